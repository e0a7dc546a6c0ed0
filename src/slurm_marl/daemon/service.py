"""The agent: every few seconds snapshot Slurm, decide per partition, write what changed.

One cycle is a pipeline of stages, each a function or object of its own module:

1. **read** (``ClusterSource.snapshot``: 4 Slurm client calls); on the first cycle after a
   start, the guard's protected jobs and the predictor's state come back from the store,
   half-done GPU re-pins are repaired and the agent's reservations reconciled;
2. **enrich** (``daemon/enrich.py``): accounting into the store's job records (attained
   service survives requeue and restarts), model signatures, observed speeds, GPU-time
   predictions;
3. **admit** (``slurm_integration/admission.py``): which jobs each managed partition's
   policy may decide, and why not the others (left to Slurm, held, a begin time its user
   or an admin set, an in-flight start); jobs no placement could ever hold are left to
   Slurm first (``daemon/placeable.py``), and priorities set by someone else than the
   agent are marked (``daemon/priorities.py``: kept in the order, never rewritten);
4. **decide** (``daemon/decide.py``): ``run_cycle`` per managed partition;
5. **plan writes** (``daemon/writes.py``): priorities and placements only where they
   changed; a waiting multi-node job gets a reservation on its chosen nodes; preemption
   only in opted-in partitions; the "lease": jobs the agent keeps waiting get their begin
   time pushed by the grace again shortly before it ends, so if the agent dies they become
   eligible within one grace (fail-open) and while it lives Slurm does not start them
   behind its back;
6. **apply** through the DecisionSink (nothing in shadow mode), remembering what was
   written (``daemon/write_memory.py``);
7. **record** (``daemon/recording.py``): decisions, Slurm's answers and why jobs were left
   alone, for ``explain``.

Nothing here raises out of a cycle: a failed cycle is logged, recorded and retried at the
next tick; the loop keeps running while slurmctld restarts.
"""

from __future__ import annotations

import gc
import logging
import sqlite3
import time
from dataclasses import dataclass, field

from slurm_marl.daemon.config import Config
from slurm_marl.daemon.decide import Decided, decide
from slurm_marl.daemon.enrich import (Accounting, Enriched, Enricher, Predictions,
                                      Signatures, SpeedSamples)
from slurm_marl.daemon.health import HealthFile, health_path
from slurm_marl.daemon.placeable import Placeability
from slurm_marl.daemon.priorities import asked_priorities
from slurm_marl.daemon.recording import Recorder
from slurm_marl.daemon.store import Store
from slurm_marl.daemon.write_memory import WriteMemory
from slurm_marl.daemon.writes import translate
from slurm_marl.domain import ClusterSnapshot, Decision, Place, SetPriority
from slurm_marl.policy.guard import GuardedOrder
from slurm_marl.slurm_integration.admission import Admission, AdmissionRules, Admitted
from slurm_marl.slurm_integration.ports import (ClusterSource, DecisionSink, SlurmError,
                                                WriteResult, WriteStatus)
from slurm_marl.slurm_integration.vocabulary import is_agent_reservation

log = logging.getLogger(__name__)


@dataclass
class CycleReport:
    cycle: int
    time_s: float
    duration_s: float = 0.0
    pending: int = 0
    running: int = 0
    decisions: list[Decision] = field(default_factory=list)
    results: list[WriteResult] = field(default_factory=list)
    error: str | None = None
    # jobs the Slurm-alone guard protects (policy/guard.py); None: no profile has a guard
    protected: int | None = None
    # managed partitions Slurm does not list; some of them: a warning, all: an error
    unknown_partitions: tuple[str, ...] = ()
    warning: str | None = None
    # seconds from the cycle's start to the end of its writes before the lease renewals
    # (the sink's ``starts_done``): what the loop paces early cycles on. None: the sink
    # made no writes this cycle or does not say (then the whole duration counts)
    starts_s: float | None = None

    @property
    def written(self) -> int:
        return sum(1 for r in self.results if r.status is WriteStatus.OK)

    @property
    def refused(self) -> int:
        return sum(1 for r in self.results if r.status in (WriteStatus.REFUSED,
                                                            WriteStatus.VANISHED))


class Agent:
    def __init__(self, config: Config, source: ClusterSource, sink: DecisionSink,
                 store: Store, policy, metrics=None, clock=time.time,
                 predictor=None, partition_policies: dict | None = None,
                 gate_warning: str | None = None) -> None:
        self.config = config
        # GPU-time predictions (daemon/predictions.py), when a model is configured; what
        # it held before a restart is given back from the store on the first cycle
        self.predictor = predictor
        self.source = source
        self.sink = sink
        self.store = store
        self.policy = policy
        # partitions with a profile of their own (agent.partition_profiles): their policy
        self.partition_policies = dict(partition_policies or {})
        for p in (policy, *self.partition_policies.values()):
            if hasattr(p, "reuse_decisions"):
                p.reuse_decisions = config.agent.reuse_decisions
        self.metrics = metrics
        self.clock = clock
        self._started = False
        agent = config.agent
        self.admission = Admission(AdmissionRules(
            grace_s=agent.grace_s, interval_s=agent.interval_s,
            preempt_partitions=agent.preempt_partitions))
        self.memory = WriteMemory(agent.interval_s)
        self.placeability = Placeability()
        # why the installed gate does not match this agent (``wiring.gate_warning``): said
        # once in the journal and in every cycle's warning (``status``)
        self.gate_warning = gate_warning
        self.recorder = Recorder(store)
        self.sampler = None
        if agent.progress_dir:
            from slurm_marl.daemon.progress import ProgressSampler, usable_dir
            usable_dir(agent.progress_dir)  # warns now if it is not there yet
            self.sampler = ProgressSampler(agent.progress_dir, agent.sample_min_s)
        self.enrichers: list[Enricher] = [Accounting(store), Signatures(store)]
        if self.sampler is not None:
            self.enrichers.append(SpeedSamples(store, self.sampler))
        if predictor is not None:
            self.enrichers.append(Predictions(store, predictor))
        self._cycle_no = 0   # the cycle under way (repairs are recorded under it)
        self._cycle_started = time.monotonic()  # when it began (``report.starts_s``)
        self.last_report: CycleReport | None = None
        self._unknown_logged: str | None = None  # unknown partitions, as last logged
        # the last cycle's outcome beside the store, for `status` when the store fails
        self.health = HealthFile(health_path(store.path), config.agent.interval_s)

    # ---- one cycle ----------------------------------------------------------------------
    def probe(self) -> str | None:
        """The managed partitions' queue fingerprint (``ClusterSource.queue_fingerprint``):
        the loop runs a cycle early when it changes. None: not known (a source without the
        probe, or a failed read)."""
        probe = getattr(self.source, "queue_fingerprint", None)
        if probe is None:
            return None
        try:
            return probe(tuple(self.config.agent.managed_partitions))
        except Exception as exc:  # a probe never stops the agent; the cycle will tell
            log.debug("queue probe failed: %s", exc)
            return None

    def cycle(self) -> CycleReport:
        started = time.monotonic()
        try:
            number = self.store.next_cycle()
        except sqlite3.Error:
            number = (self.last_report.cycle if self.last_report else 0) + 1
        report = CycleReport(cycle=number, time_s=self.clock())
        # A cycle makes hundreds of thousands of short-lived objects (the snapshot, the
        # policy's state) that reference counting frees at its end; the cyclic collector
        # would walk the live heap several times meanwhile (measured: docs/benchmarks.md,
        # "The cycle's constant costs"). It runs again between cycles.
        collecting = gc.isenabled()
        gc.disable()
        self._cycle_started = started
        try:
            self._cycle(report)
        except SlurmError as exc:
            self.store.records.forget_live()    # records may be folded but not saved
            report.error = f"slurm: {exc.message or exc}"
            log.warning("cycle %d: Slurm did not answer (%s); retrying next tick",
                        report.cycle, exc.message or exc)
        except sqlite3.Error as exc:  # the disk is full, the file damaged: one line
            self.store.records.forget_live()
            report.error = f"store: cannot write {self.store.path}: {exc}"
            log.error("cycle %d failed: %s", report.cycle, report.error)
        except Exception as exc:  # one bad cycle must not end the agent
            self.store.records.forget_live()
            report.error = f"internal: {exc!r}"
            log.exception("cycle %d failed", report.cycle)
        finally:
            if collecting:
                gc.enable()
        report.duration_s = time.monotonic() - started
        recorded = False
        try:
            self.store.record_cycle(report.cycle, report.time_s, report.duration_s,
                                    report.pending, report.running, len(report.decisions),
                                    report.written, report.refused, report.error,
                                    report.protected, report.warning)
            recorded = True
        except sqlite3.Error as exc:
            if report.error is None:    # a cycle the store did not take has failed
                report.error = f"store: cannot record the cycle in {self.store.path}: {exc}"
                log.error("cycle %d failed: %s", report.cycle, report.error)
        except Exception:
            log.exception("could not record cycle %d", report.cycle)
        self.health.write(report, recorded)
        if self.metrics is not None:
            self.metrics.observe(report)
        self.last_report = report
        return report

    def _cycle(self, report: CycleReport) -> None:
        """One cycle's stages, in order (the module's docstring)."""
        self._cycle_no = report.cycle
        raw = self.source.snapshot()
        report.time_s = raw.time_s
        self._catch_up(raw)
        enriched = self._enrich(raw)
        self.recorder.accounting(enriched.records.values(), enriched.finished_runs)
        snap = enriched.snapshot
        managed = [p for p in self.config.agent.managed_partitions if snap.partition(p)]
        if self._unknown_partitions(report, snap, managed):
            return
        if self.gate_warning:
            report.warning = "; ".join(w for w in (report.warning, self.gate_warning) if w)
        snap = self.placeability.mark(snap, managed)
        snap = asked_priorities(snap, managed, self.config.agent.site_factor_partitions,
                                self.memory.priorities, self.memory.nices)
        admitted = self.admission.admit(snap, managed, self.memory.inflight,
                                        self.memory.preempted, self.memory.begins)
        self.recorder.rows(report.cycle, snap.time_s, admitted.logged)
        decided = decide(admitted.views, self._policy_for, self.admission.may_requeue, snap,
                         admitted.held.time_s)
        report.pending, report.running = decided.pending, decided.running
        report.decisions = decided.decisions
        self.recorder.alone(report.cycle, snap.time_s, admitted.alone)
        report.protected = self.recorder.guard(self._guards(), snap)
        # each ordered job's queue of the last cycle, before this cycle's are stored
        records = enriched.records
        last_queue = {d.job_id: records[d.job_id].queue for d in decided.decisions
                      if isinstance(d, SetPriority) and d.job_id in records}
        self.store.records.set_queues((d.job_id, d.queue) for d in decided.decisions
                                      if isinstance(d, SetPriority))
        writes, advice = self._plan(snap, decided, admitted)
        if self.config.agent.shadow:
            self.recorder.shadow(report.cycle, snap, writes + advice)
            return
        results = self._apply(report, writes, snap)
        self.recorder.applied(report.cycle, snap, results,
                              self.memory.remember(
                                  results, snap,
                                  snap.time_s + time.monotonic() - self._cycle_started),
                              advice, decided.decisions, last_queue)

    def _catch_up(self, raw: ClusterSnapshot) -> None:
        """On the first cycle the agent takes back what it kept (``_on_start``); on later
        ones the sink repairs half-done writes first."""
        if not self._started:
            self._on_start(raw)
            self._started = True
        elif not self.config.agent.shadow:
            self.recorder.repairs(self._cycle_no, raw, self.sink.repair_half_done(raw))

    def _enrich(self, raw: ClusterSnapshot) -> Enriched:
        cycle = Enriched(raw)
        for enricher in self.enrichers:
            cycle = enricher.enrich(cycle)
        return cycle

    def _policy_for(self, part: str):
        return self.partition_policies.get(part, self.policy)

    def _plan(self, snap: ClusterSnapshot, decided: Decided, admitted: Admitted
              ) -> tuple[list[Decision], list[Place]]:
        """(writes for Slurm, changed plans that need no write): the decisions translated
        (``writes.translate``), the releases of jobs left to Slurm, and none to a job
        whose refusal pause is not over, nor a start of a job the agent requeued seconds
        ago (``WriteMemory.settled``)."""
        writes, advice = translate(
            snap, decided.decisions, decided.orders, self.config.agent,
            written=self.store.written.get({d.job_id for d in decided.decisions}),
            reservations=self.store.reservations.active(),
            left=self.admission.left_waiting(snap),
            inflight_nodes=self.memory.inflight_nodes(),
            resv_renewed=self.memory.resv_renewed, own_priorities=self.memory.priorities)
        writes += admitted.released
        return self.memory.settled(self.memory.past_backoff(writes, snap.time_s),
                                   snap.time_s), advice

    def _apply(self, report: CycleReport, writes: list[Decision], snap: ClusterSnapshot
               ) -> list[WriteResult]:
        results = self.sink.apply(writes, snap) if writes else []
        done = self.sink.starts_done() if writes else None
        if done is not None:
            report.starts_s = max(0.0, done - self._cycle_started)
        report.results = results
        return results

    def _unknown_partitions(self, report: CycleReport, snap: ClusterSnapshot,
                            managed: list[str]) -> bool:
        """Managed partitions Slurm does not list (a typo in the config, a partition
        renamed): all of them is an error (the cycle fails: nothing to manage; `status`,
        the metrics and the watchdog show it); some of them a warning (the others are
        managed; a partition renamed and restored comes back by itself). Logged when the
        set changes. True: the cycle can do nothing."""
        missing = tuple(p for p in self.config.agent.managed_partitions if p not in managed)
        report.unknown_partitions = missing
        if not missing:
            if self._unknown_logged is not None:
                log.warning("every managed partition is in Slurm again")
                self._unknown_logged = None
            return False
        known = ", ".join(p.name for p in snap.partitions) or "none"
        text = (f"{', '.join(missing)} (Slurm has: {known}; agent.managed_partitions in "
                f"{self.config.source})")
        if not managed:
            report.error = f"config: no managed partition is in Slurm: {text}"
        else:
            report.warning = f"managed partitions not in Slurm: {text}; the others are managed"
        if self._unknown_logged != text:
            (log.error if not managed else log.warning)(
                "%s", report.error or report.warning)
            self._unknown_logged = text
        return not managed

    def _guards(self) -> list[GuardedOrder]:
        """The Slurm-alone guards of the policies this agent runs."""
        return [p.order for p in (self.policy, *self.partition_policies.values())
                if isinstance(getattr(p, "order", None), GuardedOrder)]

    # ---- start-up -----------------------------------------------------------------------
    def _on_start(self, snap: ClusterSnapshot) -> None:
        if self.gate_warning:
            log.warning("%s", self.gate_warning)
        guards = self._guards()
        if guards:       # the jobs they protected before a restart
            guarded = {job_id: (r["protected_s"], r["shadow_start_s"])
                       for job_id, r in self.store.guard.get().items()}
            for g in guards:
                g.shadow.restore(guarded)
        if self.predictor is not None:
            try:
                self.predictor.restore(
                    self.store.predictions.live(),
                    self.store.predictions.scored(self.predictor.window), snap,
                    self.store.predictions.history())
            except Exception:
                log.exception("could not restore the GPU-time predictions from the store; "
                              "the skill gate starts empty")
        if self.config.agent.shadow:
            return
        # the leases and priorities it wrote before, so that it still tells them from a
        # begin or a priority its users or admins set
        kept = self.store.written.get([j.job_id for j in snap.pending])
        self.memory.take_back({k: v for k, v in kept.items()
                               if k[1] in ("begin", "priority", "nice")})
        repaired = self.sink.repair_half_done(snap)
        if repaired:
            log.info("repaired GPU requests of jobs %s", repaired)
            self.recorder.repairs(self._cycle_no, snap, repaired)
        # Reservations named like ours that the store does not know (a crash right after
        # creating one) are adopted, so they are ended like any other.
        known = self.store.reservations.active()
        for job in snap.jobs:
            name = job.reservation
            if is_agent_reservation(name) and name not in known:
                self.store.reservations.add(name, job.job_id, ",".join(job.required_nodes),
                                           snap.time_s)
