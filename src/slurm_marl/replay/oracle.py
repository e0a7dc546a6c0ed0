"""Emulated interference on the real cluster: the simulator's performance model, applied to
what Slurm actually placed.

The fake GPUs are /dev/null, so nothing physical slows a job down. The oracle watches the
running jobs (one snapshot per tick), works out for each replay job what it shares (GPU group,
node, leaf links with other multi-node jobs), asks ``sim.perf.job_speed`` how fast it runs
there, and writes that speed to ``<dir>/speed/<jobid>``. Each job's payload advances at that
speed. So the agent's placements change real completion times through the same documented
model the simulator uses.
"""

from __future__ import annotations

import logging
import os
import threading
import time
from pathlib import Path

from slurm_marl.domain import ClusterSnapshot, Job, JobState
from slurm_marl.replay.plan import parse_job_name
from slurm_marl.sim.perf import Neighbourhood, PerfParams, job_speed

log = logging.getLogger(__name__)


def _model(job: Job) -> str | None:
    parsed = parse_job_name(job.name)
    return parsed[1] if parsed else None


def neighbourhoods(snap: ClusterSnapshot) -> dict[int, tuple[str | None, Neighbourhood]]:
    """For every running job: (its model, what it shares) as the performance model reads it."""
    running = [j for j in snap.jobs if j.state is JobState.RUNNING and j.gpu_alloc]
    # (node, group) -> {job id: GPUs there}
    group_jobs: dict[tuple[str, int], dict[int, int]] = {}
    leaf_multi: dict[str, set[int]] = {}
    for j in running:
        node_names = [n for n, _ in j.gpu_alloc]
        for node_name, indices in j.gpu_alloc:
            node = snap.node(node_name)
            if node is None:
                continue
            for i in indices:
                g = node.group_of_gpu(i)
                if g is not None:
                    slot = group_jobs.setdefault((node_name, g.index), {})
                    slot[j.job_id] = slot.get(j.job_id, 0) + 1
        if len(node_names) > 1:
            for n in node_names:
                leaf = snap.leaf_of(n)
                if leaf:
                    leaf_multi.setdefault(leaf, set()).add(j.job_id)
    models = {j.job_id: _model(j) for j in running}
    out = {}
    for j in running:
        groups, nodes, leaves = [], [], set()
        mine_groups = set()
        for node_name, indices in j.gpu_alloc:
            node = snap.node(node_name)
            if node is None:
                continue
            leaf = snap.leaf_of(node_name)
            if leaf:
                leaves.add(leaf)
            per_group: dict[int, int] = {}
            for i in indices:
                g = node.group_of_gpu(i)
                if g is not None:
                    per_group[g.index] = per_group.get(g.index, 0) + 1
            for gi, mine in per_group.items():
                mine_groups.add((node_name, gi))
                size = node.gpu_groups[gi].gpu_count if gi < len(node.gpu_groups) else mine
                others = tuple((models.get(o), k) for o, k in
                               group_jobs.get((node_name, gi), {}).items() if o != j.job_id)
                groups.append((mine, size, others))
            others_node = []
            for g in node.gpu_groups:
                if (node_name, g.index) in mine_groups:
                    continue
                others_node.extend((models.get(o), k) for o, k in
                                   group_jobs.get((node_name, g.index), {}).items()
                                   if o != j.job_id)
            nodes.append((len(indices), node.gpu_count, tuple(others_node)))
        leaf_models: tuple = ()
        if len(j.gpu_alloc) > 1:
            ids = set().union(*(leaf_multi.get(leaf, set()) for leaf in leaves)) - {j.job_id}
            leaf_models = tuple(models.get(o) for o in sorted(ids))
        out[j.job_id] = (models[j.job_id], Neighbourhood(
            groups=tuple(groups), nodes=tuple(nodes), n_groups=len(groups),
            n_nodes=len(nodes), n_leaves=len(leaves), leaf_models=leaf_models))
    return out


def speeds(snap: ClusterSnapshot, params: PerfParams) -> dict[int, float]:
    return {jid: job_speed(model, hood, params)
            for jid, (model, hood) in neighbourhoods(snap).items()}


class Oracle:
    """A background thread writing each running job's speed every ``tick_s``."""

    def __init__(self, source, directory: Path, params: PerfParams, tick_s: float = 0.5):
        self.source = source
        self.dir = Path(directory) / "speed"
        self.dir.mkdir(parents=True, exist_ok=True)
        self.params = params
        self.tick_s = tick_s
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="oracle", daemon=True)
        self.ticks = 0
        self.errors = 0
        self.speed_sum = 0.0
        self.speed_n = 0

    def start(self) -> "Oracle":
        self._thread.start()
        return self

    def stop(self) -> None:
        self._stop.set()
        self._thread.join(timeout=10)

    def tick(self) -> dict[int, float]:
        current = speeds(self.source.snapshot(), self.params)
        for jid, speed in current.items():
            tmp = self.dir / f".{jid}.tmp"
            tmp.write_text(f"{speed:.6f}\n")
            os.replace(tmp, self.dir / str(jid))
            self.speed_sum += speed
            self.speed_n += 1
        return current

    def _run(self) -> None:
        while not self._stop.is_set():
            started = time.monotonic()
            try:
                self.tick()
                self.ticks += 1
            except Exception as exc:  # a missed tick only delays speed changes
                self.errors += 1
                log.debug("oracle tick failed: %s", exc)
            self._stop.wait(max(0.0, self.tick_s - (time.monotonic() - started)))
