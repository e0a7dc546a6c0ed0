"""Ending the local cluster's processes with psutil: by PID and process tree, never by name.

A process whose parent does not reap it stays a zombie; it counts as ended here, so
teardown does not wait for it.
"""

from __future__ import annotations

import os
import signal
import time
from collections.abc import Iterable
from pathlib import Path

import psutil


def _running(proc: psutil.Process) -> bool:
    try:
        return proc.is_running() and proc.status() != psutil.STATUS_ZOMBIE
    except psutil.NoSuchProcess:  # ZombieProcess included
        return False
    except psutil.AccessDenied:
        return True


def alive(pid: int) -> bool:
    """The process runs and is not a zombie."""
    if pid <= 0:
        return False
    try:
        proc = psutil.Process(pid)
    except psutil.NoSuchProcess:
        return False
    except psutil.AccessDenied:
        return True
    return _running(proc)


def _send(procs: Iterable[psutil.Process], kill: bool) -> None:
    for proc in procs:
        try:
            proc.kill() if kill else proc.terminate()
        except psutil.NoSuchProcess:
            pass


def _terminate_wait_kill(procs: list[psutil.Process], timeout_s: float) -> None:
    """SIGTERM, wait up to ``timeout_s`` for every process to end, SIGKILL the rest."""
    _send(procs, kill=False)
    deadline = time.monotonic() + timeout_s
    left = [p for p in procs if _running(p)]
    while left and time.monotonic() < deadline:
        _, left = psutil.wait_procs(left, timeout=min(0.05, max(0.001,
                                                                 deadline - time.monotonic())))
        left = [p for p in left if _running(p)]
    _send(left, kill=True)


def _spared() -> set[int]:
    """This process and its ancestors: never part of a tree this module ends."""
    me = psutil.Process()
    return {me.pid} | {p.pid for p in me.parents()}


def _descendants(procs: Iterable[psutil.Process]) -> list[psutil.Process]:
    spared = _spared()
    found: dict[int, psutil.Process] = {}
    for proc in procs:
        try:
            children = proc.children(recursive=True)
        except psutil.NoSuchProcess:
            continue
        for child in children:
            if child.pid not in spared:
                found.setdefault(child.pid, child)
    return list(found.values())


def end_processes(pids: Iterable[int], timeout_s: float) -> None:
    """End the processes ``pids`` and the trees below them: SIGTERM each process, wait up to
    ``timeout_s`` for it to end, SIGKILL it if not; then the same (at most 5 s) for what
    was running below them and did not end with them."""
    procs: list[psutil.Process] = []
    for pid in pids:
        try:
            procs.append(psutil.Process(pid))
        except psutil.NoSuchProcess:
            continue
    below = _descendants(procs)
    _terminate_wait_kill(procs, timeout_s)
    _terminate_wait_kill([p for p in below if _running(p)], min(timeout_s, 5.0))


def _touches(proc: psutil.Process, root: str) -> bool:
    """The process works under ``root``: its cwd, command line or an open file."""
    texts = [proc.cwd(), " ".join(proc.cmdline())] + [f.path for f in proc.open_files()]
    prefix = root + "/"
    return any(prefix in t or t.startswith(root + " ") or t == root for t in texts)


def kill_strays(root: Path) -> None:
    """SIGKILL the processes whose cwd, command line or open files are under ``root``
    (slurmstepd and job scripts of this cluster only), with their process groups and the
    trees below them."""
    me = os.getpid()
    strays: list[psutil.Process] = []
    groups: set[int] = set()
    for proc in psutil.process_iter():
        if proc.pid == me:
            continue
        try:
            if not _touches(proc, str(root)):
                continue
            groups.add(os.getpgid(proc.pid))
        except (psutil.Error, ProcessLookupError):
            continue
        strays.append(proc)
    _send(strays + _descendants(strays), kill=True)
    for pgid in groups:
        if pgid in (os.getpgid(me), 0, 1):
            continue
        try:
            os.killpg(pgid, signal.SIGKILL)
        except (ProcessLookupError, PermissionError):
            pass
