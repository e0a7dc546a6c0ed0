"""Which Slurm a local cluster runs: the host's own (Debian 12: 22.05), or 24.11 / 26.05 in
a Debian chroot (``chroot``), and what the harness does differently for the latter.

``SLURM_MARL_SLURM_VERSION`` (unset, "" or "22.05": the host's) picks the version for the
real-Slurm tests; ``default_version()`` is the one place it is read. For a chroot version
``ClusterSpec.slurm_version`` names it; the harness then installs nothing on the host and
instead: builds the chroot when missing and holds its bind mounts (``prepare``), writes
``PluginDir`` and a ``cgroup.conf`` with ``CgroupPlugin=disabled`` (``conf_extras``), starts
every daemon inside (``inside``), puts wrappers of the chroot's clients first on PATH
(``ROOT/bin``) and releases the mounts at teardown (``release``). The cluster folder must lie
under /tmp, a host folder bound into the chroot (daemons, job scripts and the host then
see it under one path); ``ClusterSpec.host_paths`` binds more, read-only, at their own paths
(a job that runs this host's interpreter and virtualenv: submitit's). Accounting there
runs the chroot's slurmdbd against the host's MariaDB: with the chroot's own MariaDB 11.8,
slurmdbd 24.11 and 26.05 stop at their first query ("Number of columns in result set
exceeds maximum allowed number of columns (=0)").
"""

from __future__ import annotations

import logging
import os
import shutil
import subprocess
from pathlib import Path

from slurm_marl.testcluster import accounting as acct
from slurm_marl.testcluster import chroot as C
from slurm_marl.testcluster.errors import HarnessError

log = logging.getLogger(__name__)

HOST_VERSION = "22.05"
VERSION_ENV = "SLURM_MARL_SLURM_VERSION"
SHARED_TMP = Path("/tmp")
APT_PACKAGES = ("slurmctld", "slurmd", "slurm-client", "munge", "hwloc-nox")
REQUIRED_BINARIES = ("munged", "slurmctld", "slurmd", "sbatch", "squeue", "sinfo", "scontrol")


def normalise(version: str | None) -> str | None:
    """None for the host's Slurm (None, "", "22.05", "host"); a chroot version as given;
    a HarnessError for a version there is no recipe for."""
    version = (version or "").strip()
    if version in ("", HOST_VERSION, "host"):
        return None
    C.suite_of(version)  # raises for an unknown version
    return version


def default_version() -> str | None:
    """The Slurm the tests run: ``$SLURM_MARL_SLURM_VERSION`` (None: the host's)."""
    return normalise(os.environ.get(VERSION_ENV))


# --slurm-version's help, for every command that starts a local cluster
OPTION_HELP = ("22.05 (the host's, default: $SLURM_MARL_SLURM_VERSION or 22.05), or 24.11 / "
               "26.05 from a Debian chroot (built on first use)")


def requested(version: str | None) -> str | None:
    """A command's ``--slurm-version``: as given (normalised), else ``default_version()``;
    a HarnessError for a version there is no recipe for."""
    return default_version() if version is None else normalise(version)


def label(version: str | None) -> str:
    """The version as people write it ("22.05" for the host's)."""
    return version or HOST_VERSION


# ---- the host's Slurm --------------------------------------------------------------------

def missing_binaries(accounting: bool = False) -> list[str]:
    paths = os.environ.get("PATH", "") + ":/usr/sbin:/sbin"
    missing = [b for b in REQUIRED_BINARIES if shutil.which(b, path=paths) is None]
    return missing + (acct.missing_binaries() if accounting else [])


def ensure_installed(accounting: bool = False) -> None:
    """Install Debian's Slurm and munge (and slurmdbd + MariaDB for ``accounting``) on the
    host if they are missing (idempotent; needs root)."""
    missing = missing_binaries(accounting)
    if not missing:
        return
    packages = APT_PACKAGES + (acct.APT_PACKAGES if accounting else ())
    if os.geteuid() != 0:
        raise HarnessError(
            f"Slurm binaries missing ({', '.join(missing)}) and not root: run "
            f"`apt-get install -y --no-install-recommends {' '.join(packages)}`")
    env = dict(os.environ, DEBIAN_FRONTEND="noninteractive")
    log.info("installing %s with apt-get", " ".join(packages))
    for cmd in (["apt-get", "update", "-qq"],
                ["apt-get", "install", "-y", "-qq", "--no-install-recommends", *packages]):
        proc = subprocess.run(cmd, env=env, capture_output=True, text=True)
        if proc.returncode != 0:
            raise HarnessError(f"{' '.join(cmd)} failed: {proc.stderr.strip()[-2000:]}")
    if missing_binaries(accounting):
        raise HarnessError(f"still missing after apt-get: {missing_binaries(accounting)}")


# ---- a chroot's Slurm --------------------------------------------------------------------

def new_root_parent(version: str | None) -> str | None:
    """Where a cluster folder of its own is made: /tmp for a chroot (bound into it)."""
    return str(SHARED_TMP) if version else None


def check_root(version: str, cluster_root: Path) -> Path:
    """The real path of ``cluster_root``, which must lie under /tmp for a chroot's Slurm."""
    real = Path(os.path.realpath(cluster_root))
    if SHARED_TMP not in real.parents:
        raise HarnessError(f"a Slurm {version} cluster must live under {SHARED_TMP} (the only "
                           f"host folder bound into its chroot); {cluster_root} is not")
    return real


def prepare(version: str, cluster_root: Path, accounting: bool = False,
            host_paths: tuple[str, ...] = ()) -> Path:
    """The chroot of ``version`` built if missing, held for ``cluster_root`` (its bind mounts
    up, ``host_paths`` among them, read-only), its clients' wrappers written into
    ``cluster_root/bin``. Returns the chroot."""
    real = check_root(version, cluster_root)
    root = C.ensure_chroot(version)
    if accounting:
        _check_accounting(version, root)
    C.hold(root, real, host_paths)
    try:
        C.write_client_wrappers(root, real / "bin")
    except BaseException:
        C.release(root, real)
        raise
    return root


def _check_accounting(version: str, root: Path) -> None:
    """Accounting with a chroot's Slurm: the chroot's slurmdbd, sacct and sacctmgr, and the
    host's MariaDB (the chroot's 11.8 makes that slurmdbd stop at its first query)."""
    lacking = []
    for name in ("slurmdbd", "sacct", "sacctmgr"):
        try:
            C.client_argv(root, [name])
        except HarnessError:
            lacking.append(name)
    if lacking:
        raise HarnessError(f"accounting is not supported with Slurm {version}: the chroot "
                           f"{root} lacks {', '.join(lacking)} (remove it to rebuild it)")
    paths = os.environ.get("PATH", "") + ":/usr/sbin:/sbin"
    host = [b for b in acct.REQUIRED_BINARIES
            if b.startswith("mariadb") and shutil.which(b, path=paths) is None]
    if host:
        raise HarnessError(f"accounting with Slurm {version} uses the host's MariaDB, and "
                           f"{', '.join(host)} is missing: apt-get install mariadb-server")


def plugin_dir(chroot: Path | None) -> Path | None:
    return C.plugin_dir(chroot) if chroot is not None else None


def inside(chroot: Path | None, argv: list[str]) -> list[str]:
    """``argv`` run inside the chroot when there is one (munged, slurmctld, slurmd,
    slurmdbd)."""
    return C.daemon_argv(chroot, argv) if chroot is not None else list(argv)


def release(chroot: Path, cluster_root: Path) -> None:
    """This cluster no longer uses the chroot: its bind mounts go with the last holder."""
    C.release(chroot, Path(os.path.realpath(cluster_root)))
