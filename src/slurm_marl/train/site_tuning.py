"""Each partition's 2D-LAS knobs learned on a site's own history (``slurm-marl report
--tune``, issue 34): the search and the over-fitting guard of ``train/thresholds.py``, fed
with the site's jobs instead of a Philly virtual cluster's windows.

The history is cut in two by submission time (``tune_split``): a *learning* part and a more
recent *evaluation* part, never overlapping. By default the evaluation part is the report's
period itself (the jobs the what-if runs on) and the learning part the history submitted in
the twice as long span before the period's start (``--from``), if it holds at least
``MIN_TUNE_JOBS`` jobs; otherwise (no ``--from``, or too little history before it) the
period is split: its first two thirds of time learn, its last third evaluates.
``--tune-from DATE`` makes the learning part start at DATE (before ``--from``) and end at
``--from``; the period evaluates.

Per partition with at least ``MIN_TUNE_JOBS`` jobs in each part (``tune_partition``): the
cross-entropy search (``cem_search``, subject to the per-job bound against
``fifo-backfill``) learns the knobs on the learning part, starting from Tiresias' fixed
ones (``las-consolidate``'s); the guard (``validate``) keeps them only where they beat
``las-consolidate`` on the evaluation part by ``min_gain`` without breaking the per-job
bound more, and says why. The evaluation part's average JCT of the learned knobs, of
``las-consolidate`` and of ``fifo-backfill`` are reported side by side. Every run is
without simulated interference (the recorded run times hold whatever slowed the jobs).

A partition whose learned knobs are kept gets a profile file (``write_profiles``) and a line
of ``[agent.partition_profiles]`` (``config_lines``); the others keep the daemon's
``agent.profile``.
"""

from __future__ import annotations

import json
import math
import re
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path

from slurm_marl.history.records import HistoryJob
from slurm_marl.policy.profile import Profile, load_profile
from slurm_marl.sim.cluster import SimCluster
from slurm_marl.sim.report import SiteTrace, in_period, site_trace
from slurm_marl.sim.run import simulate
from slurm_marl.sim.traces import TraceJob
from slurm_marl.train.thresholds import (BASELINE, FIXED_TIRESIAS, CemConfig, LasKnobs,
                                         WindowScore, cem_search, simulator_evaluator,
                                         trace_window, validate)

MIN_TUNE_JOBS = 20            # jobs of a partition in each part, or it is not tuned
HISTORY_SPAN = 2.0            # the learning part before --from: this many periods long
PERIOD_LEARN_SHARE = 2 / 3    # without enough history before it: the period's first 2/3
START_PROFILE = "las-consolidate"   # FIXED_TIRESIAS as a shipped profile
INTERFERENCE = "none"
MIN_GAIN = 0.02


@dataclass(frozen=True)
class TuneSplit:
    """The learning and evaluation parts (absolute times, ``[from, to)`` of submission)."""

    how: str
    learn_from_s: float
    learn_to_s: float
    evaluate_from_s: float
    evaluate_to_s: float
    learn: SiteTrace
    evaluate: SiteTrace


def tune_split(jobs: Sequence[HistoryJob], cluster: SimCluster, period_from_s: float,
               period_to_s: float, from_given: bool, tune_from_s: float | None = None
               ) -> TuneSplit:
    """The parts of ``jobs`` (the whole history) for a period ``[period_from_s,
    period_to_s)`` (module docstring). ``from_given``: the period's start was named
    (``--from``); without it there is no history before the period."""
    span = period_to_s - period_from_s
    if tune_from_s is not None:
        if not from_given or tune_from_s >= period_from_s:
            raise ValueError("--tune-from must come before --from (it starts the history "
                             "the knobs are learned on; the period evaluates them)")
        how, cut, start = "--tune-from to --from; the period evaluates", period_from_s, \
            tune_from_s
    else:
        start = period_from_s - HISTORY_SPAN * span
        before = in_period(jobs, start, period_from_s)
        if from_given and len(before) >= MIN_TUNE_JOBS:
            how, cut = (f"the {HISTORY_SPAN:g} periods before --from; the period "
                        f"evaluates"), period_from_s
        else:
            why = "no --from" if not from_given else \
                f"fewer than {MIN_TUNE_JOBS} jobs in the {HISTORY_SPAN:g} periods before --from"
            cut = period_from_s + PERIOD_LEARN_SHARE * span
            how, start = (f"the period's first two thirds learn, its last third evaluates "
                          f"({why})"), period_from_s
    return TuneSplit(how, start, cut, cut, period_to_s,
                     site_trace(in_period(jobs, start, cut), cluster),
                     site_trace(in_period(jobs, cut, period_to_s), cluster))


def by_partition(trace: Iterable[TraceJob], cluster: SimCluster) -> dict[str, list[TraceJob]]:
    """The jobs of each partition (a job naming none is the first's, Slurm's default)."""
    default = cluster.partitions_spec[0].name
    out: dict[str, list[TraceJob]] = {}
    for t in trace:
        out.setdefault(t.partition or default, []).append(t)
    return out


def partition_gpus(cluster: SimCluster, name: str) -> int:
    return sum(p.nodes * p.sockets * p.gpus_per_socket for p in cluster.partitions_spec
               if p.name == name)


@dataclass
class PartitionTuning:
    partition: str
    learn_jobs: int
    evaluate_jobs: int
    knobs: LasKnobs | None = None          # the search's best (None: not tuned)
    kept: bool = False
    reason: str = ""
    learn_jct_s: dict | None = None        # {"learned", START_PROFILE} on the learning part
    evaluate_jct_s: dict | None = None     # {"learned", START_PROFILE, BASELINE}
    evaluate_scores: dict | None = None    # the per-job bound's numbers, learned and start

    def as_dict(self) -> dict:
        return {"partition": self.partition, "learn_jobs": self.learn_jobs,
                "evaluate_jobs": self.evaluate_jobs, "tuned": self.knobs is not None,
                "learned": None if self.knobs is None else
                {**self.knobs.as_dict(), "description": self.knobs.describe()},
                "learn_avg_jct_s": self.learn_jct_s,
                "evaluate_avg_jct_s": self.evaluate_jct_s,
                "evaluate_per_job": self.evaluate_scores,
                "kept": self.kept, "reason": self.reason,
                "profile": None if not self.kept else tuned_name(self.partition)}


def tuned_name(partition: str) -> str:
    return f"tuned-{partition}"


def recommended_profiles(tunings: Sequence[PartitionTuning]) -> dict[str, Profile]:
    """What the report recommends per partition: the learned knobs where they were kept
    (the profile ``write_profiles`` writes), else ``START_PROFILE``."""
    start = load_profile(START_PROFILE)
    return {t.partition: t.knobs.profile(tuned_name(t.partition), _description(t))
            if t.kept and t.knobs is not None else start for t in tunings}


def _description(t: PartitionTuning) -> str:
    return (f"2D-LAS knobs learned on {t.partition}'s history by slurm-marl report --tune "
            f"({t.knobs.describe()})")


def tune_partition(name: str, learn: Sequence[TraceJob], evaluate: Sequence[TraceJob],
                   cluster: SimCluster, cfg: CemConfig = CemConfig(),
                   min_gain: float = MIN_GAIN,
                   progress: Callable[[int, int, float], None] | None = None
                   ) -> PartitionTuning:
    """Learn ``name``'s knobs on ``learn`` and guard them on ``evaluate`` (module
    docstring); ``progress`` as ``cem_search``'s."""
    got = PartitionTuning(name, len(learn), len(evaluate))
    short = [f"{n} jobs to {what}" for n, what in ((len(learn), "learn from"),
                                                   (len(evaluate), "evaluate on"))
             if n < MIN_TUNE_JOBS]
    if short:
        got.reason = (f"not tuned: {' and '.join(short)} (at least {MIN_TUNE_JOBS} each); "
                      f"{START_PROFILE} kept")
        return got
    gpus = partition_gpus(cluster, name)
    train = trace_window(f"{name}: learning part", learn, gpus)
    check = trace_window(f"{name}: evaluation part", evaluate, gpus)
    result = cem_search(simulator_evaluator([train], cluster, INTERFERENCE), cfg,
                        start=FIXED_TIRESIAS, progress=progress)
    scored: dict[LasKnobs, list[WindowScore]] = {}
    on_check = simulator_evaluator([check], cluster, INTERFERENCE)

    def cached(knobs: LasKnobs) -> list[WindowScore]:
        if knobs not in scored:
            scored[knobs] = on_check(knobs)
        return scored[knobs]

    verdict = validate(result.best.knobs, result.start.knobs, cached, [check.window],
                       min_gain)
    learned, start = cached(result.best.knobs)[0], cached(result.start.knobs)[0]
    fifo = simulate(list(check.jobs), cluster, BASELINE, interference=INTERFERENCE,
                    drop_oversized=True)
    got.knobs, got.kept = result.best.knobs, verdict.learned_kept
    got.reason = verdict.reason + ("; learned knobs kept" if verdict.learned_kept
                                   else f"; {START_PROFILE} kept")
    got.learn_jct_s = {"learned": _r(result.best.jct_s[0]),
                       START_PROFILE: _r(result.start.jct_s[0])}
    got.evaluate_jct_s = {"learned": _r(learned.avg_jct_s), START_PROFILE: _r(start.avg_jct_s),
                          BASELINE: None if fifo.summary.get("unfinished")
                          else _r(fifo.summary["avg_jct_s"])}
    got.evaluate_scores = {"learned": learned.as_dict(), START_PROFILE: start.as_dict()}
    return got


def tune(split: TuneSplit, cluster: SimCluster, cfg: CemConfig = CemConfig(),
         min_gain: float = MIN_GAIN,
         progress: Callable[[str, int, int], None] | None = None,
         mapper=None) -> list[PartitionTuning]:
    """``tune_partition`` for each partition of the cluster, in its order;
    ``progress(partition, done, total)`` over the search's candidates (with ``mapper``,
    ``sim.report.Mapper``, which runs each partition's tuning elsewhere: over partitions
    done)."""
    learn = by_partition(split.learn.trace, cluster)
    check = by_partition(split.evaluate.trace, cluster)
    tasks = [(p.name, learn.get(p.name, []), check.get(p.name, []), cluster, cfg, min_gain)
             for p in cluster.partitions_spec]
    if mapper is not None:
        return mapper(tune_task, tasks, lambda i, _r, n, total: progress and progress(
            tasks[i][0], n, total))
    out = []
    for task in tasks:
        tick = None if progress is None else \
            (lambda d, n, _b, name=task[0]: progress(name, d, n))
        out.append(tune_partition(*task, progress=tick))
    return out


def tune_task(task: tuple) -> PartitionTuning:
    """``tune_partition(*task)``: one partition's tuning as a task another process runs."""
    return tune_partition(*task)


def profile_file(folder: Path, partition: str) -> Path:
    """Where a partition's tuned profile is written (its name made file-safe)."""
    return folder / (re.sub(r"[^A-Za-z0-9_.-]", "_", partition) + ".toml")


def write_profiles(tunings: Sequence[PartitionTuning], folder: Path) -> dict[str, Path]:
    """A profile TOML per partition whose learned knobs were kept; partition -> file."""
    written = {}
    for t in tunings:
        if t.kept and t.knobs is not None:
            folder.mkdir(parents=True, exist_ok=True)
            path = profile_file(folder, t.partition)
            path.write_text(t.knobs.to_toml(tuned_name(t.partition), _description(t)),
                            encoding="utf-8")
            written[t.partition] = path
    return written


def config_lines(files: dict[str, Path]) -> list[str]:
    """The daemon config's ``[agent.partition_profiles]`` table for ``files`` (none: [])."""
    if not files:
        return []
    lines = ["[agent.partition_profiles]"]
    for partition, path in sorted(files.items()):
        key = partition if re.fullmatch(r"[A-Za-z0-9_-]+", partition) else json.dumps(partition)
        lines.append(f"{key} = {json.dumps(str(path.resolve()))}")
    return lines


def _r(x: float | None) -> float | None:
    """Rounded; None for None or a non-finite JCT (jobs left unfinished)."""
    return None if x is None or not math.isfinite(x) else round(float(x), 2)
