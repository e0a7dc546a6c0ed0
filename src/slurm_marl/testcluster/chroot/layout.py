"""Where things are in a Slurm chroot and how the host runs them: the cache folder and
the Debian suite of each version, the completion marker, the chroot's loader, libraries,
plugins and binaries, and the argument lists of its clients and daemons.
"""

from __future__ import annotations

import json
import os
import shlex
from pathlib import Path

from slurm_marl.testcluster.errors import HarnessError

# Slurm version -> the Debian suite that ships it.
SLURM_SUITES = {"24.11": "trixie", "26.05": "forky"}
DEFAULT_CACHE = Path("/var/cache/slurm-marl")
CACHE_ENV = "SLURM_MARL_CHROOT_CACHE"
PACKAGES = ("slurmctld", "slurmd", "slurm-client", "munge", "slurmdbd", "mariadb-server",
            "python3-minimal",
            # ctypes' library: a host interpreter bound in (``host_paths``) imports it
            "libffi8")
# The interpreter job scripts find inside the chroot (python3-minimal's).
PYTHON = "/usr/bin/python3"
MARKER = ".slurm-marl-complete"
# Bound in this order, unbound in the reverse order.
BIND_MOUNTS = ("/proc", "/sys", "/dev", "/dev/pts", "/tmp")
LOADER = "usr/lib/x86_64-linux-gnu/ld-linux-x86-64.so.2"
LIBRARY_DIRS = ("usr/lib/x86_64-linux-gnu", "lib/x86_64-linux-gnu",
                "usr/lib/x86_64-linux-gnu/slurm-wlm", "usr/lib/x86_64-linux-gnu/slurm")
PLUGIN_DIRS = ("usr/lib/x86_64-linux-gnu/slurm-wlm", "usr/lib/x86_64-linux-gnu/slurm")
BIN_DIRS = ("usr/bin", "usr/sbin", "bin", "sbin")
CLIENTS = ("squeue", "sinfo", "scontrol", "sbatch", "scancel", "sacct", "sacctmgr", "sprio",
           "sstat", "salloc", "srun", "sshare")
TAIL_CHARS = 2000


# ---------------------------------------------------------------------------------------
# paths


def cache_dir() -> Path:
    """Where chroots are kept: ``$SLURM_MARL_CHROOT_CACHE`` or /var/cache/slurm-marl."""
    return Path(os.environ.get(CACHE_ENV) or DEFAULT_CACHE)


def chroot_path(version: str) -> Path:
    """The folder of the chroot for Slurm ``version`` (built or not)."""
    suite_of(version)
    return (cache_dir() / f"chroot-{version}").resolve()


def suite_of(version: str) -> str:
    """The Debian suite that ships Slurm ``version`` (``24.11`` -> trixie)."""
    try:
        return SLURM_SUITES[version]
    except KeyError:
        raise HarnessError(f"no chroot recipe for Slurm {version!r}; known: "
                           f"{', '.join(sorted(SLURM_SUITES))}") from None


def is_complete(root: Path) -> bool:
    """The chroot was built to the end (its marker, written last, is there)."""
    return (root / MARKER).is_file()


def missing_packages(root: Path) -> list[str]:
    """Packages of ``PACKAGES`` the complete chroot's marker does not list (a marker written
    before a package was added lists fewer, or none)."""
    try:
        listed = json.loads((root / MARKER).read_text()).get("packages") or []
    except (OSError, ValueError, AttributeError):
        listed = []
    return [p for p in PACKAGES if p not in listed]


def resolve_in_root(root: Path, path: str, hops: int = 40) -> Path:
    """``path`` inside the chroot as a host path, following symlinks as the chroot would
    (an absolute link target is taken relative to ``root``, not to the host's /)."""
    parts = [p for p in path.split("/") if p]
    current = root
    while parts:
        part = parts.pop(0)
        candidate = current / part
        if candidate.is_symlink():
            hops -= 1
            if hops < 0:
                raise HarnessError(f"symlink loop resolving {path} in {root}")
            target = os.readlink(candidate)
            if target.startswith("/"):
                current = root
            parts = [p for p in target.split("/") if p] + parts
        elif part == "..":
            current = current.parent if current != root else root
        elif part != ".":
            current = candidate
    return current


def plugin_dir(root: Path) -> Path:
    """Host path of the chroot's Slurm plugin folder: the ``PluginDir`` a slurm.conf shared
    by the chroot's daemons and its clients run from the host must name."""
    for rel in PLUGIN_DIRS:
        if (root / rel / "select_cons_tres.so").exists():
            return root / rel
    raise HarnessError(f"no Slurm plugin folder in {root} (looked in {', '.join(PLUGIN_DIRS)})")


def _binary(root: Path, name: str) -> Path:
    for rel in BIN_DIRS:
        path = root / rel / name
        if path.exists():
            return resolve_in_root(root, f"{rel}/{name}")
    raise HarnessError(f"{name} not found in chroot {root}")


def client_argv(root: Path, argv: list[str]) -> list[str]:
    """``argv`` of a Slurm client (squeue, sinfo, scontrol, sbatch, sacct...) run from the
    host with the chroot's binary, its loader and its libraries, for any user."""
    root = Path(root)
    loader = resolve_in_root(root, LOADER)
    libs = ":".join(str(root / d) for d in LIBRARY_DIRS if (root / d).is_dir())
    return [str(loader), "--library-path", libs, str(_binary(root, argv[0])), *argv[1:]]


def daemon_argv(root: Path, argv: list[str]) -> list[str]:
    """``argv`` run inside the chroot (root only): daemons, and anything they exec."""
    return ["chroot", str(root), *argv]


def write_client_wrappers(root: Path, bin_dir: Path, names: tuple[str, ...] = CLIENTS
                          ) -> list[Path]:
    """Small executables in ``bin_dir`` that run the chroot's clients through its loader
    (``client_argv``): with ``bin_dir`` first on PATH, or as a SlurmRunner's ``bin_dir``,
    code that calls plain ``squeue``/``sbatch`` reaches the chroot's Slurm."""
    bin_dir.mkdir(parents=True, exist_ok=True)
    written = []
    for name in names:
        try:
            argv = client_argv(root, [name])
        except HarnessError:
            continue  # a client this Slurm does not ship
        path = bin_dir / name
        path.write_text("#!/bin/sh\n# written by slurm_marl.testcluster.chroot\nexec "
                        + " ".join(shlex.quote(a) for a in argv) + ' "$@"\n')
        path.chmod(0o755)
        written.append(path)
    return written
