"""SchedMD's own regression tests (Slurm's ``testsuite/python``) on a local cluster, run
once with Slurm alone and once with the gate and the agent, compared test by test.

The testsuite comes from Debian's source package of the installed Slurm (``apt-get source
--download-only slurm-wlm=<version>`` with a private apt state, so the host's apt
configuration is left alone; the download is checked against Debian's signed Sources
index), unpacked once under ``.cache/schedmd-testsuite/<version>/``. It is GPL-2.0 code of
SchedMD's and is never copied into this repository. Its pytest runs from a virtualenv of its
own beside it: the 22.05 testsuite's conftest needs ``py.io``, which pytest >= 7.2 dropped.

Each run gets a fresh cluster of the same shape (GPUs as the harness makes them, typed per
socket), written into the testsuite's ``testsuite.conf`` (``SlurmInstallDir``,
``SlurmConfigDir``, ...; atf reads ``SlurmUser`` from slurm.conf). The testsuite runs in its
local-config mode: tests that would change Slurm's configuration or restart daemons
(``atf.require_auto_config``), or need a configuration the cluster does not have, skip.
Run "slurm" is Slurm alone; run "agent" has the gate (``slurm-marl install-plugin``'s
job_submit.lua, ``JobSubmitPlugins=lua``) and ``slurm-marl run`` (active, not shadow)
against its cluster for the whole run. Outcomes are read from pytest's JUnit XML.

``python -m slurm_marl.testcluster.schedmd`` (``bash run.sh schedmd-tests``) exits 0 when
every test ends the same way in both runs, 1 when one does not, 2 when it could not run.

This module starts the agent and writes the gate only through the ``slurm-marl`` command
line (subprocesses), as a site does: ``testcluster`` imports neither the daemon nor the
Slurm layer (they import ``testcluster.versions``; the import rules forbid the cycle).
"""

from __future__ import annotations

import argparse
import contextlib
import fcntl
import json
import os
import shutil
import signal
import subprocess
import sys
import tarfile
import time
import xml.etree.ElementTree as ET
from dataclasses import asdict, dataclass, field
from pathlib import Path

from slurm_marl.testcluster.errors import HarnessError
from slurm_marl.testcluster.harness import LocalCluster
from slurm_marl.testcluster.spec import ClusterSpec

SOURCE_PACKAGE_OF = "slurmctld"          # its source package is the Slurm under test
DEFAULT_CACHE = Path(".cache/schedmd-testsuite")
DEFAULT_OUT = Path("out/schedmd-tests")
# The testsuite's Python side, pinned: pytest of the 22.05 era (its conftest imports py.io)
TESTSUITE_REQUIREMENTS = ("pytest==7.1.3", "py==1.11.0", "pexpect==4.8.0",
                          "ptyprocess==0.7.0", "attrs==23.2.0", "pluggy==1.5.0",
                          "iniconfig==2.0.0", "packaging==24.0", "tomli==2.0.1")
# What the manual run covered (issue 30): the user commands, job arrays,
# reservations, GRES. Paths relative to testsuite/python.
DEFAULT_MODULES = (
    "tests/commands/sbatch", "tests/commands/srun", "tests/commands/salloc",
    "tests/commands/scancel", "tests/commands/squeue", "tests/commands/scontrol",
    "tests/commands/sinfo", "tests/commands/sprio", "tests/commands/sacct",
    "tests/features/job_arrays", "tests/features/reservations", "tests/features/gres",
)
# A few seconds of tests that submit, list, update and cancel real jobs (the CI check)
QUICK_MODULES = (
    "tests/commands/sbatch", "tests/commands/scancel", "tests/commands/squeue",
    "tests/commands/scontrol", "tests/features/job_arrays",
    "tests/commands/srun/test_--job-name.py", "tests/commands/srun/test_exit_code_reporting.py",
    "tests/commands/srun/test_--mem--mincpus--tmp.py",
)
RUNS = ("slurm", "agent")
GRACE_S = 5
# Closer to a site's Slurm than the harness's defaults, so more of the testsuite runs:
# multifactor priority (sprio's tests), no OverTimeLimit (srun -t)
SITE_LIKE_CONF = ("PriorityType=priority/multifactor\nPriorityWeightAge=1000\n"
                  "PriorityWeightFairshare=10000\nOverTimeLimit=0")


class SchedmdError(HarnessError):
    """The testsuite could not be fetched, set up or run (not a test outcome)."""


# ---- the testsuite's source ---------------------------------------------------------------

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


# ---- outcomes -------------------------------------------------------------------------------

@dataclass(frozen=True)
class Outcome:
    outcome: str          # passed | failed | error | skipped
    message: str = ""     # the skip reason, or the failure's first line


def read_junit(path: Path) -> dict[str, Outcome]:
    """Per test (``tests/x/test_y.py::test_z``-like id from the JUnit classname) its outcome;
    an error in setup or teardown counts over a pass, a failure over both."""
    rank = {"passed": 0, "skipped": 1, "error": 2, "failed": 3}
    tags = {"failure": "failed", "error": "error", "skipped": "skipped"}
    found: dict[str, Outcome] = {}
    for case in ET.parse(path).getroot().iter("testcase"):
        test_id = f"{case.get('classname')}::{case.get('name')}"
        result = Outcome("passed")
        for child in case:
            if child.tag in tags:
                msg = (child.get("message") or child.text or "").strip().splitlines()
                cand = Outcome(tags[child.tag], msg[0][:300] if msg else "")
                if rank[cand.outcome] > rank[result.outcome]:
                    result = cand
        old = found.get(test_id)
        if old is None or rank[result.outcome] > rank[old.outcome]:
            found[test_id] = result
    return found


def counts(outcomes: dict[str, Outcome]) -> dict[str, int]:
    out = {k: 0 for k in ("passed", "failed", "error", "skipped")}
    for o in outcomes.values():
        out[o.outcome] += 1
    return out


def differences(a: dict[str, Outcome], b: dict[str, Outcome]) -> list[dict]:
    """Tests whose outcome (passed / failed / error / skipped) differs, or that ran in only
    one run. Skip reasons and failure messages may differ (job ids, times)."""
    diffs = []
    for test in sorted(set(a) | set(b)):
        oa, ob = a.get(test), b.get(test)
        if oa is None or ob is None or oa.outcome != ob.outcome:
            diffs.append({"test": test,
                          RUNS[0]: asdict(oa) if oa else None,
                          RUNS[1]: asdict(ob) if ob else None})
    return diffs


# ---- one run --------------------------------------------------------------------------------

@dataclass
class RunSettings:
    modules: tuple[str, ...] = DEFAULT_MODULES
    nodes: int = 4
    accounting: bool = True
    site_like: bool = True
    timeout_s: float = 1800.0
    cache: Path = DEFAULT_CACHE
    out: Path = DEFAULT_OUT
    extra_pytest: tuple[str, ...] = field(default_factory=tuple)


def _cli(*args: str) -> list[str]:
    return [sys.executable, "-m", "slurm_marl.cli", *args]


def write_agent_config(folder: Path, slurm_conf: Path, grace_s: int = GRACE_S) -> Path:
    """The agent's config for the test cluster: the shipped default profile, partition gpu
    managed and preemptible (the strictest setting), a fast cycle, its own store."""
    path = folder / "agent.toml"
    path.write_text(f"""
[slurm]
slurm_conf = "{slurm_conf}"
command_timeout_s = 15
[agent]
interval_s = 1
managed_partitions = ["gpu"]
preempt_partitions = ["gpu"]
grace_s = {grace_s}
state_dir = "{folder / 'agent-state'}"
[metrics]
enabled = false
""")
    return path


def render_gate(folder: Path, config: Path) -> Path:
    """job_submit.lua as ``slurm-marl install-plugin`` writes it for this config."""
    version = subprocess.run(["scontrol", "--version"], capture_output=True, text=True,
                             timeout=30).stdout.split()
    proc = subprocess.run(_cli("install-plugin", "--config", str(config), "--print",
                               "--slurm-version", version[-1] if version else "22.05"),
                          capture_output=True, text=True, timeout=120)
    if proc.returncode != 0:
        raise SchedmdError(f"slurm-marl install-plugin failed: {proc.stderr or proc.stdout}")
    lua = folder / "job_submit.lua"
    lua.write_text(proc.stdout)
    return lua


class Agent:
    """``slurm-marl run`` (active) in the background, until ``stop``."""

    def __init__(self, config: Path, env: dict[str, str], log: Path) -> None:
        self.config, self.env, self.log = config, env, log
        self.proc = subprocess.Popen(_cli("run", "--config", str(config)), env=env,
                                     stdout=log.open("w"), stderr=subprocess.STDOUT)
        deadline = time.monotonic() + 90
        while self.cycles() < 1:
            if self.proc.poll() is not None or time.monotonic() > deadline:
                self.stop()
                raise SchedmdError(f"the agent did not complete a cycle:\n{self.output()}")
            time.sleep(0.5)

    def cycles(self) -> int:
        proc = subprocess.run(_cli("status", "--config", str(self.config), "--json"),
                              env=self.env, capture_output=True, text=True, timeout=60)
        if proc.returncode != 0:
            return 0
        try:
            last = json.loads(proc.stdout).get("last_cycle")
        except json.JSONDecodeError:
            return 0
        return int(last["cycle"]) if last else 0

    def stop(self) -> int | None:
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                return self.proc.wait(timeout=30)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                return self.proc.wait(timeout=30)
        return self.proc.returncode

    def output(self, lines: int = 40) -> str:
        text = self.log.read_text(errors="replace").splitlines() if self.log.exists() else []
        return "\n".join(text[-lines:])


def write_testsuite_conf(path: Path, source_root: Path, local: LocalCluster) -> Path:
    """atf's testsuite.conf for this cluster (atf also takes SLURM_CONF and PATH)."""
    path.write_text(f"SlurmSourceDir={source_root}\nSlurmBuildDir={source_root}\n"
                    f"SlurmInstallDir=/usr\nSlurmConfigDir={local.slurm_conf.parent}\n")
    return path


def run_once(name: str, settings: RunSettings, python: Path, testsuite: Path) -> dict:
    """One run on a fresh cluster: ``name`` "slurm" (Slurm alone) or "agent" (gate +
    agent). Returns its record: outcomes per test, counts, timings, the agent's fate."""
    folder = (settings.out / name).resolve()
    shutil.rmtree(folder, ignore_errors=True)
    folder.mkdir(parents=True)
    with_agent = name == "agent"
    lua = config = None
    if with_agent:   # the gate needs a slurm.conf path only at run time: a placeholder now
        config = write_agent_config(folder, folder / "slurm.conf.placeholder")
        lua = render_gate(folder, config)
    extra = SITE_LIKE_CONF if settings.site_like else ""
    spec = ClusterSpec(nodes=settings.nodes, sockets=2, cores_per_socket=4, gpus_per_socket=2,
                       accounting=settings.accounting, extra_slurm_conf=extra,
                       job_submit_lua=str(lua) if lua else None)
    record: dict = {"run": name, "gate": with_agent, "agent": with_agent}
    started = time.monotonic()
    local = LocalCluster(spec=spec).up()
    agent = None
    try:
        record["cluster_root"] = str(local.root)
        env = dict(local.env)
        for var in ("PYTHONPATH", "VIRTUAL_ENV", "PYTEST_ADDOPTS", "PYTEST_XDIST_WORKER"):
            env.pop(var, None)
        if with_agent:
            assert config is not None
            config = write_agent_config(folder, local.slurm_conf)
            agent = Agent(config, local.env, folder / "agent.log")
        conf = write_testsuite_conf(folder / "testsuite.conf", testsuite.parents[1], local)
        env["SLURM_TESTSUITE_CONF"] = str(conf)
        junit = folder / "junit.xml"
        argv = [str(python), "-m", "pytest", "-p", "no:cacheprovider", "-q", "-rfEs",
                f"--junitxml={junit}", f"--basetemp={folder / 'tmp'}",
                *settings.extra_pytest, *settings.modules]
        t0 = time.monotonic()
        with (folder / "pytest.log").open("w") as log:
            proc = subprocess.Popen(argv, cwd=testsuite, env=env, stdout=log,
                                    stderr=subprocess.STDOUT, start_new_session=True)
            try:
                rc = proc.wait(timeout=settings.timeout_s)
            except subprocess.TimeoutExpired:
                os.killpg(proc.pid, signal.SIGKILL)
                proc.wait()
                raise SchedmdError(f"run {name}: the testsuite ran past "
                                   f"{settings.timeout_s:.0f} s (log: {log.name})") from None
        record["pytest_s"] = round(time.monotonic() - t0, 1)
        record["pytest_rc"] = rc
        if rc not in (0, 1) or not junit.exists():   # 0 all passed, 1 some failed
            tail = (folder / "pytest.log").read_text(errors="replace")[-3000:]
            raise SchedmdError(f"run {name}: pytest exited {rc} (no usable result):\n{tail}")
        if agent is not None:
            alive = agent.proc.poll() is None
            record["agent_cycles"] = agent.cycles()
            record["agent_alive_at_end"] = alive
            if not alive:
                raise SchedmdError(f"the agent died during the run, so the comparison says "
                                   f"nothing:\n{agent.output()}")
    finally:
        if agent is not None:
            agent.stop()
        _keep_logs(local, folder, record)
        local.down()
    outcomes = read_junit(junit)
    record["wall_s"] = round(time.monotonic() - started, 1)
    record["counts"] = counts(outcomes)
    record["outcomes"] = {t: asdict(o) for t, o in sorted(outcomes.items())}
    return record


def _keep_logs(local: LocalCluster, folder: Path, record: dict) -> None:
    """The cluster's slurmctld log beside the run's results (the cluster folder goes);
    whether the gate was loaded and how many GPU submissions it logged as left to Slurm."""
    assert local.root is not None
    log = local.root / "log" / "slurmctld.log"
    if not log.exists():
        return
    shutil.copy(log, folder / "slurmctld.log")
    text = log.read_text(errors="replace")
    record["gate_left_to_slurm"] = text.count("slurm-marl: job '")
    record["gate_loaded"] = "slurm-marl job_submit.lua loaded" in text


def compare(settings: RunSettings) -> dict:
    """Both runs and their comparison; also written to <out>/schedmd-tests.json and
    <out>/schedmd-tests.txt (the table)."""
    testsuite = fetch_testsuite(settings.cache)
    python = ensure_venv(settings.cache)
    source = json.loads((testsuite.parents[1] / "source.json").read_text())
    runs = {name: run_once(name, settings, python, testsuite) for name in RUNS}
    outcomes = {name: {t: Outcome(**o) for t, o in runs[name]["outcomes"].items()}
                for name in RUNS}
    diffs = differences(outcomes[RUNS[0]], outcomes[RUNS[1]])
    passed_both = sum(1 for t, o in outcomes[RUNS[0]].items()
                      if o.outcome == "passed" and outcomes[RUNS[1]].get(t, o).outcome == "passed"
                      and t in outcomes[RUNS[1]])
    result = {"source": source, "testsuite": str(testsuite), "modules": list(settings.modules),
              "cluster": {"nodes": settings.nodes, "gpus_per_node": 4,
                          "accounting": settings.accounting, "site_like": settings.site_like},
              "counts": {n: runs[n]["counts"] for n in RUNS},
              "passed_in_both": passed_both, "same_per_test": not diffs,
              "differences": diffs, "runs": runs}
    settings.out.mkdir(parents=True, exist_ok=True)
    (settings.out / "schedmd-tests.json").write_text(json.dumps(result, indent=2))
    (settings.out / "schedmd-tests.txt").write_text(table(result))
    return result


def table(result: dict) -> str:
    src = result["source"]
    lines = [f"SchedMD testsuite/python of {src['package']} {src['version']} "
             f"({src['upstream_tree']}), {len(result['modules'])} module paths",
             f"{'run':<8}{'passed':>8}{'failed':>8}{'error':>7}{'skipped':>9}"]
    for name in RUNS:
        c = result["counts"][name]
        lines.append(f"{name:<8}{c['passed']:>8}{c['failed']:>8}{c['error']:>7}"
                     f"{c['skipped']:>9}")
    lines.append(f"passed in both runs: {result['passed_in_both']}; same outcome per test: "
                 f"{'yes' if result['same_per_test'] else 'NO'}")
    for d in result["differences"]:
        a, b = d[RUNS[0]], d[RUNS[1]]
        lines.append(f"  DIFFERS {d['test']}: slurm={a['outcome'] if a else 'absent'} "
                     f"agent={b['outcome'] if b else 'absent'} "
                     f"({(b or a or {}).get('message', '')[:120]})")
    bad = {t: o for t, o in result["runs"][RUNS[0]]["outcomes"].items()
           if o["outcome"] in ("failed", "error")}
    if bad:
        lines.append("failed with Slurm alone too:")
        lines += [f"  {t}: {o['message'][:140]}" for t, o in bad.items()]
    reasons: dict[str, int] = {}
    for o in result["runs"][RUNS[0]]["outcomes"].values():
        if o["outcome"] == "skipped":
            reasons[o["message"]] = reasons.get(o["message"], 0) + 1
    if reasons:
        lines.append("skipped (Slurm alone), by reason:")
        lines += [f"  {n:>3} {r[:140]}" for r, n in sorted(reasons.items(), key=lambda x: -x[1])]
    return "\n".join(lines) + "\n"


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m slurm_marl.testcluster.schedmd",
                                 description=__doc__.split("\n\n")[0])
    ap.add_argument("modules", nargs="*", help="test files or folders under testsuite/python "
                    "(default: the issue-30 list: sbatch, srun, salloc, scancel, squeue, "
                    "scontrol, sinfo, sprio, sacct, job arrays, reservations, gres)")
    ap.add_argument("--quick", action="store_true", help="a few fast modules (the CI check)")
    ap.add_argument("--nodes", type=int, default=4)
    ap.add_argument("--no-accounting", dest="accounting", action="store_false",
                    help="no slurmdbd/MariaDB (sacct and sprio tests then skip)")
    ap.add_argument("--harness-conf", dest="site_like", action="store_false",
                    help="the harness's slurm.conf as is (priority/basic)")
    ap.add_argument("--out", type=Path, default=DEFAULT_OUT)
    ap.add_argument("--cache", type=Path, default=DEFAULT_CACHE)
    ap.add_argument("--timeout", type=float, default=1800.0, help="seconds per run")
    ap.add_argument("--fetch-only", action="store_true",
                    help="fetch the testsuite and its virtualenv, run nothing")
    args = ap.parse_args(argv)
    if os.environ.get("SLURM_MARL_SLURM_VERSION", "").strip() not in ("", "22.05", "host"):
        print("error: the SchedMD testsuite runs on the host's Slurm only (its source "
              "package); unset SLURM_MARL_SLURM_VERSION", file=sys.stderr)
        return 2
    modules = tuple(args.modules) or (QUICK_MODULES if args.quick else DEFAULT_MODULES)
    settings = RunSettings(modules=modules, nodes=args.nodes, accounting=args.accounting,
                           site_like=args.site_like, timeout_s=args.timeout,
                           cache=args.cache, out=args.out)
    try:
        if args.fetch_only:
            print(fetch_testsuite(args.cache), ensure_venv(args.cache))
            return 0
        result = compare(settings)
    except HarnessError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    sys.stdout.write(table(result))
    print(f"per-test outcomes: {settings.out / 'schedmd-tests.json'}")
    return 0 if result["same_per_test"] else 1


if __name__ == "__main__":
    sys.exit(main())
