"""GPU-time predictions learned while a simulation runs, from nothing but the jobs that
have finished in it: what a site's predictor would know at each submission.

Each arriving job gets its features from ``history.features`` (fed only by jobs that
finished before it arrived) and a prediction from a LightGBM model (``history.predictor``)
refit every ``refit_every_s`` simulated seconds on the jobs finished so far; before the
first fit, the history median of similar jobs; with no similar job at all, no prediction
(the order then ranks that job by attained service, as 2D-LAS would).

A trace has no names, accounts or time limits: a job's ``user`` column (the virtual
cluster, for Philly) stands as user and account, so the per-user history is all there is.

A site has months of history when it starts; a simulation that learned only from its own
finished jobs would learn from the short ones first (the long ones are still running: a
survivorship bias that made predictions far too low on a Philly window: docs/benchmarks.md,
"Ordering on the six held-out windows"). For a Philly window, ``philly_prior`` gives the
virtual cluster's jobs before the window as that history (each counted as ended at submit +
duration, the trace having no start times); for a site's own history
(``slurm-marl report``), ``PriorHistory`` holds its jobs that ended before the simulated
period and, for each simulated job, its history job: a job then arrives with its request's
own fields (account, name, QOS, nodes, time limit), as the prior's jobs were described, not
with the trace's user alone.

Every prediction is recorded with the prediction-skill gate (``history/skill.py``, the
daemon's too): the simulator lets the order use a partition's predictions only while they
have ordered the partition's finished jobs well enough (``withheld``).
"""

from __future__ import annotations

import math

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field, replace
from pathlib import Path

from slurm_marl.history.features import Submission, history_median
from slurm_marl.history.philly import philly_history
from slurm_marl.history.predictor import GpuTimeModel, next_refit, replay
from slurm_marl.history.records import HistoryJob
from slurm_marl.history.skill import SkillGate
from slurm_marl.sim.traces import Window, detect_format, philly_window_rows


def submission(job, now: float) -> Submission:
    """What a simulated job tells at submission (no duration, nothing of its run)."""
    return Submission(user=job.user, account=job.user, partition=job.partition, qos="",
                      name="", gpus=job.num_gpus, nodes=1, time_limit_s=None, submit_s=now)


@dataclass(frozen=True)
class PriorHistory:
    """What a learned predictor knows when a simulation starts: ``jobs`` of the history
    before it (absolute times), ``origin_s`` the absolute time of simulated time 0, and
    ``requests``: trace job id -> the history job it replays, where the trace is made of
    a history (``sim/history_trace.py``); empty for a trace without one."""

    jobs: Sequence[HistoryJob]
    origin_s: float
    requests: Mapping[int, HistoryJob] = field(default_factory=dict)


class OnlinePredictor:
    """``prior``: the site's history before the simulation (jobs with absolute times);
    ``origin_s``: the absolute time of simulated time 0. Jobs of ``prior`` that ended by
    ``origin_s`` are known from the start and train the first model (``prior_jobs``
    counts them); none of it is known if it ended later. ``requests``: a simulated job's
    history job by job id, whose request describes it at submission (``PriorHistory``;
    others: ``submission``). ``gate``: the prediction-skill gate (None: every prediction
    is used)."""

    def __init__(self, refit_every_s: float = 86400.0, min_train: int = 200, seed: int = 0,
                 rounds: int = 100, prior: Sequence[HistoryJob] = (),
                 origin_s: float = 0.0, gate: SkillGate | None = None,
                 requests: Mapping[int, HistoryJob] | None = None) -> None:
        self.gate = gate
        self.requests = requests or {}
        self.refit_every_s = refit_every_s
        self.min_train = min_train
        self.seed = seed
        self.rounds = rounds
        self.origin_s = origin_s
        self.rows: list[dict] = []
        self.labels: list[float] = []

        def known(job: HistoryJob, row: dict, _now: float) -> None:
            if job.end_s is not None and job.end_s <= origin_s:
                self.rows.append(row)
                self.labels.append(math.log1p(job.gpu_time_s))

        self.state = replay([j for j in prior if j.submit_s < origin_s], known,
                            until_s=origin_s)
        self.prior_jobs = len(self.rows)
        self.model: GpuTimeModel | None = None
        self.next_fit: float | None = None
        self.fits = 0
        self._pending: dict[int, tuple[Submission, dict]] = {}

    def arrived(self, job, now: float) -> float | None:
        """The prediction for ``job`` arriving at ``now`` (GPU-seconds), or None; recorded
        with the gate."""
        predicted = self._predict(job, now)
        if self.gate is not None:
            self.gate.record(job.job_id, job.partition, predicted)
        return predicted

    def withheld(self, partition: str) -> str:
        """Why ``partition``'s predictions are withheld now ("": used)."""
        return self.gate.withheld(partition) if self.gate is not None else ""

    def _predict(self, job, now: float) -> float | None:
        request = self.requests.get(job.job_id)
        sub = submission(job, self.origin_s + now) if request is None else \
            replace(Submission.of(request), submit_s=self.origin_s + now)
        row = self.state.features(sub)
        self.state.submitted(sub)
        self._pending[job.job_id] = (sub, row)
        if self.next_fit is None or now >= self.next_fit:
            if len(self.rows) >= self.min_train:
                self.model = GpuTimeModel.fit(self.rows, self.labels, seed=self.seed,
                                              rounds=self.rounds)
                self.fits += 1
            self.next_fit = next_refit(now if self.next_fit is None else self.next_fit,
                                       now, self.refit_every_s)
        if self.model is not None:
            return float(self.model.predict_gpu_s([row])[0])
        base = history_median(row)
        return None if math.isnan(base) else math.expm1(base)

    def finished(self, job, now: float) -> None:
        """``job`` finished at ``now``: its GPU-time (alone, at full speed) is known."""
        sub, row = self._pending.pop(job.job_id)
        truth = max(0.0, job.duration_s) * max(1, job.num_gpus)
        self.state.ended(sub, truth)
        self.rows.append(row)
        self.labels.append(math.log1p(truth))
        if self.gate is not None:
            self.gate.finished(job.job_id, truth)


def philly_prior(trace: str | Path, window: Window | str | None
                 ) -> tuple[list[HistoryJob], float] | None:
    """The jobs of a Philly window's virtual cluster submitted before the window, and the
    window's first submission (absolute), or None for other traces and windows."""
    win = window if isinstance(window, Window) else Window.parse(window)
    if win.cluster is None or detect_format(Path(trace)) != "philly":
        return None
    # by time, then line: the history's job ids are the trace's line numbers
    jobs = sorted(philly_history(trace, win.cluster), key=lambda j: (j.submit_s, int(j.job_id)))
    window = philly_window_rows([(j.submit_s, int(j.job_id)) for j in jobs], win)
    if not window:
        return None
    origin = window[0][0]
    return [j for j in jobs if j.submit_s < origin], origin
