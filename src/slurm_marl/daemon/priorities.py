"""Priorities to write so that Slurm's order equals the policy's, with as few writes as
possible.

The policy ranks a partition's pending jobs (``n_pending - rank``): one arrival shifts the
rank of every job below it, and writing ranks as they are cost one ``scontrol`` per pending
job per cycle (docs/benchmarks.md, "Priority writes at 3,000 pending on real Slurm"). Only
the order matters to Slurm, so the jobs whose current priorities are already in the
policy's order are kept (the longest strictly decreasing run of them, found in O(n log n)),
and only the others get new values, spread evenly in the gaps between their kept
neighbours. A new arrival then costs one write, a demotion one write. When a gap has no
integer room left, the whole partition is spread again with ``SPACING`` between neighbours
(rare: gaps start ``SPACING`` wide).
"""

from __future__ import annotations

from bisect import bisect_left
from collections.abc import Collection, Mapping, Sequence
from dataclasses import replace

from slurm_marl.domain import ClusterSnapshot

SPACING = 1024


def longest_decreasing(values: Sequence[int | None]) -> set[int]:
    """Positions of a longest strictly decreasing subsequence of ``values`` (None never
    belongs to it)."""
    # Patience sorting on negated values: strictly increasing in -v.
    tails: list[int] = []      # smallest tail (-v) of an increasing run of each length
    tail_pos: list[int] = []
    prev: dict[int, int] = {}
    for i, v in enumerate(values):
        if v is None:
            continue
        k = bisect_left(tails, -v)
        if k == len(tails):
            tails.append(-v)
            tail_pos.append(i)
        else:
            tails[k] = -v
            tail_pos[k] = i
        prev[i] = tail_pos[k - 1] if k else -1
    keep: set[int] = set()
    i = tail_pos[-1] if tail_pos else -1
    while i >= 0:
        keep.add(i)
        i = prev[i]
    return keep


def plan_priorities(current: Sequence[int | None], low: int, high: int,
                    spacing: int = SPACING) -> list[int]:
    """Priorities for jobs listed in the policy's order (first = runs first), given their
    current Slurm priorities (None: not one the agent wrote, or unknown). The result is
    strictly decreasing, within [low, high], and equal to ``current`` wherever it can be."""
    n = len(current)
    if n == 0:
        return []
    if high - low + 1 < n:
        raise ValueError(f"{n} jobs cannot get distinct priorities in [{low}, {high}]")
    usable = [v if v is not None and low <= v <= high else None for v in current]
    keep = longest_decreasing(usable)
    out: list[int | None] = [usable[i] if i in keep else None for i in range(n)]
    i = 0
    while i < n:
        if out[i] is not None:
            i += 1
            continue
        j = i
        while j < n and out[j] is None:
            j += 1
        k = j - i                                   # jobs to place in this gap
        above = out[i - 1] if i > 0 else None
        below = out[j] if j < n else None
        # open ends become virtual neighbours SPACING per job away (room for later ones)
        if above is None and below is None:
            below = low - 1
            above = min(high + 1, below + spacing * (k + 1))
        elif above is None:
            above = min(high + 1, below + spacing * (k + 1))
        elif below is None:
            below = max(low - 1, above - spacing * (k + 1))
        if above - below < k + 1:
            return _spread(n, low, high, spacing)
        for m in range(k):   # evenly inside (below, above), strictly decreasing
            out[i + m] = below + ((above - below) * (k - m)) // (k + 1)
        i = j
    return [int(v) for v in out]  # type: ignore[arg-type]


def _spread(n: int, low: int, high: int, spacing: int) -> list[int]:
    step = max(1, min(spacing, (high - low + 2) // (n + 1)))
    return [low - 1 + step * (n - r) for r in range(n)]


def asked_priorities(snap: ClusterSnapshot, managed: Collection[str],
                     site_factor_partitions: Collection[str],
                     own: Mapping[int, int], nices: Mapping[int, int] | None = None
                     ) -> ClusterSnapshot:
    """``snap`` with what users and admins asked of the order of the ``managed``
    partitions' waiting jobs: ``Job.priority_asked`` where the Slurm priority is not the
    one this agent last wrote (``own``: set since by ``scontrol top``, an admin's
    ``Priority=`` or a release that recomputed it), and the nice value a job had when the
    agent first wrote its priority (``nices``: Slurm sets it to 0 then) where it reads 0.
    No ``priority_asked`` in partitions whose order goes into the SiteFactor (Slurm
    computes their priorities all the time), nor for held jobs (priority 0 until released,
    which Slurm also shows for a job it cannot run)."""
    nices = nices or {}
    if not own and not nices:
        return snap
    parts = set(managed) - set(site_factor_partitions)
    changed = {}
    for j in snap.pending:
        written = own.get(j.job_id)
        if written is None:
            continue
        fields = {}
        if not j.nice and nices.get(j.job_id) and j.priority == written:
            fields["nice"] = nices[j.job_id]
        if not (j.held or j.priority <= 0 or j.priority == written or j.priority_asked) \
                and any(p in parts for p in j.partition.split(",")):
            fields["priority_asked"] = True
        if fields:
            changed[j.job_id] = j.with_(**fields)
    if not changed:
        return snap
    return replace(snap, jobs=tuple(changed.get(j.job_id, j) for j in snap.jobs))
