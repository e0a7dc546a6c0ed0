"""Loopback ports for local clusters' daemons, safe with several clusters up at once.

A port the kernel hands out for ``bind(("127.0.0.1", 0))`` comes from its ephemeral range,
the range it also takes every outgoing connection's local port from. Between choosing a
daemon's port and the daemon binding it (seconds: a chroot to prepare, MariaDB and slurmdbd
to start), a client's connection may take it, and clusters started side by side (the test
suite's pytest-xdist workers, two Slurm versions at once) choose from the same pool. Both
happened: a slurmctld of 24.11 reached another cluster's daemon on its slurmd's port
("Insane message length") and its nodes never came up.

So ports come from below the ephemeral range (or above it where the range starts too low),
and a registry (a folder in the temporary directory, one file per port naming the cluster
folder that holds it, changed under a lock) keeps a port chosen for one cluster from any
other until the first releases it or its folder is gone.
"""

from __future__ import annotations

import contextlib
import fcntl
import random
import socket
import tempfile
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

# the kernel's default when /proc does not say
DEFAULT_EPHEMERAL = (32768, 60999)
# how many ports below (or above) the ephemeral range are used
POOL_SIZE = 10_000
LOWEST = 1024


def registry_dir() -> Path:
    return Path(tempfile.gettempdir()) / "slurm-marl-ports"


def ephemeral_range(path: str = "/proc/sys/net/ipv4/ip_local_port_range") -> tuple[int, int]:
    """(first, last) port of the kernel's ephemeral range."""
    try:
        lo, hi = (int(x) for x in Path(path).read_text().split())
    except (OSError, ValueError):
        return DEFAULT_EPHEMERAL
    return lo, hi


def pool(ephemeral: tuple[int, int]) -> range:
    """The ports to choose from: just below the ephemeral range, or just above it when
    fewer than ``POOL_SIZE`` ports lie below; empty when neither side has room."""
    lo, hi = ephemeral
    if lo - POOL_SIZE >= LOWEST:
        return range(lo - POOL_SIZE, lo)
    if hi + POOL_SIZE <= 65535:
        return range(hi + 1, hi + 1 + POOL_SIZE)
    return range(0)


def bindable(port: int) -> bool:
    """Nothing listens on (or holds) ``port`` on loopback now."""
    s = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    try:
        s.bind(("127.0.0.1", port))
        return True
    except OSError:
        return False
    finally:
        s.close()


@contextmanager
def _locked(folder: Path) -> Iterator[None]:
    if not folder.is_dir():
        folder.mkdir(parents=True, exist_ok=True)
        with contextlib.suppress(OSError):
            folder.chmod(0o1777)     # shared by every user's clusters, like /tmp
    with open(folder / ".lock", "w") as handle:
        fcntl.flock(handle, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(handle, fcntl.LOCK_UN)


def _held(folder: Path) -> set[int]:
    """Ports registered to a cluster folder that still exists; stale entries are removed."""
    held = set()
    for entry in folder.iterdir():
        if not entry.name.isdigit():
            continue
        try:
            owner = entry.read_text().strip()
        except OSError:
            continue
        if owner and Path(owner).exists():
            held.add(int(entry.name))
        else:
            with contextlib.suppress(OSError):
                entry.unlink(missing_ok=True)
    return held


def reserve(count: int, owner: Path, folder: Path | None = None,
            rng: random.Random | None = None) -> list[int]:
    """``count`` distinct ports for the cluster in folder ``owner``: from the pool, free on
    loopback now and registered to no other live cluster; registered to ``owner`` until
    ``release``. Falls back to ports the kernel picks when the pool runs short (only on a
    kernel whose ephemeral range spans nearly all ports)."""
    folder = folder or registry_dir()
    ports: list[int] = []
    with _locked(folder):
        held = _held(folder)
        choices = list(pool(ephemeral_range()))
        (rng or random).shuffle(choices)
        for port in choices:
            if port not in held and bindable(port):
                ports.append(port)
                if len(ports) == count:
                    break
        if len(ports) < count:
            ports += kernel_ports(count - len(ports), exclude=set(ports))
        for port in ports:
            (folder / str(port)).write_text(f"{Path(owner).absolute()}\n")
    return ports


def release(owner: Path, folder: Path | None = None) -> None:
    """Unregister every port registered to ``owner``."""
    folder = folder or registry_dir()
    if not folder.is_dir():
        return
    mine = str(Path(owner).absolute())
    with _locked(folder):
        for entry in folder.iterdir():
            if entry.name.isdigit():
                with contextlib.suppress(OSError):
                    if entry.read_text().strip() == mine:
                        entry.unlink(missing_ok=True)


def kernel_ports(count: int, exclude: set[int] = frozenset()) -> list[int]:
    """Ports the kernel picks (its ephemeral range), all held open together so they are
    distinct; for a one-off use where no other cluster is up (``record_versions.py``)."""
    socks, ports = [], []
    try:
        while len(ports) < count:
            s = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
            s.bind(("127.0.0.1", 0))
            socks.append(s)
            if s.getsockname()[1] not in exclude:
                ports.append(s.getsockname()[1])
    finally:
        for s in socks:
            s.close()
    return ports


