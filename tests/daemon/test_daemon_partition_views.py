"""All partitions' views in one pass give each partition's view as its definition says: its
nodes, the running jobs on any of its nodes, the other jobs submitted to it (a job submitted
to several partitions is in each); order kept."""

import random

from hypothesis import given, settings
from hypothesis import strategies as st

from slurm_marl.slurm_integration.admission import partition_views
from slurm_marl.domain import ClusterSnapshot, Job, JobState, Node
from slurm_marl.topology.synthetic import synthetic_snapshot


def reference(snap, partition):
    nodes = tuple(n for n in snap.nodes if partition in n.partitions)
    names = {n.name for n in nodes}
    jobs = tuple(j for j in snap.jobs
                 if (any(n in names for n in j.nodes) if j.is_running
                     else partition in j.partition.split(",")))
    return nodes, jobs


@settings(max_examples=40, deadline=None)
@given(seed=st.integers(0, 10**6))
def test_one_pass_views_are_the_views(seed):
    rng = random.Random(seed)
    base = synthetic_snapshot(rng.randint(4, 30), partitions=3, seed=seed)
    names = [p.name for p in base.partitions]
    nodes = tuple(Node(**{**n.__dict__, "partitions": tuple(rng.sample(names, rng.randint(1, 2)))})
                  if rng.random() < 0.3 else n for n in base.nodes)
    states = [JobState.PENDING, JobState.COMPLETING, JobState.COMPLETED, JobState.SUSPENDED]
    extra = tuple(Job(10_000 + i, partition=",".join(rng.sample(names + ["other", "p0"], 2)),
                      state=rng.choice(states), gpus_per_node=1,
                      nodes=tuple(rng.sample([n.name for n in nodes] + ["gone"], 1)))
                  for i in range(rng.randint(0, 20)))
    snap = ClusterSnapshot(base.time_s, nodes, base.jobs + extra, base.partitions,
                           base.switches)
    asked = rng.sample(names, rng.randint(1, 3)) + (["missing"] if rng.random() < 0.3 else [])
    views = partition_views(snap, asked)
    assert list(views) == asked
    for p in asked:
        assert (views[p].nodes, views[p].jobs) == reference(snap, p)
        assert [x.name for x in views[p].partitions] == [x.name for x in snap.partitions
                                                        if x.name == p]
