"""Predicted GPU-time for the daemon's jobs: what orders such as
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
predictions have ordered its last finished predicted jobs well enough; otherwise none of
them does (2D-LAS order) and each says why.

Both outlive a restart through the agent's store (``daemon/store.py``, tables
``predictions`` and ``scored_predictions``; the agent writes what ``unsaved`` hands it,
once a cycle): each prediction is stored when made, and a job still there after a restart
keeps its stored prediction (it is not predicted again from the restart-time history);
each (prediction, true GPU-time) pair is stored when its job finishes, and a restarted
gate is rebuilt from the last ``window`` pairs of each partition in the order they were
scored, so its verdict is the one it had before the restart. Out of sample by
construction, as without a restart: a job is predicted only while Slurm lists it alive,
and scored at a later cycle, the one that sees it finish; a pair is restored only if it
was scored (and its job finished) no later than the restart, from a prediction made before
it was scored. A stored row that is not so, or not a plain number, is skipped with a
warning (a clock set back across a restart can cost pairs, never add any). A store without
these rows (new, or written by an older version) starts the gate empty: predictions are
withheld until enough predicted jobs of a partition have ended.

The features' history outlives a restart too (table ``feature_history``): each job's
request is stored when it is predicted and its history row (``HistoryJob``'s fields, and
the GPU-time it taught, all runs together) when its final run ends; a restarted predictor
replays the history CSV, then these rows in the order the predictor before it learned
them (not by end time: within a cycle, ends are learned in Slurm's listing order, and which
job ended "last" is a feature), then submits the live jobs, each with the request it was
predicted from. So a job first seen after a restart is predicted as it would have been
without one. Not taken: a job also in the CSV (sacct's row, replayed by end time), a row
seen, ended or submitted after the restart, a strange row (skipped with a warning,
deleted). A job is matched to the CSV by the id sacct gives it, which each of its rows
stores as Slurm last listed the job (``sacct_id``): "123_4" for task 4 of array 123,
whatever its own job id; all its rows are skipped if one matches (an array's own job,
listed pending for the array's unsplit tasks, runs as its last task: stored as "123" when
predicted, "123_9" when it ends). Not matched, so counted twice: a row stored by an older
version, without that id, of an array task (matched by its job id, as before), and an
array's own job that started and ended between two cycles (never listed with its task).
Not exact where the submissions before the restart are only partly known: a predicted job
that vanished while the daemon was down is never counted again, and the features' count of
recent submissions, for a job submitted over ~23 h before the newest one seen, may depend
on the order submissions were learned in.
"""

from __future__ import annotations

import logging
import math
from dataclasses import replace
from pathlib import Path

from slurm_marl.domain import ClusterSnapshot, Job
from slurm_marl.history.features import RECENT, Submission, name_stem
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


def sacct_id(job: Job) -> str:
    """The job's id as sacct and the history CSV write it: "123_4" for task 4 of array 123
    (whatever its own job id), else its job id."""
    if job.array_job_id and job.array_task_id is not None:
        return f"{job.array_job_id}_{job.array_task_id}"
    return str(job.job_id)


def _stored_sacct_id(row: tuple) -> str:
    """A stored history row's ``sacct_id`` (its last column); its job id for a row stored
    by an older version, without one."""
    return row[-1] if row[-1] is not None else str(row[1])


def _number(value, low: float = 0.0) -> float | None:
    """``value`` as a finite float >= ``low``, else None (a strange stored value)."""
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        return None
    value = float(value)
    return value if math.isfinite(value) and value >= low else None


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
        # the CSV's job ids, which ``restore`` does not take again from the store; dropped
        # after the first cycle (the ids of a large history are not kept for nothing)
        self._history_ids: set[str] | None = {j.job_id for j in past}
        self.predicted: dict[int, float] = {}
        self._subs: dict[int, Submission] = {}
        self._gpu_s: dict[int, float] = {}
        # job id -> ``sacct_id`` of a predicted job, as Slurm last listed it (an array's own
        # job is listed pending for its unsplit tasks, then as its last task) or as stored
        self._sacct_ids: dict[int, str] = {}
        # job id -> (partition, when predicted, the gate's arrival number)
        self._made: dict[int, tuple[str, float, int | None]] = {}
        # for the store (``unsaved`` / ``saved``): predictions made or changed, scored
        # pairs, jobs forgotten and stored scored rows skipped, since the last save
        self._unsaved_made: dict[int, tuple] = {}
        self._unsaved_scored: list[tuple] = []
        self._unsaved_dropped: set[int] = set()
        self._unsaved_bad_scored: list[int] = []
        # history rows (``Store.HISTORY_COLUMNS`` but the id) and stored ones to delete
        self._unsaved_history: list[tuple] = []
        self._unsaved_bad_history: list[int] = []
        log.info("GPU-time predictor: model %s, %d jobs of history", model_dir, len(past))

    @property
    def window(self) -> int:
        """How many scored pairs per partition the store keeps: what the gate reads."""
        return (self.gate.params if self.gate is not None else GateParams()).window

    # how many ended jobs of each key the features read (the store keeps those)
    keep_recent = RECENT

    # ---- the store ----------------------------------------------------------------------
    def restore(self, predictions: list[tuple], scored: list[tuple],
                snap: ClusterSnapshot, history: list[tuple] = ()) -> None:
        """Take back what a store holds (``Store.predictions``,
        ``Store.scored_predictions`` and ``Store.feature_history``) when the agent starts,
        before any other call; the agent has restarted at ``snap.time_s``. The feature
        history goes on from the history CSV with the stored history rows, in the order
        the predictor before the restart learned them (a job also in the CSV is taken
        from the CSV only; a row seen after ``snap.time_s`` is never taken), then the live
        jobs of the stored predictions are submitted. Stored predictions are kept as they were
        made (a job of ``snap`` is not predicted again, and its prediction is recorded in
        the gate as pending again, with its arrival number); the gate scores the stored
        pairs again, in their order. Out of sample: a pair finished or scored after
        ``snap.time_s``, or whose prediction was made after it was scored, is never
        scored; nor is a prediction made after ``snap.time_s`` kept. Strange rows (not
        finite, negative, not a number) are skipped with a warning and deleted at the next
        save."""
        now = snap.time_s
        skipped: list[str] = []
        n_history, stored_subs = self._restore_history(history, now, skipped)
        n_scored = self._restore_scored(scored, now, skipped)
        restored = self._valid_predictions(predictions, now, skipped)
        jobs = {j.job_id: j for j in snap.jobs}
        for arrival, job_id, part, pred, made, done in sorted(restored):
            self._take_back(job_id, part, pred, made, done, arrival,
                            stored_subs.get(job_id, (None, None)), jobs.get(job_id))
        if skipped:
            log.warning("GPU-time predictions: %d stored rows skipped: %s%s", len(skipped),
                        "; ".join(skipped[:5]), "; ..." if len(skipped) > 5 else "")
        log.info("GPU-time predictor: %d predictions, %d scored pairs and %d history rows "
                 "restored from the store", len(restored), n_scored, n_history)

    def _restore_scored(self, scored: list[tuple], now: float, skipped: list[str]) -> int:
        """The gate scores the stored pairs again, in their order; how many."""
        if self.gate is None:
            return 0
        n_scored = 0
        for row in scored:
            row_id, job_id, part, pred, truth, made, finished, scored_s, arrival = row
            pred, truth = _number(pred), _number(truth)
            made, finished, scored_s = (_number(t, -math.inf)
                                        for t in (made, finished, scored_s))
            problem = (
                "not a number" if None in (pred, truth, made, finished, scored_s)
                or not isinstance(part, str) or not isinstance(arrival, int)
                or arrival < 0
                else "finished after the restart" if max(finished, scored_s) > now
                else "predicted after it was scored" if made > scored_s else "")
            if problem:
                skipped.append(f"scored pair of job {job_id} ({problem})")
                self._unsaved_bad_scored.append(row_id)
                continue
            self.gate.score(part, pred, truth, arrival)
            n_scored += 1
        return n_scored

    def _valid_predictions(self, predictions: list[tuple], now: float, skipped: list[str]
                           ) -> list[tuple]:
        """The stored predictions that can be taken back, as (arrival or -1, job id,
        partition, prediction, when made, GPU-seconds done); the others skipped."""
        restored = []
        for row in predictions:
            job_id, part, pred, made, arrival, done = row
            pred, made = _number(pred), _number(made, -math.inf)
            done = 0.0 if done is None else _number(done)
            problem = (
                "not a number" if None in (pred, made, done) or not isinstance(part, str)
                or not isinstance(job_id, int)
                or not (arrival is None or isinstance(arrival, int) and arrival >= 0)
                else "made after the restart" if made > now else "")
            if problem:
                skipped.append(f"prediction of job {job_id} ({problem})")
                self._unsaved_dropped.add(job_id)
                continue
            restored.append((arrival if arrival is not None else -1, job_id, part, pred,
                             made, done))
        return restored

    def _take_back(self, job_id: int, part: str, pred: float, made: float, done: float,
                   arrival: int, stored: tuple, job) -> None:
        """One stored prediction kept as it was made (``stored``: its submission and
        ``sacct_id`` from the history rows, if any; ``job``: Slurm's listing now, if
        any)."""
        self.predicted[job_id] = pred
        if done:
            self._gpu_s[job_id] = done
        # the request it was predicted from (in the features already), or for a store
        # without it, the request Slurm lists now
        sub, stored_id = stored
        if sub is not None:
            self._subs[job_id] = sub
        elif job is not None:
            sub = self._subs[job_id] = submission(job)
            self.state.submitted(sub)
        if stored_id is not None:      # a listed array job's is updated each cycle
            self._sacct_ids[job_id] = stored_id
        if self.gate is not None:
            arrival = self.gate.record(job_id, part, pred, arrival if arrival >= 0 else None)
        self._made[job_id] = (part, made, arrival if arrival >= 0 else None)

    def _restore_history(self, rows: list[tuple], now: float, skipped: list[str]
                         ) -> tuple[int, dict[int, tuple[Submission, str | None]]]:
        """Feed the stored history rows (``Store.HISTORY_COLUMNS``) to the features in
        their order, as the predictor before the restart learned them: a submission row
        (``end_s`` and ``gpu_time_s`` NULL) submits its job, an end row teaches its
        GPU-time. Skipped: a job of the history CSV (sacct's row was replayed; every row of
        a job one of whose rows has an id of the CSV: its ``sacct_id``, or for a row
        without one, its job id), a row seen, ended or submitted after ``now``, a strange
        row (added to ``skipped`` and deleted at the next save). Returns (rows taken, each
        job's submission and stored ``sacct_id`` by its id)."""
        csv_ids, self._history_ids = self._history_ids or set(), None
        # by job id: an array's own job is stored as "123" when predicted, as its last task
        # "123_9" when it ends
        in_csv = {row[1] for row in rows if _stored_sacct_id(row) in csv_ids}
        taken = 0
        subs: dict[int, tuple[Submission, str | None]] = {}
        for row in rows:
            (row_id, job_id, name, user, account, part, qos, _stem, gpus, nodes, limit,
             submit, start, end, state, gpu_s, seen, sacct) = row
            submit, seen = _number(submit, -math.inf), _number(seen, -math.inf)
            submitted = end is None and gpu_s is None
            end, gpu_s = (None, None) if submitted else (_number(end, -math.inf),
                                                         _number(gpu_s))
            problem = (
                "not a number or missing" if None in (submit, seen)
                or not submitted and None in (end, gpu_s)
                or not (start is None or _number(start, -math.inf) is not None)
                or not (limit is None or _number(limit) is not None)
                or not all(isinstance(v, str) for v in (name, user, account, part, qos, state))
                or not (sacct is None or isinstance(sacct, str))
                or not all(isinstance(v, int) and not isinstance(v, bool) and v >= 0
                           for v in (job_id, gpus, nodes))
                else "seen after the restart"
                if max(submit, seen, -math.inf if submitted else end) > now else "")
            if problem:
                skipped.append(f"history row of job {job_id} ({problem})")
                self._unsaved_bad_history.append(row_id)
                continue
            sub = Submission(user=user, account=account, partition=part, qos=qos, name=name,
                             gpus=gpus, nodes=nodes,
                             time_limit_s=None if limit is None else float(limit),
                             submit_s=submit)
            if submitted:
                subs[job_id] = (sub, sacct)
            if job_id in in_csv:
                continue
            if submitted:
                self.state.submitted(sub)
            else:
                self.state.ended(sub, gpu_s)
            taken += 1
        return taken, subs

    def unsaved(self) -> tuple[list[tuple], list[tuple], list[int], list[int],
                               list[tuple], list[int]]:
        """What the store does not have yet: (predictions made or changed, scored pairs,
        jobs forgotten, stored scored rows to delete, history rows in the order learned,
        stored history rows to delete), in ``Store.save_predictions``'s order; ``saved``
        once written."""
        return (list(self._unsaved_made.values()), list(self._unsaved_scored),
                sorted(self._unsaved_dropped), list(self._unsaved_bad_scored),
                list(self._unsaved_history), list(self._unsaved_bad_history))

    def saved(self) -> None:
        self._unsaved_made.clear()
        self._unsaved_scored.clear()
        self._unsaved_dropped.clear()
        self._unsaved_bad_scored.clear()
        self._unsaved_history.clear()
        self._unsaved_bad_history.clear()

    def _learned(self, job_id: int, sub: Submission, start_s: float | None,
                 end_s: float | None, state: str, gpu_s: float | None,
                 seen_s: float) -> None:
        """A history row for the store (``Store.HISTORY_COLUMNS`` but the id)."""
        self._unsaved_history.append((
            job_id, sub.name, sub.user, sub.account, sub.partition, sub.qos,
            name_stem(sub.name), sub.gpus, sub.nodes, sub.time_limit_s, sub.submit_s,
            start_s, end_s, state, gpu_s, seen_s,
            self._sacct_ids.get(job_id, str(job_id))))

    def _mark_made(self, job_id: int) -> None:
        part, made, arrival = self._made[job_id]
        self._unsaved_made[job_id] = (job_id, part, self.predicted[job_id], made, arrival,
                                      self._gpu_s.get(job_id, 0.0))
        self._unsaved_dropped.discard(job_id)

    def _forget(self, job_id: int) -> None:
        self.predicted.pop(job_id, None)
        self._subs.pop(job_id, None)
        self._gpu_s.pop(job_id, None)
        self._sacct_ids.pop(job_id, None)
        if self._made.pop(job_id, None) is not None:
            self._unsaved_made.pop(job_id, None)
            self._unsaved_dropped.add(job_id)
        if self.gate is not None:
            self.gate.forget(job_id)

    # ---- each cycle ---------------------------------------------------------------------
    def annotate(self, snap: ClusterSnapshot) -> ClusterSnapshot:
        """The snapshot with every GPU job's prediction; jobs seen for the first time are
        predicted together (one model call per cycle). Jobs gone from Slurm without a
        final run (cancelled while pending) are forgotten."""
        self._history_ids = None        # no restore after the first cycle
        present = {j.job_id for j in snap.jobs}
        for gone in [k for k in self.predicted if k not in present]:
            self._forget(gone)
        for j in snap.jobs:
            if j.array_job_id and j.job_id in self.predicted:
                self._sacct_ids[j.job_id] = sacct_id(j)
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
                self._sacct_ids[j.job_id] = sacct_id(j)
                self._learned(j.job_id, s, None, None, "SUBMITTED", None, snap.time_s)
                arrival = None
                if self.gate is not None:
                    arrival = self.gate.record(j.job_id, j.partition, float(gpu_s))
                self._made[j.job_id] = (j.partition, snap.time_s, arrival)
                self._mark_made(j.job_id)
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
                  state: str, now_s: float | None = None) -> None:
        """One run of a job ended, seen at ``now_s`` (the cycle's time; default ``end_s``);
        a final one teaches the history the job's GPU-time (all its runs together), scores
        its prediction in the gate and forgets the job."""
        scored_s = end_s if now_s is None else now_s
        self._gpu_s[job_id] = self._gpu_s.get(job_id, 0.0) + num_gpus * max(0.0, end_s - start_s)
        if state.split()[0].upper() not in FINAL_STATES:
            if job_id in self._made:
                self._mark_made(job_id)     # its runs so far outlive a restart
            return
        sub = self._subs.pop(job_id, None)
        total = self._gpu_s.pop(job_id)
        made = self._made.get(job_id)
        if sub is not None and math.isfinite(total):
            self.state.ended(sub, total)
            self._learned(job_id, sub, start_s, end_s, state.split()[0].upper(), total,
                          scored_s)
        # made[1] <= scored_s always holds here (a job is predicted only while listed
        # alive, and run_ended comes before annotate in a cycle); checked all the same, as
        # ``restore`` checks it, so a restored gate scores exactly the pairs this one did
        if (self.gate is not None and made is not None and made[1] <= scored_s
                and math.isfinite(total)):
            scored = self.gate.finished(job_id, total)
            if scored is not None:
                part, predicted, arrival = scored
                self._unsaved_scored.append((job_id, part, predicted, total, made[1],
                                             end_s, scored_s, arrival))
        self._forget(job_id)
