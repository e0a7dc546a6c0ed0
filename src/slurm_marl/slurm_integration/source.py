"""ClusterSource over Slurm's own CLIs: a fixed number of client calls per snapshot."""

from __future__ import annotations

import hashlib
import logging
import time
from dataclasses import dataclass

from slurm_marl.domain import ClusterSnapshot, Job, Node
from slurm_marl.slurm_integration import changes as C
from slurm_marl.slurm_integration import parse as P
from slurm_marl.slurm_integration.parse_job_text import JobTextError, job_raw_from_scontrol
from slurm_marl.slurm_integration.ports import ClusterSource
from slurm_marl.slurm_integration.runner import SlurmError, SlurmRunner

log = logging.getLogger(__name__)
# More changed records than this are read whole (the ids must fit one command line).
MAX_BY_ID = 2000
# Changed jobs are read one per call while there are at most one per this many jobs listed:
# for a list of ids slurmctld packs, and squeue unpacks, every job before it filters, for
# one id only that job (docs/benchmarks.md, "Changed jobs read one per call").
LISTED_PER_SINGLE_READ = 100
# Slurm 22.05 (no JSON by id): changed jobs are read as text, one ``scontrol show job`` each,
# while there are at most one per this many jobs listed; more, or any new job, and the
# snapshot reads every job as JSON (one text read costs about what the JSON read costs per
# this many jobs listed: docs/benchmarks.md, "22.05 with changed jobs read as text").
LISTED_PER_TEXT_READ = 20


class CliClusterSource(ClusterSource):
    """Reads jobs, nodes, partitions and topology: a fixed number of calls, whatever the
    number of jobs and nodes.

    Slurm 22.05: ``squeue --json``, ``sinfo --json``, ``scontrol show partition -o`` and
    ``scontrol show topology``. From 24.11 on ``sinfo --json`` has no per-node records and
    ``squeue --json`` omits finished jobs, so nodes come from ``scontrol show node --json``
    and jobs from ``squeue --json --states=all`` (22.05's view). The version is told by the
    ``meta`` of the first ``sinfo --json`` answer and kept; every answer's ``meta`` is checked
    again and a different known version (Slurm upgraded under the agent) followed; a failed
    ``scontrol show node --json`` (a downgrade to 22.05) makes the next snapshot tell the
    version anew. An unknown layout raises ``SlurmOutputError``.

    Partitions and topology change only on reconfiguration, so they are cached for
    ``static_ttl_s`` (0 = read every time). A node equal to the one of the previous snapshot
    is that same object: consumers that keep per-node work (the learned placement's
    featuriser) redo it only for nodes that changed.

    ``full_read_s`` > 0 (the daemon's ``slurm.full_read_s``) and a Slurm whose JSON can be
    read by id (24.11 on): between full reads, at most ``full_read_s`` apart, only the jobs
    and nodes that changed are read as JSON, the rest kept (``changes.py`` says how changes
    are seen; few changed jobs are read one per call, ``LISTED_PER_SINGLE_READ``); a
    snapshot read so holds the same records a full read would. Any failed
    read makes the next snapshot a full one. ``invalidate`` names jobs written to, which
    the next snapshot reads again. 0: every snapshot is a full read.

    On 22.05 (``Layout.reads_jobs_by_text``) the nodes are read whole each snapshot and a
    few changed jobs as ``scontrol show job -d -o N`` text (``parse_job_text``), as the
    record JSON would give; a new job, many changed ones (``LISTED_PER_TEXT_READ``), a line
    that is not certain, or an AdminComment or Comment other than the one kept (or, for
    the AdminComment, than the agent's own last write, ``admin_comment_written``) make that
    snapshot read every job as JSON.
    """

    def __init__(self, runner: SlurmRunner, static_ttl_s: float = 0.0,
                 full_read_s: float = 0.0, clock=time.monotonic) -> None:
        self.runner = runner
        self.static_ttl_s = static_ttl_s
        self.full_read_s = full_read_s
        self._clock = clock
        self._static: tuple[float, list, list, dict] | None = None
        self.last_problems: list[str] = []
        self._last_nodes: dict = {}
        self.layout: P.Layout | None = None
        # kept between snapshots that read changes only (None: the next one reads all)
        self._kept: _Kept | None = None
        self._dirty: set[int] = set()
        # the AdminComment each job was last written (``admin_comment_written``)
        self._written_comments: dict[int, str] = {}
        # how the last snapshot was read: "full", or "changes" with the records read
        self.last_read: dict = {}

    def _static_parts(self):
        now = time.monotonic()
        if self._static is not None and now - self._static[0] < self.static_ttl_s:
            return self._static[1:]
        problems: list[str] = []
        parts, probs = P.partitions_from_scontrol(
            self.runner.run_checked(["scontrol", "show", "partition", "-o"]))
        problems += probs
        topo = self.runner.run(["scontrol", "show", "topology"])
        if topo.ok:
            switches, leaf_of, probs = P.switches_from_scontrol(topo.stdout)
            problems += probs
        else:  # topology/tree not configured: a flat cluster
            switches, leaf_of = [], {}
        self._static = (now, parts, switches, leaf_of)
        self._static_problems = problems
        return parts, switches, leaf_of

    def _nodes(self, leaf_of: dict[str, str]) -> tuple[list, list[str]]:
        """Per-node records: from ``sinfo --json`` on 22.05 (one call, as always), from
        ``scontrol show node --json`` on later versions; the first call tells which. Both
        answers are streamed, record by record (``run_json_streamed``)."""
        if self.layout is None or self.layout.nodes_from_sinfo:
            reader = P.NodesReader(P.SINFO, leaf_of)
            # later versions' "sinfo" array (per partition and state) is not needed: dropped
            rest, counts = self.runner.run_json_streamed(
                ["sinfo", "--json"], {"nodes": reader.add, "sinfo": None})
            layout = P.layout_of(rest, "sinfo --json")
            if layout != self.layout:
                log.info("Slurm %s (%s): nodes from %s", layout.release, layout.parser,
                         "sinfo --json" if layout.nodes_from_sinfo
                         else "scontrol show node --json")
                self.layout = layout
            if layout.nodes_from_sinfo:
                return reader.finish(rest, "nodes" in counts)
        reader = P.NodesReader(P.SCONTROL_NODES, leaf_of)
        try:
            rest, counts = self.runner.run_json_streamed(
                ["scontrol", "show", "node", "--json"], {"nodes": reader.add})
        except Exception:
            self.layout = None  # e.g. Slurm downgraded: tell the version again next time
            raise
        self._check_layout(rest, "scontrol show node --json")
        return reader.finish(rest, "nodes" in counts)

    def _layout_from_version(self) -> None:
        """Before the first read: the layout from ``scontrol --version``. On a Slurm that
        reads records by id (24.11+) the first snapshot is then a full read kept with the
        listings taken before it, and the second reads changes only (one full read at
        start, not two, the first of them through ``sinfo --json``). A
        version this reader does not know, or a failed call, leaves it to the first JSON
        answer, as before; a JSON answer of another layout is followed (``_check_layout``)."""
        try:
            res = self.runner.run(["scontrol", "--version"])
        except Exception as exc:     # missing client, timeout: the reads will say it
            log.debug("scontrol --version: %s", exc)
            return
        layout = P.layout_of_version(res.stdout) if res.ok else None
        if layout is not None:
            log.info("Slurm %s: records read by %s", layout.release,
                     "changes" if layout.reads_by_id else "full reads")
            self.layout = layout

    def _check_layout(self, data: dict, what: str) -> None:
        """Follow an answer that names another known layout than the one kept (Slurm
        upgraded under the agent); an unknown one raises SlurmOutputError."""
        layout = P.layout_of(data, what)
        if self.layout is not None and layout.parser != self.layout.parser:
            log.warning("%s: Slurm %s (%s) answered where %s (%s) was known; reading it as "
                        "such from now on", what, layout.release, layout.parser,
                        self.layout.release, self.layout.parser)
            self.layout = layout

    def _squeue_args(self) -> list[str]:
        if self.layout is None or self.layout.squeue_lists_finished:
            return ["squeue", "--json"]
        return ["squeue", "--json", "--states=all"]

    def queue_fingerprint(self, partitions: tuple[str, ...]) -> str | None:
        """One ``squeue -h -t PD,R,CG,CF -p ... -o "%i %t" --sort=i`` (ids and compact
        states, ordered by id so that a priority write changes nothing), digested."""
        try:
            res = self.runner.run(["squeue", "-h", "-t", "PD,R,CG,CF", "-p",
                                   ",".join(partitions), "-o", "%i %t", "--sort=i"])
        except SlurmError:
            return None
        if not res.ok:
            return None
        return hashlib.blake2b(res.stdout.encode(), digest_size=16).hexdigest()

    def invalidate(self, job_ids) -> None:
        """Jobs written to (``CliDecisionSink``'s ``on_write``): the next snapshot reads
        them again whatever their text listing says (an AdminComment is not in it)."""
        self._dirty.update(int(j) for j in job_ids)

    def admin_comment_written(self, job_id: int, value: str) -> None:
        """The AdminComment the agent wrote to a job (``CliDecisionSink``'s
        ``on_admin_comment``): a text read of that job may show it (22.05)."""
        self._written_comments[int(job_id)] = value

    def snapshot(self) -> ClusterSnapshot:
        taken = time.time()
        parts, switches, leaf_of = self._static_parts()
        problems = list(getattr(self, "_static_problems", []))
        if self.layout is None and self.full_read_s > 0:
            self._layout_from_version()
        by_changes = (self.full_read_s > 0 and self.layout is not None
                      and (self.layout.reads_by_id or self.layout.reads_jobs_by_text))
        if by_changes:
            try:
                nodes, jobs, probs = self._read_changes(leaf_of)
            except Exception:
                self._kept = None    # whatever was half read: the next snapshot reads all
                raise
        else:
            self._kept = None
            nodes, jobs, probs = self._read_full(leaf_of)
            self.last_read = {"mode": "full"}
        problems += probs
        last = self._last_nodes
        nodes = [old if (old := last.get(n.name)) == n else n for n in nodes]
        self._last_nodes = {n.name: n for n in nodes}
        for p in problems:
            log.warning("snapshot: %s", p)
        self.last_problems = problems
        return ClusterSnapshot(time_s=taken, nodes=tuple(nodes), jobs=tuple(jobs),
                               partitions=tuple(parts), switches=tuple(switches))

    def _read_full(self, leaf_of: dict[str, str]) -> tuple[list, list, list[str]]:
        nodes, problems = self._nodes(leaf_of)
        jobs, probs = self._jobs(self._squeue_args())
        return nodes, jobs, problems + probs

    def _jobs(self, args: list[str]) -> tuple[list[Job], list[str]]:
        reader = P.JobsReader()     # the answer is streamed: no copy of every job record
        rest, _ = self.runner.run_json_streamed(args, {"jobs": reader.add})
        self._check_layout(rest, " ".join(args))
        return reader.finish(rest)

    def _jobs_by_id(self, ids: list[int], listed: int) -> tuple[list[Job], list[str]]:
        """The jobs ``ids`` as JSON: one call each while they are few against the ``listed``
        jobs (``LISTED_PER_SINGLE_READ``), else one call for all. A job purged since the
        listing is left out: a list of ids leaves it out, a call for it alone fails with
        "Invalid job id specified"."""
        args = self._squeue_args()
        if len(ids) > 1 and len(ids) * LISTED_PER_SINGLE_READ > listed:
            return self._jobs(args + ["--jobs=" + ",".join(str(j) for j in ids)])
        jobs: list[Job] = []
        problems: list[str] = []
        for job_id in ids:
            try:
                got, probs = self._jobs(args + [f"--jobs={job_id}"])
            except SlurmError as exc:
                if exc.returncode == 1 and "invalid job id" in exc.message.lower():
                    continue
                raise
            jobs += got
            problems += probs
        return jobs, problems

    def _jobs_as_text(self, ids: list[int], kept: dict[int, Job]
                      ) -> tuple[list[Job], list[str]]:
        """The jobs ``ids`` (each kept from an earlier read) from one ``scontrol show job
        -d -o N`` each (22.05). A job purged since the listing is left out. JobTextError
        where a line is not certain, or its AdminComment or Comment is not one known
        (``parse_job_text``: a free-text value could forge them)."""
        jobs: list[Job] = []
        problems: list[str] = []
        for job_id in ids:
            res = self.runner.run(["scontrol", "show", "job", "-d", "-o", str(job_id)])
            if not res.ok:
                if "invalid job id" in (res.stderr + res.stdout).lower():
                    continue
                raise SlurmError(res.command, res.returncode,
                                 (res.stderr or res.stdout).strip()[:300])
            lines = [ln for ln in res.stdout.splitlines() if ln.strip()]
            if len(lines) != 1:
                raise JobTextError(f"job {job_id}: {len(lines)} lines")
            raw = job_raw_from_scontrol(lines[0])
            old = kept[job_id]
            if raw["job_id"] != job_id:
                raise JobTextError(f"job {job_id}: the answer is job {raw['job_id']}")
            if raw["admin_comment"] not in (old.admin_comment,
                                            self._written_comments.get(job_id)):
                raise JobTextError(f"job {job_id}: AdminComment not the one known")
            if raw["comment"] != old.comment:
                raise JobTextError(f"job {job_id}: Comment changed")
            job, probs = P.job_from_json(raw)
            if job is not None:
                jobs.append(job)
            problems += probs
        return jobs, problems

    def _nodes_named(self, names, leaf_of: dict[str, str]) -> tuple[list[Node], list[str]]:
        args = ["scontrol", "show", "node", "--json", ",".join(sorted(names))]
        reader = P.NodesReader(P.SCONTROL_NODES, leaf_of)
        rest, counts = self.runner.run_json_streamed(args, {"nodes": reader.add})
        self._check_layout(rest, "scontrol show node --json")
        return reader.finish(rest, "nodes" in counts)

    def _read_changes(self, leaf_of: dict[str, str]) -> tuple[list, list, list[str]]:
        """Node states and job rows as text, then as JSON what changed since the last
        snapshot (everything when nothing is kept, or ``full_read_s`` has passed).
        The text is read before the JSON: a change made between the two reads shows in
        the next listing, so it is read then."""
        problems: list[str] = []
        states, probs = C.node_states(self.runner.run_checked(C.NODE_STATES))
        problems += probs
        rows, probs = C.job_rows(self.runner.run_checked(C.JOB_ROWS))
        problems += probs
        kept = self._kept
        now = self._clock()
        dirty = set(self._dirty)
        if kept is None or now - kept.full_at >= self.full_read_s:
            nodes, jobs, probs = self._read_full_kept(leaf_of, rows, states, now, dirty)
            return nodes, jobs, problems + probs
        ch = C.changes(rows, states, kept.rows, kept.states, kept.jobs, kept.nodes, dirty)
        # told once: a read below may follow another layout, not this snapshot's choices
        by_text = not self.layout.reads_by_id
        node_map, probs = self._changed_nodes(ch, kept, leaf_of, by_text)
        problems += probs
        job_map, probs, text_note = self._changed_jobs(ch, kept, rows, by_text)
        problems += probs
        _apply_listing(job_map, kept.jobs, rows, ch)
        self._kept = _Kept(kept.full_at, rows, states, job_map, node_map)
        self._dirty -= dirty
        self.last_read = _changes_read(rows, states, ch, by_text, text_note)
        return list(node_map.values()), list(job_map.values()), problems

    def _read_full_kept(self, leaf_of: dict[str, str], rows: dict, states: dict,
                        now: float, dirty: set[int]) -> tuple[list, list, list[str]]:
        """A full read that the next snapshots' change reads start from, kept with the
        listings taken just before it."""
        nodes, jobs, probs = self._read_full(leaf_of)
        # a layout that reads no changes (an unknown one) keeps nothing
        self._kept = _Kept(now, rows, states, {j.job_id: j for j in jobs},
                           {n.name: n for n in nodes}) \
            if self.layout is not None and (self.layout.reads_by_id
                                            or self.layout.reads_jobs_by_text) else None
        self._written_comments.clear()
        self._dirty -= dirty
        self.last_read = {"mode": "full", "listed_jobs": len(rows),
                          "listed_nodes": len(states)}
        return nodes, jobs, probs

    def _changed_nodes(self, ch: C.Changes, kept: _Kept, leaf_of: dict[str, str],
                       by_text: bool) -> tuple[dict, list[str]]:
        """The node records after the changes: the changed ones read by name and merged
        into those kept, or every node read anew."""
        # 22.05 reads no node by name: every node, as a full read does
        if by_text or len(ch.nodes) > MAX_BY_ID:
            fresh_nodes, probs = self._nodes(leaf_of)
            return {n.name: n for n in fresh_nodes}, probs
        fresh_nodes, probs = self._nodes_named(ch.nodes, leaf_of) if ch.nodes else ([], [])
        return _merged(kept.nodes, {n.name: n for n in fresh_nodes}, ch.nodes), probs

    def _changed_jobs(self, ch: C.Changes, kept: _Kept, rows: dict, by_text: bool
                      ) -> tuple[dict, list[str], str]:
        """(the job records after the changes, problems, on 22.05 why they were read as
        JSON rather than as text ("" if as text)). The changed jobs are read by id and
        merged into those kept; too many of them, every job is read anew."""
        if by_text and ch.jobs:
            return self._changed_jobs_by_text(ch, kept, rows)
        if len(ch.jobs) > MAX_BY_ID:
            fresh_jobs, probs = self._jobs(self._squeue_args())
            return {j.job_id: j for j in fresh_jobs}, probs, ""
        fresh_jobs, probs = self._jobs_by_id(sorted(ch.jobs), len(rows)) \
            if ch.jobs else ([], [])
        return (_merged(kept.jobs, {j.job_id: j for j in fresh_jobs}, ch.jobs, ch.gone_jobs),
                probs, "")

    def _changed_jobs_by_text(self, ch: C.Changes, kept: _Kept, rows: dict
                              ) -> tuple[dict, list[str], str]:
        """22.05: the changed jobs as text merged into those kept, or, where text will not
        do (``_jobs_text_read``), every job as JSON (which makes the AdminComments the
        agent wrote known from that read)."""
        fresh_jobs, probs, text_note = self._jobs_text_read(ch, kept, rows)
        if fresh_jobs is None:
            fresh_jobs, probs = self._jobs(self._squeue_args())
            self._written_comments.clear()
            return {j.job_id: j for j in fresh_jobs}, probs, text_note
        return (_merged(kept.jobs, {j.job_id: j for j in fresh_jobs}, ch.jobs, ch.gone_jobs),
                probs, text_note)

    def _jobs_text_read(self, ch: C.Changes, kept: _Kept, rows: dict
                        ) -> tuple[list[Job] | None, list[str], str]:
        """(the changed jobs read as text, problems, "") or (None, [], why not): not for a
        new job (no kept record to check the text against), nor for many changed ones
        (``LISTED_PER_TEXT_READ``), nor where a line is not certain (``JobTextError``)."""
        new = sum(1 for j in ch.jobs if j not in kept.jobs)
        if new or len(ch.jobs) * LISTED_PER_TEXT_READ > len(rows):
            return None, [], f"{new} new job(s)" if new else f"{len(ch.jobs)} changed jobs"
        try:
            fresh_jobs, probs = self._jobs_as_text(sorted(ch.jobs), kept.jobs)
        except JobTextError as exc:
            log.debug("changed jobs not read as text: %s; every job read as JSON", exc)
            return None, [], str(exc)
        return fresh_jobs, probs, ""


def _apply_listing(job_map: dict[int, Job], kept_jobs: dict[int, Job], rows: dict,
                   ch: C.Changes) -> None:
    """Priority and pending reason come from the listing, whatever read the record; so
    does a kept waiting record's eligible time that alone moved (a lease renewal).
    ``job_map`` is updated in place."""
    for jid, when in ch.eligible.items():
        job = job_map.get(jid)
        if job is not None and job is kept_jobs.get(jid):
            job_map[jid] = job.with_(eligible_time_s=when)
    for jid, job in job_map.items():
        row = rows.get(jid)
        if row is None or jid in ch.jobs:
            continue
        if (row.priority is not None and row.priority != job.priority) \
                or row.reason != job.pending_reason:
            priority = job.priority if row.priority is None else row.priority
            job_map[jid] = job.with_(priority=priority, pending_reason=row.reason,
                                     held=P.job_held(job.state, row.reason, priority))


def _changes_read(rows: dict, states: dict, ch: C.Changes, by_text: bool,
                  text_note: str) -> dict:
    """``last_read`` of a snapshot read by changes: what was listed and what read."""
    read = {"mode": "changes", "listed_jobs": len(rows),
            "listed_nodes": len(states), "jobs_read": len(ch.jobs),
            "nodes_read": len(ch.nodes), "jobs_gone": len(ch.gone_jobs),
            "eligible_moved": len(ch.eligible)}
    if by_text:
        read.update(nodes_read=len(states), jobs_as="json" if text_note
                    else "text", why_json=text_note)
    return read


def _merged(kept: dict, fresh: dict, read: frozenset, gone: frozenset = frozenset()
            ) -> dict:
    """The kept records in their order, those read anew replaced (one read but not
    answered, gone meanwhile, is dropped), those gone dropped, new ones at the end."""
    fresh = dict(fresh)
    merged = {key: fresh.pop(key, value) for key, value in kept.items()
              if key not in gone and (key in fresh or key not in read)}
    merged.update(fresh)
    return merged


@dataclass(slots=True)
class _Kept:
    """What a snapshot read by changes starts from: the last listings and records."""

    full_at: float
    rows: dict
    states: dict
    jobs: dict
    nodes: dict
