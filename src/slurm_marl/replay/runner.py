"""Replaying a plan on a fresh local Slurm cluster, with or without the agent.

Mode ``slurm``: Slurm alone (its backfill, cons_tres, topology/tree). Mode ``agent``: the
project's job_submit.lua gate plus the daemon (`slurm-marl run`, its own process) with a
chosen profile. In both, the interference oracle runs and every job's payload advances at the
speed the performance model gives for where Slurm actually put it.
"""

from __future__ import annotations

import json
import logging
import os
import shlex
import shutil
import signal
import subprocess
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

from slurm_marl.replay import payload as payload_module
from slurm_marl.replay.oracle import Oracle
from slurm_marl.replay.plan import ReplayJob, ReplayPlan
from slurm_marl.replay.timescale import time_scaled_profile
from slurm_marl.sim.perf import PerfParams
from slurm_marl.slurm_integration.clients import submit_batch
from slurm_marl.slurm_integration.plugin import render_job_submit_lua
from slurm_marl.slurm_integration.runner import SlurmError, SlurmRunner
from slurm_marl.slurm_integration.source import CliClusterSource
from slurm_marl.testcluster import ClusterSpec, LocalCluster
from slurm_marl.testcluster.versions import label

log = logging.getLogger(__name__)
PAYLOAD = "payload.py"  # the payload script's name in the folder jobs share with the replay


class ReplayError(RuntimeError):
    """The replay could not run to the end (submission failed, jobs lost, time out)."""


@dataclass
class JobTimes:
    """One replayed job. Times are wall seconds after the replay's start (result.json keeps
    them so); ``ReplayResult`` turns them into trace seconds (x speedup)."""

    index: int                 # in the plan
    job_id: int                # Slurm's: a fresh cluster numbers from 1 again, every run
    arrival_s: float           # planned, relative to replay start
    submit_s: float            # actual, relative to replay start
    start_s: float | None = None
    end_s: float | None = None
    restarts: int = 0
    nodes: str = ""
    trace_job_id: int | None = None   # the trace's: the same job in every run of a plan


@dataclass
class ReplayResult:
    mode: str
    profile: str
    speedup: float
    jobs: list[JobTimes] = field(default_factory=list)
    wall_s: float = 0.0
    oracle_mean_speed: float = 1.0
    speed_samples: int = 0     # observed-speed samples the agent stored (agent mode)

    def completed(self) -> list[JobTimes]:
        return [j for j in self.jobs if j.end_s is not None]

    def jct_trace_s(self) -> list[float]:
        """Job completion times in trace seconds (wall x speedup), from planned arrival."""
        return [(j.end_s - j.arrival_s) * self.speedup for j in self.completed()]

    def summary(self) -> dict:
        from slurm_marl.sim.metrics import percentile

        jct = self.jct_trace_s()
        waits = [(j.start_s - j.arrival_s) * self.speedup for j in self.completed()
                 if j.start_s is not None]
        late = [j.submit_s - j.arrival_s for j in self.jobs]
        ends = [j.end_s for j in self.completed()]
        return {
            "mode": self.mode, "profile": self.profile, "jobs": len(self.jobs),
            "completed": len(jct),
            "avg_jct_s": sum(jct) / len(jct) if jct else None,
            "median_jct_s": percentile(jct, 50) if jct else None,
            "p95_jct_s": percentile(jct, 95) if jct else None,
            "avg_queue_s": sum(waits) / len(waits) if waits else None,
            "makespan_s": max(ends) * self.speedup if ends else None,
            "preemptions": sum(j.restarts for j in self.jobs),
            "submit_late_avg_s": sum(late) / len(late) if late else None,
            "submit_late_max_s": max(late) if late else None,
            "oracle_mean_speed": self.oracle_mean_speed,
            "speed_samples": self.speed_samples,
            "wall_s": self.wall_s,
        }


def _job_side(cluster: LocalCluster, out: Path) -> tuple[Path, str]:
    """The folder job payloads share with this process (their logs and progress out, the
    oracle's speeds in) and the interpreter that runs the payload script copied there.

    On the host's Slurm: the results folder and this process's Python. A chroot's job scripts
    run inside it, where only /tmp is the host's and python3-minimal is the interpreter: a
    folder in the cluster's own (under /tmp), copied into the results before teardown. The
    payload is standard-library Python, so either interpreter runs it as a script."""
    if cluster.chroot is None:
        xdir, python = out, sys.executable
    else:
        from slurm_marl.testcluster.chroot import PYTHON

        xdir, python = cluster.root / "replay", PYTHON
    for sub in ("jobs", "progress", "speed"):
        (xdir / sub).mkdir(parents=True, exist_ok=True)
    shutil.copyfile(Path(payload_module.__file__), xdir / PAYLOAD)
    return xdir, python


def _save_history(cluster: LocalCluster, job_ids: set[int], t0: float, path: Path,
                  wait_s: float = 60.0) -> None:
    """The replay's jobs as ``sacct`` knows them, written as a history CSV. slurmctld
    reports a job's end to slurmdbd a moment after it ends: read until every job of the
    replay is there as ended (at most ``wait_s``)."""
    from slurm_marl.history.fetch import DAY_S, fetch, sacct_runner
    from slurm_marl.history.records import write_history

    runner = sacct_runner(cluster.slurm_conf, bin_dir=cluster.bin_dir)
    deadline = time.monotonic() + wait_s
    while True:
        found = fetch(runner, t0 - 3600, time.time() + 3600, slice_s=DAY_S)
        ended = {j.job_id for j in found.jobs if j.end_s is not None}
        missing = sorted(j for j in job_ids if str(j) not in ended)
        if not missing:
            break
        if time.monotonic() > deadline:
            raise ReplayError(f"sacct still lacks the end of {len(missing)} of the replay's "
                              f"{len(job_ids)} jobs after {wait_s:.0f} s (first: "
                              f"{missing[0]}); slurmdbd log: {cluster.root}/log")
        time.sleep(1.0)
    path.parent.mkdir(parents=True, exist_ok=True)
    write_history(path, [j for j in found.jobs if j.job_id.isdigit()
                         and int(j.job_id) in job_ids])
    log.info("history of %d jobs from sacct written to %s (%s)", len(job_ids), path,
             found.summary())


def _agent_config(cluster: LocalCluster, out: Path, xdir: Path, profile: str, grace_s: int,
                  preempt: bool, sample_min_s: float, gpu_time_model: Path | None = None,
                  history: Path | None = None, prediction_gate: bool = True,
                  guard: bool = True) -> Path:
    cfg = out / "agent.toml"
    preempt_line = f'preempt_partitions = ["{cluster.spec.partition}"]' if preempt else ""
    predictor_lines = "\n".join(
        f'{key} = "{Path(value).resolve()}"'
        for key, value in (("gpu_time_model", gpu_time_model), ("history", history))
        if value is not None) + ("" if prediction_gate else "\nprediction_gate = false") \
        + ("" if guard else "\nguard = false")
    cfg.write_text(f"""
[slurm]
slurm_conf = "{cluster.slurm_conf}"
command_timeout_s = 20
write_retries = 1
[agent]
interval_s = 0.5
profile = "{profile}"
managed_partitions = ["{cluster.spec.partition}"]
{preempt_line}
grace_s = {grace_s}
state_dir = "{out / 'state'}"
progress_dir = "{xdir / 'progress'}"
sample_min_s = {sample_min_s}
{predictor_lines}
[metrics]
enabled = false
[log]
level = "INFO"
""")
    return cfg


def _read_job_logs(directory: Path, times: dict[int, JobTimes], t0: float) -> None:
    for jt in times.values():
        path = directory / "jobs" / f"{jt.job_id}.log"
        if not path.exists():
            continue
        starts = 0
        for line in path.read_text().splitlines():
            parts = line.split()
            if parts[:1] == ["start"]:
                starts += 1
                if jt.start_s is None:
                    jt.start_s = float(parts[1]) - t0
                if len(parts) > 3:
                    jt.nodes = parts[3]
            elif parts[:1] == ["end"]:
                jt.end_s = float(parts[1]) - t0
        jt.restarts = max(0, starts - 1)


def run_replay(plan: ReplayPlan, spec: ClusterSpec, mode: str, out: Path, *,
               profile: str = "las-consolidate", interference: str = "medium",
               grace_s: int = 2, preempt: bool = True, timeout_s: float = 1800.0,
               interference_model: Path | None = None, sample_min_s: float = 3.0,
               progress: Callable[[str, int, int], None] | None = None,
               history_out: Path | None = None,
               gpu_time_model: Path | None = None, history: Path | None = None,
               prediction_gate: bool = True, guard: bool = True) -> ReplayResult:
    """Replay ``plan`` on a fresh cluster of ``spec`` in ``mode`` and collect every job's
    times. ``history_out``: the cluster also runs slurmdbd, and the replay's jobs as
    ``sacct`` reports them once all ended are written there (a history CSV, as
    ``slurm-marl history import`` writes). ``gpu_time_model`` / ``history``: the agent's
    GPU-time predictor and the history it continues from (``agent.gpu_time_model``,
    ``agent.history``), for profiles whose order reads predictions; ``prediction_gate``:
    ``agent.prediction_gate`` (false: every prediction is used); ``guard``:
    ``agent.guard`` (the default Slurm-alone guard where the profile has none; false: the
    profile as written)."""
    if mode not in ("slurm", "agent"):
        raise ValueError("mode is 'slurm' or 'agent'")
    out = _fresh_out(out)
    spec = _replay_spec(spec, mode, out, grace_s, history_out)
    result = ReplayResult(mode=mode, profile=profile if mode == "agent" else "slurm",
                          speedup=plan.speedup)
    cluster = LocalCluster(spec=spec).up()
    os.chmod(cluster.root / "out", 0o777)
    daemon = None
    oracle = None
    xdir = out
    try:
        xdir, python = _job_side(cluster, out)
        runner = SlurmRunner(cluster.slurm_conf, bin_dir=cluster.bin_dir)
        # sbatch hands its environment to the job: keep the cluster's PATH there (a chroot's
        # client wrappers first)
        submitter = SlurmRunner(cluster.slurm_conf, bin_dir=cluster.bin_dir,
                                extra_env={"PATH": cluster.env["PATH"]})
        oracle = Oracle(CliClusterSource(runner), xdir, PerfParams(strength=interference),
                        tick_s=0.25).start()
        if mode == "agent":
            daemon = _start_agent(cluster, out, xdir, plan, profile, interference_model,
                                  grace_s, preempt, sample_min_s, gpu_time_model, history,
                                  prediction_gate, guard)
        t0 = time.time()
        times = _submit_plan(plan, submitter, cluster.root / "out", python, xdir, t0,
                             progress)
        _wait_all_ended(xdir, times, t0, timeout_s, daemon, out, progress)
        result.jobs = sorted(times.values(), key=lambda t: t.index)
        result.wall_s = time.time() - t0
        if history_out is not None:
            if progress:
                progress("reading sacct", 0, 1)
            _save_history(cluster, set(times), t0, Path(history_out))
            if progress:
                progress("history read from sacct", 1, 1)
        if oracle.speed_n:
            result.oracle_mean_speed = oracle.speed_sum / oracle.speed_n
    finally:
        _tear_down(oracle, daemon, xdir, out, cluster)
    if mode == "agent" and (out / "state" / "state.sqlite").exists():
        result.speed_samples = _speed_samples(out / "state" / "state.sqlite")
    (out / "result.json").write_text(json.dumps(
        {"summary": result.summary(), "jobs": [t.__dict__ for t in result.jobs]}, indent=2))
    return result


def _fresh_out(out: Path) -> Path:
    """The replay's folder, absolute (job payloads run in another working directory) and
    without an earlier run's job logs, progress, speed samples and store: a fresh cluster
    numbers jobs from 1 again, so they would be read as this run's."""
    out = Path(out).resolve()
    out.mkdir(parents=True, exist_ok=True)
    for sub in ("jobs", "progress", "speed", "state"):
        shutil.rmtree(out / sub, ignore_errors=True)
    return out


def _replay_spec(spec: ClusterSpec, mode: str, out: Path, grace_s: int,
                 history_out: Path | None) -> ClusterSpec:
    """``spec`` as this replay runs it: in mode ``agent`` with the project's job_submit.lua
    (written to ``out``), and with accounting where the history is to be read back."""
    lua = None
    if mode == "agent":
        lua = out / "job_submit.lua"
        lua.write_text(render_job_submit_lua(
            [spec.partition], grace_s, [],
            slurm_version=label(spec.slurm_version)))
    return ClusterSpec(**{**spec.__dict__, "job_submit_lua": str(lua) if lua else None,
                          "accounting": spec.accounting or history_out is not None})


def _start_agent(cluster: LocalCluster, out: Path, xdir: Path, plan: ReplayPlan,
                 profile: str, interference_model: Path | None, grace_s: int,
                 preempt: bool, sample_min_s: float, gpu_time_model: Path | None,
                 history: Path | None, prediction_gate: bool,
                 guard: bool) -> subprocess.Popen:
    """The daemon (`slurm-marl run`) in its own process with the profile scaled to the
    plan's speedup, once it has finished its first cycle (so the first submissions meet a
    running agent)."""
    extra = ({"least_interference": {"model_path": str(Path(interference_model)
                                                        .resolve())}}
             if interference_model else None)
    scaled = time_scaled_profile(profile, plan.speedup, out, extra, guard=guard)
    cfg = _agent_config(cluster, out, xdir, str(scaled), grace_s, preempt,
                        sample_min_s, gpu_time_model, history, prediction_gate,
                        guard)
    daemon = subprocess.Popen([sys.executable, "-m", "slurm_marl.cli", "run",
                               "--config", str(cfg)], env=cluster.env,
                              stdout=(out / "daemon.log").open("w"),
                              stderr=subprocess.STDOUT)
    _wait_first_cycle(out / "state" / "state.sqlite", daemon)
    return daemon


def _submit_plan(plan: ReplayPlan, submitter: SlurmRunner, chdir: Path, python: str,
                 xdir: Path, t0: float,
                 progress: Callable[[str, int, int], None] | None) -> dict[int, JobTimes]:
    """Every job of the plan submitted at its arrival (wall seconds after ``t0``), running
    the payload; the jobs' times so far, by Slurm job id."""
    restart_delay = 30.0 / plan.speedup
    times: dict[int, JobTimes] = {}
    for k, job in enumerate(plan.jobs):
        delay = t0 + job.arrival_s - time.time()
        if delay > 0:
            time.sleep(delay)
        jid = _submit(submitter, job, chdir,
                      f"exec {shlex.quote(python)} {shlex.quote(str(xdir / PAYLOAD))} "
                      f"--work {job.work_s:.4f} --dir {shlex.quote(str(xdir))} "
                      f"--restart-delay {restart_delay:.4f} --tick 0.2")
        times[jid] = JobTimes(job.index, jid, job.arrival_s, time.time() - t0,
                              trace_job_id=job.trace_job_id)
        if progress:
            progress("submitted", k + 1, len(plan.jobs))
    return times


def _wait_all_ended(xdir: Path, times: dict[int, JobTimes], t0: float, timeout_s: float,
                    daemon: subprocess.Popen | None, out: Path,
                    progress: Callable[[str, int, int], None] | None) -> None:
    """Read the payloads' logs into ``times`` until every job has ended; a ReplayError
    when ``timeout_s`` passes first or the agent exits."""
    deadline = time.monotonic() + timeout_s
    while True:
        _read_job_logs(xdir, times, t0)
        done = sum(1 for t in times.values() if t.end_s is not None)
        if progress:
            progress("completed", done, len(times))
        if done == len(times):
            return
        if time.monotonic() > deadline:
            raise ReplayError(f"{len(times) - done} of {len(times)} jobs not done after "
                              f"{timeout_s:.0f} s")
        if daemon is not None and daemon.poll() is not None:
            raise ReplayError(f"the agent exited ({daemon.returncode}); see "
                              f"{out / 'daemon.log'}")
        time.sleep(0.5)


def _tear_down(oracle: Oracle | None, daemon: subprocess.Popen | None, xdir: Path,
               out: Path, cluster: LocalCluster) -> None:
    """The oracle and the agent stopped, a chroot's exchange folder copied out (it goes
    with the cluster) and the cluster taken down, whether the replay ended or failed."""
    if oracle is not None:
        oracle.stop()
    if daemon is not None and daemon.poll() is None:
        daemon.send_signal(signal.SIGTERM)
        try:
            daemon.wait(timeout=30)
        except subprocess.TimeoutExpired:
            daemon.kill()
    if xdir != out:  # the chroot's exchange folder goes with the cluster: keep its files
        for sub in ("jobs", "progress", "speed"):
            if (xdir / sub).is_dir():
                shutil.copytree(xdir / sub, out / sub, dirs_exist_ok=True)
    cluster.down()


def _speed_samples(store_path: Path) -> int:
    """How many speed samples the agent's store kept."""
    from slurm_marl.daemon.store import Store
    store = Store(store_path)
    count = len(store.samples.all())
    store.close()
    return count


def _submit(runner: SlurmRunner, job: ReplayJob, chdir: Path, script: str) -> int:
    """Submit one job of the plan (requeued when preempted, its own output discarded: the
    payload logs to the shared folder); its Slurm job id. A ReplayError with sbatch's
    words when it is refused or cannot run."""
    try:
        return submit_batch(runner, [f"--chdir={chdir}", "--output=/dev/null", "--requeue",
                                     *job.sbatch_args()], script, timeout_s=60)
    except SlurmError as exc:
        raise ReplayError(f"sbatch of {job.name} failed: {exc.message}") from None


def _wait_first_cycle(store_path: Path, daemon: subprocess.Popen, timeout_s: float = 60):
    from slurm_marl.daemon.store import Store

    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if daemon.poll() is not None:
            raise ReplayError(f"the agent exited at start ({daemon.returncode})")
        if store_path.exists() and Store(store_path).log.cycles(1):
            return
        time.sleep(0.2)
    raise ReplayError("the agent did not finish a cycle within a minute")
