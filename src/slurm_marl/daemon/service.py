"""The agent: every few seconds snapshot Slurm, decide per partition, write what changed.

One cycle:
1. snapshot (4 Slurm client calls); on the first cycle after a start, repair half-done GPU
   re-pins and reconcile the reservations the store says the agent owns;
2. fold it into the store's job records (attained service survives requeue and restarts);
3. ``run_cycle`` per managed partition on that partition's nodes and jobs;
4. translate (``daemon/writes.py``): priorities and placements only where they changed; a
   waiting multi-node job gets a reservation on its chosen nodes; preemption only in
   opted-in partitions; the "lease": jobs the agent keeps waiting get their begin time
   pushed by the grace again shortly before it ends, so if the agent dies they become
   eligible within one grace (fail-open) and while it lives Slurm does not start them
   behind its back;
5. write through the DecisionSink (nothing in shadow mode), record decisions and answers.

Nothing here raises out of a cycle: a failed cycle is logged, recorded and retried at the
next tick; the loop keeps running while slurmctld restarts.
"""

from __future__ import annotations

import gc
import json
import logging
import sqlite3
import time
from collections.abc import Callable
from dataclasses import dataclass, field, fields, replace
from operator import attrgetter

from slurm_marl.daemon.accounting import AccountMemo, account
from slurm_marl.daemon.config import Config
from slurm_marl.daemon.health import HealthFile, health_path
from slurm_marl.daemon.signature import infer_signatures
from slurm_marl.daemon.store import Store
from slurm_marl.daemon.writes import (ordered_writes, place_key, plan_writes,
                                      site_factor_writes)
from slurm_marl.domain import (ACTIVE_STATES, ClusterSnapshot, Decision, EndReservation, Job,
                               JobState, Place, Preempt, Release, Reserve, SetPriority)
from slurm_marl.policy.guard import GuardedOrder
from slurm_marl.slurm_integration.marker import (marker_gpus_per_node, parse_marker,
                                                 requested_gpu_fields, user_begin,
                                                 user_gpu_request)
from slurm_marl.slurm_integration.ports import (ClusterSource, DecisionSink, SlurmError,
                                                WriteResult, WriteStatus)
from slurm_marl.slurm_integration.vocabulary import (NEVER_RUNNABLE, is_agent_reservation,
                                                    unschedulable)

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


def partition_view(snap: ClusterSnapshot, partition: str) -> ClusterSnapshot:
    """The part of the cluster one agent decides for: its nodes and the jobs that may run
    there (a job submitted to several partitions is seen by each)."""
    return partition_views(snap, [partition])[partition]


def partition_views(snap: ClusterSnapshot, partitions: list[str]
                    ) -> dict[str, ClusterSnapshot]:
    """``partition_view`` of each partition, in one pass over the jobs: a running job is in
    the partitions of its nodes, any other job in those it was submitted to."""
    wanted = set(partitions)
    nodes: dict[str, list] = {p: [] for p in partitions}
    parts_of_node: dict[str, tuple[str, ...]] = {}
    for n in snap.nodes:
        parts_of_node[n.name] = n.partitions
        for p in n.partitions:
            if p in wanted:
                nodes[p].append(n)
    jobs: dict[str, list] = {p: [] for p in partitions}
    by_nodes: dict[tuple[str, ...], tuple[str, ...]] = {}     # memo: alike jobs abound
    by_request: dict[str, tuple[str, ...]] = {}
    active = ACTIVE_STATES
    for j in snap.jobs:
        if j.state in active:
            parts = by_nodes.get(j.nodes)
            if parts is None:
                parts = by_nodes[j.nodes] = tuple(sorted(
                    {p for n in j.nodes for p in parts_of_node.get(n, ()) if p in wanted}))
        else:
            parts = by_request.get(j.partition)
            if parts is None:
                parts = by_request[j.partition] = tuple(
                    p for p in dict.fromkeys(j.partition.split(",")) if p in wanted)
        for p in parts:
            jobs[p].append(j)
    return {p: ClusterSnapshot(time_s=snap.time_s, nodes=tuple(nodes[p]), jobs=tuple(jobs[p]),
                               partitions=tuple(x for x in snap.partitions if x.name == p),
                               switches=snap.switches)
            for p in partitions}


_FIELDS_BUT_REASON: dict[type, attrgetter] = {}


def _without_reason(d: Decision) -> tuple:
    """A decision's fields but its reason (which may name the time or service attained)."""
    get = _FIELDS_BUT_REASON.get(type(d))
    if get is None:
        get = _FIELDS_BUT_REASON[type(d)] = attrgetter(
            *(f.name for f in fields(d) if f.name != "reason"))
    return get(d)


class Agent:
    def __init__(self, config: Config, source: ClusterSource, sink: DecisionSink,
                 store: Store, policy, metrics=None, clock=time.time,
                 predictor=None, partition_policies: dict | None = None) -> None:
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
        self._colocated: dict[int, dict] = {}
        self._account_memo = AccountMemo()
        self._history: dict[tuple[str, str], str] | None = None
        # Jobs told to start that Slurm has not started yet: job id -> (placement, when).
        self._inflight: dict[int, tuple[Place, float]] = {}
        # shadow mode: the last decision recorded per (job, kind), but for its reason
        self._shadow_last: dict[tuple[int, type], tuple] = {}
        # Jobs this agent requeued itself (it may restart them at once; a requeue by Slurm
        # keeps Slurm's own delay), reservations by when they were last extended, and jobs
        # already logged as left to Slurm.
        self._preempted: set[int] = set()
        self._resv_renewed: dict[str, float] = {}
        self._left_logged: set[int] = set()
        # Jobs whose last write Slurm refused: job id -> (no write before, refusals in a
        # row). A refusal that will not change (a job Slurm holds, a request it will not
        # take) is retried with a doubling pause, not every cycle, and logged once.
        self._refused: dict[int, tuple[float, int]] = {}
        # Why a pending job is left alone this cycle (held, its user's begin time), and
        # what was last recorded of that per job: recorded once per change for `explain`.
        self._alone: dict[int, str] = {}
        self._alone_recorded: dict[int, str] = {}
        self._cycle_no = 0   # the cycle under way (repairs are recorded under it)
        self._cycle_started = time.monotonic()  # when it began (``report.starts_s``)
        self.last_report: CycleReport | None = None
        self._unknown_logged: str | None = None  # unknown partitions, as last logged
        # the last cycle's outcome beside the store, for `status` when the store fails
        self.health = HealthFile(health_path(store.path), config.agent.interval_s)
        self.sampler = None
        if config.agent.progress_dir:
            from slurm_marl.daemon.progress import ProgressSampler, usable_dir
            usable_dir(config.agent.progress_dir)  # warns now if it is not there yet
            self.sampler = ProgressSampler(config.agent.progress_dir,
                                           config.agent.sample_min_s)

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
            self.store.forget_live()    # records may be folded but not saved
            report.error = f"slurm: {exc.message or exc}"
            log.warning("cycle %d: Slurm did not answer (%s); retrying next tick",
                        report.cycle, exc.message or exc)
        except sqlite3.Error as exc:  # the disk is full, the file damaged: one line
            self.store.forget_live()
            report.error = f"store: cannot write {self.store.path}: {exc}"
            log.error("cycle %d failed: %s", report.cycle, report.error)
        except Exception as exc:  # one bad cycle must not end the agent
            self.store.forget_live()
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
        self._cycle_no = report.cycle
        raw = self.source.snapshot()
        report.time_s = raw.time_s
        if not self._started:
            self._on_start(raw)
            self._started = True
        elif not self.config.agent.shadow:
            self._record_repairs(raw, self.sink.repair_half_done(raw))
        records = self.store.live_records(j.job_id for j in raw.jobs)
        acc = account(raw, records, self._colocated, self._account_memo)
        snap = self._with_signatures(acc)
        self.store.save_jobs(acc.records)
        self._sample_speeds(snap)
        if self.predictor is not None:
            snap = self._predicted(snap, acc.finished_runs)
        for run in acc.finished_runs:
            self.store.record_outcome(run.job_id, run.run, user=run.user, name=run.name,
                                      model_type=run.model_type,
                                      num_gpus=run.num_gpus, nodes=run.nodes,
                                      gpu_alloc=run.gpu_alloc,
                                      colocated=json.dumps(run.colocated),
                                      start_s=run.start_s, end_s=run.end_s, state=run.state)
        managed = [p for p in self.config.agent.managed_partitions if snap.partition(p)]
        if self._unknown_partitions(report, snap, managed):
            return
        decisions: list[Decision] = []
        decided_jobs: set[int] = set()
        left = self._left_to_slurm(snap, managed, report.cycle)
        held = self._hold_inflight(snap)  # for deciding only; writes see the real state
        # each partition's order, planned apart
        orders: list[tuple[str, list[SetPriority]]] = []
        views = partition_views(held, managed)
        decidable = {part: self._decidable(views[part], part) for part in managed}
        self._settle_orders(decidable, held.time_s)
        for part in managed:
            view = decidable[part]
            report.pending += len(view.pending)
            report.running += len(view.running)
            order: list[SetPriority] = []
            policy = self.partition_policies.get(part, self.policy)
            for d in policy.run_cycle(view):
                if d.job_id in decided_jobs and not isinstance(d, Preempt):
                    continue  # a multi-partition job is decided by its first partition
                if isinstance(d, Preempt) and not self._may_requeue(part, snap.job(d.job_id)):
                    continue  # the policy was told (Job.preemptible); kept as a last guard
                decisions.append(d)
                if isinstance(d, SetPriority):
                    order.append(d)
            orders.append((part, order))
            decided_jobs |= {d.job_id for d in decisions}
        report.decisions = decisions
        self._record_alone(report.cycle, snap)
        self._record_guard(report, snap)
        # each ordered job's queue of the last cycle, before this cycle's are stored
        last_queue = {d.job_id: records[d.job_id].queue for d in decisions
                      if isinstance(d, SetPriority) and d.job_id in records}
        self.store.set_queues((d.job_id, d.queue) for d in decisions
                              if isinstance(d, SetPriority))
        writes, advice = self._translate(snap, decisions, orders)
        writes += left
        writes = self._past_backoff(writes, snap.time_s)
        if self.config.agent.shadow:
            # What the agent would write, recorded when it changes (a decision equal but for
            # its reason to the last one recorded for its job is not recorded again): an
            # unchanged queue of 5,000 jobs is not 10,000 rows a cycle.
            self.store.record_decisions(report.cycle, snap.time_s,
                                        [(d, "shadow", "") for d in self._shadow_changes(
                                            writes + advice, snap)])
            return
        results = self.sink.apply(writes, snap) if writes else []
        done = self.sink.starts_done() if writes else None
        if done is not None:
            report.starts_s = max(0.0, done - self._cycle_started)
        report.results = results
        self._remember(results, snap)
        # Plans that need no write (a job waits for GPUs) are recorded once per change,
        # so `slurm-marl explain` can say what a waiting job waits for.
        self.store.mark_written([(d.job_id, "place", place_key(d)) for d in advice],
                                snap.time_s)
        # An order that needed no write (Slurm's order already agrees) is recorded when the
        # job's queue changes, so `explain` still says why a job sits where it does (its
        # queue, the service attained, a prediction).
        written = {r.decision.job_id for r in results if isinstance(r.decision, SetPriority)}
        kept = [d for d in decisions if isinstance(d, SetPriority) and d.job_id not in written
                and last_queue.get(d.job_id) != d.queue]
        self.store.record_decisions(
            report.cycle, snap.time_s,
            [(r.decision, r.status.value, r.message) for r in results]
            + [(d, "planned", "waits; nothing written") for d in advice]
            + [(d, "planned", "order kept; no write needed") for d in kept])

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

    def _settle_orders(self, views: dict[str, ClusterSnapshot], now_s: float) -> None:
        """Each policy's order state (Tiresias' queue lists) settled once a cycle over the
        jobs of all the partitions it decides, as the simulator settles its one snapshot
        (``Policy.settle_order``); a policy without such state is left alone."""
        groups: dict[int, tuple[object, dict[int, Job], list[ClusterSnapshot]]] = {}
        for part, view in views.items():
            policy = self.partition_policies.get(part, self.policy)
            _, jobs, seen = groups.setdefault(id(policy), (policy, {}, []))
            seen.append(view)
            for job in view.jobs:
                jobs.setdefault(job.job_id, job)
        for policy, jobs, seen in groups.values():
            settle = getattr(policy, "settle_order", None)
            if settle is not None:
                settle(tuple(jobs.values()), now_s, seen)

    def _shadow_changes(self, decisions: list[Decision], snap: ClusterSnapshot
                        ) -> list[Decision]:
        last = self._shadow_last
        present = {j.job_id for j in snap.jobs}
        for key in [k for k in last if k[0] not in present]:
            del last[key]  # jobs gone from Slurm
        changed = []
        for d in decisions:
            key = (d.job_id, type(d))
            value = _without_reason(d)
            if last.get(key) != value:
                last[key] = value
                changed.append(d)
        return changed

    def _predicted(self, snap: ClusterSnapshot, finished_runs) -> ClusterSnapshot:
        """The snapshot with GPU-time predictions; a predictor failure costs this cycle its
        predictions (orders then rank by attained service), never the cycle. On the first
        cycle the predictor gets back what the store kept of it (the predictions of jobs
        still alive, the gate's scored pairs and the history rows of the jobs it saw end);
        each cycle the store gets what changed
        (this store object is its one writer; ``_on_start`` restores)."""
        try:
            for run in finished_runs:
                self.predictor.run_ended(run.job_id, run.num_gpus, run.start_s, run.end_s,
                                         run.state, now_s=snap.time_s)
            out = self.predictor.annotate(snap)
        except Exception:
            log.exception("GPU-time predictions failed this cycle; ordering without them")
            out = snap
        try:
            made, scored, dropped, bad, history, bad_history = self.predictor.unsaved()
            self.store.save_predictions(made, scored, dropped, self.predictor.window, bad,
                                        history, bad_history,
                                        keep_recent=self.predictor.keep_recent)
            self.predictor.saved()
        except Exception:
            log.exception("could not store the GPU-time predictions; tried again next cycle")
        return out

    def _left_to_slurm(self, snap: ClusterSnapshot, managed: list[str], cycle: int
                       ) -> list[Release]:
        """Pending jobs whose request the agent cannot model (arrays, --gpus-per-task,
        several partitions, ...): never decided, never leased. One the gate delayed gets
        its start released at once (a user's own later --begin is kept); each is logged
        once and recorded, so ``explain`` says why Slurm alone schedules it."""
        out = []
        grace = self.config.agent.grace_s
        for job in snap.pending:
            if not job.left_to_slurm:
                continue
            if not any(p in managed for p in job.partition.split(",")):
                continue
            marker = parse_marker(job.admin_comment)
            if job.held:
                # held by a user, an admin or Slurm itself: no write at all (a start time
                # written to it would be refused, or outlive the hold)
                continue
            if marker is not None and not job.num_gpus and requested_gpu_fields(marker):
                # a GPU request emptied by an older agent's half-done re-pin: repaired by
                # repair_half_done, never released without its GPUs
                continue
            gated = (marker is not None
                     and job.eligible_time_s is not None
                     and job.eligible_time_s > snap.time_s + 1
                     and job.eligible_time_s <= job.submit_time_s + grace + 5
                     and job.restart_count == 0)
            if job.job_id not in self._left_logged:
                self._left_logged.add(job.job_id)
                log.info("job %s: left to Slurm (%s)%s", job.job_id, job.left_to_slurm,
                         "; its gate delay is released" if gated else "")
                if not gated:
                    self.store.record_decisions(
                        cycle, snap.time_s,
                        [(Release(job.job_id, "left-to-slurm",
                                  f"left to Slurm: {job.left_to_slurm}"),
                          "skipped", "nothing to write")])
            if gated:
                out.append(Release(job.job_id, "left-to-slurm",
                                   f"left to Slurm: {job.left_to_slurm}"))
        if len(self._left_logged) > 100_000:
            self._left_logged.clear()
        return out

    def _guards(self) -> list[GuardedOrder]:
        """The Slurm-alone guards of the policies this agent runs."""
        return [p.order for p in (self.policy, *self.partition_policies.values())
                if isinstance(getattr(p, "order", None), GuardedOrder)]

    def _record_guard(self, report: CycleReport, snap: ClusterSnapshot) -> None:
        """The jobs a Slurm-alone guard protects now (any policy's, for jobs Slurm still
        lists), for `status`, `queues` and the metrics."""
        guards = self._guards()
        if not guards:
            return
        live = {j.job_id for j in snap.jobs if j.is_pending or j.is_running}
        protected = {}
        for g in guards:
            for job_id, since in g.shadow.protected.items():
                if job_id in live:
                    protected[job_id] = (since, g.shadow.starts.get(job_id))
        report.protected = len(protected)
        self.store.set_protected(protected)

    def _record_repairs(self, snap: ClusterSnapshot, job_ids: list[int]) -> None:
        """Say in ``explain`` why the agent rewrote a job's GPU request outside a decision:
        a narrowing Slurm turned down (never runnable) widened back, or a half-done re-pin
        of an older agent restored."""
        rows = []
        for job_id in job_ids:
            job = snap.job(job_id)
            if job is not None and job.pending_reason in NEVER_RUNNABLE:
                why = (f"{job.pending_reason} after the agent narrowed its GPU request: "
                       "its user's request given back (Slurm 22.05, which takes a typed "
                       "request no longer back to untyped: widened over its node's GPU "
                       "groups instead); never narrowed again")
            else:
                why = "GPU request emptied by an older agent's half-done re-pin: restored"
            rows.append((Release(job_id, "repair", why), "ok", ""))
        if rows:
            try:
                self.store.record_decisions(self._cycle_no, snap.time_s, rows)
            except Exception:
                log.exception("could not record the repairs of jobs %s", job_ids)

    def _record_alone(self, cycle: int, snap: ClusterSnapshot) -> None:
        """Record, once per change, why pending jobs were left alone this cycle (held, a
        user's begin time), so ``explain`` says it; forget jobs no longer left alone."""
        alone, self._alone = self._alone, {}
        rows = []
        for job_id, why in alone.items():
            if self._alone_recorded.get(job_id) != why:
                rows.append((Release(job_id, "slurm", why), "skipped", "nothing written"))
                log.info("job %s: %s", job_id, why)
        self._alone_recorded = alone
        if rows:
            self.store.record_decisions(cycle, snap.time_s, rows)

    def _sample_speeds(self, snap: ClusterSnapshot) -> None:
        """Observed speeds from jobs' progress reports (``agent.progress_dir``); a failure
        here costs samples, never the cycle."""
        if self.sampler is None:
            return
        try:
            samples = self.sampler.observe(snap)
            if samples:
                self.store.add_speed_samples(samples)
        except Exception:
            log.exception("speed sampling failed this cycle; samples in progress dropped")
            self.sampler.forget()

    def _hold_inflight(self, snap: ClusterSnapshot) -> ClusterSnapshot:
        """Slurm starts a released job a moment after ``StartTime=now``. Until it does (or
        ``inflight_s`` passes), the job is not re-decided, and its planned GPUs count as
        taken, so the next cycle neither moves it nor gives its GPUs to another job."""
        ttl = max(5.0, 6 * self.config.agent.interval_s)
        held: dict[str, set[int]] = {}
        skip: set[int] = set()
        for job_id, (place, when) in list(self._inflight.items()):
            job = snap.job(job_id)
            if job is None or not job.is_pending or snap.time_s - when > ttl:
                del self._inflight[job_id]
                continue
            skip.add(job_id)
            for a in place.allocs:
                node = snap.node(a.node)
                if node is None or a.group >= len(node.gpu_groups):
                    continue
                taken = held.setdefault(a.node, set())
                free = [i for i in node.free_in_group(node.gpu_groups[a.group])
                        if i not in taken]
                taken.update(free[:a.gpus])
        if not skip:
            return snap
        nodes = tuple(replace(n, used_gpu_indices=n.used_gpu_indices | held[n.name])
                      if n.name in held else n for n in snap.nodes)
        return replace(snap, nodes=nodes, jobs=tuple(j for j in snap.jobs
                                                     if j.job_id not in skip))

    def _with_signatures(self, acc) -> ClusterSnapshot:
        """Fill in model types the jobs do not declare (name, then user history)."""
        if self._history is None:
            self._history = self.store.signature_history()
        sigs = infer_signatures(acc.snapshot.jobs, self._history)
        by_id = {r.job_id: r for r in acc.records}
        for job_id, model in sigs.items():
            rec = by_id.get(job_id)
            if rec is not None and not rec.model_type:
                rec.model_type = model
                self._history[(rec.user, rec.name)] = model
        if not sigs:
            return acc.snapshot
        return replace(acc.snapshot, jobs=tuple(
            j.with_(model_type=sigs[j.job_id]) if j.job_id in sigs else j
            for j in acc.snapshot.jobs))

    def _may_requeue(self, part: str, victim: Job | None) -> bool:
        """Whether the agent may requeue ``victim`` for a job of ``part``: both partitions
        are among ``preempt_partitions``, wherever the victim runs (a job of an unmanaged
        partition on shared nodes is never requeued)."""
        allowed = self.config.agent.preempt_partitions
        return (victim is not None and part in allowed
                and bool(victim.partition) and victim.partition in allowed)

    def _decidable(self, view: ClusterSnapshot, part: str = "") -> ClusterSnapshot:
        """Leave out pending jobs the agent must not touch: held (by anyone, Slurm
        included), waiting on a dependency, before the begin time their user asked for (the
        gate's marker keeps it), or with a begin time set beyond the gate's grace. Running
        jobs outside ``preempt_partitions`` (or all, if ``part`` is not one) are marked
        not preemptible. A job the agent narrowed to one GPU group (moving its request to
        the per-job field) is read as the per-node request its user made (the marker)."""
        horizon = self._horizon(view.time_s)
        keep = []
        pending = JobState.PENDING
        for j in view.jobs:
            if j.state is pending:
                if j.left_to_slurm:
                    continue
                if j.held or unschedulable(j.pending_reason):
                    self._alone[j.job_id] = (
                        f"held by Slurm ({j.pending_reason or 'priority 0'}): nothing written "
                        "until it is released" if j.held else
                        f"cannot run now ({j.pending_reason}): nothing written")
                    continue
                marker = parse_marker(j.admin_comment)
                begin = user_begin(j, marker)
                if begin is not None and begin > view.time_s:
                    # the user's --begin: Slurm alone would not start it yet
                    self._alone[j.job_id] = (
                        "waits for its user's begin time "
                        f"{time.strftime('%Y-%m-%dT%H:%M:%S', time.localtime(begin))}"
                        ": the agent starts it no earlier")
                    continue
                if j.required_nodes:
                    # Slurm keeps the agent's ReqNodeList across a requeue; unless the user
                    # named nodes at submission, it is the agent's own pin, not a constraint
                    # (else a preempted job could only ever resume where it ran before).
                    if marker is not None and marker.user_gave_no_nodes:
                        j = j.with_(required_nodes=())
                if j.gpu_type is not None and marker is not None \
                        and user_gpu_request(j)[1] is None:
                    j = j.with_(gpu_type=None)  # the agent's own earlier pin, not the user's
                if (j.gpus_per_job and not j.gpus_per_node and marker is not None
                        and marker.per_node_request):
                    # the agent's own narrowing (TresPerJob, NumNodes=1-1): still the user's
                    # per-node request, not a per-job one free to spread over nodes
                    per_node = marker_gpus_per_node(marker)
                    j = j.with_(gpus_per_node=per_node, gpus_per_job=0,
                                node_count=max(1, j.gpus_per_job // per_node))
                if (j.restart_count > 0 and j.job_id not in self._preempted
                        and j.eligible_time_s and j.eligible_time_s > view.time_s + 1):
                    continue  # requeued by Slurm (node failure...): Slurm's delay stands
                # a user's later --begin is theirs; Slurm's own delay after a requeue
                # (cred_expire + 1 s) is not, and the agent restarts such jobs in turn
                if (j.eligible_time_s and j.eligible_time_s > horizon
                        and j.restart_count == 0):
                    continue
            elif j.preemptible and not self._may_requeue(part, j):
                j = j.with_(preemptible=False)
            keep.append(j)
        return ClusterSnapshot(time_s=view.time_s, nodes=view.nodes, jobs=tuple(keep),
                               partitions=view.partitions, switches=view.switches)

    # ---- decisions -> writes ------------------------------------------------------------
    def _priority_writes(self, snap: ClusterSnapshot, part: str, order: list[SetPriority],
                         written: dict, eligible: set[int], left: list[Job]
                         ) -> list[SetPriority]:
        """The partition's priority writes; adds to ``eligible`` the jobs that must not
        wait behind the lease because a job left to Slurm would jump them
        (``writes.ordered_writes``; not for SiteFactor partitions, whose order only
        nudges Slurm's own)."""
        agent = self.config.agent
        if part in agent.site_factor_partitions:
            return site_factor_writes(snap, order, agent.site_factor_max, written)
        writes, head = ordered_writes(snap, order, agent.priority_base,
                                      [j for j in left if part in j.partition.split(",")],
                                      agent.eligible_ahead_gpus)
        eligible.update(head)
        return writes

    def _horizon(self, now_s: float) -> float:
        """How far ahead a begin time still counts as the gate's grace (a job whose begin
        is later is the user's or Slurm's, not the agent's to decide or to count)."""
        return now_s + self.config.agent.grace_s + 2 * self.config.agent.interval_s

    def _left_waiting(self, snap: ClusterSnapshot) -> list[Job]:
        """Pending GPU jobs left to Slurm that Slurm may start now or within one grace
        (not held, no unmet dependency, no later begin time of their own)."""
        horizon = self._horizon(snap.time_s)
        return [j for j in snap.pending
                if j.left_to_slurm and j.num_gpus and not j.held
                and not unschedulable(j.pending_reason)
                and (j.eligible_time_s is None or j.eligible_time_s <= horizon)]

    def _translate(self, snap: ClusterSnapshot, decisions: list[Decision],
                   orders: list[tuple[str, list[SetPriority]]]
                   ) -> tuple[list[Decision], list[Place]]:
        """(writes for Slurm, changed plans that need no write); ``orders``: each
        partition's SetPriority decisions, planned apart (``daemon/writes.py``)."""
        written = self.store.written({d.job_id for d in decisions})
        eligible: set[int] = set()
        left = self._left_waiting(snap)   # once a cycle, for every partition
        priorities = [w for part, order in orders
                      for w in self._priority_writes(snap, part, order, written, eligible,
                                                     left)]
        return plan_writes(
            snap, decisions, priorities, self.config.agent, written=written,
            reservations=self.store.active_reservations(),
            inflight_nodes={n for place, _ in self._inflight.values() for n in place.nodes},
            resv_renewed=self._resv_renewed, eligible=eligible)

    REFUSED_PAUSE_MAX_S = 600.0

    def _past_backoff(self, writes: list[Decision], now_s: float) -> list[Decision]:
        """``writes`` but those to jobs whose last write was refused and whose pause is not
        over (reservations are always ended)."""
        if not self._refused:
            return writes
        for job_id in [j for j, (until, _) in self._refused.items()
                       if until < now_s - self.REFUSED_PAUSE_MAX_S]:
            del self._refused[job_id]   # long past: forgotten
        return [d for d in writes if isinstance(d, EndReservation)
                or self._refused.get(d.job_id, (0.0, 0))[0] <= now_s]

    def _note_refusals(self, results: list[WriteResult], now_s: float) -> None:
        ok = {r.decision.job_id for r in results if r.ok}
        for job_id in ok:
            self._refused.pop(job_id, None)
        for r in results:
            d = r.decision
            if r.status is not WriteStatus.REFUSED or d.job_id in ok \
                    or isinstance(d, (Reserve, EndReservation)):
                continue
            _, count = self._refused.get(d.job_id, (0.0, 0))
            pause = min(self.REFUSED_PAUSE_MAX_S,
                        max(1.0, self.config.agent.interval_s) * 2 ** count)
            self._refused[d.job_id] = (now_s + pause, count + 1)
            (log.warning if count == 0 else log.debug)(
                "job %s: Slurm refused the agent's %s (%s); no write to it for %.0f s%s",
                d.job_id, type(d).__name__, r.message, pause,
                "" if count == 0 else f" (refusal {count + 1} in a row)")

    def _remember(self, results: list[WriteResult], snap: ClusterSnapshot) -> None:
        self._note_refusals(results, snap.time_s)
        marks = []
        for r in results:
            d = r.decision
            if isinstance(d, Reserve):
                if r.ok:
                    self.store.add_reservation(d.name, d.job_id, ",".join(d.nodes), snap.time_s)
                    self._resv_renewed[d.name] = snap.time_s
            elif isinstance(d, EndReservation):
                if r.ok or r.status is WriteStatus.VANISHED:
                    self.store.end_reservation(d.name, snap.time_s)
                    self._resv_renewed.pop(d.name, None)
            elif isinstance(d, Preempt) and r.ok:
                self._preempted.add(d.job_id)
            elif isinstance(d, SetPriority) and d.site_factor and r.ok:
                marks.append((d.job_id, "site_factor", str(d.priority)))
            elif isinstance(d, Place) and r.ok:
                marks.append((d.job_id, "place", place_key(d)))
                if d.start_now:
                    self._inflight[d.job_id] = (d, snap.time_s)
        if marks:
            self.store.mark_written(marks, snap.time_s)

    # ---- start-up -----------------------------------------------------------------------
    def _on_start(self, snap: ClusterSnapshot) -> None:
        guards = self._guards()
        if guards:       # the jobs they protected before a restart
            guarded = {job_id: (r["protected_s"], r["shadow_start_s"])
                       for job_id, r in self.store.protected().items()}
            for g in guards:
                g.shadow.restore(guarded)
        if self.predictor is not None:
            try:
                self.predictor.restore(
                    self.store.predictions(),
                    self.store.scored_predictions(self.predictor.window), snap,
                    self.store.feature_history())
            except Exception:
                log.exception("could not restore the GPU-time predictions from the store; "
                              "the skill gate starts empty")
        if self.config.agent.shadow:
            return
        repaired = self.sink.repair_half_done(snap)
        if repaired:
            log.info("repaired GPU requests of jobs %s", repaired)
            self._record_repairs(snap, repaired)
        # Reservations named like ours that the store does not know (a crash right after
        # creating one) are adopted, so they are ended like any other.
        known = self.store.active_reservations()
        for job in snap.jobs:
            name = job.reservation
            if is_agent_reservation(name) and name not in known:
                self.store.add_reservation(name, job.job_id, ",".join(job.required_nodes),
                                           snap.time_s)


def _agent_profile(config: Config, name: str):
    """The profile the daemon runs: with the default Slurm-alone guard where it has none
    of its own (``agent.guard``, on by default), said in the log."""
    from slurm_marl.policy.profile import load_profile, with_default_guard

    profile = load_profile(name)
    if profile.guard:
        log.info("profile %s: its own Slurm-alone guard %s", name, dict(profile.guard))
    elif config.agent.guard:
        profile = with_default_guard(profile)
        log.info("profile %s: the default Slurm-alone guard %s (agent.guard)", name,
                 dict(profile.guard))
    else:
        log.warning("profile %s: no Slurm-alone guard (agent.guard = false): jobs may "
                    "finish later than with Slurm alone", name)
    return profile


def build_agent(config: Config, metrics=None,
                acquire: Callable[[], bool] | None = None) -> Agent | None:
    """The agent wired to real Slurm, its store and the configured policy profile.

    ``acquire`` (daemon/loop.py) is called once the profiles and the predictor have loaded
    and before the store opens: it takes the agent's locks, waiting as a standby while
    another agent holds them; None if it was stopped before (no agent then)."""
    from slurm_marl.policy.framework import build_policy
    from slurm_marl.policy.profile import ProfileError
    from slurm_marl.slurm_integration.runner import SlurmRunner
    from slurm_marl.slurm_integration.sink import CliDecisionSink
    from slurm_marl.slurm_integration.source import CliClusterSource

    runner = SlurmRunner(config.slurm.slurm_conf, timeout_s=config.slurm.command_timeout_s)
    source = CliClusterSource(runner, static_ttl_s=60.0,
                              full_read_s=config.slurm.full_read_s)
    sink = CliDecisionSink(runner, retries=config.slurm.write_retries,
                           on_write=source.invalidate,
                           on_admin_comment=source.admin_comment_written)
    policy = build_policy(_agent_profile(config, config.agent.profile))
    partition_policies = {}
    for part, name in config.agent.partition_profiles:
        try:
            partition_policies[part] = build_policy(_agent_profile(config, name))
        except ProfileError as exc:
            raise ProfileError(f"agent.partition_profiles.{part}: {exc}") from None
        log.info("partition %s: profile %s", part, name)
    predictor = None
    if config.agent.gpu_time_model:
        from slurm_marl.daemon.predictions import DaemonPredictor
        from slurm_marl.history.skill import GateParams
        predictor = DaemonPredictor(config.agent.gpu_time_model, config.agent.history or None,
                                    time.time(),
                                    gate=GateParams() if config.agent.prediction_gate else None)
    elif config.agent.history:
        log.warning("agent.history is set but agent.gpu_time_model is not: no predictions")
    if acquire is not None and not acquire():
        return None
    store = Store(config.store_path)
    return Agent(config, source, sink, store, policy, metrics=metrics, predictor=predictor,
                 partition_policies=partition_policies)
