"""GPU-time predictions learned while a simulation runs, from nothing but the jobs that
have finished in it: what a site's predictor would know at each submission.

Each arriving job gets its features from ``history.features`` (fed only by jobs that
finished before it arrived) and a prediction from a LightGBM model (``history.predictor``)
refit every ``refit_every_s`` simulated seconds on the jobs finished so far; before the
first fit, the history median of similar jobs; with no similar job at all, no prediction
(the order then ranks that job by attained service, as 2D-LAS would).

A trace has no names, accounts or time limits: a job's ``user`` column (the virtual
cluster, for Philly) stands as user and account, so the per-user history is all there is.
"""

from __future__ import annotations

import math

from slurm_marl.history.features import FeatureState, Submission, history_median
from slurm_marl.history.predictor import GpuTimeModel


def submission(job, now: float) -> Submission:
    """What a simulated job tells at submission (no duration, nothing of its run)."""
    return Submission(user=job.user, account=job.user, partition=job.partition, qos="",
                      name="", gpus=job.num_gpus, nodes=1, time_limit_s=None, submit_s=now)


class OnlinePredictor:
    def __init__(self, refit_every_s: float = 86400.0, min_train: int = 200, seed: int = 0,
                 rounds: int = 100) -> None:
        self.refit_every_s = refit_every_s
        self.min_train = min_train
        self.seed = seed
        self.rounds = rounds
        self.state = FeatureState()
        self.rows: list[dict] = []
        self.labels: list[float] = []
        self.model: GpuTimeModel | None = None
        self.next_fit: float | None = None
        self.fits = 0
        self._pending: dict[int, tuple[Submission, dict]] = {}

    def arrived(self, job, now: float) -> float | None:
        """The prediction for ``job`` arriving at ``now`` (GPU-seconds), or None."""
        sub = submission(job, now)
        row = self.state.features(sub)
        self.state.submitted(sub)
        self._pending[job.job_id] = (sub, row)
        if self.next_fit is None:
            self.next_fit = now + self.refit_every_s
        elif now >= self.next_fit:
            if len(self.rows) >= self.min_train:
                self.model = GpuTimeModel.fit(self.rows, self.labels, seed=self.seed,
                                              rounds=self.rounds)
                self.fits += 1
            while self.next_fit <= now:
                self.next_fit += self.refit_every_s
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
