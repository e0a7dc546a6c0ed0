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
import json
import os
import shutil
import signal
import subprocess
import sys
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path

from slurm_marl.testcluster.errors import HarnessError
from slurm_marl.testcluster.harness import LocalCluster
from slurm_marl.testcluster.schedmd_outcomes import (RUNS, Outcome, counts, differences,
                                                     read_junit, table)
from slurm_marl.testcluster.schedmd_source import (DEFAULT_CACHE, SchedmdError,
                                                   ensure_venv, fetch_testsuite)
from slurm_marl.testcluster.spec import ClusterSpec

# Fetching the testsuite (``schedmd_source``) and reading its outcomes
# (``schedmd_outcomes``) live in sibling modules; the names a site's comparison uses
# (``read_junit``, ``differences``; docs/operations.md) stay importable from here.
__all__ = ["DEFAULT_MODULES", "QUICK_MODULES", "RunSettings", "SchedmdError", "compare",
           "counts", "differences", "main", "read_junit", "run_once", "table"]

DEFAULT_OUT = Path("out/schedmd-tests")
# What a manual run of the testsuite covered first: the user commands, job arrays,
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
GRACE_S = 5
# Closer to a site's Slurm than the harness's defaults, so more of the testsuite runs:
# multifactor priority (sprio's tests), no OverTimeLimit (srun -t)
SITE_LIKE_CONF = ("PriorityType=priority/multifactor\nPriorityWeightAge=1000\n"
                  "PriorityWeightFairshare=10000\nOverTimeLimit=0")




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




def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m slurm_marl.testcluster.schedmd",
                                 description=__doc__.split("\n\n")[0])
    ap.add_argument("modules", nargs="*", help="test files or folders under testsuite/python "
                    "(default: sbatch, srun, salloc, scancel, squeue, "
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
