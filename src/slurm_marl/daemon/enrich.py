"""The pipeline's enrich stage: Slurm's snapshot with what Slurm does not say.

Each enricher takes the cycle's ``Enriched`` and gives it back with more filled in:
accounting (attained service and queue time across requeues and restarts, from the
store's job records), model signatures (a job's model type from its name or its user's
history), observed speeds (sampled from jobs' progress reports; the snapshot unchanged),
GPU-time predictions. They run in that order; one that fails on a cycle (but accounting)
costs the cycle its part, never the cycle.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass, field, replace
from typing import Protocol

from slurm_marl.daemon.accounting import AccountMemo, FinishedRun, account
from slurm_marl.daemon.signature import infer_signatures
from slurm_marl.daemon.store import JobRecord, Store
from slurm_marl.domain import ClusterSnapshot

log = logging.getLogger(__name__)


@dataclass
class Enriched:
    """A cycle's snapshot as enriched so far, with the job records behind it and the runs
    that ended since the last cycle."""

    snapshot: ClusterSnapshot
    # the store's live job records, by job id (folded by accounting)
    records: dict[int, JobRecord] = field(default_factory=dict)
    finished_runs: list[FinishedRun] = field(default_factory=list)


class Enricher(Protocol):
    def enrich(self, cycle: Enriched) -> Enriched:
        """``cycle`` with this enricher's part filled in."""
        ...


class Accounting:
    """Folds the snapshot into the store's live job records (``accounting.account``)."""

    def __init__(self, store: Store) -> None:
        self.store = store
        self._colocated: dict[int, dict] = {}
        self._memo = AccountMemo()

    def enrich(self, cycle: Enriched) -> Enriched:
        raw = cycle.snapshot
        records = self.store.records.live(j.job_id for j in raw.jobs)
        acc = account(raw, records, self._colocated, self._memo)
        return Enriched(acc.snapshot, acc.records, acc.finished_runs)


class Signatures:
    """Fills in model types the jobs do not declare (name, then user history)."""

    def __init__(self, store: Store) -> None:
        self.store = store
        self._history: dict[tuple[str, str], str] | None = None

    def enrich(self, cycle: Enriched) -> Enriched:
        if self._history is None:
            self._history = self.store.records.signatures()
        snap = cycle.snapshot
        sigs = infer_signatures(snap.jobs, self._history)
        for job_id, model in sigs.items():
            rec = cycle.records.get(job_id)
            if rec is not None and not rec.model_type:
                rec.model_type = model
                self._history[(rec.user, rec.name)] = model
        if not sigs:
            return cycle
        return replace(cycle, snapshot=replace(snap, jobs=tuple(
            j.with_(model_type=sigs[j.job_id]) if j.job_id in sigs else j
            for j in snap.jobs)))


class SpeedSamples:
    """Observed speeds from jobs' progress reports (``agent.progress_dir``), stored; a
    failure here costs samples, never the cycle."""

    def __init__(self, store: Store, sampler) -> None:
        self.store = store
        self.sampler = sampler

    def enrich(self, cycle: Enriched) -> Enriched:
        try:
            samples = self.sampler.observe(cycle.snapshot)
            if samples:
                self.store.samples.add(samples)
        except Exception:
            log.exception("speed sampling failed this cycle; samples in progress dropped")
            self.sampler.forget()
        return cycle


class Predictions:
    """GPU-time predictions (``daemon/predictions.py``); a predictor failure costs this
    cycle its predictions (orders then rank by attained service), never the cycle. Each
    cycle the store gets what changed (this store object is its one writer; the agent
    gives the predictor back what the store kept when it starts)."""

    def __init__(self, store: Store, predictor) -> None:
        self.store = store
        self.predictor = predictor

    def enrich(self, cycle: Enriched) -> Enriched:
        snap = cycle.snapshot
        try:
            for run in cycle.finished_runs:
                self.predictor.run_ended(run.job_id, run.num_gpus, run.start_s, run.end_s,
                                         run.state, now_s=snap.time_s)
            out = self.predictor.annotate(snap)
        except Exception:
            log.exception("GPU-time predictions failed this cycle; ordering without them")
            out = snap
        try:
            made, scored, dropped, bad, history, bad_history = self.predictor.unsaved()
            self.store.predictions.save(made, scored, dropped, self.predictor.window,
                                             bad, history, bad_history,
                                             keep_recent=self.predictor.keep_recent)
            self.predictor.saved()
        except Exception:
            log.exception("could not store the GPU-time predictions; tried again next cycle")
        return replace(cycle, snapshot=out) if out is not snap else cycle
