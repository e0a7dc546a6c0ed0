"""The single-node placement rule in its two forms (a loop for the framework, arrays for the
learned observation) gives the same nodes and groups."""

import random

import numpy as np
import pytest

from slurm_marl.domain import Job, JobState
from slurm_marl.placement_shapes import single_node_fit_arrays, single_node_fits
from slurm_marl.policy.state import CycleState
from slurm_marl.topology.synthetic import synthetic_snapshot


def _flat(cap):
    free = np.array([f for row in cap for f in row], dtype=np.float32)
    node = np.array([n for n, row in enumerate(cap) for _ in row], dtype=np.int64)
    return free, node


@pytest.mark.parametrize("seed", range(8))
def test_array_form_matches_the_loop(seed):
    rng = random.Random(seed)
    snap = synthetic_snapshot(60, busy_fraction=rng.choice([0.2, 0.5, 0.8]), seed=seed,
                              gpus_per_node=rng.choice([4, 8]), sockets=rng.choice([1, 2]))
    state = CycleState(snap)
    # Hosts with few CPUs or little memory left, so those checks decide some nodes.
    for n in rng.sample(range(len(state.infos)), 20):
        state.free_cpus[n] = rng.randint(0, 8)
        state.free_mem[n] = rng.randint(0, 64_000)
    checked = 0
    for trial in range(40):
        gpus = rng.choice([1, 2, 3, 4, 6, 8])
        job = Job(job_id=9_000_000 + trial, partition=snap.nodes[0].partitions[0],
                  gpus_per_job=gpus, cpus=rng.choice([1, gpus, 4 * gpus]),
                  mem_mib=rng.choice([0, 4_000, 32_000]), submit_time_s=0.0,
                  state=JobState.PENDING)
        nodes = sorted(rng.sample(range(len(state.infos)), rng.randint(1, len(state.infos))))
        cap = state.view
        loop = single_node_fits(job, state, cap, nodes, gpus, gpus, dedupe=False)
        free, node = _flat(cap)
        fits, split_nodes = single_node_fit_arrays(job, state, free, node, nodes, gpus, gpus)
        starts = np.concatenate([[0], np.cumsum([len(r) for r in cap])])
        fitting = {n: [g for g in range(len(cap[n])) if fits[starts[n] + g]]
                   for n in set(node[fits].tolist())}
        assert [(n, f) for n, f in loop if f] == sorted(fitting.items())
        assert [n for n, f in loop if not f] == split_nodes.tolist()
        checked += len(loop)
    assert checked > 0


def test_array_form_on_nothing_allowed():
    snap = synthetic_snapshot(4, busy_fraction=0.0, seed=0, gpus_per_node=4)
    state = CycleState(snap)
    job = Job(job_id=1, partition="p0", gpus_per_job=1, submit_time_s=0.0)
    free, node = _flat(state.view)
    fits, split_nodes = single_node_fit_arrays(job, state, free, node, (), 1, 1)
    assert not fits.any() and len(split_nodes) == 0
    fits, _ = single_node_fit_arrays(job, state, free, node, (2,), 1, 1)
    assert set(node[fits].tolist()) == {2}
