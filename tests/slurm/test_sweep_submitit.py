"""A 24-simulation sweep as ONE Slurm array job through submitit on a real local cluster,
and the same sweep in local processes: identical results (issue 17, item 4)."""

from __future__ import annotations

import os
import sys
import time
from pathlib import Path

import pytest

import slurm_marl
from slurm_marl.shared_data import data_dir, data_file
from slurm_marl.sweep import comparable, cross_product, run_sweep
from slurmtest import submitit_cluster

pytestmark = pytest.mark.slurm

# 1 window x 2 strengths x 3 profiles x 4 seeds = 24 simulations of 100 Philly jobs
# (at 'low' and 'high' interference the seeds draw different model types: distinct results)
STRENGTHS = ["low", "high"]
PROFILES = ["las-consolidate", "las-spread", "fifo-backfill"]
SEEDS = [0, 1, 2, 3]


def job_host_paths() -> tuple[str, ...]:
    """What submitit's job needs of this host to run as this test does: the interpreter,
    its virtualenv, the package's source and the trace. A newer Slurm's jobs run inside its
    chroot, which sees them bound read-only at the same paths."""
    return (sys.base_prefix, sys.prefix, str(Path(slurm_marl.__file__).parents[1]),
            str(data_dir()),
            *(p for p in os.environ.get("PYTHONPATH", "").split(os.pathsep) if p))


@pytest.fixture(scope="module")
def local_slurm():
    """A 2-node cluster: 16 one-CPU tasks at a time."""
    with submitit_cluster(2, job_host_paths()) as cluster:
        yield cluster


def sweep_cells():
    return cross_product(str(data_file("traces/philly.csv")), "2x2x4",
                         windows=["vc=6214e9,rows=10000:10100"], strengths=STRENGTHS,
                         profiles=PROFILES, seeds=SEEDS)


def test_sweep_as_one_array_job_equals_local_processes(local_slurm, tmp_path):
    cells = sweep_cells()
    assert len(cells) == 24
    conf_before = os.environ.get("SLURM_CONF")
    started = time.perf_counter()
    on_slurm = run_sweep(cells, "slurm", workers=16, slurm_folder=tmp_path / "submitit",
                         slurm_conf=local_slurm.slurm_conf, timeout_s=240)
    slurm_s = time.perf_counter() - started
    assert os.environ.get("SLURM_CONF") == conf_before   # set for sbatch only, restored
    started = time.perf_counter()
    local = run_sweep(cells, "local", workers=2)
    local_s = time.perf_counter() - started
    print(f"\n24-cell sweep: slurm backend {slurm_s:.1f} s, local (2 processes) {local_s:.1f} s")

    assert [r["error"] for r in on_slurm + local] == [None] * 48
    # every cell ran as a task of one array job: job ids A_0 .. A_23, seen inside the task
    places = [r["ran_on"] for r in on_slurm]
    array_id = places[0]["array_job_id"]
    assert [p["submitted_as"] for p in places] == [f"{array_id}_{i}" for i in range(24)]
    assert [(p["array_job_id"], p["array_task_id"]) for p in places] == \
        [(array_id, str(i)) for i in range(24)]
    assert len({p["job_id"] for p in places}) == 24
    assert {p["node"] for p in places} <= set(local_slurm.spec.node_names)
    if "SLURM_JOB_ID" not in os.environ:     # pytest itself not inside a Slurm job
        assert all(r["ran_on"] is None for r in local)
    # identical results, cell by cell (wall times and places aside)
    assert comparable(on_slurm) == comparable(local)
    assert [r["key"] for r in on_slurm] == [c.key for c in cells]
    assert len({r["avg_jct_s"] for r in local}) > 8
