"""This simulator against Tiresias' own, on the reference Philly windows.

The reference (``reference/tiresias_windows.md`` in the package's data folder) holds, per window
and cluster, what Tiresias' simulator (SymbioticLab/Tiresias ``simulator/run_sim.py``, run
unmodified but for a Python 3 port) gave for ``fifo``, ``dlas-gpu`` and ``shortest-gpu`` with
placement ``count``, job by job. ``compare`` runs the same window through ``simulate`` with
the matching profile and reports both averages and how many jobs finish at the same time.

Schedules map to profiles as docs/simulator.md explains: ``fifo`` is ``fifo-consolidate``,
``dlas-gpu`` is ``las-consolidate`` with Tiresias' three queues (``num_queues = 3``),
``shortest-gpu`` is ``srtf-consolidate``; preemption costs nothing (restart delay 0) and
there is no interference, as in Tiresias.
"""

from __future__ import annotations

import csv
import tomllib
from collections.abc import Mapping
from dataclasses import dataclass

from slurm_marl.policy.profile import PROFILES_DIR, Profile, profile_from_mapping
from slurm_marl.shared_data import data_file
from slurm_marl.sim.run import simulate

REFERENCE_DIR = "reference/tiresias_windows"
# Tiresias cluster_spec -> ours (whole GPUs, one GPU group per node, cores to spare).
CLUSTERS = {"n8g8": "8x1x8:leaf=4", "n10g8": "10x1x8"}
WINDOWS = (("0e4a51_2017-09-20", "n8g8"), ("0e4a51_2017-09-20", "n10g8"),
           ("7f04ca_2017-09-01", "n8g8"), ("b436b2_2017-10-15", "n8g8"),
           ("6214e9_2017-12-01", "n8g8"))
SCHEDULES = ("fifo", "dlas-gpu", "shortest-gpu")
_PROFILES = {"fifo": ("fifo-consolidate", {}),
             "dlas-gpu": ("las-consolidate", {"num_queues": 3}),
             "shortest-gpu": ("srtf-consolidate", {})}


def profile_for(schedule: str, **order_params) -> Profile:
    """The built-in profile that plays Tiresias' ``schedule``, order parameters overridden."""
    if schedule not in _PROFILES:
        raise ValueError(f"unknown Tiresias schedule {schedule!r}; known: {list(SCHEDULES)}")
    name, params = _PROFILES[schedule]
    data = tomllib.loads((PROFILES_DIR / f"{name}.toml").read_text(encoding="utf-8"))
    data["order"].update(params)
    data["order"].update(order_params)
    return profile_from_mapping(data, source=f"{name} as Tiresias' {schedule}")


def reference_rows(window: str, cluster: str, schedule: str) -> list[dict[str, str]]:
    """Tiresias' per-job results (``job_id, submit_time, start_time, end_time, JCT,
    preempt``)."""
    path = data_file(f"{REFERENCE_DIR}/{window}.{cluster}.{schedule}.jobs.csv")
    with open(path, newline="", encoding="utf-8") as fh:
        return list(csv.DictReader(fh))


@dataclass(frozen=True)
class Comparison:
    window: str
    cluster: str
    schedule: str
    jobs: int
    reference_avg_jct_s: float
    ours_avg_jct_s: float
    ratio: float                     # ours / Tiresias
    same_jct_share: float            # jobs whose JCT is within 1 s of Tiresias'
    close_jct_share: float           # within 1 % (or 1 s)
    max_abs_diff_s: float
    ours_preemptions: int
    reference_preemptions: int | None

    def as_dict(self) -> Mapping:
        return dict(self.__dict__)


def compare(window: str, cluster: str, schedule: str, profile: Profile | None = None
            ) -> Comparison:
    rows = reference_rows(window, cluster, schedule)
    ref = {int(row["job_id"]): float(row["JCT"]) for row in rows}
    ref_preempt = sum(int(row["preempt"]) for row in rows) if rows and "preempt" in rows[0] \
        else None
    run = simulate(str(data_file(f"{REFERENCE_DIR}/{window}.csv")), CLUSTERS[cluster],
                   profile or profile_for(schedule), interference="none", restart_delay_s=0)
    ours = {j.job_id: j.finish_s - j.submit_s for j in run.outcome.jobs
            if j.finish_s is not None}
    if set(ours) != set(ref):
        missing = sorted(set(ref) - set(ours))[:5]
        raise AssertionError(f"{window} {cluster} {schedule}: jobs differ from the "
                             f"reference (e.g. not finished here: {missing})")
    diffs = [abs(ours[i] - ref[i]) for i in ref]
    n = len(ref)
    ref_avg = sum(ref.values()) / n
    our_avg = sum(ours.values()) / n
    return Comparison(
        window=window, cluster=cluster, schedule=schedule, jobs=n,
        reference_avg_jct_s=round(ref_avg, 1), ours_avg_jct_s=round(our_avg, 1),
        ratio=round(our_avg / ref_avg, 5),
        same_jct_share=round(sum(d <= 1.0 for d in diffs) / n, 4),
        close_jct_share=round(sum(d <= max(1.0, 0.01 * ref[i])
                                  for d, i in zip(diffs, ref)) / n, 4),
        max_abs_diff_s=round(max(diffs), 1),
        ours_preemptions=run.outcome.preemptions, reference_preemptions=ref_preempt)

