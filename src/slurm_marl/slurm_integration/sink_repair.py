"""Repairs of GPU requests an earlier write left wrong: a request cleared by an agent
before the one-update re-pin (``repair_half_done``), and a narrowing Slurm now refuses to
start (``plan_unstick``). Each repair is one ``scontrol update`` made through the sink; one
that fails is not tried again for a minute.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable

from slurm_marl.slurm_integration.text import gres as G
from slurm_marl.domain import ClusterSnapshot
from slurm_marl.slurm_integration.marker import parse_marker, requested_gpu_fields
from slurm_marl.slurm_integration.runner import CommandResult
from slurm_marl.slurm_integration.sink_plan import plan_unstick

log = logging.getLogger(__name__)


class RequestRepairs:
    """The sink's repairs, with what they remember between cycles: when a failed repair
    may be tried again, and the jobs given a request back after a refused narrowing
    (``unstuck``: never narrowed again). ``update_job(job_id, fields, cmds)`` is the sink's
    one update of a job."""

    def __init__(self, update_job: Callable[[int, dict[str, str], list[str]], CommandResult]
                 ) -> None:
        self._update_job = update_job
        self._restore_failed: dict[int, float] = {}
        # jobs whose narrowing Slurm turned down and that got a request back: never
        # narrowed again (nodes pinned only)
        self.unstuck: set[int] = set()

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
