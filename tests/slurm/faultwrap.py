#!/usr/bin/env python3
"""Fault injection for the Slurm client: installed on PATH as ``scontrol`` and ``squeue``
in front of the real ones, for the agent only.

- ``FAULT_KILL_AFTER=N``: after the N-th write (``scontrol update|create|delete|requeue``)
  whose command line contains ``FAULT_MATCH`` (any write if unset) has been carried out,
  the agent (this process's parent) is killed with SIGKILL, as a crash would.
- ``FAULT_FAIL_READ=N``: the N-th ``squeue`` call fails as a controller timeout would.
- ``FAULT_DIR``: where the counters and a log of the calls are kept.
"""

import os
import signal
import subprocess
import sys
from pathlib import Path

WRITES = ("update", "create", "delete", "requeue")


def bump(counter: Path) -> int:
    n = int(counter.read_text() or 0) + 1 if counter.exists() else 1
    counter.write_text(str(n))
    return n


def main() -> int:
    tool = Path(sys.argv[0]).name
    args = sys.argv[1:]
    state = Path(os.environ["FAULT_DIR"])
    real = os.environ.get("FAULT_REAL_BIN", "/usr/bin")
    line = " ".join([tool, *args])
    with (state / "calls.log").open("a") as log:
        log.write(line + "\n")
    if tool == "squeue" and os.environ.get("FAULT_FAIL_READ"):
        if bump(state / "reads") == int(os.environ["FAULT_FAIL_READ"]):
            sys.stderr.write("slurm_load_jobs error: Socket timed out on send/recv operation\n")
            return 1
    proc = subprocess.run([f"{real}/{tool}", *args])
    write = tool == "scontrol" and args and args[0] in WRITES
    if write and os.environ.get("FAULT_KILL_AFTER") \
            and os.environ.get("FAULT_MATCH", "") in line:
        if bump(state / "writes") == int(os.environ["FAULT_KILL_AFTER"]):
            (state / "killed").write_text(line + "\n")
            os.kill(os.getppid(), signal.SIGKILL)
    return proc.returncode


if __name__ == "__main__":
    sys.exit(main())
