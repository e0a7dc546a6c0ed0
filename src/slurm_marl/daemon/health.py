"""The agent's health as the admin commands read it, even when the store cannot be written.

Each cycle the agent records its report in the store (``cycles``). When the store itself
fails (the disk is full, the file is damaged), that row is missing and `slurm-marl status`
would show the last good cycle. So the agent also writes its last cycle's outcome to a
small side file beside the store (``state.sqlite`` -> ``state.health``): one JSON line,
written over itself in place at offset 0 in a file whose blocks were reserved when the
agent started (``posix_fallocate``), so writing it allocates nothing and still works on a
full disk (measured on a full tmpfs; a copy-on-write file system such as btrfs or ZFS
may still refuse it, and then `status` judges by the last cycle's age alone).

The metrics (``slurm_marl_healthy``, ``slurm_marl_cycle_errors_total``) and systemd's
STATUS line say the same without reading any file.
"""

from __future__ import annotations

import json
import logging
import os
import time
from pathlib import Path

log = logging.getLogger(__name__)

SIZE = 4096             # bytes reserved; a report is a few hundred
SUFFIX = ".health"


def health_path(store_path: str | Path) -> Path:
    """The side file of the store at ``store_path``."""
    return Path(store_path).with_suffix(SUFFIX)


def stale_after_s(interval_s: float) -> float:
    """How old the last cycle may be before `status` calls the agent unhealthy: three
    intervals, at least 30 s (the watchdog's own rule, daemon/loop.py)."""
    return max(3.0 * interval_s, 30.0)


class HealthFile:
    """The agent's writer; a failure to write it is logged once and never ends a cycle."""

    def __init__(self, path: str | Path, interval_s: float) -> None:
        self.path = Path(path)
        self.interval_s = interval_s
        self.fd: int | None = None
        self.failed = False
        try:
            self.fd = os.open(self.path, os.O_RDWR | os.O_CREAT, 0o640)
            if os.fstat(self.fd).st_size < SIZE:
                os.posix_fallocate(self.fd, 0, SIZE)
        except OSError as exc:
            self._failed(exc)

    def _failed(self, exc: OSError) -> None:
        if not self.failed:
            log.warning("cannot write the health file %s (%s); `slurm-marl status` judges "
                        "by the store alone", self.path, exc.strerror or exc)
        self.failed = True
        if self.fd is not None:
            os.close(self.fd)
            self.fd = None

    def write(self, report, recorded: bool) -> None:
        """``report`` (a CycleReport); ``recorded``: whether the store took it."""
        if self.fd is None:
            return
        data = {"cycle": report.cycle, "time_s": report.time_s,
                "written_s": time.time(), "ok": report.error is None,
                "error": report.error, "warning": report.warning,
                "recorded": recorded, "pending": report.pending,
                "running": report.running, "interval_s": self.interval_s,
                "pid": os.getpid()}
        line = json.dumps(data).encode()[:SIZE - 1]
        try:
            os.pwrite(self.fd, line + b"\n" + b" " * (SIZE - 1 - len(line)), 0)
        except OSError as exc:
            self._failed(exc)

    def close(self) -> None:
        if self.fd is not None:
            os.close(self.fd)
            self.fd = None


def read_health(store_path: str | Path) -> dict | None:
    """The last report the agent wrote beside this store, or None (none, unreadable)."""
    try:
        text = health_path(store_path).read_bytes().split(b"\n", 1)[0]
        data = json.loads(text) if text.strip() else None
    except (OSError, ValueError):
        return None
    return data if isinstance(data, dict) else None


def verdict(last_cycle: dict | None, health: dict | None, now_s: float,
            interval_s: float | None) -> dict:
    """`status`'s health: ``healthy``, ``problems`` (why not) and ``warnings``, from the
    store's last cycle row and the side file, whichever is newer."""
    problems: list[str] = []
    warnings: list[str] = []
    latest = last_cycle
    if health is not None and (last_cycle is None
                               or health.get("cycle", 0) > last_cycle.get("cycle", 0)
                               or not health.get("recorded", True)):
        latest = health
        if not health.get("recorded", True):
            problems.append(f"cycle {health.get('cycle')} could not be recorded in the "
                            "store")
    if latest is None:
        return {"healthy": False, "problems": ["the agent has not run a cycle yet"],
                "warnings": []}
    if latest.get("error"):
        problems.append(f"cycle {latest.get('cycle')} failed: {latest['error']}")
    if latest.get("warning"):
        warnings.append(latest["warning"])
    interval = interval_s or (health or {}).get("interval_s")
    newest = max(float(latest.get("time_s") or 0),
                 float((health or {}).get("written_s") or 0))
    if interval:
        age = now_s - newest
        if age > stale_after_s(interval):
            problems.append(f"no cycle for {age:.0f} s (every {interval:g} s expected): "
                            "is the agent running?")
    return {"healthy": not problems, "problems": problems, "warnings": warnings}
