"""One active agent per cluster: exclusive locks the agent holds while it acts.

Two agents writing to one cluster fight: each leases, pins and requeues the same jobs (one
wrote ``ReqNodeList=n1``, the other ``n2`` a second later). So ``slurm-marl run`` acts only
while it holds two ``flock`` locks:

- the **cluster lock**, ``agent.lock_file`` (default ``slurm-marl.lock`` in slurm.conf's
  ``StateSaveLocation``, the folder a primary and a backup slurmctld must share, so that an
  agent started on either controller finds the same lock; any file both can reach works);
- the **state-dir lock**, ``agent.lock`` in ``agent.state_dir``: the store has one writer.

A shadow agent writes nothing to Slurm and takes only the state-dir lock, so it can run
beside the active one with a state dir of its own. An agent that finds a lock held waits as
a *standby*: it tells systemd it is ready, keeps the watchdog fed, and tries again every
cycle interval; the kernel drops a lock when its holder's process ends (on NFS, when the
server sees it gone), so a standby takes over within one interval of the active agent's end.
The holder writes who it is into the file (host, pid, since, config) for ``status`` and for
the standby's log line. If a lock file is removed or replaced while held (a second agent
could then lock the new file), the holder stops acting at its next cycle.
"""

from __future__ import annotations

import errno
import fcntl
import json
import logging
import os
import socket
import time
from dataclasses import dataclass
from pathlib import Path

from slurm_marl.topology.confparse import read_config_file
from slurm_marl.topology.errors import TopologyConfigError

log = logging.getLogger("slurm_marl.daemon")

LOCK_NAME = "slurm-marl.lock"
STATE_LOCK_NAME = "agent.lock"
SLURM_STATE_DEFAULT = "/var/spool/slurmctld"  # Slurm's own default StateSaveLocation


class LockError(RuntimeError):
    """A lock file cannot be opened: the one-line reason, with what to do."""


def state_save_location(slurm_conf: str | Path) -> str:
    """slurm.conf's ``StateSaveLocation`` (Slurm's default if unset; the last one wins, as
    in Slurm). An unreadable or unparsable slurm.conf is a :class:`LockError`."""
    try:
        text = read_config_file(slurm_conf)
    except TopologyConfigError as exc:
        raise LockError(f"cannot find the cluster lock's folder: {exc}") from exc
    found = [v for entry in text.entries for k, v in entry.pairs
             if k.lower() == "statesavelocation"]
    return found[-1] if found else SLURM_STATE_DEFAULT


def cluster_lock_path(lock_file: str, slurm_conf: str | Path) -> Path:
    """``agent.lock_file``, or ``slurm-marl.lock`` in slurm.conf's StateSaveLocation."""
    if lock_file:
        return Path(lock_file)
    return Path(state_save_location(slurm_conf)) / LOCK_NAME


def holder_text(holder: dict | None) -> str:
    if not holder:
        return "an agent that did not say who it is"
    since = holder.get("since")
    when = time.strftime("%Y-%m-%d %H:%M:%S", time.localtime(since)) if since else "?"
    return (f"pid {holder.get('pid', '?')} on {holder.get('host', '?')} (since {when}, "
            f"config {holder.get('config', '?')})")


@dataclass
class FileLock:
    """One ``flock(LOCK_EX)`` on ``path``, created if missing. Opened read-write where the
    agent may write it (the holder is recorded), else read-only (locking still works)."""

    path: Path
    what: str                     # "cluster lock" / "state-dir lock", for messages
    make_parent: bool = False     # the state dir is the agent's to create; Slurm's is not
    fd: int | None = None
    writable: bool = False
    locked: bool = False

    def _open(self) -> None:
        if self.fd is not None:
            return
        if self.make_parent:
            try:
                self.path.parent.mkdir(parents=True, exist_ok=True)
            except OSError as exc:
                raise LockError(f"cannot create agent.state_dir {self.path.parent}: "
                                f"{exc.strerror}") from exc
        hint = (f"create it for the agent's user (install -m 0644 -o slurm-marl /dev/null "
                f"{self.path}) or set agent.lock_file to a file every controller host can "
                "reach")
        try:
            self.fd = os.open(self.path, os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o644)
            self.writable = True
        except OSError as exc:
            if exc.errno not in (errno.EACCES, errno.EROFS, errno.EPERM):
                raise LockError(f"cannot open the agent's {self.what} {self.path}: "
                                f"{exc.strerror}; {hint}") from exc
            try:  # a file the agent may only read locks as well (holder not recorded)
                self.fd = os.open(self.path, os.O_RDONLY | os.O_CLOEXEC)
            except OSError as exc2:
                raise LockError(f"cannot open or create the agent's {self.what} "
                                f"{self.path}: {exc2.strerror}; {hint}") from exc2

    def try_acquire(self, holder: dict) -> bool:
        self._open()
        assert self.fd is not None
        try:
            fcntl.flock(self.fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            return False
        except OSError as exc:  # ENOLCK: an NFS mount without lock support
            raise LockError(f"cannot lock the agent's {self.what} {self.path}: "
                            f"{exc.strerror}") from exc
        self.locked = True
        if self.writable:
            data = (json.dumps(holder) + "\n").encode()
            os.ftruncate(self.fd, 0)
            os.pwrite(self.fd, data, 0)
        return True

    def holder(self) -> dict | None:
        return read_holder(self.path)

    def still_ours(self) -> bool:
        """Locked, and the file at ``path`` is still the one locked (not removed, not
        replaced)."""
        if self.fd is None or not self.locked:
            return False
        try:
            here, held = os.stat(self.path), os.fstat(self.fd)
        except OSError:
            return False
        return (here.st_dev, here.st_ino) == (held.st_dev, held.st_ino)

    def release(self) -> None:
        if self.fd is not None:
            os.close(self.fd)  # closing drops the flock
            self.fd = None
            self.locked = False


def read_holder(path: Path) -> dict | None:
    """What the holder wrote into a lock file (None: empty, unreadable or not JSON)."""
    try:
        data = json.loads(Path(path).read_text() or "null")
    except (OSError, ValueError):
        return None
    return data if isinstance(data, dict) else None


def lock_is_held(path: Path) -> bool | None:
    """Whether some process holds ``path``'s lock now (None: the file cannot be opened).
    Probes with a shared lock it drops at once: never blocks, never keeps it."""
    try:
        fd = os.open(path, os.O_RDONLY | os.O_CLOEXEC)
    except OSError:
        return None
    try:
        fcntl.flock(fd, fcntl.LOCK_SH | fcntl.LOCK_NB)
    except BlockingIOError:
        return True
    except OSError:
        return None
    finally:
        os.close(fd)  # also drops the probe's shared lock
    return False


class AgentLocks:
    """The locks one agent holds while it acts: the cluster lock (unless ``shadow``) and the
    state-dir lock, always taken in that order, all or none."""

    def __init__(self, cluster: Path | None, state_dir: Path, config_source: str) -> None:
        self.locks: list[FileLock] = []
        if cluster is not None:
            self.locks.append(FileLock(Path(cluster), "cluster lock"))
        state_lock = Path(state_dir) / STATE_LOCK_NAME
        if cluster is None or Path(cluster).resolve() != state_lock.resolve():
            self.locks.append(FileLock(state_lock, "state-dir lock", make_parent=True))
        self.config_source = config_source
        self.state_dir = Path(state_dir)

    @classmethod
    def for_config(cls, config) -> "AgentLocks":
        """The locks ``config`` asks for (``LockError`` if the cluster lock's place cannot be
        found). Nothing is created or locked yet."""
        cluster = None
        if not config.agent.shadow:
            cluster = cluster_lock_path(config.agent.lock_file, config.slurm.slurm_conf)
        return cls(cluster, Path(config.agent.state_dir), config.source)

    def holder_record(self) -> dict:
        return {"host": socket.gethostname(), "pid": os.getpid(), "since": time.time(),
                "config": self.config_source, "state_dir": str(self.state_dir)}

    def try_acquire(self) -> FileLock | None:
        """None when every lock is now held by this process; else the first lock another
        holds (those taken on the way are let go again)."""
        record = self.holder_record()
        taken: list[FileLock] = []
        for lock in self.locks:
            if lock.still_ours():
                taken.append(lock)
                continue
            if not lock.try_acquire(record):
                for got in taken:
                    got.release()
                return lock
            taken.append(lock)
        return None

    def lost(self) -> FileLock | None:
        """A lock whose file was removed or replaced while held (None: all still ours)."""
        return next((lock for lock in self.locks if not lock.still_ours()), None)

    def release(self) -> None:
        for lock in reversed(self.locks):
            lock.release()

    def describe(self) -> str:
        return ", ".join(f"{lock.what} {lock.path}" for lock in self.locks)
