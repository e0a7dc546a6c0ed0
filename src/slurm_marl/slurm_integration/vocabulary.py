"""Slurm's own words as the agent reads and writes them (Slurm 22.05): names, ranges and
strings that mean something only to Slurm. The daemon decides; what its decisions look like
in Slurm is spelled here. The AdminComment marker has its own module (``marker``).
"""

from __future__ import annotations

import re

# Reservations the agent creates for a waiting multi-node job: ``slurm-marl-<jobid>``. Any
# reservation named so is the agent's own (one left by a crash is adopted at start-up).
RESERVATION_PREFIX = "slurm-marl-"

# Slurm's job priority is a uint32 below NO_VAL; the agent writes at most this.
MAX_PRIORITY = 4_294_967_293

# Pending reasons of a job Slurm holds (prefixes: JobHeldUser, JobHeldAdmin; a job whose
# launch failed is held as launch_failed_requeued_held, one requeued by its own exit code as
# JobHoldMaxRequeue or with SPECIAL_EXIT).
HELD_REASONS = ("JobHeld", "JobHold", "launch_failed_requeued_held", "SPECIAL_EXIT")

# Reasons for which Slurm will never start a pending job as it stands (it sets its priority
# to 0 too): after the agent's narrowing of its GPU request, that narrowing is undone.
NEVER_RUNNABLE = ("BadConstraints",)

# Pending reasons that mean the job cannot run whatever the agent writes: the held ones and
# these.
UNSCHEDULABLE_REASONS = HELD_REASONS + (
    "Dependency", "DependencyNeverSatisfied", "BadConstraints", "PartitionDown",
    "PartitionInactive", "InvalidAccount", "InvalidQOS", "ReqNodeNotAvail, UnavailableNodes",
    "SystemFailure")


# A partition name the agent accepts (config, the gate): letters, digits, ``_``, ``.`` and
# ``-``, as sites name partitions. Anything else (a comma is Slurm's list separator; quotes,
# brackets, ``$``, ``;``, spaces would have to be escaped in the gate's Lua table and in the
# command lines the agent runs) is refused: by the config at start and by install-plugin.
PARTITION_NAME_RE = re.compile(r"[A-Za-z0-9_.-]+")


def bad_partition_name(name: str) -> str | None:
    """Why ``name`` is not a partition name the agent accepts, or None if it is."""
    if not isinstance(name, str) or not name:
        return "an empty partition name"
    if PARTITION_NAME_RE.fullmatch(name) is None:
        return (f"partition name {name!r} is not a plain Slurm name (letters, digits, "
                "'_', '.' and '-' only)")
    return None


def reservation_name(job_id: int) -> str:
    """The name of the agent's reservation for ``job_id``."""
    return f"{RESERVATION_PREFIX}{job_id}"


def is_agent_reservation(name: str | None) -> bool:
    """Whether a reservation with this name is one the agent creates."""
    return bool(name) and name.startswith(RESERVATION_PREFIX)


def unschedulable(pending_reason: str) -> bool:
    """Whether a pending job's reason says it cannot run whatever the agent writes."""
    return pending_reason.startswith(UNSCHEDULABLE_REASONS)


def held(pending_reason: str, priority: int) -> bool:
    """Whether Slurm holds a pending job (by a user, an admin, or itself after a failed
    launch): a held job has priority 0, whatever its reason says. The agent writes nothing
    to it, not even a start time."""
    return priority == 0 or pending_reason.startswith(HELD_REASONS)
