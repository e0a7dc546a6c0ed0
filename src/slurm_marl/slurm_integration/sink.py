"""DecisionSink over ``scontrol``: the write-back protocol measured on Slurm 22.05.

- Order: ``Priority=`` on pending jobs.
- Nodes: ``ReqNodeList=``.
- GPU group: GPUs are typed per socket in gres.conf (``s0``, ``s1``); pinning a pending job
  to a group is a TWO-step update: clear the GPU request while pushing the start time out
  (so the job cannot start with no GPU in between), then set the typed request, nodes,
  priority and start time. The original request is kept in the AdminComment marker first,
  so a crash between the steps can be repaired (``repair_half_done``). The written request
  is read back and checked.
- Start: ``StartTime=now`` (the job was gated by job_submit.lua's begin time).
- Multi-node holds: ``scontrol create reservation ... Flags=IGNORE_JOBS,NO_HOLD_JOBS_AFTER_END``
  + ``Reservation=``. Without NO_HOLD_JOBS_AFTER_END a reservation that runs out (the agent
  died and never ended it) leaves its pending job in RESV_DEL_HOLD with priority 0 forever;
  with it the job just runs outside the reservation (fail-open).
- Preemption: ``scontrol requeue``.

Every write is idempotent; failures come back as WriteResult values, never as exceptions.
"""

from __future__ import annotations

import logging
import math
import re
import time
from collections import defaultdict
from collections.abc import Callable

from slurm_marl.domain import (ClusterSnapshot, Decision, Defer, EndReservation, Job, Place,
                               Preempt, Release, Reserve, SetPriority)
from slurm_marl.slurm_integration import gres as G
from slurm_marl.slurm_integration.marker import Marker, parse_marker, with_marker
from slurm_marl.slurm_integration.parse import collapse_hosts, parse_kv_line
from slurm_marl.slurm_integration.ports import WriteResult, WriteStatus
from slurm_marl.slurm_integration.runner import CommandResult, SlurmRunner, looks_unavailable

log = logging.getLogger(__name__)

HOLD_OFF = "now+600"  # start time while a job's GPU request is cleared mid re-pin


def classify(res: CommandResult) -> WriteStatus:
    if res.ok:
        return WriteStatus.OK
    msg = res.message.lower()
    if looks_unavailable(msg):
        return WriteStatus.UNAVAILABLE
    if ("invalid job id" in msg or "job has already finished" in msg
            or "reservation not found" in msg or "invalid reservation" in msg
            or "requested reservation is invalid" in msg):
        return WriteStatus.VANISHED
    return WriteStatus.REFUSED


def desired_gpu_request(place: Place, snapshot: ClusterSnapshot | None, job: Job | None
                        ) -> tuple[str | None, str, str]:
    """(TRES string to write or None, field name, why not) for a placement.

    A typed request can pin only when every node of the job gets the same counts of the same
    named groups (Slurm's per-node request is uniform across nodes).
    """
    if snapshot is None or job is None or not place.allocs:
        return None, "", "no snapshot or no GPU allocation to pin"
    per_node: dict[str, dict[str | None, int]] = defaultdict(lambda: defaultdict(int))
    for alloc in place.allocs:
        node = snapshot.node(alloc.node)
        group = None
        if node is not None:
            group = next((g for g in node.gpu_groups if g.index == alloc.group), None)
        if group is None:
            return None, "", f"GPU group {alloc.group} unknown on {alloc.node}"
        if not group.name:
            return None, "", f"GPU group {alloc.group} on {alloc.node} has no GRES type"
        per_node[alloc.node][group.name] += alloc.gpus
    if any(len(d) > 1 for d in per_node.values()):
        # With enforce-binding a job's GPUs follow its cores; one CPU cannot sit on two
        # sockets, so a typed request over two groups leaves the job unstartable.
        return None, "", "spans GPU groups inside a node; binding left to Slurm"
    shapes = {tuple(sorted(d.items())) for d in per_node.values()}
    if len(shapes) != 1:
        return None, "", "GPU groups differ between nodes; Slurm's request is per node"
    counts = dict(shapes.pop())
    if job.gpus_per_job and not job.gpus_per_node:
        if len(per_node) != 1:
            return None, "", "--gpus job over several nodes: nodes pinned, groups left to Slurm"
        return G.format_gpu_request(counts), "TresPerJob", ""
    return G.format_gpu_request(counts), "TresPerNode", ""


class CliDecisionSink:
    """Writes decisions with ``scontrol``; see the module docstring for the protocol."""

    def __init__(self, runner: SlurmRunner, retries: int = 2, backoff_s: float = 0.3,
                 verify: bool = True, sleep: Callable[[float], None] = time.sleep) -> None:
        self.runner = runner
        self.retries = retries
        self.backoff_s = backoff_s
        self.verify = verify
        self._sleep = sleep
        self._controller_down = False
        self._restore_failed: dict[int, float] = {}

    # ---- plumbing -----------------------------------------------------------------------
    def _run(self, args: list[str], log_cmds: list[str]) -> CommandResult:
        """One write, retried with backoff while the controller does not answer. Once the
        controller is found down, the rest of this batch is not tried (each try costs ~9 s)."""
        if self._controller_down:
            return CommandResult(args, -1, "", "unable to contact slurm controller "
                                 "(not tried: controller down earlier in this batch)")
        delay = self.backoff_s
        for attempt in range(self.retries + 1):
            try:
                res = self.runner.run(args)
            except Exception as exc:  # timeout / missing binary
                res = CommandResult(args, -1, "", f"unavailable: {exc}")
                if "timed out" in str(exc):
                    res = CommandResult(args, -1, "", "socket timed out (client timeout)")
            log_cmds.append(" ".join(args))
            if classify(res) is not WriteStatus.UNAVAILABLE:
                return res
            if attempt == self.retries:
                self._controller_down = True
                return res
            self._sleep(delay)
            delay *= 2
        return res  # pragma: no cover - loop always returns

    def _result(self, decision: Decision, res: CommandResult, cmds: list[str],
                note: str = "") -> WriteResult:
        status = classify(res)
        message = res.message if not res.ok else note
        if status is not WriteStatus.OK:
            log.warning("job %s: %s %s: %s", decision.job_id, type(decision).__name__,
                        status.value, message)
        return WriteResult(decision, status, message, tuple(cmds))

    def _update_job(self, job_id: int, fields: dict[str, str], cmds: list[str]
                    ) -> CommandResult:
        args = ["scontrol", "update", f"jobid={job_id}", *(f"{k}={v}" for k, v in fields.items())]
        return self._run(args, cmds)

    def show_job(self, job_id: int) -> dict[str, str] | None:
        """``scontrol show -d job`` as key/values (one line per key folded together)."""
        res = self.runner.run(["scontrol", "show", "-o", "-d", "job", str(job_id)])
        if not res.ok:
            return None
        first = res.stdout.splitlines()[0] if res.stdout else ""
        return parse_kv_line(first)

    # ---- apply --------------------------------------------------------------------------
    def apply(self, decisions: list[Decision],
              snapshot: ClusterSnapshot | None = None) -> list[WriteResult]:
        self._controller_down = False
        by_job: dict[int, list[Decision]] = defaultdict(list)
        results: list[WriteResult] = []
        defers: dict[int, list[Defer]] = defaultdict(list)
        for d in decisions:
            if isinstance(d, (Reserve, EndReservation)):
                continue
            if isinstance(d, Defer):
                defers[int(d.seconds)].append(d)
                continue
            by_job[d.job_id].append(d)
        # Reservations first so a job placed into one in this cycle finds it.
        for d in decisions:
            if isinstance(d, Reserve):
                results.append(self._reserve(d, snapshot))
        for job_id, decs in by_job.items():
            try:
                results.extend(self._apply_job(job_id, decs, snapshot))
            except Exception as exc:  # never let one job stop the others
                log.exception("job %s: unexpected error while writing", job_id)
                results.extend(WriteResult(d, WriteStatus.REFUSED, f"internal error: {exc!r}")
                               for d in decs)
        for seconds, group in sorted(defers.items()):
            results.extend(self._defer(group, seconds))
        for d in decisions:
            if isinstance(d, EndReservation):
                results.append(self._end_reservation(d))
        return results

    def _defer(self, group: list[Defer], seconds: int) -> list[WriteResult]:
        """One ``scontrol update jobid=a,b,c StartTime=now+N`` for a whole lease renewal;
        a job that vanished meanwhile is named in Slurm's answer, the others still moved."""
        results = []
        for i in range(0, len(group), 200):  # keep the command line short
            chunk = group[i:i + 200]
            cmds: list[str] = []
            ids = ",".join(str(d.job_id) for d in chunk)
            res = self._run(["scontrol", "update", f"jobid={ids}",
                             f"StartTime=now+{max(1, seconds)}"], cmds)
            status = classify(res)
            gone = {int(m) for m in re.findall(r"for job (\d+)", res.message)} if not res.ok \
                else set()
            for d in chunk:
                if res.ok or (gone and d.job_id not in gone and status is WriteStatus.VANISHED):
                    results.append(WriteResult(d, WriteStatus.OK, "", tuple(cmds)))
                else:
                    results.append(WriteResult(d, status, res.message, tuple(cmds)))
        return results

    def _apply_job(self, job_id: int, decs: list[Decision], snapshot: ClusterSnapshot | None
                   ) -> list[WriteResult]:
        job = snapshot.job(job_id) if snapshot is not None else None
        results: list[WriteResult] = []
        prio = next((d for d in decs if isinstance(d, SetPriority)), None)
        place = next((d for d in decs if isinstance(d, Place)), None)
        release = next((d for d in decs if isinstance(d, Release)), None)
        preempt = next((d for d in decs if isinstance(d, Preempt)), None)

        if preempt is not None:
            cmds: list[str] = []
            res = self._run(["scontrol", "requeue", str(job_id)], cmds)
            results.append(self._result(preempt, res, cmds))

        fields: dict[str, str] = {}
        cmds = []
        if prio is not None:
            fields["Priority"] = str(max(1, int(prio.priority)))
        pin_note = ""
        if place is not None:
            fields["ReqNodeList"] = collapse_hosts(place.nodes)
            request, field, why = desired_gpu_request(place, snapshot, job)
            marked = job is None or parse_marker(job.admin_comment) is not None
            if request and job is not None and request != self._current_request(job):
                cleared = self._clear_gpu_request(job, field, cmds)  # marks it too
                if not cleared.ok:
                    results += [self._result(d, cleared, cmds)
                                for d in (place, prio, release) if d is not None]
                    return results
                fields[field] = request
                marked = True
            elif why:
                pin_note = f"nodes only ({why})"
            if not marked:
                # before the first pin: remember what the user asked for, nodes included
                fields["AdminComment"] = with_marker(job.admin_comment,
                                                     self.original_request(job))
            if place.start_now:
                fields["StartTime"] = "now"
        if release is not None:
            fields["StartTime"] = "now"
        if not fields:
            return results

        res = self._update_job(job_id, fields, cmds)
        pinned = [k for k in ("TresPerNode", "TresPerJob") if k in fields]
        if res.ok and self.verify and pinned:
            shown = self.show_job(job_id) or {}
            for key in pinned:
                if shown.get(key, "") != fields[key]:
                    res = CommandResult(res.command, 1, "",
                                        f"verify failed: {key} is {shown.get(key, '')!r}, "
                                        f"wanted {fields[key]!r}")
        if not res.ok and pinned and job is not None:
            self.restore_request(job, self.original_request(job))  # keep its GPUs
        for d in (prio, place, release):
            if d is not None:
                results.append(self._result(d, res, cmds, pin_note if d is place else ""))
        return results

    @staticmethod
    def _request_field(job: Job) -> str:
        """Where the job's GPU request lives: ``--gpus`` alone is per job, else per node."""
        return "TresPerJob" if job.gpus_per_job and not job.gpus_per_node else "TresPerNode"

    @classmethod
    def _current_request(cls, job: Job) -> str:
        counts: dict[str | None, int] = {}
        if cls._request_field(job) == "TresPerJob":
            total = job.gpus_per_job
        else:
            total = job.gpus_per_node
        if total:
            counts[job.gpu_type] = total
        return G.format_gpu_request(counts)

    @staticmethod
    def original_request(job: Job) -> Marker:
        """The job's own GPU request: from its marker, else from what it asks now."""
        marker = parse_marker(job.admin_comment)
        if marker is not None:
            return marker
        return Marker(
            tres_per_node=(G.format_gpu_request({job.gpu_type: job.gpus_per_node})
                           if job.gpus_per_node else ""),
            tres_per_job=(G.format_gpu_request({job.gpu_type: job.gpus_per_job})
                          if job.gpus_per_job else ""),
            required_nodes=collapse_hosts(job.required_nodes) if job.required_nodes else "")

    def _clear_gpu_request(self, job: Job, field: str, cmds: list[str]) -> CommandResult:
        """Step 1 of a re-pin: save the original request, clear it, hold the start."""
        fields = {"StartTime": HOLD_OFF, field: ""}
        if parse_marker(job.admin_comment) is None:
            fields["AdminComment"] = with_marker(job.admin_comment, self.original_request(job))
        return self._update_job(job.job_id, fields, cmds)

    def restore_request(self, job: Job, marker: Marker | None = None) -> bool:
        """Put a job's original GPU request back (after a failed or half-done pin) and let it
        start: the re-pin had pushed its start time out, and fail-open means a job the
        agent could not place starts as Slurm alone would start it. Two steps, like a pin:
        22.05 refuses to turn a typed request into an untyped one in one update."""
        marker = marker or parse_marker(job.admin_comment)
        if marker is None or not (marker.tres_per_node or marker.tres_per_job):
            return False
        if self._restore_failed.get(job.job_id, 0) > time.monotonic():
            return False  # failed a moment ago; do not hammer slurmctld every cycle
        cmds: list[str] = []
        cleared = {"StartTime": HOLD_OFF}
        restored = {"StartTime": "now"}
        for key, value in (("TresPerNode", marker.tres_per_node),
                           ("TresPerJob", marker.tres_per_job)):
            if value:
                cleared[key] = ""
                restored[key] = value
        # What the job asks for now (the agent's typed pin), to put back if Slurm refuses
        # the original: never leave a GPU job with no GPU request, which it would start
        # without GPUs once its start time came (measured on 22.05: after a requeued job
        # was re-pinned, every untyped request was refused "with and without type
        # identification" while the typed one was accepted).
        current = self._current_request(job)
        res = self._update_job(job.job_id, cleared, cmds)
        cleared_ok = res.ok
        if res.ok:
            res = self._update_job(job.job_id, restored, cmds)
        if not res.ok:
            self._restore_failed[job.job_id] = time.monotonic() + 60
            log.error("job %s: could not restore GPU request %s: %s", job.job_id, restored,
                      res.message)
            if cleared_ok and current:
                back = self._update_job(job.job_id, {self._request_field(job): current,
                                                     "StartTime": "now"}, cmds)
                if back.ok:
                    log.error("job %s: kept its GPU request %s instead", job.job_id, current)
                else:
                    log.error("job %s: has NO GPU request now (%s); its start stays held "
                              "%s", job.job_id, back.message, HOLD_OFF)
        return res.ok

    def repair_half_done(self, snapshot: ClusterSnapshot) -> list[int]:
        """Pending marked jobs whose GPU request is empty (a crash between the two steps of
        a re-pin) or that Slurm found unstartable after a re-pin (BadConstraints) get their
        original request back."""
        repaired = []
        for job in snapshot.pending:
            marker = parse_marker(job.admin_comment)
            if marker is None:
                continue
            broken = job.num_gpus == 0 or (
                job.pending_reason == "BadConstraints"
                and self._current_request(job) not in (marker.tres_per_node,
                                                       marker.tres_per_job))
            if not broken:
                continue
            if (marker.tres_per_node or marker.tres_per_job) and self.restore_request(job):
                log.info("job %s: restored GPU request after a half-done re-pin", job.job_id)
                repaired.append(job.job_id)
        return repaired

    # ---- reservations -------------------------------------------------------------------
    def _reserve(self, d: Reserve, snapshot: ClusterSnapshot | None) -> WriteResult:
        cmds: list[str] = []
        job = snapshot.job(d.job_id) if snapshot is not None else None
        name = d.name or f"slurm-marl-{d.job_id}"
        minutes = max(1, math.ceil(d.duration_s / 60.0))
        users = job.user if job is not None and job.user else "root"
        nodes = collapse_hosts(d.nodes)
        res = self._run(["scontrol", "create", "reservation", f"ReservationName={name}",
                         f"Nodes={nodes}", f"Users={users}", "StartTime=now",
                         f"Duration={minutes}", "Flags=IGNORE_JOBS,NO_HOLD_JOBS_AFTER_END"],
                        cmds)
        if not res.ok and "duplicate" in res.message.lower():
            res = self._run(["scontrol", "update", f"ReservationName={name}", f"Nodes={nodes}",
                             f"Duration={minutes}"], cmds)
        if res.ok and d.job_id:
            res = self._update_job(d.job_id, {"Reservation": name}, cmds)
        return self._result(d, res, cmds)

    def _end_reservation(self, d: EndReservation) -> WriteResult:
        cmds: list[str] = []
        name = d.name or f"slurm-marl-{d.job_id}"
        res = self._run(["scontrol", "delete", f"ReservationName={name}"], cmds)
        if not res.ok and classify(res) is WriteStatus.REFUSED:
            # In use by a running job: end it now, the job keeps running.
            res = self._run(["scontrol", "update", f"ReservationName={name}", "EndTime=now"],
                            cmds)
            if not res.ok and "invalid time" in res.message.lower():
                # created this very second: an end equal to its start is refused
                res = self._run(["scontrol", "update", f"ReservationName={name}",
                                 "EndTime=now+2"], cmds)
        return self._result(d, res, cmds)
