"""SchedMD's testsuite for the installed Slurm: fetched from Debian's source package with a
private apt state (the host's apt configuration is left alone), unpacked once into a cache
folder, and the virtualenv its pytest runs from (``schedmd`` runs it).
"""

from __future__ import annotations

import contextlib
import fcntl
import json
import os
import shutil
import subprocess
import tarfile
from pathlib import Path

from slurm_marl.testcluster.errors import HarnessError

SOURCE_PACKAGE_OF = "slurmctld"          # its source package is the Slurm under test
DEFAULT_CACHE = Path(".cache/schedmd-testsuite")
# The testsuite's Python side, pinned: pytest of the 22.05 era (its conftest imports py.io)
TESTSUITE_REQUIREMENTS = ("pytest==7.1.3", "py==1.11.0", "pexpect==4.8.0",
                          "ptyprocess==0.7.0", "attrs==23.2.0", "pluggy==1.5.0",
                          "iniconfig==2.0.0", "packaging==24.0", "tomli==2.0.1")


class SchedmdError(HarnessError):
    """The testsuite could not be fetched, set up or run (not a test outcome)."""


def installed_source() -> tuple[str, str]:
    """(source package, Debian version) of the host's Slurm, e.g. ("slurm-wlm",
    "22.05.8-4+deb12u3")."""
    proc = subprocess.run(["dpkg-query", "-W", "-f", "${source:Package} ${source:Version}",
                           SOURCE_PACKAGE_OF], capture_output=True, text=True)
    if proc.returncode != 0 or len(proc.stdout.split()) != 2:
        raise SchedmdError(f"{SOURCE_PACKAGE_OF} is not installed as a Debian package "
                           f"(dpkg-query: {(proc.stderr or proc.stdout).strip()}); run "
                           "`bash run.sh setup` first")
    package, version = proc.stdout.split()
    return package, version


def _codename() -> str:
    for line in Path("/etc/os-release").read_text().splitlines():
        if line.startswith("VERSION_CODENAME="):
            return line.split("=", 1)[1].strip().strip('"')
    raise SchedmdError("no VERSION_CODENAME in /etc/os-release: not a Debian release")


def deb_src_lines(codename: str) -> str:
    """Debian's source archives for this release ($SLURM_MARL_DEB_SRC replaces them: whole
    sources.list lines, e.g. a local mirror)."""
    if os.environ.get("SLURM_MARL_DEB_SRC"):
        return os.environ["SLURM_MARL_DEB_SRC"].strip() + "\n"
    key = "[signed-by=/usr/share/keyrings/debian-archive-keyring.gpg] "
    return (f"deb-src {key}http://deb.debian.org/debian {codename} main\n"
            f"deb-src {key}http://deb.debian.org/debian {codename}-updates main\n"
            f"deb-src {key}http://deb.debian.org/debian-security {codename}-security main\n")


def _apt(apt_dir: Path, *args: str, cwd: Path | None = None) -> str:
    """apt-get with its own sources.list, lists and cache under ``apt_dir`` (the host's
    sources and package lists are neither read nor changed)."""
    opts = ["-o", f"Dir::Etc::SourceList={apt_dir / 'sources.list'}",
            "-o", "Dir::Etc::SourceParts=/nonexistent",
            "-o", f"Dir::State::Lists={apt_dir / 'lists'}",
            "-o", f"Dir::Cache={apt_dir / 'cache'}",
            "-o", "Debug::NoLocking=1"]
    if os.geteuid() == 0:    # _apt cannot write into the cache folder: download as root
        opts += ["-o", "APT::Sandbox::User=root"]
    proc = subprocess.run(["apt-get", "-q", *opts, *args], cwd=cwd, capture_output=True,
                          text=True, timeout=600)
    if proc.returncode != 0:
        raise SchedmdError(f"apt-get {' '.join(args)} failed (rc {proc.returncode}):\n"
                           f"{(proc.stderr or proc.stdout).strip()[-2000:]}")
    return proc.stderr


def fetch_testsuite(cache: Path = DEFAULT_CACHE) -> Path:
    """testsuite/python of the installed Slurm's Debian source, fetched and unpacked on
    first use; returns its folder."""
    package, version = installed_source()
    base = (cache / version).resolve()
    python_dir = base / "testsuite" / "python"
    done = base / "source.json"
    if done.exists() and (python_dir / "lib" / "atf.py").exists():
        return python_dir
    base.mkdir(parents=True, exist_ok=True)
    with _locked(base / ".lock"):
        if done.exists() and (python_dir / "lib" / "atf.py").exists():
            return python_dir
        apt_dir = base / "apt"
        for sub in ("lists/partial", "cache/archives/partial", "download"):
            (apt_dir / sub).mkdir(parents=True, exist_ok=True)
        (apt_dir / "sources.list").write_text(deb_src_lines(_codename()))
        warnings = _apt(apt_dir, "update")
        if not list((apt_dir / "lists").glob("*Sources*")):  # update only warns when offline
            raise SchedmdError("apt-get update could not fetch Debian's source index from\n"
                               f"{(apt_dir / 'sources.list').read_text()}"
                               f"{warnings.strip()[-2000:]}")
        download = apt_dir / "download"
        try:
            _apt(apt_dir, "source", "--download-only", f"{package}={version}", cwd=download)
        except SchedmdError as exc:
            raise SchedmdError(f"Debian's source of {package} {version} could not be "
                               f"downloaded: {exc}") from None
        upstream = version.split(":")[-1].rsplit("-", 1)[0]
        origs = sorted(download.glob(f"{package}_{upstream}.orig.tar.*"))
        if not origs:
            raise SchedmdError(f"no {package}_{upstream}.orig.tar.* in {download}")
        top = _unpack_testsuite(origs[0], base)
        done.write_text(json.dumps({"package": package, "version": version,
                                    "orig": origs[0].name, "upstream_tree": top}, indent=2))
    return python_dir


def _unpack_testsuite(orig: Path, base: Path) -> str:
    """Unpack <top>/testsuite/python from the upstream tarball into base/testsuite/python;
    returns <top> (e.g. slurm-slurm-22-05-8-1, the upstream tag)."""
    target = base / "testsuite"
    shutil.rmtree(target, ignore_errors=True)
    with tarfile.open(orig) as tar:
        members = []
        top = None
        for m in tar.getmembers():
            parts = m.name.split("/")
            if len(parts) >= 3 and parts[1:3] == ["testsuite", "python"]:
                top = parts[0]
                if not (m.isfile() or m.isdir()):
                    continue        # no links or devices out of an archive
                m.name = "/".join(parts[1:])
                members.append(m)
        if top is None:
            raise SchedmdError(f"{orig.name} has no testsuite/python: this Slurm's source "
                               "does not ship SchedMD's python testsuite")
        tar.extractall(base, members=members, filter="data")
    return top


@contextlib.contextmanager
def _locked(path: Path):
    with open(path, "w") as fh:
        fcntl.flock(fh, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(fh, fcntl.LOCK_UN)


def ensure_venv(cache: Path = DEFAULT_CACHE) -> Path:
    """The testsuite's own virtualenv (host python3, pinned pytest); returns its python."""
    venv = (cache / "venv").resolve()
    python = venv / "bin" / "python"
    stamp = venv / ".requirements"
    want = "\n".join(TESTSUITE_REQUIREMENTS)
    if python.exists() and stamp.exists() and stamp.read_text() == want:
        return python
    cache.mkdir(parents=True, exist_ok=True)
    with _locked(cache.resolve() / ".venv.lock"):
        if python.exists() and stamp.exists() and stamp.read_text() == want:
            return python
        for argv in (["python3", "-m", "venv", "--clear", str(venv)],
                     [str(python), "-m", "pip", "install", "-q", *TESTSUITE_REQUIREMENTS]):
            proc = subprocess.run(argv, capture_output=True, text=True, timeout=600)
            if proc.returncode != 0:
                raise SchedmdError(f"{' '.join(argv[:4])} failed:\n"
                                   f"{(proc.stderr or proc.stdout).strip()[-2000:]}")
        stamp.write_text(want)
    return python
