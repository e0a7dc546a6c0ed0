"""One Slurm client operation per function, for code outside this package.

Everything that runs a Slurm client goes through a ``SlurmRunner`` (explicit SLURM_CONF, a
chroot's ``bin_dir``, none of the shell's client defaults), and its command lines are built
here or beside the readers and writers of this package, never by the callers: the sweep's
array watch, the replay's submissions, ``slurm-marl install-plugin``'s version question and
the history import call these. Each function takes the runner and plain values, returns
plain values, and raises the runner's errors: ``SlurmUnavailable`` when the client could
not run or answer (missing, timed out, slurmctld unreachable), ``SlurmError`` with the
client's own words when it failed, ``SlurmOutputError`` when its answer cannot be read.
What a failure means to the caller (retry, ignore, tell the admin) is the caller's to say.
"""

from __future__ import annotations

from collections.abc import Sequence
from datetime import datetime

from slurm_marl.slurm_integration.runner import (SlurmError, SlurmOutputError, SlurmRunner,
                                                 failure)


def slurm_version(runner: SlurmRunner) -> str:
    """``scontrol --version``'s answer as printed ("slurm 24.11.5"). It asks no daemon:
    SlurmUnavailable only when the client is missing or timed out, else SlurmError."""
    args = ["scontrol", "--version"]
    res = runner.run(args)
    if not res.ok:
        raise SlurmError(args, res.returncode, res.message)
    return res.stdout.strip()


def submit_batch(runner: SlurmRunner, args: Sequence[str], wrap: str,
                 timeout_s: float | None = None) -> int:
    """``sbatch --parsable ARGS --wrap WRAP``: the new job's id (``--parsable`` prints
    ``id`` or, on a multi-cluster site, ``id;cluster``). The job gets the runner's
    environment (sbatch exports it). A refusal raises SlurmError with sbatch's stderr."""
    argv = ["sbatch", "--parsable", *args, "--wrap", wrap]
    res = runner.run(argv, timeout_s)
    if not res.ok:
        raise failure(argv, res.returncode, res.stderr)
    first = res.stdout.strip().split(";")[0]
    try:
        return int(first)
    except ValueError:
        raise SlurmOutputError(argv, 0, f"not a job id: {res.stdout.strip()[:200]!r}") from None


def jobs_listed(runner: SlurmRunner, job_ids: Sequence[str | int],
                timeout_s: float | None = None) -> list[str]:
    """The ids ``squeue`` lists of ``job_ids`` (pending, running, completing), as it prints
    them (an array's tasks: ``12_3``, ``12_[4-9]``); none: []. squeue fails with "Invalid
    job id" where slurmctld has forgotten the job: that is none listed too. Other failures
    raise (SlurmError with squeue's stderr)."""
    argv = ["squeue", "-h", "-j", ",".join(map(str, job_ids)), "-o", "%i"]
    res = runner.run(argv, timeout_s)
    if not res.ok:
        if "invalid job id" in res.stderr.lower():
            return []
        raise failure(argv, res.returncode, res.stderr)
    return [line.strip() for line in res.stdout.splitlines() if line.strip()]


def cancel(runner: SlurmRunner, job_ids: Sequence[str | int],
           timeout_s: float | None = None) -> None:
    """``scancel`` of ``job_ids`` (an array's id: all its tasks). A failure raises
    SlurmError with scancel's words; a caller tidying up may ignore it."""
    argv = ["scancel", *map(str, job_ids)]
    res = runner.run(argv, timeout_s)
    if not res.ok:
        raise failure(argv, res.returncode, res.message)


def sacct_argv(fields: Sequence[str], since_s: float, until_s: float) -> list[str]:
    """``sacct`` of every user's jobs (``-a``, allocations only ``-X``) between two Unix
    times (written in local time, as sacct reads them), ``fields`` separated by ``|``
    without a header (``-P -n``). The times in the answer are as the runner's
    SLURM_TIME_FORMAT says (``history.fetch`` sets ``%s``)."""
    return ["sacct", "-a", "-X", "-P", "-n", f"--format={','.join(fields)}",
            f"--starttime={_stamp(since_s)}", f"--endtime={_stamp(until_s)}"]


def accounting_lines(runner: SlurmRunner, fields: Sequence[str], since_s: float,
                     until_s: float) -> list[str]:
    """``sacct_argv``'s answer, one line per job. A failure raises as
    ``SlurmRunner.run_checked`` does, with sacct's own message."""
    return runner.run_checked(sacct_argv(fields, since_s, until_s)).splitlines()


def _stamp(t: float) -> str:
    return datetime.fromtimestamp(t).strftime("%Y-%m-%dT%H:%M:%S")
