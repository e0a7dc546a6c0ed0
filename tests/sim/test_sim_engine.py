from pathlib import Path

import numpy as np
import pytest

import slurm_marl.sim.engine as E

from slurm_marl.domain import GroupAlloc, Place
from slurm_marl.policy.framework import Policy, build_policy
from slurm_marl.policy.interference import FittedEstimator
from slurm_marl.policy.profile import load_profile
from slurm_marl.sim.cluster import parse_cluster
from slurm_marl import shared_data
from slurm_marl.shared_data import ENV_VAR, DataNotFound, data_dir, data_file
from slurm_marl.sim.engine import FINISH, Simulator
from slurm_marl.sim.jobs import SimulationError
from slurm_marl.sim.metrics import percentile, summarize
from slurm_marl.sim.run import simulate
from slurm_marl.sim.traces import TraceJob, load_trace

DATA = Path(__file__).resolve().parents[1] / "data" / "traces"


def tj(job_id, submit, duration, gpus, model="resnet50_bs64", **kw):
    return TraceJob(job_id=job_id, submit_time_s=submit, duration_s=duration, num_gpus=gpus,
                    model_type=model, **kw)


def finish_times(run):
    return {j.job_id: j.finish_s for j in run.outcome.jobs}


def test_single_job_runs_its_duration():
    run = simulate([tj(1, 5.0, 100.0, 2)], "1x2x4", "fifo-consolidate")
    job = run.outcome.jobs[0]
    assert (job.first_start_s, job.finish_s) == (5.0, 105.0)
    assert run.summary["avg_jct_s"] == 100.0 and run.summary["avg_queue_delay_s"] == 0.0


def test_fifo_queues_a_job_that_does_not_fit():
    run = simulate([tj(1, 0, 100, 8), tj(2, 10, 50, 8), tj(3, 20, 10, 1)], "1x2x4",
                   "fifo-consolidate")
    assert finish_times(run) == {1: 100.0, 2: 150.0, 3: 160.0}
    s = run.summary
    assert s["makespan_s"] == 160.0 and s["longest_wait_s"] == 130.0
    assert s["gpu_utilisation"] == pytest.approx((800 + 400 + 10) / (8 * 160), abs=1e-4)


def test_preemption_costs_the_restart_delay():
    jobs = [tj(1, 0, 10000, 1), tj(2, 4000, 100, 1)]
    run = simulate(jobs, "1x1x1", "las-consolidate", restart_delay_s=30.0)
    a, b = run.outcome.jobs
    assert b.finish_s == 4100.0 and a.preemptions == 1
    assert a.finish_s == pytest.approx(4100 + 6000 + 30)
    assert run.summary["preemptions"] == 1
    assert run.summary["longest_wait_s"] == 100.0


def test_demotion_wake_lets_a_waiting_job_in_without_other_events():
    # Job 1 holds the only GPU; job 2 (queue 0) waits until job 1 reaches 3250 GPU-s.
    jobs = [tj(1, 0, 10000, 1), tj(2, 10, 100, 1)]
    run = simulate(jobs, "1x1x1", "las-consolidate", restart_delay_s=0.0)
    assert finish_times(run)[2] == pytest.approx(3250 + 100)


def test_interference_slows_co_located_jobs_and_only_when_on():
    jobs = [tj(1, 0, 1000, 1, "a3c"), tj(2, 0, 1000, 1, "resnet18_bs16")]
    calm = simulate(jobs, "1x1x4", "fifo-consolidate", interference="none")
    assert set(finish_times(calm).values()) == {1000.0}
    busy = simulate(jobs, "1x1x4", "fifo-consolidate", interference="high")
    assert all(t > 1050 for t in finish_times(busy).values())
    low = simulate(jobs, "1x1x4", "fifo-consolidate", interference="low")
    assert max(finish_times(low).values()) < max(finish_times(busy).values())
    assert busy.summary["mean_speed"] < 1.0


def test_samples_carry_the_documented_schema():
    jobs = [tj(1, 0, 1000, 1, "a3c"), tj(2, 0, 500, 1, "lm_bs20"), tj(3, 0, 900, 8, "vgg19")]
    run = simulate(jobs, "2x2x4:leaf=1", "fifo-consolidate", interference="high",
                   collect_samples=True)
    samples = run.outcome.samples
    assert samples
    keys = {"time_s", "job_id", "model_type", "num_gpus", "groups", "nodes", "leaves",
            "cross_leaf", "colocated", "duration_s", "speed", "strength"}
    for s in samples:
        assert set(s) == keys
        assert set(s["colocated"]) == {"gpu", "group", "node", "leaf"}
        assert 0 < s["speed"] <= 1.2 and s["strength"] == "high"
    first = next(s for s in samples if s["job_id"] == 1)
    assert first["colocated"]["group"] == ["lm_bs20"]


def test_skipping_idle_cycles_changes_nothing():
    trace = load_trace(DATA / "philly_head300.csv", "vc=6214e9,rows=0:150")
    for profile in ("fifo-consolidate", "fifo-backfill", "las-consolidate"):
        cluster = parse_cluster("2x2x4")
        runs = []
        for skip in (True, False):
            sim = Simulator(cluster, trace, build_policy(load_profile(profile)), seed=3,
                            skip_idle_cycles=skip)
            runs.append(sim.run())
        assert [j.finish_s for j in runs[0].jobs] == [j.finish_s for j in runs[1].jobs]
        assert runs[0].cycles <= runs[1].cycles


class Seeing:
    """A policy that records the times of the cycles it is shown."""

    def __init__(self, profile: str, watches_ends: bool) -> None:
        self._policy = build_policy(load_profile(profile))
        self.watches_ends = watches_ends
        self.times: list[float] = []

    def run_cycle(self, snap, partitions=None):
        self.times.append(snap.time_s)
        return self._policy.run_cycle(snap, partitions)

    def __getattr__(self, name):
        return getattr(self._policy, name)


def test_a_policy_that_watches_ends_is_shown_each_end_with_nothing_waiting():
    """Two 1-GPU jobs, far apart: nothing waits when they end. A policy that learns from
    ends (the guard) gets a cycle at each end too, and the outcome is the same."""
    trace = [TraceJob(0, 0.0, 100.0, 1), TraceJob(1, 1000.0, 50.0, 1)]
    runs = {}
    for watches in (False, True):
        policy = Seeing("las-consolidate", watches)
        out = Simulator(parse_cluster("1x1x2"), trace, policy, seed=0).run()
        runs[watches] = (policy.times, [j.finish_s for j in out.jobs])
    assert runs[False][0] == [0.0, 1000.0]
    assert runs[True][0] == [0.0, 100.0, 1000.0, 1050.0]
    assert runs[False][1] == runs[True][1] == [100.0, 1050.0]
    assert build_policy(load_profile("las-consolidate")).watches_ends is False


def test_periodic_cycles_do_not_change_event_driven_results():
    trace = load_trace(DATA / "philly_head300.csv", "vc=6214e9,rows=0:100")
    base = simulate(trace, "2x2x4", "las-consolidate")
    ticked = simulate(trace, "2x2x4", "las-consolidate", cycle_period_s=600.0)
    assert finish_times(base) == pytest.approx(finish_times(ticked))
    assert ticked.outcome.cycles > base.outcome.cycles


class Greedy(Policy):
    """A broken policy: always puts the first pending job on the first group."""

    def run_cycle(self, snapshot, partitions=None):
        for job in snapshot.pending:
            return [Place(job_id=job.job_id, nodes=("gpu01",),
                          allocs=(GroupAlloc("gpu01", 0, job.num_gpus),))]
        return []


def test_a_policy_that_overbooks_is_caught():
    base = build_policy(load_profile("fifo-consolidate"))
    policy = Greedy(base.profile, base.order, base.place)
    sim = Simulator(parse_cluster("1x2x4"), [tj(1, 0, 100, 4), tj(2, 1, 100, 4)], policy)
    with pytest.raises(SimulationError, match="group 0, which has 0 free"):
        sim.run()


def test_oversized_jobs_are_an_error_or_dropped():
    jobs = [tj(1, 0, 10, 16), tj(2, 0, 10, 1)]
    with pytest.raises(SimulationError, match="needs 16 GPUs"):
        simulate(jobs, "1x2x4", "fifo-consolidate")
    run = simulate(jobs, "1x2x4", "fifo-consolidate", drop_oversized=True)
    assert [j.job_id for j in run.outcome.jobs] == [2]


def test_model_types_are_drawn_with_the_seed():
    trace = [tj(i, i, 10, 1, model=None) for i in range(20)]
    a = simulate(trace, "1x2x4", "fifo-consolidate", seed=1)
    b = simulate(trace, "1x2x4", "fifo-consolidate", seed=1)
    c = simulate(trace, "1x2x4", "fifo-consolidate", seed=2)
    models = lambda r: [j.model_type for j in r.outcome.jobs]  # noqa: E731
    assert models(a) == models(b) != models(c)
    assert len(set(models(a))) > 3


def test_least_interference_profile_fits_its_estimator_from_a_pilot():
    trace = load_trace(DATA / "philly_head300.csv", "vc=6214e9,rows=0:120")
    run = simulate(trace, "2x2x4", "las-lif", interference="high")
    assert run.estimator_samples > 0 and run.summary["unfinished"] == 0
    est = FittedEstimator.fit(simulate(trace, "2x2x4", "las-consolidate",
                                       interference="high", collect_samples=True)
                              .outcome.samples)
    assert est.n_samples > 0


def test_a_pilot_is_fitted_once_for_the_same_trace_cluster_strength_and_seed(monkeypatch):
    import slurm_marl.sim.run as sim_run
    from slurm_marl.sim.cluster import parse_cluster
    trace = load_trace(DATA / "philly_head300.csv", "vc=6214e9,rows=0:80")
    cluster = parse_cluster("2x2x4")
    fits = []
    real = sim_run._fit_pilot
    monkeypatch.setattr(sim_run, "_fit_pilot", lambda *a: fits.append(a) or real(*a))
    monkeypatch.setattr(sim_run, "_PILOTS", [])
    a = simulate(trace, cluster, "las-lif", interference="high")
    b = simulate(trace, cluster, "learned-order", interference="high")
    assert len(fits) == 1 and a.estimator_samples == b.estimator_samples > 0
    fresh = real(trace, cluster, "high", 0, 30.0)            # what a second pilot gives
    again = sim_run.fit_estimator_from_pilot(trace, cluster, "high", 0, 30.0)
    assert (again.weights, again.bias) == (fresh.weights, fresh.bias) and len(fits) == 1
    simulate(list(trace), cluster, "las-lif", interference="medium")   # another strength
    simulate(trace, parse_cluster("2x2x4"), "las-lif", interference="high")  # cluster
    simulate(trace[:-1], cluster, "las-lif", interference="high")          # trace
    assert len(fits) == 4


def test_percentile_matches_numpy():
    xs = [5.0, 1.0, 9.0, 3.0, 7.0, 2.0]
    for q in (0, 25, 50, 95, 100):
        assert percentile(xs, q) == pytest.approx(float(np.percentile(xs, q)))


def test_summary_fields():
    run = simulate([tj(1, 0, 10, 1)], "1x1x1", "fifo-consolidate")
    assert {"avg_jct_s", "median_jct_s", "p95_jct_s", "avg_queue_delay_s", "makespan_s",
            "gpu_utilisation", "preemptions", "longest_wait_s"} <= set(summarize(run.outcome))


def test_data_dir_honours_the_environment(monkeypatch, tmp_path):
    (tmp_path / "traces").mkdir()
    (tmp_path / "traces" / "x.csv").write_text("a\n")
    monkeypatch.setenv(ENV_VAR, str(tmp_path))
    assert data_dir() == tmp_path
    assert data_file("traces/x.csv") == tmp_path / "traces" / "x.csv"
    with pytest.raises(DataNotFound, match="missing from the data folder"):
        data_file("traces/none.csv")
    monkeypatch.setenv(ENV_VAR, str(tmp_path / "nowhere"))
    with pytest.raises(DataNotFound, match=ENV_VAR):
        data_dir()


def test_data_dir_defaults_to_the_data_shipped_in_the_package(monkeypatch, tmp_path):
    monkeypatch.delenv(ENV_VAR, raising=False)
    package = Path(shared_data.__file__).resolve().parent
    assert data_dir() == package / "data" / "public"
    for name in ("traces/philly.csv", "traces/tiresias_60_job.csv",
                 "traces/tiresias_yarn_gput1000.csv", "interference/gavel_pairwise_colocation.csv",
                 "interference/gavel_simulation_throughputs.json",
                 "reference/tiresias_windows.md"):
        assert data_file(name).is_relative_to(package)
    monkeypatch.chdir(tmp_path)                      # the current directory plays no part
    assert data_dir() == package / "data" / "public"
    monkeypatch.setattr(shared_data, "BUNDLED", tmp_path / "gone")
    with pytest.raises(DataNotFound, match="data folder .* is missing"):
        data_dir()


def test_gpus_stay_the_binding_resource_on_wide_and_shared_nodes():
    # 64 one-GPU jobs on one 64-GPU socket, 16 one-slot jobs on 4 GPUs shared 4 ways: every
    # job starts at once (CPUs used to bind: 16 default cores for 64 GPUs or 16 slots).
    wide = simulate([tj(i, 0, 100, 1) for i in range(64)], "1x1x64", "fifo-consolidate")
    assert {j.first_start_s for j in wide.outcome.jobs} == {0.0}
    assert wide.summary["gpu_utilisation"] == 1.0
    shared = Simulator(parse_cluster("1x1x4:share=4"), [tj(i, 0, 100, 1) for i in range(16)],
                       build_policy(load_profile("fifo-consolidate")))
    assert {j.first_start_s for j in shared.run().jobs} == {0.0}
    # Whole GPUs: CPUs and memory per GPU as before (8x2x4: 32 cores, 256 GiB per node).
    sim = Simulator(parse_cluster("8x2x4"), [tj(1, 0, 10, 3)],
                    build_policy(load_profile("fifo-consolidate")))
    assert (sim.jobs[0].cpus, sim.jobs[0].mem_mib) == (12, 3 * 16 * 1024)


def test_oversized_error_names_the_cli_flag_and_drops_are_counted():
    jobs = [tj(1, 0, 10, 17), tj(2, 0, 10, 1), tj(3, 0, 10, 12, gpus_per_node=4)]
    with pytest.raises(SimulationError, match=r"job 1 needs 17 GPUs .*--drop-oversized; "
                       r"drop_oversized=True from Python"):
        simulate(jobs, "2x1x8", "fifo-consolidate")
    # A fixed shape needing more nodes than the partition has never fits either.
    with pytest.raises(SimulationError, match="job 3 needs 3 nodes x 4 GPUs"):
        simulate(jobs[1:], "2x1x8", "fifo-consolidate")
    run = simulate(jobs, "2x1x8", "fifo-consolidate", drop_oversized=True)
    assert [j.job_id for j in run.outcome.jobs] == [2]
    assert run.summary["dropped_oversized"] == 2 and run.summary["unfinished"] == 0


class CycleTimes(Simulator):
    """Records when cycles run and the heap's stale share at each of them."""

    def _cycle(self, now):
        self.times = getattr(self, "times", []) + [now]
        stale = sum(1 for e in self.events
                    if e[1] == FINISH and self.by_id[e[3]].version != e[4])
        self.worst = max(getattr(self, "worst", 0), stale - len(self.events) // 2)
        super()._cycle(now)


def test_stale_finish_events_trigger_no_cycle():
    # Job 1 is preempted at 4000 (finish at 10000 goes stale) and at 9000 (10100 goes stale);
    # job 1 waits from 9000 to 14000, so a cycle at a stale time would run with work pending.
    jobs = [tj(1, 0, 10000, 1), tj(2, 4000, 100, 1), tj(3, 9000, 5000, 1)]
    sim = CycleTimes(parse_cluster("1x1x1"), jobs, build_policy(load_profile("las-consolidate")),
                     restart_delay_s=0)
    out = sim.run()
    assert {j.job_id: j.finish_s for j in out.jobs} == {1: 15100.0, 2: 4100.0, 3: 14000.0}
    assert 10000.0 not in sim.times and 10100.0 not in sim.times
    # the wake-up of job 3's demotion (service 3250 GPU-s at 12250) comes a microsecond late,
    # so the rounding of its service can never keep it in its queue
    assert sim.times == [0, 4000, 4100.0, 9000, 12250.0 + E.EPS, 14000.0]


def test_heap_stays_bounded_under_heavy_preemption():
    # A long job preempted by 300 short ones leaves 300 stale finish events behind.
    jobs = [tj(0, 0, 1e6, 1)] + [tj(i, 3600 + 200 * i, 100, 1) for i in range(1, 301)]
    sim = CycleTimes(parse_cluster("1x1x1"), jobs, build_policy(load_profile("las-consolidate")))
    out = sim.run()
    assert out.preemptions == 300 and out.unfinished == 0
    assert sim.worst <= 2          # stale entries never much more than half the heap
    assert out.jobs[0].finish_s == pytest.approx(1e6 + 300 * (100 + 30))


class SlotLog(Simulator):
    """Records which GPU slots each job got."""

    def _start(self, j, place, now):
        touched = super()._start(j, place, now)
        if touched is not None:
            self.slots = getattr(self, "slots", {})
            self.slots[j.job_id] = [(self.nodes[n].name, gpu)
                                    for n, _, gpus in j.allocs for gpu in gpus]
        return touched


def test_gpu_fraction_takes_slots_of_one_physical_gpu():
    # 2 GPUs offered as 4 slots each, slot-major: slots 0 and 1 are GPUs 0 and 1, so the
    # lowest free slots would split a 2-slot job over two GPUs.
    cluster = parse_cluster("1x1x2:share=4")
    jobs = [tj(1, 0, 100, 1, gpu_fraction=0.5), tj(2, 0, 50, 1, gpu_fraction=0.25),
            tj(3, 0, 10, 1, gpu_fraction=1.0)]
    sim = SlotLog(cluster, jobs, build_policy(load_profile("fifo-consolidate")))
    out = sim.run()
    physical = {jid: {cluster.physical_gpu(n, s) for n, s in slots}
                for jid, slots in sim.slots.items()}
    assert {jid: len(slots) for jid, slots in sim.slots.items()} == {1: 2, 2: 1, 3: 4}
    assert all(len(gpus) == 1 for gpus in physical.values())
    assert sim.slots[1] == [("gpu01", 0), ("gpu01", 2)]
    # Job 3 wants a whole GPU: refused at 0 (3 + 2 slots free, on two GPUs), runs once job 2
    # has left GPU 1; nobody shares a GPU, so everyone runs at full speed.
    assert out.refused_placements == 1 and physical[3] == physical[2]
    assert {j.job_id: (j.first_start_s, j.finish_s) for j in out.jobs} == {
        1: (0.0, 100.0), 2: (0.0, 50.0), 3: (50.0, 60.0)}


def test_gpu_fraction_shares_a_gpu_under_the_sharing_model():
    jobs = [tj(1, 0, 1000, 1, "resnet50_bs64", gpu_fraction=0.5),
            tj(2, 0, 1000, 1, "a3c", gpu_fraction=0.25)]
    run = simulate(jobs, "1x1x1:share=4", "fifo-consolidate", collect_samples=True)
    assert all(j.finish_s > 1000 for j in run.outcome.jobs)     # one GPU, shared
    # Job 1 holds two slots of the GPU, job 2 sees it there once.
    first = {}
    for s in run.outcome.samples:
        first.setdefault(s["job_id"], s["colocated"]["gpu"])
    assert first == {1: ["a3c"], 2: ["resnet50_bs64"]}
    whole = simulate([tj(1, 0, 100, 1, gpu_fraction=1.0), tj(2, 0, 100, 1, gpu_fraction=0.5)],
                     "1x1x1:share=2", "fifo-consolidate")
    assert finish_times(whole) == {1: 100.0, 2: 200.0}          # a whole GPU takes both


def test_gpu_fraction_without_sharing_is_an_error():
    with pytest.raises(SimulationError, match=r"2 job\(s\) ask for a fraction of a GPU "
                       r"\(first: job 1, gpu_fraction=0.5\) .*share=K"):
        simulate([tj(1, 0, 10, 1, gpu_fraction=0.5), tj(2, 0, 10, 1, gpu_fraction=0.3)],
                 "1x1x4", "fifo-consolidate")
    with pytest.raises(SimulationError, match="fractions are for 1-GPU jobs only"):
        simulate([tj(1, 0, 10, 2, gpu_fraction=0.5)], "1x1x4:share=2", "fifo-consolidate")
    # A whole GPU on whole GPUs is just a GPU.
    run = simulate([tj(1, 0, 10, 1, gpu_fraction=1.0)], "1x1x4", "fifo-consolidate")
    assert finish_times(run) == {1: 10.0}
