"""DecisionSink over ``scontrol``: the write-back protocol measured on Slurm 22.05.

- Order: ``Priority=`` on pending jobs, or ``SiteFactor=`` where the order is to be added to
  Slurm's multifactor priority (``SetPriority.site_factor``).
- Nodes: ``ReqNodeList=``.
- GPU group: GPUs are typed per socket in gres.conf (``s0``, ``s1``). A job's GPU request is
  only ever changed by ONE ``scontrol update`` that moves it from one request field to the
  other (``TresPerNode=`` -> ``TresPerJob=gres:gpu:s1:N`` or back), so there is no moment
  at which the job has no GPU request, whatever dies when (see ``plan_gpu_pin``). Measured
  on 22.05.8: typed->typed in the SAME field ADDS GPUs (the job ran with 4 instead of 2),
  untyped->typed in the same field is refused, typed->untyped is refused; the cross-field
  move replaces the request exactly (the old type stays with count 0). Only single-node
  jobs whose user gave no GPU type and no ``--cpus-per-gpu`` are narrowed (with CPUs per
  GPU Slurm takes the CPUs beside the GPUs, and a group too small for them leaves the job
  BadConstraints); everything else is pinned by nodes only.
  The requests are read fresh before the writes and the written ones read back after
  them (``squeue -O``, one call for all the jobs an ``apply`` pins); a failed or odd
  read-back is reported, never "repaired" by further GPU writes.
- Start: ``StartTime=now`` (the job was gated by job_submit.lua's begin time).
- Multi-node holds: ``scontrol create reservation ... Flags=IGNORE_JOBS,NO_HOLD_JOBS_AFTER_END``
  on the chosen nodes, lasting one grace and renewed while the job waits, so a reservation
  whose agent died ends within one grace. The job itself is never put into it: Slurm kills
  a job running in a reservation when the reservation ends (ResvOverRun=0). When the nodes
  are free the agent ends the reservation and starts the job in the same cycle.
- Preemption: ``scontrol requeue``.

Every write is idempotent; failures come back as WriteResult values, never as exceptions.
Each write, whatever its answer, names the jobs it touched to ``on_write`` (the source then
reads them again: its text listing cannot show an AdminComment), but for a write of
``StartTime`` alone (lease renewals, releases: the listing shows the eligible time they
move, ``moves_eligible_time_only``), and an AdminComment it
writes to ``on_admin_comment`` (on 22.05 the source reads a changed job as text, where it
trusts no AdminComment but the one it knew and the agent's own).
"""

from __future__ import annotations

import logging
import re
import time
from collections import defaultdict
from collections.abc import Callable

from slurm_marl.domain import (ClusterSnapshot, Decision, Defer, EndReservation, Job, Place,
                               Preempt, Release, Reserve, SetPriority)
from slurm_marl.slurm_integration import sink_reservations as R
from slurm_marl.slurm_integration.marker import (Marker, parse_marker, requested_gpu_fields,
                                                 user_gpu_request, with_marker)
from slurm_marl.slurm_integration.ports import DecisionSink, WriteResult, WriteStatus
from slurm_marl.slurm_integration.runner import CommandResult, SlurmRunner, looks_busy
from slurm_marl.slurm_integration.sink_commands import (classify, jobs_written,
                                                        moves_eligible_time_only,
                                                        request_rows)
from slurm_marl.slurm_integration.sink_plan import desired_gpu_request, plan_gpu_pin
from slurm_marl.slurm_integration.sink_repair import RequestRepairs
from slurm_marl.slurm_integration.text import collapse_hosts
from slurm_marl.slurm_integration.text import gres as G

# What a write is planned from (``sink_plan``), how Slurm's answers are read
# (``sink_commands``), the repairs (``sink_repair``) and the reservations
# (``sink_reservations``) live in sibling modules. The marker's request helpers this
# module once held stay importable from here.
__all__ = ["CliDecisionSink", "requested_gpu_fields", "user_gpu_request"]

log = logging.getLogger(__name__)


class CliDecisionSink(DecisionSink):
    """Writes decisions with ``scontrol``; see the module docstring for the protocol."""

    def __init__(self, runner: SlurmRunner, retries: int = 2, backoff_s: float = 0.3,
                 verify: bool = True, sleep: Callable[[float], None] = time.sleep,
                 on_write: Callable[[list[int]], None] | None = None,
                 clock: Callable[[], float] = time.monotonic,
                 on_admin_comment: Callable[[int, str], None] | None = None) -> None:
        self.runner = runner
        self._clock = clock
        # when the last ``apply``'s writes before its lease renewals ended (``clock``)
        self._starts_done: float | None = None
        self._fresh: dict[int, dict | None] = {}   # ``apply``'s fresh reads, by job
        self.on_write = on_write
        self.on_admin_comment = on_admin_comment
        self.retries = retries
        self.backoff_s = backoff_s
        self.verify = verify
        self._sleep = sleep
        self._controller_down = False
        self._repairs = RequestRepairs(self._update_job)
        # jobs whose narrowing Slurm turned down and that got a request back: never
        # narrowed again (nodes pinned only; ``RequestRepairs`` adds them)
        self.unstuck: set[int] = self._repairs.unstuck

    # ---- plumbing -----------------------------------------------------------------------
    def _run(self, args: list[str], log_cmds: list[str]) -> CommandResult:
        """One write, retried with backoff while the controller does not answer or answers
        that it is busy (EAGAIN: not applied, try again). Once the controller is found down,
        the rest of this batch is not tried (each try costs ~9 s); a write still refused as
        busy after the retries is only refused."""
        if self._controller_down:
            return CommandResult(args, -1, "", "unable to contact slurm controller "
                                 "(not tried: controller down earlier in this batch)")
        delay = self.backoff_s
        if self.on_write is not None and not moves_eligible_time_only(args):
            self.on_write(jobs_written(args))
        if self.on_admin_comment is not None:
            for arg in args[2:]:
                if arg.startswith("AdminComment="):
                    for job_id in jobs_written(args):
                        self.on_admin_comment(job_id, arg.split("=", 1)[1])
        for attempt in range(self.retries + 1):
            try:
                res = self.runner.run(args)
            except Exception as exc:  # timeout / missing binary
                res = CommandResult(args, -1, "", f"unavailable: {exc}")
                if "timed out" in str(exc):
                    res = CommandResult(args, -1, "", "socket timed out (client timeout)")
            log_cmds.append(" ".join(args))
            busy = not res.ok and looks_busy(res.message)
            if classify(res) is not WriteStatus.UNAVAILABLE and not busy:
                return res
            if attempt == self.retries:
                self._controller_down = not busy
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

    # ---- apply --------------------------------------------------------------------------
    def apply(self, decisions: list[Decision],
              snapshot: ClusterSnapshot | None = None) -> list[WriteResult]:
        """Reservations, then each job's writes (priorities, placements and starts,
        requeues, releases), then the lease renewals; ``starts_done`` says when the
        writes before the renewals ended."""
        self._controller_down = False
        self._starts_done = None
        by_job, defers = _grouped(decisions)
        results = self._write_reservations(decisions, snapshot)
        results += self._write_jobs(by_job, snapshot)
        results += self._write_batched(defers)
        return results

    def _write_reservations(self, decisions: list[Decision],
                            snapshot: ClusterSnapshot | None) -> list[WriteResult]:
        """Reservations first: a job started this cycle on nodes its own reservation held
        needs that reservation gone (the job is never inside it, see ``sink_reservations``);
        every end before any new one."""
        results: list[WriteResult] = []
        for d in decisions:
            if isinstance(d, EndReservation):
                results.append(self._end_reservation(d))
        for d in decisions:
            if isinstance(d, Reserve):
                results.append(self._reserve(d, snapshot))
        return results

    def _write_jobs(self, by_job: dict[int, list[Decision]],
                    snapshot: ClusterSnapshot | None) -> list[WriteResult]:
        """Each job's writes, in the jobs' order. The GPU requests of every job this call
        may pin are read fresh in one squeue before the writes (``_plan_pin``); the pinned
        ones read back in one after them."""
        self._fresh = self.read_requests(self._to_read(by_job, snapshot))
        later: list[tuple[int, dict[str, str], Callable[[str], list[WriteResult]]]] = []
        per_job: dict[int, list[WriteResult]] = {}
        for job_id, decs in by_job.items():
            try:
                per_job[job_id] = self._apply_job(job_id, decs, snapshot, later)
            except Exception as exc:  # never let one job stop the others
                log.exception("job %s: unexpected error while writing", job_id)
                per_job[job_id] = [WriteResult(d, WriteStatus.REFUSED,
                                               f"internal error: {exc!r}") for d in decs]
        self._fresh = {}
        now = self.read_requests([job_id for job_id, _, _ in later]) if later else {}
        for job_id, pinned, finish in later:
            per_job[job_id].extend(finish(self._verify_against(now.get(job_id), pinned)))
        return [r for rs in per_job.values() for r in rs]

    def _write_batched(self, defers: dict[int, list[Decision]]) -> list[WriteResult]:
        """The batched ``StartTime`` writes, releases (0) before lease renewals; the
        writes before the first renewal end the starts (``starts_done``)."""
        results: list[WriteResult] = []
        for seconds, group in sorted(defers.items()):
            if seconds > 0 and self._starts_done is None:
                self._starts_done = self._clock()
            results.extend(self._defer(group, seconds))
        if self._starts_done is None:
            self._starts_done = self._clock()
        return results

    def starts_done(self) -> float | None:
        return self._starts_done

    def _to_read(self, by_job: dict[int, list[Decision]], snapshot: ClusterSnapshot | None
                 ) -> list[int]:
        """The jobs whose GPU request ``_plan_pin`` would read: placed, with a GPU group
        to pin and never unstuck."""
        ids = []
        for job_id, decs in by_job.items():
            job = snapshot.job(job_id) if snapshot is not None else None
            place = next((d for d in decs if isinstance(d, Place)), None)
            if job is None or place is None:
                continue
            try:
                if not self._why_not_pinned(job, place, snapshot):
                    ids.append(job_id)
            except Exception:  # noqa: BLE001 - _apply_job meets it again and reports it
                continue
        return ids

    def _defer(self, group: list[Decision], seconds: int) -> list[WriteResult]:
        """One ``scontrol update jobid=a,b,c StartTime=now+N`` for a whole lease renewal
        (``StartTime=now`` for ``seconds`` 0: releases); a job that started or vanished
        meanwhile is named in Slurm's answer, the others still moved."""
        results = []
        for i in range(0, len(group), 200):  # keep the command line short
            chunk = group[i:i + 200]
            cmds: list[str] = []
            ids = ",".join(str(d.job_id) for d in chunk)
            start = f"now+{seconds}" if seconds > 0 else "now"
            res = self._run(["scontrol", "update", f"jobid={ids}", f"StartTime={start}"],
                            cmds)
            named = {int(m) for m in re.findall(r"for job (\d+)", res.message)} \
                if not res.ok else set()
            for d in chunk:
                # scontrol updates each job of a list on its own: one job that started or
                # ended meanwhile is named in the answer, the others were moved.
                if res.ok or (named and d.job_id not in named):
                    results.append(WriteResult(d, WriteStatus.OK, "", tuple(cmds)))
                else:
                    lines = [ln for ln in res.message.splitlines()
                             if f"job {d.job_id}" in ln] or [res.message]
                    one = CommandResult(res.command, res.returncode, "", lines[0])
                    results.append(WriteResult(d, classify(one), lines[0], tuple(cmds)))
        return results

    def _apply_job(self, job_id: int, decs: list[Decision], snapshot: ClusterSnapshot | None,
                   later: list) -> list[WriteResult]:
        """The job's writes' results: a requeue, then ONE update of every field its
        decisions set. A GPU pin written is read back once every job is written: (job,
        pinned fields, finish) is added to ``later``, ``finish(problem)`` giving the
        results still due with the read-back's problem ("" if none)."""
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

        fields, pin_note = self._job_fields(job, prio, place, release, snapshot)
        if not fields:
            return results
        cmds = []
        res = self._update_job(job_id, fields, cmds)
        pinned = {k: v for k, v in fields.items() if k in ("TresPerNode", "TresPerJob") and v}

        def finish(problem: str) -> list[WriteResult]:
            done = res
            if problem:
                # Both the old and the new request are the job's own GPUs: no further GPU
                # write is made on a doubtful read-back, it is only reported.
                done = CommandResult(res.command, 1, "", f"verify failed: {problem}")
            return [self._result(d, done, cmds, pin_note if d is place else "")
                    for d in (prio, place, release) if d is not None]

        if res.ok and self.verify and pinned:
            later.append((job_id, pinned, finish))
            return results
        return results + finish("")

    def _job_fields(self, job: Job | None, prio: SetPriority | None, place: Place | None,
                    release: Release | None, snapshot: ClusterSnapshot | None
                    ) -> tuple[dict[str, str], str]:
        """(the fields of the job's one update, in the order written; why a placement
        pins nodes only, "" if it pins its GPU group too or places nothing)."""
        fields: dict[str, str] = {}
        if prio is not None and prio.site_factor:
            # added to the multifactor priority (fair-share, age, QOS keep acting)
            fields["SiteFactor"] = str(int(prio.priority))
        elif prio is not None:
            fields["Priority"] = str(max(1, int(prio.priority)))
        pin_note = ""
        if place is not None:
            fields["ReqNodeList"] = collapse_hosts(place.nodes)
            if job is not None:
                pin, why = self._plan_pin(job, place, snapshot)
                fields.update(pin)
                if why:
                    pin_note = f"nodes only ({why})"
                if parse_marker(job.admin_comment) is None:
                    # before the first pin: remember what the user asked for, nodes included
                    fields["AdminComment"] = with_marker(job.admin_comment,
                                                         self.original_request(job))
            if place.start_now:
                fields["StartTime"] = "now"
        if release is not None:
            fields["StartTime"] = "now"
        return fields, pin_note

    def _plan_pin(self, job: Job, place: Place, snapshot: ClusterSnapshot | None
                  ) -> tuple[dict[str, str], str]:
        """``plan_gpu_pin`` on the job's request as slurmctld holds it NOW, not as the
        snapshot showed it: a typed value written over another type in the same field
        would add GPUs, so a GPU write is planned only from a fresh read."""
        why = self._why_not_pinned(job, place, snapshot)
        if why:
            return {}, why
        fresh = (self._fresh[job.job_id] if job.job_id in self._fresh
                 else self.read_request(job.job_id))
        if fresh is None:
            return {}, "could not read its GPU request just now; GPU group left to Slurm"
        return plan_gpu_pin(job.with_(**fresh), place, snapshot)

    def _why_not_pinned(self, job: Job, place: Place, snapshot: ClusterSnapshot | None
                        ) -> str:
        """Why ``place`` pins no GPU group for ``job`` ("": it does, from a fresh read of
        its request): what ``_to_read`` reads for and ``_plan_pin`` plans from."""
        request, _, why = desired_gpu_request(place, snapshot, job)
        if request is None:
            return why
        if job.job_id in self.unstuck:
            return ("its narrowing once left it BadConstraints: nodes pinned only, its "
                    "GPU request left as Slurm runs it")
        return ""

    def read_request(self, job_id: int) -> dict | None:
        """The job's GPU request fields now (``gpus_per_node``, ``gpus_per_job``,
        ``gpu_type``), or None when it cannot be read or looks odd: ``read_requests`` of
        one job."""
        return self.read_requests([job_id])[job_id]

    def read_requests(self, job_ids: list[int]) -> dict[int, dict | None]:
        """``read_request`` of each job, in one ``squeue -h -j a,b,c -O`` per 200 jobs.
        ``squeue -O`` with only these fields: a job name with a newline or ``Key=value``
        text cannot split or spoof it (``scontrol show -o`` can), and 22.05's ``squeue
        --json`` ignores ``--jobs`` and lists every job. A job not in the answer exactly
        once, or with a field that does not parse, is None (not read); a failed read makes
        each of its jobs None. Measured on 22.05.8: squeue leaves a list's unknown ids out
        (rc 0) and fails only for ONE unknown id ("Invalid job id specified"); should a
        list fail so, its jobs are read one by one, so one gone job never hides the
        others."""
        ids = list(dict.fromkeys(job_ids))
        out: dict[int, dict | None] = {}
        for i in range(0, len(ids), 200):  # keep the command line short
            chunk = ids[i:i + 200]
            res = self._read(chunk)
            if (res is not None and not res.ok and len(chunk) > 1
                    and classify(res) is WriteStatus.VANISHED):
                for job_id in chunk:
                    one = self._read([job_id])
                    out[job_id] = request_rows(one, [job_id])[job_id]
                continue
            out.update(request_rows(res, chunk))
        return out

    def _read(self, job_ids: list[int]) -> CommandResult | None:
        try:
            return self.runner.run(["squeue", "-h", "-j", ",".join(map(str, job_ids)), "-O",
                                    "JobID:30|,tres-per-node:200|,tres-per-job:200|"])
        except Exception as exc:  # timeout / missing binary: not read
            log.warning("could not read the GPU requests of %d job(s): %s", len(job_ids), exc)
            return None

    @staticmethod
    def _verify_against(now: dict | None, written: dict[str, str]) -> str:
        """"" if ``now`` (a read-back, None: not read) asks for what was written."""
        if now is None:
            return "could not read the job back (the write itself was accepted)"
        for field, value in written.items():
            want, _ = G.parse_gpu_request(value)
            have = now["gpus_per_job"] if field == "TresPerJob" else now["gpus_per_node"]
            if have != G.total_gpus(want) or now["gpu_type"] != G.single_type(want):
                return (f"{field} reads back as {have} GPU(s) of type {now['gpu_type']!r}, "
                        f"wanted {value!r}")
        return ""

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

    # ---- reservations -------------------------------------------------------------------
    def _reserve(self, d: Reserve, snapshot: ClusterSnapshot | None) -> WriteResult:
        cmds: list[str] = []
        job = snapshot.job(d.job_id) if snapshot is not None else None
        return self._result(d, R.reserve(d, job, lambda args: self._run(args, cmds)), cmds)

    def _end_reservation(self, d: EndReservation) -> WriteResult:
        cmds: list[str] = []
        return self._result(d, R.end_reservation(d, lambda args: self._run(args, cmds)), cmds)

    def repair_half_done(self, snapshot: ClusterSnapshot) -> list[int]:
        """``RequestRepairs.repair_half_done``: GPU requests an earlier write left wrong
        given back; the repaired jobs' ids."""
        return self._repairs.repair_half_done(snapshot)


def _grouped(decisions: list[Decision]
             ) -> tuple[dict[int, list[Decision]], dict[int, list[Decision]]]:
    """(each job's own writes, the batched ``StartTime`` writes by seconds from now).
    Reservations are written apart (``_write_reservations``). A release with nothing else
    to write for its job (a job left to Slurm) goes out in one batched StartTime=now
    (seconds 0), like the lease."""
    by_job: dict[int, list[Decision]] = defaultdict(list)
    defers: dict[int, list[Decision]] = defaultdict(list)
    for d in decisions:
        if isinstance(d, (Reserve, EndReservation)):
            continue
        if isinstance(d, Defer):
            defers[max(1, int(d.seconds))].append(d)
            continue
        by_job[d.job_id].append(d)
    for job_id in [j for j, decs in by_job.items()
                   if all(isinstance(d, Release) for d in decs)]:
        defers[0].extend(by_job.pop(job_id))
    return by_job, defers
