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
import math
import re
import time
from collections import defaultdict
from collections.abc import Callable

from slurm_marl.domain import (ClusterSnapshot, Decision, Defer, EndReservation, Job, Place,
                               Preempt, Release, Reserve, SetPriority)
from slurm_marl.slurm_integration.marker import (Marker, marker_gpus_per_node, parse_marker,
                                                 requested_gpu_fields, user_gpu_request,
                                                 with_marker)
from slurm_marl.slurm_integration.ports import DecisionSink, WriteResult, WriteStatus
from slurm_marl.slurm_integration.runner import (CommandResult, SlurmRunner, looks_busy,
                                                    looks_unavailable)
from slurm_marl.slurm_integration.text import collapse_hosts
from slurm_marl.slurm_integration.text import gres as G
from slurm_marl.slurm_integration.vocabulary import NEVER_RUNNABLE, reservation_name

log = logging.getLogger(__name__)


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
    """(TRES string of the chosen group or None, field it would go to, why not) for a
    placement. The field is the one the job's request does NOT live in now: a re-pin moves
    the request across fields in one update (module docstring)."""
    if snapshot is None or job is None or not place.allocs:
        return None, "", "no snapshot or no GPU allocation to pin"
    if job.cpus_per_gpu:
        # Slurm takes such a job's CPUs beside its GPUs: narrowed to one group, a job
        # wanting more CPUs than that socket has free is left BadConstraints, pending
        # forever (measured on 22.05.8: --cpus-per-gpu=4 --gres=gpu:2 on 4-core sockets),
        # although it runs under Slurm alone over both sockets. Decided before the fresh
        # read of the request (``_plan_pin``): no Slurm call for a pin never written.
        return None, "", (f"--cpus-per-gpu={job.cpus_per_gpu}: its CPUs must sit beside "
                          "its GPUs, which one GPU group may not allow; nodes pinned only")
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
    if len(per_node) != 1 or job.node_count > 1:
        return None, "", ("multi-node job: nodes pinned, GPU groups left to Slurm (a "
                          "per-node request cannot be moved across fields in one update)")
    counts = dict(next(iter(per_node.values())))
    return G.format_gpu_request(counts), _other_field(request_field(job)), ""


def request_field(job: Job) -> str:
    """Where the job's GPU request lives now: per job (``--gpus``, or an earlier pin) or
    per node (``--gres``, ``--gpus-per-node``)."""
    return "TresPerJob" if job.gpus_per_job and not job.gpus_per_node else "TresPerNode"


def _other_field(field: str) -> str:
    return "TresPerNode" if field == "TresPerJob" else "TresPerJob"


def plan_gpu_pin(job: Job, place: Place, snapshot: ClusterSnapshot | None
                 ) -> tuple[dict[str, str], str]:
    """The fields of the ONE update that narrows ``job``'s GPU request to the group chosen
    by ``place``, or ({}, why the request is left as it is).

    Safe by construction: the update names both request fields, clears the one the request
    lives in and writes the same count, typed, into the other, and fixes the job to one
    node. Slurm applies it whole or not at all, so before and after it the job asks for
    exactly its GPUs on one node. Never written:
    a type the user chose (kept), a count other than the job's, a second write to the same
    field (22.05 would add GPUs), anything for multi-node jobs.
    """
    request, field, why = desired_gpu_request(place, snapshot, job)
    if request is None:
        return {}, why
    total = job.num_gpus
    user_total, user_type = user_gpu_request(job)
    if user_type is not None:
        return {}, f"explicit GPU type gpu:{user_type} kept: nodes pinned only"
    if total <= 0 or total != user_total:
        return {}, (f"asks for {total} GPU(s) now but {user_total} at submission: GPU "
                    "request left as it is")
    wanted, _ = G.parse_gpu_request(request)
    if G.total_gpus(wanted) != total:
        return {}, f"chosen group holds {G.total_gpus(wanted)} of the job's {total} GPU(s)"
    if job.gpu_type == G.single_type(wanted):
        return {}, ""  # already on that group's type: nodes decide the rest
    # NumNodes=1-1: a request moved to TresPerJob may otherwise be spread over nodes
    # (measured on 22.05.8: `--gres=gpu:2` pinned to `TresPerJob=gres:gpu:s1:2` with one s1
    # GPU free on the chosen node ran as gpu:s1:1 on each of two nodes).
    return {_other_field(field): "", field: request, "NumNodes": "1-1"}, ""


def spread_over_groups(count: int, sizes: list[tuple[str, int]]) -> dict[str, int]:
    """``count`` GPUs spread as evenly as the groups allow (largest free share first, ties
    to the lower group): {'s0': 1, 's1': 1} for 2 over two groups of 2; {} if they do not
    hold ``count``."""
    if count <= 0 or sum(n for _, n in sizes) < count:
        return {}
    counts = {name: 0 for name, _ in sizes}
    size = dict(sizes)
    for _ in range(count):
        name = max(sizes, key=lambda g: ((size[g[0]] - counts[g[0]]) / size[g[0]],
                                         -sizes.index(g)))[0]
        counts[name] += 1
    return {k: v for k, v in counts.items() if v}


def plan_unstick(job: Job, snapshot: ClusterSnapshot | None
                 ) -> tuple[list[dict[str, str]], str]:
    """The updates, each ONE ``scontrol update``, to try in turn to undo the agent's
    narrowing of a job Slurm now refuses to start (``NEVER_RUNNABLE``), or ([], why not /
    "" if the job is not such a job).

    Such a job: marked, its user asked for untyped GPUs per node, and it asks now for one
    GPU type per job (the narrowing's cross-field form). First its user's own request back
    (``TresPerJob= TresPerNode=<marker's>``): Slurm 24.11 takes it and runs the job
    (measured). Slurm 22.05 refuses an untyped request for a job once typed ("Invalid
    GRES specification (with and without type identification)", both fields named in one
    update or the request cleared first, and a cleared request in between let a job start
    without GPUs), so second the same count per node spread over the node's GPU groups,
    which 22.05 then runs (measured on 22.05.8: a ``--cpus-per-gpu=4 --gres=gpu:2`` job
    narrowed to ``s0:2`` on 4-core sockets stuck BadConstraints; given
    ``gres:gpu:s0:1,gres:gpu:s1:1`` per node it ran at once; 24.11 keeps that form stuck).
    The agent's node pin goes too, unless its user named the nodes. A request over several
    types is one the agent leaves to Slurm (``parse.unmodelable_reason``), so it is never
    narrowed again; the user's own request is the marker's, read as such after a requeue."""
    if job.pending_reason not in NEVER_RUNNABLE or not job.is_pending:
        return [], ""
    marker = parse_marker(job.admin_comment)
    if marker is None or not marker.per_node_request:
        return [], ""
    _, user_type = user_gpu_request(job)
    if user_type is not None or not (job.gpus_per_job and not job.gpus_per_node
                                     and job.gpu_type is not None):
        return [], ""   # not the agent's narrowing (a typed request is its user's)
    per_node = marker_gpus_per_node(marker)
    if job.gpus_per_job != per_node:
        return [], (f"asks for {job.gpus_per_job} GPU(s) per job, its user for {per_node} "
                    "per node: left as it is")
    unpin = ({"ReqNodeList": ""} if marker.user_gave_no_nodes and job.required_nodes
             else {})
    # the marker holds the request as the gate read it (24.11+: "gres/gpu:2"); written in
    # the "gres:" form, which every version takes on updates (22.05 ignores "gres/")
    options = [{"TresPerJob": "", "TresPerNode": marker.tres_per_node.replace("gres/", "gres:"),
                **unpin}]
    node = None
    if snapshot is not None:
        names = job.required_nodes or tuple(
            n.name for n in snapshot.nodes if not job.partition or job.partition in n.partitions)
        node = next((snapshot.node(n) for n in names if snapshot.node(n) is not None
                     and any(g.name == job.gpu_type for g in snapshot.node(n).gpu_groups)),
                    None)
    if node is not None:
        groups = [(g.name, len(g.gpu_indices)) for g in node.gpu_groups if g.name]
        counts = spread_over_groups(per_node, groups)
        if len(counts) >= 2:
            options.append({"TresPerJob": "", "TresPerNode": G.format_gpu_request(counts),
                            **unpin})
    return options, ""


def jobs_written(args: list[str]) -> list[int]:
    """The jobs a write names: ``jobid=a,b,c`` of an update, the ids of a requeue."""
    ids: list[int] = []
    for arg in args[2:]:
        if arg.lower().startswith("jobid="):
            ids += [int(x) for x in arg.split("=", 1)[1].split(",") if x.strip().isdigit()]
        elif args[1] == "requeue" and arg.isdigit():
            ids.append(int(arg))
    return ids


def moves_eligible_time_only(args: list[str]) -> bool:
    """Whether a write is ``scontrol update jobid=... StartTime=now[+N]`` and nothing else
    (a lease renewal, a release): all it changes is the jobs' eligible time, which the
    source's text listing shows, so the jobs need not be read again."""
    return (len(args) == 4 and args[:2] == ["scontrol", "update"]
            and args[2].lower().startswith("jobid=")
            and re.fullmatch(r"StartTime=now(\+\d+)?", args[3]) is not None)


def _request_rows(res: CommandResult | None, job_ids: list[int]) -> dict[int, dict | None]:
    """Each job's GPU request fields from an ``squeue -h -O JobID|tres-per-node|tres-per-job``
    answer; None for a job whose row is missing, repeated or odd, all None for a failed
    read."""
    out: dict[int, dict | None] = dict.fromkeys(job_ids)
    if res is None or not res.ok:
        return out
    rows: dict[str, list[list[str]]] = defaultdict(list)
    for ln in res.stdout.splitlines():
        r = ln.split("|")
        if ln.strip() and len(r) >= 3:
            rows[r[0].strip()].append(r)
    for job_id in job_ids:
        found = rows.get(str(job_id), [])
        if len(found) != 1:
            continue
        values = [v.strip() for v in found[0][1:3]]
        values = ["" if v in ("N/A", "(null)") else v for v in values]
        per_node, bad1 = G.parse_gpu_request(values[0])
        per_job, bad2 = G.parse_gpu_request(values[1])
        if bad1 or bad2:
            continue
        live = tuple(r for r in per_node + per_job if r.count)
        out[job_id] = {"gpus_per_node": G.total_gpus(per_node),
                       "gpus_per_job": G.total_gpus(per_job), "gpu_type": G.single_type(live)}
    return out


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
        self._restore_failed: dict[int, float] = {}
        # jobs whose narrowing Slurm turned down and that got a request back: never
        # narrowed again (nodes pinned only)
        self.unstuck: set[int] = set()

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
        by_job: dict[int, list[Decision]] = defaultdict(list)
        results: list[WriteResult] = []
        defers: dict[int, list[Defer]] = defaultdict(list)
        for d in decisions:
            if isinstance(d, (Reserve, EndReservation)):
                continue
            if isinstance(d, Defer):
                defers[max(1, int(d.seconds))].append(d)
                continue
            by_job[d.job_id].append(d)
        # A release with nothing else to write for its job (a job left to Slurm) goes out
        # in one batched StartTime=now, like the lease.
        for job_id in [j for j, decs in by_job.items()
                       if all(isinstance(d, Release) for d in decs)]:
            defers[0].extend(by_job.pop(job_id))
        # Reservations first: a job started this cycle on nodes its own reservation held
        # needs that reservation gone (the job is never inside it, see _reserve).
        for d in decisions:
            if isinstance(d, EndReservation):
                results.append(self._end_reservation(d))
        for d in decisions:
            if isinstance(d, Reserve):
                results.append(self._reserve(d, snapshot))
        # The GPU requests of every job this call may pin, read fresh in one squeue before
        # the writes (``_plan_pin``); the pinned ones read back in one after them.
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
        for rs in per_job.values():
            results.extend(rs)
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
        """The job's writes' results. A GPU pin written is read back once every job is
        written: (job, pinned fields, finish) is added to ``later``, ``finish(problem)``
        giving the results still due with the read-back's problem ("" if none)."""
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
        if not fields:
            return results

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
                    out[job_id] = _request_rows(one, [job_id])[job_id]
                continue
            out.update(_request_rows(res, chunk))
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

    def repair_half_done(self, snapshot: ClusterSnapshot) -> list[int]:
        """Pending marked jobs with NO GPU request whose marker says they asked for GPUs
        (left by an agent before the one-update re-pin, which cleared the request in a
        first step) get their original request back in one update: from an empty request
        Slurm accepts either form. Jobs the agent's narrowing left never runnable are
        widened back first (``plan_unstick``). Returns both kinds' ids."""
        repaired = self._unstick(snapshot)
        for job in snapshot.pending:
            marker = parse_marker(job.admin_comment)
            if marker is None or job.num_gpus:
                continue
            fields = requested_gpu_fields(marker)
            if not fields:
                continue  # asked for no GPU (--gres=gpu:0): nothing to repair
            if self._restore_failed.get(job.job_id, 0) > time.monotonic():
                continue
            cmds: list[str] = []
            res = self._update_job(job.job_id, fields, cmds)
            if res.ok:
                log.info("job %s: GPU request %s restored after a half-done re-pin",
                         job.job_id, fields)
                repaired.append(job.job_id)
            else:
                self._restore_failed[job.job_id] = time.monotonic() + 60
                log.error("job %s: could not restore its GPU request %s: %s", job.job_id,
                          fields, res.message)
        return repaired

    def _unstick(self, snapshot: ClusterSnapshot) -> list[int]:
        """Jobs the agent's narrowing left never runnable get their request back
        (``plan_unstick``: the user's own, else widened over the node's GPU groups), each
        form one update, the next tried only when Slurm refuses one; when none is taken
        it is logged as an error (the job needs an admin) and tried again after a minute."""
        done = []
        for job in snapshot.pending:
            options, why = plan_unstick(job, snapshot)
            if not options and not why:
                continue
            if self._restore_failed.get(job.job_id, 0) > time.monotonic():
                continue
            refusals = [why] if why else []
            for fields in options:
                cmds: list[str] = []
                res = self._update_job(job.job_id, fields, cmds)
                if res.ok:
                    log.warning("job %s: %s after the agent narrowed its GPU request to %s; "
                                "%s and left to Slurm", job.job_id, job.pending_reason,
                                G.format_gpu_request({job.gpu_type: job.gpus_per_job}),
                                ("its user's request restored: " if fields is options[0]
                                 else "widened back to ")
                                + " ".join(f"{k}={v}" for k, v in fields.items()))
                    done.append(job.job_id)
                    self.unstuck.add(job.job_id)
                    break
                refusals.append(f"{fields}: {res.message}")
            else:
                self._restore_failed[job.job_id] = time.monotonic() + 60
                log.error("job %s: %s since the agent narrowed its GPU request, and no "
                          "request could be given back (%s); an admin must restore it",
                          job.job_id, job.pending_reason, "; ".join(refusals))
        return done

    # ---- reservations -------------------------------------------------------------------
    def _reserve(self, d: Reserve, snapshot: ClusterSnapshot | None) -> WriteResult:
        cmds: list[str] = []
        job = snapshot.job(d.job_id) if snapshot is not None else None
        name = d.name or reservation_name(d.job_id)
        seconds = max(10, math.ceil(d.duration_s))
        users = job.user if job is not None and job.user else "root"
        nodes = collapse_hosts(d.nodes)
        # It ends by itself one lease after the last write (the agent renews it while the
        # job waits): a dead agent's reservation blocks nodes for at most that long.
        res = self._run(["scontrol", "create", "reservation", f"ReservationName={name}",
                         f"Nodes={nodes}", f"Users={users}", "StartTime=now",
                         f"EndTime=now+{seconds}", "Flags=IGNORE_JOBS,NO_HOLD_JOBS_AFTER_END"],
                        cmds)
        if not res.ok and ("duplicate" in res.message.lower()
                           or "overlaps" in res.message.lower()):
            # it exists already (22.05 answers a second create of the same name with
            # "overlaps with another reservation"): extend it, on the chosen nodes
            res = self._run(["scontrol", "update", f"ReservationName={name}", f"Nodes={nodes}",
                             f"EndTime=now+{seconds}"], cmds)
        # The job is NOT put into its reservation (no `Reservation=` on the job): Slurm
        # kills a job running inside a reservation when the reservation ends
        # (ResvOverRun=0, the default; measured on 22.05.8: TIMEOUT at the end, whether it
        # ran out or was ended with EndTime=now). The reservation only keeps other jobs off
        # the nodes; the agent ends it and starts the job in the same cycle.
        return self._result(d, res, cmds)

    def _end_reservation(self, d: EndReservation) -> WriteResult:
        cmds: list[str] = []
        name = d.name or reservation_name(d.job_id)
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
