"""A newer Slurm in a Debian chroot next to the host's own Slurm (measured on a Debian 12 host).

Debian 12 ships Slurm 22.05; 24.11 comes with trixie and 26.05 with forky. Each is built
once into ``/var/cache/slurm-marl/chroot-<version>`` (``SLURM_MARL_CHROOT_CACHE`` moves the
cache): ``debootstrap --variant=minbase`` from Debian's mirror, then ``apt-get install
--no-install-recommends`` of Slurm's daemons, clients, munge, slurmdbd, MariaDB and
python3-minimal (job scripts the harness submits, such as the replay's payload, are
standard-library Python scripts and run inside) inside. A marker file written last says the
chroot is complete and lists the packages it holds; anything else found there is a
half-built chroot and is built again, and a complete chroot that lacks a package added to
``PACKAGES`` since it was built gets just that package (``ensure_chroot``).

Running it:

- daemons run inside (``chroot ROOT slurmctld ...``, see ``daemon_argv``) with /proc, /sys,
  /dev, /dev/pts and /tmp bind-mounted (``mount_binds``; ``hold``/``release`` share them
  between clusters and unmount them after the last), so a cluster folder under /tmp has
  the same path inside and out; job scripts run inside too. A cluster may ask for more host
  folders, read-only at their own paths where the chroot has nothing (``host_paths``: a
  job running the host's interpreter and virtualenv; the chroot then needs ``libffi8``).
  Slurm >= 23.11 also needs a
  ``cgroup.conf`` with ``CgroupPlugin=disabled`` beside slurm.conf (slurmd otherwise stops
  on "No filesystem mounted on /sys/fs/cgroup");
- clients must match the daemons (a 22.05 client gets "Invalid Protocol Version"), so
  host-side code runs the chroot's own squeue/sinfo/scontrol/sbatch/sacct through the
  chroot's dynamic loader (``client_argv``); they then load Slurm's plugins from the
  ``PluginDir`` of slurm.conf, which must name the chroot's plugin folder by its host path
  (``plugin_dir``). Inside the chroot that same path resolves through the symlink
  ``ROOT/ROOT -> /`` made at build time, so one slurm.conf serves daemons and clients.
  ``write_client_wrappers`` puts small executables for them in a folder, for code that
  calls plain ``squeue``/``sbatch`` from PATH or through a SlurmRunner's ``bin_dir``.

Nothing here runs a shell: every command is an argument list.
"""

from __future__ import annotations

import fcntl
import hashlib
import json
import logging
import os
import shlex
import shutil
import subprocess
import tempfile
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from slurm_marl.testcluster.errors import HarnessError

log = logging.getLogger(__name__)

# Slurm version -> the Debian suite that ships it.
SLURM_SUITES = {"24.11": "trixie", "26.05": "forky"}
# Suites the host's debootstrap may have no script for: the script they are built with.
DEBOOTSTRAP_SCRIPT = {"forky": "sid"}
MIRROR = "http://deb.debian.org/debian"
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
APT_ENV = {"DEBIAN_FRONTEND": "noninteractive", "LC_ALL": "C",
           "PATH": "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"}
APT_LOCK_WAIT = ("-o", "DPkg::Lock::Timeout=600")
NO_EXPIRY = ("-o", "Acquire::Check-Valid-Until=false")
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


def _run(cmd: list[str], what: str, env: dict | None = None,
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
            _run(["mount", "--bind", *options, src, str(target)],
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
            _run(["umount", "--lazy", target], f"unmounting {target}")
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


# ---------------------------------------------------------------------------------------
# building


def _apt(args: list[str], what: str, chroot_root: Path | None = None) -> None:
    """``apt-get`` on the host or inside a chroot, waiting for another apt's lock."""
    cmd = ["apt-get", *APT_LOCK_WAIT, *args]
    if chroot_root is not None:
        cmd = daemon_argv(chroot_root, cmd)
    env = dict(os.environ, **APT_ENV)
    for attempt in range(10):
        try:
            _run(cmd, what, env=env)
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
        _run(cmd, f"debootstrap of {suite}", env=dict(os.environ, **APT_ENV))
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
    proc = _run(daemon_argv(root, ["slurmctld", "-V"]), f"slurmctld -V in {root}")
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
    _run(["chroot", str(root), "apt-get", "clean"], f"apt-get clean in {root}")


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
