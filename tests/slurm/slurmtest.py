"""Helpers for tests against a real local Slurm cluster (imported by conftest and tests)."""

from __future__ import annotations

import signal
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path

from slurm_marl.daemon.config import load_config
from slurm_marl.daemon.store import Store
from slurm_marl.slurm_integration.plugin import render_job_submit_lua
from slurm_marl.slurm_integration.runner import SlurmRunner
from slurm_marl.slurm_integration.sink import CliDecisionSink
from slurm_marl.slurm_integration.source import CliClusterSource
from slurm_marl.testcluster import ClusterSpec, LocalCluster, default_version
from slurm_marl.testcluster.versions import label


SLURM_MARL = [sys.executable, "-m", "slurm_marl.cli"]
# The Slurm these tests run: $SLURM_MARL_SLURM_VERSION (None: the host's 22.05), read once.
SLURM_VERSION = default_version()


def cluster_spec(**fields) -> ClusterSpec:
    """A ClusterSpec of the Slurm version under test."""
    return ClusterSpec(slurm_version=SLURM_VERSION, **fields)


@contextmanager
def gated_cluster(folder: Path, grace_s: int, **spec) -> Iterator["Cluster"]:
    """A local cluster behind the project's job_submit.lua gate (partition gpu managed,
    ``grace_s``), scheduling every 2 s; ``spec``: more ClusterSpec fields."""
    lua = folder / "job_submit.lua"
    lua.write_text(render_job_submit_lua(["gpu"], grace_s, [],
                                         slurm_version=label(SLURM_VERSION)))
    local = LocalCluster(spec=cluster_spec(job_submit_lua=str(lua), sched_interval_s=2,
                                           **spec)).up()
    try:
        yield Cluster(local)
    finally:
        local.down()


@contextmanager
def submitit_cluster(nodes: int, host_paths: tuple[str, ...]) -> Iterator[LocalCluster]:
    """A local cluster of ``nodes`` 8-CPU nodes whose jobs can run this host's interpreter
    (submitit's): a newer Slurm's jobs run in its chroot, which sees ``host_paths`` bound
    read-only at the same paths; where they cannot be bound, the test is skipped, saying
    why."""
    import pytest

    from slurm_marl.testcluster.chroot import chroot_path, host_path_target, outermost
    from slurm_marl.testcluster.errors import HarnessError

    spec = ClusterSpec(nodes=nodes, cores_per_socket=4)
    version = default_version()
    if version is not None:
        try:    # an interpreter under /usr (Debian's own) cannot be bound: the chroot's is there
            for path in outermost(host_paths):
                host_path_target(chroot_path(version), path)
        except HarnessError as exc:
            pytest.skip(f"Slurm {version}: submitit's job cannot run this interpreter: {exc}")
        spec = ClusterSpec(nodes=nodes, cores_per_socket=4, host_paths=host_paths)
    cluster = LocalCluster(spec=spec).up()
    try:
        yield cluster
    finally:
        cluster.down()


def fast_las(threshold_gpu_s: int) -> str:
    """A 2D-LAS profile with one tiny threshold, so a test sees demotion (and preemption)
    within seconds."""
    return f"""
name = "fast-las"
preemption = true
backfill = true
backfill_reserve = false
[order]
plugin = "tiresias_las"
thresholds_gpu_s = [{threshold_gpu_s}]
[place]
consolidate = 1.0
"""


def write_agent_config(cluster: "Cluster", folder: Path, profile_toml: str,
                       grace_s: int, profile_name: str = "profile") -> Path:
    """An agent config for tests: this cluster, a fast cycle, the given policy profile
    (written beside it), partition gpu managed and preemptible, its own store."""
    profile = folder / f"{profile_name}.toml"
    profile.write_text(profile_toml)
    path = folder / "config.toml"
    path.write_text(f"""
[slurm]
slurm_conf = "{cluster.local.slurm_conf}"
command_timeout_s = 15
write_retries = 0
[agent]
interval_s = 0.5
profile = "{profile}"
managed_partitions = ["gpu"]
preempt_partitions = ["gpu"]
grace_s = {grace_s}
state_dir = "{folder / 'state'}"
[metrics]
enabled = false
[log]
level = "DEBUG"
""")
    return path


def as_nobody(c: "Cluster", *args: str) -> subprocess.CompletedProcess:
    """A Slurm command run as the unprivileged user ``nobody`` (the gate treats root and
    the agent apart). Slurm 24.11+ now and then refuses a user's job update with EAGAIN
    ("Resource temporarily unavailable for job N", the update not applied): retried, as it
    asks, for up to 30 s (under load, as when CI runs two Slurm versions at once, 2.5 s of
    retries was not always enough, and 10 s once not for an array's update on 26.05)."""
    for _ in range(60):
        proc = subprocess.run(["runuser", "-u", "nobody", "--", *args], env=c.local.env,
                              capture_output=True, text=True, timeout=30)
        if "Resource temporarily unavailable" not in proc.stderr:
            break
        time.sleep(0.5)
    return proc


class Cluster:
    """A running LocalCluster plus the helpers tests need: sbatch, waiting, cleanup."""

    def __init__(self, local: LocalCluster) -> None:
        self.local = local
        # the chroot's clients for a newer Slurm (bin_dir None: the host's from PATH)
        self.runner = SlurmRunner(local.slurm_conf, timeout_s=20, bin_dir=local.bin_dir)
        self.source = CliClusterSource(self.runner)
        self.sink = CliDecisionSink(self.runner, retries=1, backoff_s=0.1)

    def run(self, *args: str, check: bool = True) -> subprocess.CompletedProcess:
        proc = subprocess.run(list(args), env=self.local.env, capture_output=True, text=True,
                              timeout=30)
        if check and proc.returncode != 0:
            raise AssertionError(f"{' '.join(args)} failed: {proc.stderr or proc.stdout}")
        return proc

    def sbatch(self, *opts: str, seconds: int = 600, gated: bool = True) -> int:
        """Submit ``sleep`` as plain sbatch; ``gated`` delays eligibility by 10 minutes the way
        the project's job_submit.lua does, so the job waits for a decision."""
        args = ["sbatch", "--parsable", f"--chdir={self.local.root}/out",
                f"--output={self.local.root}/out/%j.out"]
        if gated:
            args.append("--begin=now+600")
        proc = self.run(*args, *opts, "--wrap", f"sleep {seconds}")
        return int(proc.stdout.strip().split(";")[0])

    def job(self, job_id: int):
        return self.source.snapshot().job(job_id)

    def wait_for(self, check: Callable[[], object], timeout_s: float = 20.0,
                 what: str = "condition") -> object:
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            value = check()
            if value:
                return value
            time.sleep(0.2)
        raise AssertionError(f"timed out after {timeout_s} s waiting for {what}")

    def wait_state(self, job_id: int, state: str, timeout_s: float = 20.0):
        return self.wait_for(
            lambda: (j := self.job(job_id)) is not None and j.state.value == state and j,
            timeout_s, f"job {job_id} to be {state}")

    def reservation_active(self, name: str) -> bool:
        """Listed and ACTIVE (one ended while its job ran stays listed, INACTIVE, a while)."""
        out = self.run("scontrol", "show", "reservation", "-o", check=False).stdout
        return any(f"ReservationName={name} " in line and "State=ACTIVE" in line
                   for line in out.splitlines())

    def cancel_all(self) -> None:
        self.run("scancel", "--quiet", "--user", "root", check=False)
        for name in self.run("scontrol", "show", "reservation", "-o", check=False).stdout.split():
            if name.startswith("ReservationName="):
                self.run("scontrol", "delete", name, check=False)
        self.wait_for(lambda: not [j for j in self.source.snapshot().jobs
                                   if j.state.value in ("PENDING", "RUNNING", "COMPLETING")],
                      30, "all jobs to be gone")


class Daemon:
    def __init__(self, cfg: Path, env: dict, extra_env: dict | None = None,
                 wait: bool = True) -> None:
        self.log = cfg.parent / f"daemon-{time.monotonic_ns()}.log"
        self.store_path = load_config(cfg).store_path
        before = self.cycles()
        self.proc = subprocess.Popen([*SLURM_MARL, "run", "--config", str(cfg)],
                                     env={**env, **(extra_env or {})},
                                     stdout=self.log.open("w"), stderr=subprocess.STDOUT)
        if wait:  # until it has finished a cycle of its own
            deadline = time.monotonic() + 60
            try:
                while self.cycles() <= before:
                    assert self.proc.poll() is None and time.monotonic() < deadline, \
                        self.output()
                    time.sleep(0.1)
            except BaseException:   # never leave a daemon running behind a failed start
                self.proc.kill()
                self.proc.wait(timeout=30)
                raise

    def cycles(self) -> int:
        if not self.store_path.exists():
            return 0
        rows = Store(self.store_path).log.cycles(1)
        return rows[0]["cycle"] if rows else 0

    def stop(self, sig=signal.SIGTERM) -> int:
        """Signal the agent and wait for its exit. It first lets a running cycle (or the
        queue probe between cycles) finish, waiting for it up to four Slurm command
        timeouts and 10 s (daemon/loop.py: 70 s with the tests' 15 s): a cycle whose Slurm
        commands were slow under load took more than 30 s once (run.sh test-versions,
        26.05), and a stop during the full suite once took more than 60 s with nothing
        logged after the signal. So the wait is 90 s, past the agent's own bound."""
        if self.proc.poll() is None:
            self.proc.send_signal(sig)
        return self.proc.wait(timeout=90)

    def output(self) -> str:
        return self.log.read_text()

    def decisions(self, chars: int = 6000) -> str:
        """The log's end for a failure message: what the agent logged, wrote and decided,
        without its reads and its empty cycles (DEBUG lines with nothing written)."""
        def wanted(line: str) -> bool:
            if not line.startswith("DEBUG"):
                return True
            if "runner: scontrol " in line:
                return not line.split("runner: scontrol ", 1)[1].startswith("show")
            return " cycle " in line and " 0 decisions, 0 written" not in line
        return "\n".join(filter(wanted, self.output().splitlines()))[-chars:]


# The default profile the differential tests run the agent with.
DEFAULT_PROFILE = "las-consolidate"


def checks_alone(run_checks: Callable[["Cluster"], dict], **spec) -> dict:
    """A differential test's checks on a fresh cluster with Slurm alone (``spec``: more
    ClusterSpec fields)."""
    local = LocalCluster(spec=cluster_spec(**spec)).up()
    try:
        return run_checks(Cluster(local))
    finally:
        local.down()


@contextmanager
def checks_with_agent(run_checks: Callable[["Cluster"], dict], folder: Path, grace_s: int,
                      **spec) -> Iterator[tuple[dict, "Daemon"]]:
    """The same checks on a fresh cluster behind the gate with the agent running the default
    profile; yields (their outcome, the daemon), which is stopped after."""
    import slurm_marl

    profile = (Path(slurm_marl.__file__).parent / "policy" / "profiles"
               / f"{DEFAULT_PROFILE}.toml").read_text()
    with gated_cluster(folder, grace_s, **spec) as c:
        daemon = Daemon(write_agent_config(c, folder, profile, grace_s, DEFAULT_PROFILE),
                        c.local.env)
        try:
            yield run_checks(c), daemon
        finally:
            assert daemon.stop() == 0, daemon.output()
