"""Building a Slurm chroot: debootstrap of the Debian suite that ships the version, Slurm
and its companions installed inside with apt-get, the marker written last; a complete
chroot that lacks a package added since gets just that package.
"""

from __future__ import annotations

import fcntl
import json
import logging
import os
import shutil
import tempfile
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from slurm_marl.testcluster.chroot.layout import (MARKER, PACKAGES, TAIL_CHARS, chroot_path,
                                                  daemon_argv, is_complete, missing_packages,
                                                  suite_of)
from slurm_marl.testcluster.chroot.mounts import (hold, mount_binds, mounts_under, release,
                                                  run, unmount_binds)
from slurm_marl.testcluster.errors import HarnessError

log = logging.getLogger(__name__)

# Suites the host's debootstrap may have no script for: the script they are built with.
DEBOOTSTRAP_SCRIPT = {"forky": "sid"}
MIRROR = "http://deb.debian.org/debian"
APT_ENV = {"DEBIAN_FRONTEND": "noninteractive", "LC_ALL": "C",
           "PATH": "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"}
APT_LOCK_WAIT = ("-o", "DPkg::Lock::Timeout=600")
NO_EXPIRY = ("-o", "Acquire::Check-Valid-Until=false")


def _apt(args: list[str], what: str, chroot_root: Path | None = None) -> None:
    """``apt-get`` on the host or inside a chroot, waiting for another apt's lock."""
    cmd = ["apt-get", *APT_LOCK_WAIT, *args]
    if chroot_root is not None:
        cmd = daemon_argv(chroot_root, cmd)
    env = dict(os.environ, **APT_ENV)
    for attempt in range(10):
        try:
            run(cmd, what, env=env)
            return
        except HarnessError as exc:
            if "is expired" in str(exc) and NO_EXPIRY[1] not in cmd:
                # A suite still in development (forky) may carry a Release file past its
                # Valid-Until on the mirror; its signature is still checked.
                log.warning("%s: Release file expired on the mirror; retrying without "
                            "the expiry check", what)
                at = cmd.index("apt-get") + 1
                cmd = cmd[:at] + list(NO_EXPIRY) + cmd[at:]
                continue
            if "Could not get lock" not in str(exc) or attempt == 9:
                raise
            log.info("%s: apt is locked by another process; waiting", what)
            time.sleep(15)


def ensure_debootstrap() -> None:
    """Install debootstrap on the host with apt-get when it is missing."""
    if shutil.which("debootstrap", path=APT_ENV["PATH"]):
        return
    if os.geteuid() != 0:
        raise HarnessError("debootstrap is missing and this is not root: run "
                           "`apt-get install -y debootstrap`")
    log.info("installing debootstrap on the host")
    _apt(["update", "-qq"], "apt-get update on the host")
    _apt(["install", "-y", "-qq", "--no-install-recommends", "debootstrap"],
         "installing debootstrap")


def _remove_partial(root: Path) -> None:
    """Remove a half-built chroot; refuses while anything is still mounted in it (a
    recursive delete through a bind mount would delete the host's /tmp or /dev)."""
    unmount_binds(root)
    if mounts_under(root):
        raise HarnessError(f"refusing to remove {root}: mounts left under it")
    log.info("removing half-built chroot %s", root)
    shutil.rmtree(root)


def _debootstrap(root: Path, suite: str) -> None:
    script = DEBOOTSTRAP_SCRIPT.get(suite)
    cmd = ["debootstrap", "--variant=minbase", suite, str(root), MIRROR]
    if script:
        cmd.append(f"/usr/share/debootstrap/scripts/{script}")
    log.info("debootstrap %s into %s (about 25 s and 150 MB from %s)", suite, root, MIRROR)
    try:
        run(cmd, f"debootstrap of {suite}", env=dict(os.environ, **APT_ENV))
    except HarnessError as exc:
        debootstrap_log = root / "debootstrap" / "debootstrap.log"
        if debootstrap_log.exists():
            tail = debootstrap_log.read_text(errors="replace")[-TAIL_CHARS:]
            raise HarnessError(f"{exc}\n--- {debootstrap_log} ---\n{tail}") from exc
        raise


def _prepare_root(root: Path) -> None:
    """What the chroot needs before packages are installed: no service starts on install
    (policy-rc.d exits 101), the host's /etc/hosts (slurmd resolves node names), and the
    ``ROOT/ROOT -> /`` symlink that makes a host-path PluginDir resolve inside."""
    policy = root / "usr/sbin/policy-rc.d"
    policy.write_text("#!/bin/sh\nexit 101\n")
    policy.chmod(0o755)
    shutil.copyfile("/etc/hosts", root / "etc/hosts")
    inner = root / str(root).lstrip("/")
    inner.parent.mkdir(parents=True, exist_ok=True)
    if not inner.is_symlink():
        inner.symlink_to("/")


def _installed_version(root: Path) -> str:
    proc = run(daemon_argv(root, ["slurmctld", "-V"]), f"slurmctld -V in {root}")
    return proc.stdout.strip()


@contextmanager
def _build_lock(root: Path) -> Iterator[None]:
    """One builder per chroot at a time (another process may be building the same one)."""
    root.parent.mkdir(parents=True, exist_ok=True)
    with open(root.parent / f".{root.name}.lock", "w") as handle:
        fcntl.flock(handle, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(handle, fcntl.LOCK_UN)


def ensure_chroot(version: str) -> Path:
    """The chroot of Slurm ``version`` ("24.11" or "26.05"), built when missing or left
    half-built (needs root, Debian's mirror, some time and disk: docs/benchmarks.md, "The
    same replay on Slurm 24.11"). Returns its path."""
    root = chroot_path(version)
    if is_complete(root) and not missing_packages(root):
        log.debug("chroot for Slurm %s found at %s", version, root)
        return root
    if os.geteuid() != 0:
        what = "missing" if not is_complete(root) else \
            f"lacks {', '.join(missing_packages(root))}"
        raise HarnessError(f"chroot for Slurm {version} at {root} {what}; building it "
                           "needs root")
    with _build_lock(root):
        # another process may have built or completed it meanwhile
        if not is_complete(root):
            _build(version, root)
        elif missing_packages(root):
            _add_packages(root, missing_packages(root))
    return root


def _write_marker(root: Path, version: str, suite: str, slurm: str,
                  built: float | None = None) -> None:
    (root / MARKER).write_text(json.dumps({
        "version": version, "suite": suite, "slurm": slurm, "packages": list(PACKAGES),
        "built": time.time() if built is None else built}) + "\n")


def _install(root: Path, packages: list[str]) -> None:
    """apt-get update, install ``packages`` (no recommends), clean: inside the chroot, whose
    bind mounts must be up."""
    _apt(["update", "-qq"], f"apt-get update in {root}", chroot_root=root)
    _apt(["install", "-y", "-qq", "--no-install-recommends", *packages],
         f"installing {' '.join(packages)} in {root}", chroot_root=root)
    run(["chroot", str(root), "apt-get", "clean"], f"apt-get clean in {root}")


def _add_packages(root: Path, packages: list[str]) -> None:
    """Install ``packages`` into a complete chroot (clusters may be running from it: its
    bind mounts are held for the time, not torn down under them), then list them in the
    marker."""
    marker = json.loads((root / MARKER).read_text())
    started = time.monotonic()
    holder = Path(tempfile.mkdtemp(prefix="slurm-marl-chroot-update-"))
    hold(root, holder)
    try:
        log.info("adding %s to the chroot %s", " ".join(packages), root)
        _install(root, packages)
    finally:
        shutil.rmtree(holder, ignore_errors=True)
        release(root, holder)
    _write_marker(root, marker.get("version", "?"), marker.get("suite", "?"),
                  marker.get("slurm", "?"), marker.get("built"))
    log.info("chroot %s brought up to date in %.0f s", root, time.monotonic() - started)


def _build(version: str, root: Path) -> None:
    """debootstrap, prepare, install Slurm, check its version, write the marker last."""
    suite = suite_of(version)
    started = time.monotonic()
    ensure_debootstrap()
    if root.exists():
        _remove_partial(root)
    root.parent.mkdir(parents=True, exist_ok=True)
    _debootstrap(root, suite)
    _prepare_root(root)
    mount_binds(root)
    try:
        log.info("installing %s in the %s chroot", " ".join(PACKAGES), suite)
        _install(root, list(PACKAGES))
        slurm = _installed_version(root)
    finally:
        unmount_binds(root)
    if not slurm.split()[-1].startswith(version):
        raise HarnessError(f"the {suite} chroot at {root} has {slurm!r}, not Slurm {version}")
    _write_marker(root, version, suite, slurm)
    log.info("chroot for %s built in %.0f s at %s", slurm, time.monotonic() - started, root)
