"""Partitions decided apart (``Policy.decides_partitions_apart``): the simulator decides only
the partitions where something changed since their last cycle, and the run is the run of a
cycle over every partition, job by job."""

import dataclasses
import random

import pytest

from slurm_marl.domain import Switch
from slurm_marl.policy.framework import Policy, build_policy
from slurm_marl.policy.profile import load_profile, profile_from_mapping
from slurm_marl.sim.cluster import parse_cluster
from slurm_marl.sim.partitions_apart import partition_groups
from slurm_marl.sim.run import simulate
from slurm_marl.sim.traces import TraceJob

# Three partitions of 8-GPU nodes, multi-node jobs (12, 16 GPUs) in a and b.
CLUSTER = "2x2x4:name=a+2x2x4:name=b+1x2x4:name=c"
MODELS = ("resnet50_bs64", "resnet18_bs16", "lm_bs20", "lm_bs5")
SIZES = {"a": (1, 1, 2, 4, 8, 12, 16), "b": (1, 2, 4, 8, 16), "c": (1, 1, 2, 4, 8)}


class Flat:
    """An interference estimator that predicts no slowdown (only to build the policies)."""

    def predict_speed(self, job, colocated_by_level):
        return 1.0


def _trace(seed: int, n: int = 160) -> list[TraceJob]:
    """Bursts of arrivals into three partitions, long and short jobs, some multi-node."""
    rng = random.Random(seed)
    jobs, t = [], 0.0
    for i in range(n):
        t += rng.expovariate(1 / 60.0) if rng.random() < 0.8 else rng.uniform(600, 3000)
        part = rng.choice("aabbc")
        jobs.append(TraceJob(job_id=i + 1, submit_time_s=round(t), num_gpus=rng.choice(
            SIZES[part]), duration_s=round(rng.lognormvariate(7.5, 1.4)) + 30,
            model_type=rng.choice(MODELS), partition=part))
    return jobs


def _outcome(run):
    return [(j.job_id, j.first_start_s, j.finish_s, j.preemptions, j.state)
            for j in run.outcome.jobs]


class Views:
    """Counts the cycles decided over part of the partitions, and decisions again at one
    time (the leaf rule)."""

    def __init__(self, monkeypatch) -> None:
        self.partial = self.again = 0
        self.last_t = None
        run_cycle = Policy.run_cycle

        def counted(policy, snap, partitions=None):
            if partitions is not None and len(partitions) < len(snap.partitions):
                self.partial += 1
            if snap.time_s == self.last_t:
                self.again += 1
            self.last_t = snap.time_s
            return run_cycle(policy, snap, partitions)

        monkeypatch.setattr(Policy, "run_cycle", counted)


def one_leaf(cluster):
    """Every node under one leaf switch (a site with no topology.conf): multi-node jobs of
    all partitions are each other's leaf-level neighbours."""
    nodes = tuple(dataclasses.replace(n, leaf_switch="leaf1") for n in cluster.nodes)
    return dataclasses.replace(cluster, nodes=nodes, switches=(
        Switch(name="leaf1", nodes=tuple(n.name for n in nodes)),
        Switch(name="spine", switches=("leaf1",))))


def _both(monkeypatch, profile: str, trace, cluster=None, **kw):
    """(the run with partitions decided apart, its views; the same simulator with every
    cycle deciding every partition)."""
    cluster = cluster or parse_cluster(CLUSTER)
    views = Views(monkeypatch)
    apart = simulate(trace, cluster, profile, **kw)
    seen = Views.__new__(Views)
    seen.partial, seen.again = views.partial, views.again
    counted = Policy.run_cycle
    with monkeypatch.context() as m:
        m.setattr(Policy, "run_cycle",
                  lambda policy, snap, partitions=None: counted(policy, snap, None))
        whole = simulate(trace, cluster, profile, **kw)
    return apart, seen, whole


@pytest.mark.parametrize("profile,kw", [
    ("las-consolidate", {}),
    ("las-consolidate", {"interference": "medium"}),
    ("las-lif", {"interference": "medium"}),
    ("las-skew", {}),
    ("srtf-consolidate", {}),
    ("learned-order", {"prediction_error": "helios"}),
    ("fifo-backfill", {}),
    ("fifo-consolidate", {}),
])
@pytest.mark.parametrize("seed", [1, 2])
def test_partitions_decided_apart_give_the_same_run(monkeypatch, profile, kw, seed):
    trace = _trace(seed)
    apart, views, whole = _both(monkeypatch, profile, trace, **kw)
    prof = load_profile(profile)
    assert build_policy(prof, interference_estimator=Flat()).decides_partitions_apart
    assert _outcome(apart) == _outcome(whole)
    assert apart.outcome.cycles == whole.outcome.cycles
    assert apart.outcome.preemptions == whole.outcome.preemptions
    assert (apart.outcome.preemptions > 0) == prof.preemption
    if prof.backfill and prof.backfill_reserve:     # the reservation path was taken
        assert apart.outcome.reservations > 0
    assert views.partial > 0      # the path was taken: some cycles left partitions out


def test_a_multi_node_start_on_a_shared_leaf_decides_its_neighbours_too(monkeypatch):
    """las-lif's filter reads the multi-node jobs on a candidate's leaf switch, of every
    partition there: a cycle that starts one decides the partitions on its leaf again."""
    trace = _trace(3, 220)
    apart, views, whole = _both(monkeypatch, "las-lif", trace, one_leaf(parse_cluster(CLUSTER)),
                                interference="high")
    assert _outcome(apart) == _outcome(whole)
    assert views.again > 0 and views.partial > 0


def test_policies_that_couple_partitions_decide_all_of_them():
    """A guard (its shadow of Slurm alone spans every partition), keys that drift between
    events (the Gittins index, predicted remaining time): every cycle decides everything.
    Backfill's reservation and a walk without backfill stay in their partition."""
    for name in ("gittins-consolidate", "predicted-las"):
        assert not build_policy(load_profile(name)).decides_partitions_apart
    for name in ("fifo-backfill", "fifo-consolidate"):
        assert build_policy(load_profile(name)).decides_partitions_apart
    las = {"name": "las", "preemption": True, "backfill": True, "backfill_reserve": False,
           "order": {"plugin": "tiresias_las", "thresholds_gpu_s": [600]},
           "place": {"consolidate": 1.0}}
    assert build_policy(profile_from_mapping(las)).decides_partitions_apart
    assert not build_policy(profile_from_mapping(
        {**las, "guard": {"slack": 0.1}})).decides_partitions_apart
    assert build_policy(profile_from_mapping(
        {**las, "backfill_reserve": True})).decides_partitions_apart
    lif = build_policy(load_profile("las-lif"), interference_estimator=Flat())
    assert lif.decides_partitions_apart and lif.reads_leaves
    assert not build_policy(load_profile("las-consolidate")).reads_leaves


def test_partition_groups_follow_shared_nodes_and_leaves():
    cluster = parse_cluster(CLUSTER)
    groups, on_leaf = partition_groups(list(cluster.nodes))
    assert groups == {"a": frozenset("a"), "b": frozenset("b"), "c": frozenset("c")}
    leaves = {n.leaf_switch for n in cluster.nodes}
    assert set(on_leaf) == leaves
    assert frozenset().union(*on_leaf.values()) == frozenset("abc")
    # a node in two partitions joins them, and whatever shares a node with either
    nodes = list(cluster.nodes)
    nodes[0] = dataclasses.replace(nodes[0], partitions=("a", "b"))
    nodes[-1] = dataclasses.replace(nodes[-1], partitions=("c", "d"))
    groups, on_leaf = partition_groups(nodes)
    assert groups["a"] == groups["b"] == frozenset("ab")
    assert groups["c"] == groups["d"] == frozenset("cd")
    _, on_leaf = partition_groups(list(one_leaf(cluster).nodes))
    assert on_leaf == {"leaf1": frozenset("abc")}


def test_the_comparison_sees_an_order_that_drifts(monkeypatch):
    """predicted-las measures remaining time against progress, checked at events: decided
    apart anyway, its run would not be the same, and the comparison above says so."""
    from slurm_marl.policy.order.predicted_las import PredictedLas
    monkeypatch.setattr(PredictedLas, "settles_at_wakes", property(lambda self: True))
    apart, views, whole = _both(monkeypatch, "predicted-las", _trace(1),
                                prediction_error="helios")
    assert views.partial > 0
    assert _outcome(apart) != _outcome(whole)


class Recorder:
    """The policy the simulator runs, keeping every snapshot it was handed."""

    decides_partitions_apart = False

    def __init__(self, policy) -> None:
        self._policy = policy
        self.snapshots = []

    def run_cycle(self, snap, partitions=None):
        self.snapshots.append(snap)
        return self._policy.run_cycle(snap)

    def __getattr__(self, name):
        return getattr(self._policy, name)


def _by_partition(decisions, snap):
    """Each preemption's and placement's repr, by the partition of the job it is about
    (priorities are ranks among the jobs decided together: not compared)."""
    from slurm_marl.domain import SetPriority
    part = {j.job_id: j.partition for j in snap.jobs}
    out: dict[str, list[str]] = {}
    for d in decisions:
        if not isinstance(d, SetPriority):
            out.setdefault(part[d.job_id], []).append(repr(d))
    return {p: sorted(ds) for p, ds in out.items()}


@pytest.mark.parametrize("profile", ["fifo-backfill", "fifo-consolidate", "las-consolidate"])
def test_a_cycle_over_the_cluster_decides_each_partition_as_the_daemon_does(profile):
    """The daemon decides each managed partition on its own view (``partition_view``); the
    simulator decides every partition in one cycle. Over a 3-partition run's snapshots,
    with jobs blocked in one partition while another has room, the two decide the same."""
    from slurm_marl.slurm_integration.admission import partition_views

    recorder = Recorder(build_policy(load_profile(profile)))
    from slurm_marl.sim.engine import Simulator
    Simulator(parse_cluster(CLUSTER), _trace(4), recorder, seed=0).run()
    whole_policy, part_policy = build_policy(load_profile(profile)), \
        build_policy(load_profile(profile))
    blocked_beside_room = 0
    for snap in recorder.snapshots[::3]:
        whole = _by_partition(whole_policy.run_cycle(snap), snap)
        views = partition_views(snap, [p.name for p in snap.partitions])
        apart = {}
        for name, view in views.items():
            apart.update(_by_partition(part_policy.run_cycle(view), view))
        assert whole == apart, snap.time_s
        started = {p for p, ds in whole.items() if any("start_now=True" in d for d in ds)}
        waiting = {j.partition for j in snap.jobs if j.is_pending}
        blocked_beside_room += bool(started and waiting - started)
    assert blocked_beside_room > 0


def _job(job_id, part, gpus, submit, running_on=None):
    from slurm_marl.domain import Job, JobState
    if running_on is None:     # 8-GPU nodes: 16 GPUs are two whole nodes
        return Job(job_id=job_id, partition=part, gpus_per_node=min(gpus, 8),
                   node_count=max(1, gpus // 8), submit_time_s=submit, cpus=gpus)
    return Job(job_id=job_id, partition=part, gpus_per_node=gpus, submit_time_s=submit,
               cpus=gpus, state=JobState.RUNNING, start_time_s=submit, nodes=(running_on,),
               gpu_alloc=((running_on, tuple(range(gpus))),))


def _two_partitions(jobs):
    """Partitions a and b of two 8-GPU nodes each, one node of each full (jobs 1, 2)."""
    import dataclasses as dc

    from slurm_marl.domain import ClusterSnapshot

    cluster = parse_cluster("2x2x4:name=a+2x2x4:name=b")
    first = {p: next(n.name for n in cluster.nodes if p in n.partitions) for p in "ab"}
    running = (_job(1, "a", 8, 0.0, running_on=first["a"]),
               _job(2, "b", 8, 0.0, running_on=first["b"]))
    nodes = tuple(dc.replace(n, used_gpu_indices=frozenset(range(8)), alloc_cpus=8)
                  if n.name in first.values() else n for n in cluster.nodes)
    return ClusterSnapshot(time_s=100.0, nodes=nodes, jobs=running + tuple(jobs),
                           partitions=cluster.partitions, switches=cluster.switches)


def _starts_and_holds(profile, snap):
    from slurm_marl.domain import Place
    decisions = build_policy(load_profile(profile)).run_cycle(snap)
    return ({d.job_id for d in decisions if isinstance(d, Place) and d.start_now},
            sorted(d.job_id for d in decisions if isinstance(d, Place) and not d.start_now))


def test_without_backfill_a_blocked_job_ends_only_its_own_partition_s_walk():
    """a's head asks for more than a has free; b's job, later, fits and starts. a's small
    job waits behind a's head (no backfill)."""
    snap = _two_partitions([_job(3, "a", 16, 10.0), _job(5, "b", 4, 20.0),
                            _job(6, "a", 4, 21.0)])
    assert _starts_and_holds("fifo-consolidate", snap) == ({5}, [])


def test_backfill_reserves_for_each_partition_s_first_blocked_job():
    """Each partition's first blocked job holds the GPUs it will start on, so neither
    partition's small job takes them."""
    snap = _two_partitions([_job(3, "a", 16, 10.0), _job(4, "b", 16, 11.0),
                            _job(5, "b", 4, 20.0), _job(6, "a", 4, 21.0)])
    assert _starts_and_holds("fifo-backfill", snap) == (set(), [3, 4])
    # with b's head gone, b's small job starts and a still reserves for its head
    snap = _two_partitions([_job(3, "a", 16, 10.0), _job(5, "b", 4, 20.0),
                            _job(6, "a", 4, 21.0)])
    assert _starts_and_holds("fifo-backfill", snap) == ({5}, [3])
