"""Replay pieces without Slurm: the plan, the oracle's view of co-location, the payload."""

import os
import subprocess
import sys
import time
from pathlib import Path

from slurm_marl.domain import ClusterSnapshot, GpuGroup, Job, JobState, Node, Switch
from slurm_marl.replay import payload as payload_module
from slurm_marl.replay.oracle import neighbourhoods, speeds
from slurm_marl.replay.plan import parse_job_name, plan_replay, sim_cluster_spec
from slurm_marl.sim.cluster import parse_cluster
from slurm_marl.sim.perf import PerfParams, job_speed
from slurm_marl.sim.traces import TraceJob
from slurm_marl.testcluster import ClusterSpec

SPEC = ClusterSpec(nodes=4, sockets=2, gpus_per_socket=2, nodes_per_leaf=2)


def test_plan_scales_time_splits_big_jobs_and_drops_what_cannot_fit():
    trace = [TraceJob(0, 0.0, 100.0, 1), TraceJob(1, 50.0, 200.0, 8),
             TraceJob(2, 60.0, 10.0, 32), TraceJob(3, 70.0, 10.0, 5),
             TraceJob(4, 80.0, 10.0, 3)]
    plan = plan_replay(trace, SPEC, speedup=10, seed=1)
    by_trace = {j.trace_job_id: j for j in plan.jobs}
    assert plan.dropped == (2, 3)  # 32 > 16 GPUs; 5 GPUs do not split evenly over 2 nodes
    assert by_trace[1].node_count == 2 and by_trace[1].gpus_per_node == 4
    assert by_trace[1].arrival_s == 5.0 and by_trace[1].work_s == 20.0
    assert by_trace[4].sbatch_args()[:3] == ["-J", by_trace[4].name, "--gres=gpu:3"]
    assert "-N" in by_trace[1].sbatch_args()
    assert parse_job_name(by_trace[1].name) == (by_trace[1].index, by_trace[1].model_type)
    assert [t.gpus_per_node for t in plan.sim_trace] == [1, 4, 3]
    assert parse_job_name("train.sh") is None and parse_job_name("rx-vgg") is None


def test_sim_cluster_string_matches_the_local_cluster():
    sim = parse_cluster(sim_cluster_spec(SPEC))
    assert sim.total_gpus == 16 and len(sim.nodes) == 4
    assert len([s for s in sim.switches if s.nodes]) == 2


NODES = tuple(Node(name=n, partitions=("gpu",), leaf_switch=leaf,
                   gpu_groups=(GpuGroup(0, (0, 1), "s0", 0), GpuGroup(1, (2, 3), "s1", 1)))
              for n, leaf in (("n1", "leaf1"), ("n2", "leaf1"), ("n3", "leaf2"), ("n4", "leaf2")))
SWITCHES = (Switch("leaf1", nodes=("n1", "n2")), Switch("leaf2", nodes=("n3", "n4")),
            Switch("spine", switches=("leaf1", "leaf2")))


def run(jid, model, alloc):
    return Job(jid, name=f"r{jid}-{model}", state=JobState.RUNNING, gpu_alloc=alloc,
               nodes=tuple(n for n, _ in alloc), gpus_per_node=len(alloc[0][1]))


def test_oracle_sees_group_node_and_leaf_sharing():
    jobs = (run(1, "resnet18_bs16", (("n1", (0,)),)),
            run(2, "vgg19_bs32", (("n1", (1,)),)),
            run(3, "lm_bs20", (("n1", (2,)),)),
            run(4, "resnet50_bs64", (("n2", (0, 1)), ("n3", (0, 1)))),
            run(5, "resnet50_bs64", (("n4", (0,)), ("n2", (2,)))))
    snap = ClusterSnapshot(time_s=0, nodes=NODES, jobs=jobs, switches=SWITCHES)
    hoods = neighbourhoods(snap)
    m1, h1 = hoods[1]
    assert m1 == "resnet18_bs16"
    assert h1.groups == ((1, 2, (("vgg19_bs32", 1),)),)
    assert h1.nodes == ((1, 4, (("lm_bs20", 1),)),)
    assert (h1.n_groups, h1.n_nodes, h1.n_leaves) == (1, 1, 1)
    _, h4 = hoods[4]
    assert (h4.n_groups, h4.n_nodes, h4.n_leaves) == (2, 2, 2)
    assert h4.leaf_models == ("resnet50_bs64",)  # job 5 also crosses leaf1 and leaf2
    params = PerfParams(strength="high")
    sp = speeds(snap, params)
    assert sp[1] == job_speed("resnet18_bs16", h1, params) and sp[1] < 1.0
    assert all(v == 1.0 for v in speeds(snap, PerfParams(strength="none")).values())
    # alone on a node, a job runs at full speed at any strength
    alone = ClusterSnapshot(time_s=0, nodes=NODES, jobs=(jobs[0],), switches=SWITCHES)
    assert speeds(alone, params) == {1: 1.0}


# The payload as the replay runs it: a script, and here with an interpreter that sees no
# site-packages and no project (-I -S), as python3-minimal inside a Slurm chroot does.
PAYLOAD = [sys.executable, "-I", "-S", str(Path(payload_module.__file__))]


def test_payload_follows_the_speed_file_and_resumes_after_requeue(tmp_path):
    (tmp_path / "speed").mkdir()
    (tmp_path / "speed" / "77").write_text("0.5\n")
    env = dict(os.environ, SLURM_JOB_ID="77", SLURM_RESTART_COUNT="0")
    t0 = time.monotonic()
    subprocess.run([*PAYLOAD, "--work", "0.4",
                    "--dir", str(tmp_path), "--tick", "0.02"], env=env, check=True, timeout=30)
    took = time.monotonic() - t0
    assert 0.75 <= took < 5, took  # half speed: 0.4 s of work takes ~0.8 s
    log = (tmp_path / "jobs" / "77.log").read_text().split("\n")
    assert log[0].startswith("start ") and log[1].startswith("end ")
    # requeued after 0.3 of 1.0 s of work: it resumes from the checkpoint
    (tmp_path / "progress" / "78").write_text("0.7\n")
    env.update(SLURM_JOB_ID="78", SLURM_RESTART_COUNT="1")
    t0 = time.monotonic()
    subprocess.run([*PAYLOAD, "--work", "1.0",
                    "--dir", str(tmp_path), "--tick", "0.02", "--restart-delay", "0.1"],
                   env=env, check=True, timeout=30)
    assert time.monotonic() - t0 < 0.9
    assert (tmp_path / "jobs" / "78.log").read_text().split()[2] == "1"


def test_time_scaled_profile_divides_service_thresholds(tmp_path):
    from slurm_marl.policy.guard import DEFAULT_GUARD
    from slurm_marl.policy.profile import load_profile
    from slurm_marl.replay.timescale import time_scaled_profile

    prof = load_profile(time_scaled_profile("las-lif", 50, tmp_path))
    assert prof.order_params["thresholds_gpu_s"] == (65.0, 144.0, 360.0)
    assert prof.place_params["least_interference"]["defer_below"] == 0.8  # not a time
    assert prof.preemption and prof.name == "las-lif-x50"
    # the daemon's default guard, its times scaled with the rest (the daemon would add it
    # unscaled); without it, the profile as written
    assert dict(prof.guard) == {**DEFAULT_GUARD, "slack_min_s": 60 / 50, "step_s": 60 / 50,
                                "tick_s": 60 / 50, "rewind_s": 86_400 / 50}
    assert not load_profile(time_scaled_profile("las-lif", 50, tmp_path, guard=False)).guard


def test_a_replay_without_the_guard_tells_the_daemon(tmp_path):
    from slurm_marl.daemon.config import load_config
    from slurm_marl.replay.runner import _agent_config

    class Cluster:
        slurm_conf = tmp_path / "slurm.conf"

        class spec:
            partition = "gpu"

    for guard in (True, False):
        cfg = load_config(_agent_config(Cluster, tmp_path, tmp_path, "las-lif", 2, True, 3.0,
                                        guard=guard))
        assert cfg.agent.guard is guard


def test_payload_checkpoints_its_progress_when_slurm_stops_it(tmp_path):
    """A requeue sends SIGTERM: the payload saves how far it got (not the last 1 s
    checkpoint) and logs the stop, so the restarted run loses no work."""
    import signal

    (tmp_path / "speed").mkdir()
    (tmp_path / "speed" / "79").write_text("1.0\n")
    env = dict(os.environ, SLURM_JOB_ID="79", SLURM_RESTART_COUNT="0")
    proc = subprocess.Popen([*PAYLOAD, "--work", "60",
                             "--dir", str(tmp_path), "--tick", "0.02"], env=env)
    log = tmp_path / "jobs" / "79.log"
    deadline = time.monotonic() + 20
    while not (log.exists() and log.read_text().startswith("start")):
        assert time.monotonic() < deadline
        time.sleep(0.02)
    time.sleep(0.6)  # less than the periodic checkpoint interval
    proc.send_signal(signal.SIGTERM)
    assert proc.wait(timeout=10) == 0
    done = float((tmp_path / "progress" / "79").read_text().split()[0])
    assert 0.4 < done < 3.0, done
    lines = log.read_text().split("\n")
    assert lines[0].startswith("start ") and lines[1].startswith("stop ")
