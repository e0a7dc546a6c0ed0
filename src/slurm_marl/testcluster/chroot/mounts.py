"""The host folders bound into a chroot (/proc, /sys, /dev, /dev/pts, /tmp, and the
read-only ``host_paths`` a cluster asks for), and the holders that share them: several
clusters may run from one chroot, and its binds stay until the last of them releases it.
"""

from __future__ import annotations

import fcntl
import hashlib
import logging
import os
import subprocess
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from slurm_marl.testcluster.chroot.layout import BIND_MOUNTS, TAIL_CHARS
from slurm_marl.testcluster.errors import HarnessError

log = logging.getLogger(__name__)


# ---------------------------------------------------------------------------------------
# bind mounts


def _unescape(field: str) -> str:
    """A path of /proc/self/mounts (spaces, tabs, newlines, backslashes are octal)."""
    for code, ch in (("\\040", " "), ("\\011", "\t"), ("\\012", "\n"), ("\\134", "\\")):
        field = field.replace(code, ch)
    return field


def mounts_under(root: Path) -> list[str]:
    """Mount points at or below ``root``, in the order they were mounted."""
    prefix = os.path.realpath(root)
    found = []
    for line in Path("/proc/self/mounts").read_text().splitlines():
        fields = line.split()
        if len(fields) < 2:
            continue
        target = _unescape(fields[1])
        if target == prefix or target.startswith(prefix + "/"):
            found.append(target)
    return found


def run(cmd: list[str], what: str, env: dict | None = None,
         timeout_s: float = 1800) -> subprocess.CompletedProcess:
    """Run ``cmd``; a HarnessError with the tail of its stderr when it fails."""
    log.debug("running %s", " ".join(cmd))
    try:
        proc = subprocess.run(cmd, capture_output=True, text=True, env=env, timeout=timeout_s)
    except (OSError, subprocess.TimeoutExpired) as exc:
        raise HarnessError(f"{what}: `{' '.join(cmd)}` could not run: {exc}") from exc
    if proc.returncode != 0:
        tail = (proc.stderr.strip() or proc.stdout.strip())[-TAIL_CHARS:]
        raise HarnessError(f"{what}: `{' '.join(cmd)}` failed (rc {proc.returncode}):\n{tail}")
    return proc


def outermost(host_paths: tuple[str, ...]) -> list[str]:
    """The real paths of ``host_paths`` not inside another of them or a folder of
    ``BIND_MOUNTS`` (bound already), each once, in the order given."""
    real = list(dict.fromkeys(os.path.realpath(p) for p in host_paths))
    covers = [Path(p) for p in real] + [Path(b) for b in BIND_MOUNTS]
    return [p for p in real if not any(c in Path(p).parents for c in covers)]


def host_path_target(root: Path, path: str) -> Path:
    """Where host folder ``path`` is bound in the chroot: the same path. Refused (a
    HarnessError) unless it is an absolute, existing folder whose place in the chroot is
    free (missing or an empty folder), so no chroot file is hidden: a system interpreter
    under /usr cannot be bound, the chroot's own /usr is there."""
    if not os.path.isabs(path) or not os.path.isdir(path):
        raise HarnessError(f"host path {path!r} to bind into the chroot is not an absolute "
                           f"existing folder")
    target = Path(os.path.realpath(root)) / os.path.realpath(path).lstrip("/")
    taken = target.is_symlink() or (target.exists() and (
        not target.is_dir() or any(target.iterdir())))
    if taken and str(target) not in mounts_under(root):
        raise HarnessError(f"host path {path} cannot be bound into the chroot {root}: the "
                           f"chroot has its own {path}")
    return target


def mount_binds(root: Path, host_paths: tuple[str, ...] = ()) -> None:
    """Bind /proc, /sys, /dev, /dev/pts and /tmp into the chroot, and ``host_paths``
    read-only at their own paths (``host_path_target``); those already mounted there are
    left as they are (idempotent)."""
    root = Path(os.path.realpath(root))
    binds = [(src, root / src.lstrip("/"), ()) for src in BIND_MOUNTS]
    binds += [(p, host_path_target(root, p), ("-o", "ro")) for p in outermost(host_paths)]
    for src, target, options in binds:
        if str(target) in mounts_under(root):
            continue
        target.mkdir(parents=True, exist_ok=True)
        try:
            run(["mount", "--bind", *options, src, str(target)],
                 f"bind-mounting {src} into {root}")
        except HarnessError:
            unmount_binds(root)
            raise
        log.debug("bound %s at %s", src, target)


def unmount_binds(root: Path) -> None:
    """Unmount everything mounted at or below the chroot, the last mounted first
    (idempotent). A busy mount is detached lazily rather than left behind."""
    root = Path(os.path.realpath(root))
    for target in reversed(mounts_under(root)):
        proc = subprocess.run(["umount", target], capture_output=True, text=True)
        if proc.returncode != 0:
            log.warning("umount %s: %s; detaching it lazily", target, proc.stderr.strip())
            run(["umount", "--lazy", target], f"unmounting {target}")
    left = mounts_under(root)
    if left:
        raise HarnessError(f"still mounted under {root}: {', '.join(left)}")


# ---------------------------------------------------------------------------------------
# holders: several clusters may share one chroot's bind mounts


def _holders_dir(root: Path) -> Path:
    return Path(os.path.realpath(root)).parent / f".{Path(root).name}.holders"


@contextmanager
def _holders_lock(root: Path) -> Iterator[Path]:
    folder = _holders_dir(root)
    folder.mkdir(parents=True, exist_ok=True)
    with open(folder / ".lock", "w") as handle:
        fcntl.flock(handle, fcntl.LOCK_EX)
        try:
            yield folder
        finally:
            fcntl.flock(handle, fcntl.LOCK_UN)


def _holder_file(folder: Path, holder: Path) -> Path:
    return folder / hashlib.sha256(str(Path(holder).absolute()).encode()).hexdigest()[:16]


def hold(root: Path, holder: Path, host_paths: tuple[str, ...] = ()) -> None:
    """Register ``holder`` (a cluster folder) as a user of the chroot and make sure its
    bind mounts are there (``host_paths`` too; all stay until the last holder goes)."""
    with _holders_lock(root) as folder:
        _holder_file(folder, holder).write_text(str(Path(holder).absolute()) + "\n")
        mount_binds(root, host_paths)


def release(root: Path, holder: Path) -> None:
    """Unregister ``holder``; unmount the chroot's binds when no holder whose folder still
    exists is left (a holder that vanished without releasing does not keep them)."""
    with _holders_lock(root) as folder:
        _holder_file(folder, holder).unlink(missing_ok=True)
        alive = []
        for entry in folder.iterdir():
            if entry.name.startswith("."):
                continue
            if Path(entry.read_text().strip()).exists():
                alive.append(entry)
            else:
                entry.unlink(missing_ok=True)
        if not alive:
            unmount_binds(root)
        else:
            log.info("chroot %s still held by %d cluster(s); binds kept", root, len(alive))
