"""Predicted GPU-time for the daemon's jobs (issue 16): what orders such as
``predicted_las`` read.

A model trained with ``slurm-marl history train`` (``agent.gpu_time_model``, a folder of
text files) predicts each GPU job once, when the agent first sees it, from its request and
the site's history as known then: the history CSV of ``slurm-marl history import``
(``agent.history``), continued with every job the agent sees end. A job keeps its
prediction for its life (a requeue does not re-predict it), so its rank never moves
because the model learned of later jobs.

A job's request as squeue shows it (user, account, QOS, partition, name, GPUs, nodes,
time limit) is what ``sacct`` shows of it later: training and prediction see the same
fields.

Predictions pass the prediction-skill gate (``history/skill.py``, the simulator's too):
each cycle, a partition's jobs carry their predictions only while the partition's
predictions have ordered the jobs that ended since the agent started well enough;
otherwise none of them does (2D-LAS order) and each says why. The gate starts empty when
the agent starts (the history has no record of what was predicted), so predictions are
withheld until enough predicted jobs have ended.
"""

from __future__ import annotations

import logging
import math
from dataclasses import replace
from pathlib import Path

from slurm_marl.domain import ClusterSnapshot, Job
from slurm_marl.history.features import Submission
from slurm_marl.history.predictor import GpuTimeModel, replay
from slurm_marl.history.records import read_history
from slurm_marl.history.skill import GateParams, SkillGate

log = logging.getLogger(__name__)
FINAL_STATES = frozenset({"COMPLETED", "FAILED", "TIMEOUT", "CANCELLED", "NODE_FAIL",
                          "OUT_OF_MEMORY", "DEADLINE", "BOOT_FAIL"})


def submission(job: Job) -> Submission:
    return Submission(user=job.user, account=job.account, partition=job.partition,
                      qos=job.qos,
                      name=job.name, gpus=job.num_gpus, nodes=max(1, job.node_count),
                      time_limit_s=job.time_limit_s, submit_s=job.submit_time_s)


class DaemonPredictor:
    """Raises ``ModelError`` / ``HistoryError`` (one line each) for a model or history
    that cannot be read: the daemon's config check turns them into exit 2."""

    def __init__(self, model_dir: str | Path, history_csv: str | Path | None,
                 now_s: float, gate: GateParams | None = GateParams()) -> None:
        self.model = GpuTimeModel.load(model_dir)
        # None: every prediction is used (ungated)
        self.gate = SkillGate(gate) if gate is not None else None
        past = [j for j in read_history(history_csv) if j.submit_s < now_s] \
            if history_csv else []
        self.state = replay(past, lambda *_: None, until_s=now_s)
        self.predicted: dict[int, float] = {}
        self._subs: dict[int, Submission] = {}
        self._gpu_s: dict[int, float] = {}
        log.info("GPU-time predictor: model %s, %d jobs of history", model_dir, len(past))

    def annotate(self, snap: ClusterSnapshot) -> ClusterSnapshot:
        """The snapshot with every GPU job's prediction; jobs seen for the first time are
        predicted together (one model call per cycle). Jobs gone from Slurm without a
        final run (cancelled while pending) are forgotten."""
        present = {j.job_id for j in snap.jobs}
        for gone in [k for k in self.predicted if k not in present]:
            self.predicted.pop(gone)
            self._subs.pop(gone, None)
            self._gpu_s.pop(gone, None)
            if self.gate is not None:
                self.gate.forget(gone)
        new = [j for j in snap.jobs
               if j.job_id not in self.predicted and j.num_gpus > 0
               and (j.is_pending or j.is_running)]
        if new:
            subs = [submission(j) for j in new]
            rows = [self.state.features(s) for s in subs]
            for s in subs:
                self.state.submitted(s)
            for j, s, gpu_s in zip(new, subs, self.model.predict_gpu_s(rows)):
                self.predicted[j.job_id] = float(gpu_s)
                self._subs[j.job_id] = s
                if self.gate is not None:
                    self.gate.record(j.job_id, j.partition, float(gpu_s))
        if not self.predicted:
            return snap
        pred = self.predicted
        why = {} if self.gate is None else {
            part: self.gate.withheld(part)
            for part in {j.partition for j in snap.jobs if j.job_id in pred}}

        def shown(j: Job) -> Job:
            reason = why.get(j.partition, "")
            value = None if reason else pred[j.job_id]
            if j.predicted_gpu_s == value and j.prediction_withheld == reason:
                return j
            return j.with_(predicted_gpu_s=value, prediction_withheld=reason)

        return replace(snap, jobs=tuple(shown(j) if j.job_id in pred else j
                                        for j in snap.jobs))

    def run_ended(self, job_id: int, num_gpus: int, start_s: float, end_s: float,
                  state: str) -> None:
        """One run of a job ended; a final one teaches the history the job's GPU-time
        (all its runs together) and forgets the job."""
        self._gpu_s[job_id] = self._gpu_s.get(job_id, 0.0) + num_gpus * max(0.0, end_s - start_s)
        if state.split()[0].upper() not in FINAL_STATES:
            return
        sub = self._subs.pop(job_id, None)
        total = self._gpu_s.pop(job_id)
        self.predicted.pop(job_id, None)
        if sub is not None and math.isfinite(total):
            self.state.ended(sub, total)
            if self.gate is not None:
                self.gate.finished(job_id, total)
        elif self.gate is not None:
            self.gate.forget(job_id)
