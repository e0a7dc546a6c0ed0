"""The sink's multi-node holds: a reservation on the chosen nodes that ends by itself one
lease after its last write (``reserve``), and its end (``end_reservation``). Each takes
the sink's ``run(args)``, one write retried as the sink retries, and returns Slurm's last
answer.
"""

from __future__ import annotations

import math
from collections.abc import Callable

from slurm_marl.domain import EndReservation, Job, Reserve
from slurm_marl.slurm_integration.ports import WriteStatus
from slurm_marl.slurm_integration.runner import CommandResult
from slurm_marl.slurm_integration.sink_commands import classify
from slurm_marl.slurm_integration.text import collapse_hosts
from slurm_marl.slurm_integration.vocabulary import reservation_name

Run = Callable[[list[str]], CommandResult]


def reserve(d: Reserve, job: Job | None, run: Run) -> CommandResult:
    """Create the reservation of ``d``, or extend it where it exists already."""
    name = d.name or reservation_name(d.job_id)
    seconds = max(10, math.ceil(d.duration_s))
    users = job.user if job is not None and job.user else "root"
    nodes = collapse_hosts(d.nodes)
    # It ends by itself one lease after the last write (the agent renews it while the
    # job waits): a dead agent's reservation blocks nodes for at most that long.
    res = run(["scontrol", "create", "reservation", f"ReservationName={name}",
               f"Nodes={nodes}", f"Users={users}", "StartTime=now",
               f"EndTime=now+{seconds}", "Flags=IGNORE_JOBS,NO_HOLD_JOBS_AFTER_END"])
    if not res.ok and ("duplicate" in res.message.lower()
                       or "overlaps" in res.message.lower()):
        # it exists already (22.05 answers a second create of the same name with
        # "overlaps with another reservation"): extend it, on the chosen nodes
        res = run(["scontrol", "update", f"ReservationName={name}", f"Nodes={nodes}",
                   f"EndTime=now+{seconds}"])
    # The job is NOT put into its reservation (no `Reservation=` on the job): Slurm
    # kills a job running inside a reservation when the reservation ends
    # (ResvOverRun=0, the default; measured on 22.05.8: TIMEOUT at the end, whether it
    # ran out or was ended with EndTime=now). The reservation only keeps other jobs off
    # the nodes; the agent ends it and starts the job in the same cycle.
    return res


def end_reservation(d: EndReservation, run: Run) -> CommandResult:
    """Delete the reservation of ``d``; one in use by a running job is ended instead."""
    name = d.name or reservation_name(d.job_id)
    res = run(["scontrol", "delete", f"ReservationName={name}"])
    if not res.ok and classify(res) is WriteStatus.REFUSED:
        # In use by a running job: end it now, the job keeps running.
        res = run(["scontrol", "update", f"ReservationName={name}", "EndTime=now"])
        if not res.ok and "invalid time" in res.message.lower():
            # created this very second: an end equal to its start is refused
            res = run(["scontrol", "update", f"ReservationName={name}", "EndTime=now+2"])
    return res
