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
from slurm_marl.sim.engine import _partition_groups
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
])
@pytest.mark.parametrize("seed", [1, 2])
def test_partitions_decided_apart_give_the_same_run(monkeypatch, profile, kw, seed):
    trace = _trace(seed)
    apart, views, whole = _both(monkeypatch, profile, trace, **kw)
    assert build_policy(load_profile(profile),
                        interference_estimator=Flat()).decides_partitions_apart
    assert _outcome(apart) == _outcome(whole)
    assert apart.outcome.cycles == whole.outcome.cycles
    assert apart.outcome.preemptions == whole.outcome.preemptions > 0
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
    """A guard (its blocked protected job holds back every partition), backfill's one
    reservation, no backfill, keys that drift between events (the Gittins index, predicted
    remaining time): every cycle decides everything."""
    for name in ("fifo-backfill", "fifo-consolidate", "gittins-consolidate", "predicted-las"):
        assert not build_policy(load_profile(name)).decides_partitions_apart
    las = {"name": "las", "preemption": True, "backfill": True, "backfill_reserve": False,
           "order": {"plugin": "tiresias_las", "thresholds_gpu_s": [600]},
           "place": {"consolidate": 1.0}}
    assert build_policy(profile_from_mapping(las)).decides_partitions_apart
    assert not build_policy(profile_from_mapping(
        {**las, "guard": {"slack": 0.1}})).decides_partitions_apart
    assert not build_policy(profile_from_mapping(
        {**las, "backfill_reserve": True})).decides_partitions_apart
    lif = build_policy(load_profile("las-lif"), interference_estimator=Flat())
    assert lif.decides_partitions_apart and lif.reads_leaves
    assert not build_policy(load_profile("las-consolidate")).reads_leaves


def test_partition_groups_follow_shared_nodes_and_leaves():
    cluster = parse_cluster(CLUSTER)
    groups, on_leaf = _partition_groups(list(cluster.nodes))
    assert groups == {"a": frozenset("a"), "b": frozenset("b"), "c": frozenset("c")}
    leaves = {n.leaf_switch for n in cluster.nodes}
    assert set(on_leaf) == leaves
    assert frozenset().union(*on_leaf.values()) == frozenset("abc")
    # a node in two partitions joins them, and whatever shares a node with either
    nodes = list(cluster.nodes)
    nodes[0] = dataclasses.replace(nodes[0], partitions=("a", "b"))
    nodes[-1] = dataclasses.replace(nodes[-1], partitions=("c", "d"))
    groups, on_leaf = _partition_groups(nodes)
    assert groups["a"] == groups["b"] == frozenset("ab")
    assert groups["c"] == groups["d"] == frozenset("cd")
    _, on_leaf = _partition_groups(list(one_leaf(cluster).nodes))
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
