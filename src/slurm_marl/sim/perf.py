"""The simulator's performance model: how fast a job runs where it is placed.

speed = sharing / (1 + penalty), relative to the job alone on its GPUs (1.0).

* ``sharing`` - only when the cluster offers GPUs as shared slots (``share=K``): for each of
  the job's physical GPUs, the product of Gavel's measured pair factors with every job on
  that GPU; the job runs at its slowest GPU (synchronous training). Measured, so not scaled
  by the strength preset.
* ``penalty`` - the around-the-GPU effects, each an assumption scaled by the interference
  strength (``none`` 0, ``low`` 0.25, ``medium`` 0.5, ``high`` 1 x the coefficients below):

  - same GPU group (PCIe root complex, socket memory bandwidth):
    ``group_contention x host(job) x sum(pressure(other) x other's GPUs in the group / group
    size)``, averaged over the job's groups by its GPUs there;
  - same node, other group (QPI/UPI, CPU cores, host memory, NIC): ``node_contention x
    host(job) x sum(pressure(other) x other's GPUs on the node / node size)``;
  - the job's own spread (gradient exchange over slower links): ``comm(job) x
    (cross_group if it spans GPU groups + cross_node if it spans nodes + cross_leaf if it
    spans leaf switches)``;
  - leaf links shared with other multi-node jobs: ``leaf_link x comm(job) x sum(comm(other))``.

At ``high`` a 1-GPU job with a full group of pressure-1 neighbours runs at ~0.77, a
comm-heavy (0.77) job spread over two leaves at ~0.59; Gavel's same-GPU pairs (median 0.68)
stay the strongest effect, as the data README asks.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass

from slurm_marl.domain import ClusterSnapshot, Job, JobState
from slurm_marl.sim.models import family_profile, sharing_factor

STRENGTHS = {"none": 0.0, "low": 0.25, "medium": 0.5, "high": 1.0}


@dataclass(frozen=True)
class PerfParams:
    """Coefficients at strength ``high``; the preset scales them."""

    strength: str = "none"
    group_contention: float = 0.40
    node_contention: float = 0.15
    cross_group: float = 0.15
    cross_node: float = 0.60
    cross_leaf: float = 0.30
    leaf_link: float = 0.30

    def __post_init__(self) -> None:
        if self.strength not in STRENGTHS:
            raise ValueError(f"interference strength {self.strength!r} is not one of "
                             f"{', '.join(STRENGTHS)}")

    @property
    def scale(self) -> float:
        return STRENGTHS[self.strength]


@dataclass(frozen=True)
class Neighbourhood:
    """What a job shares, as the engine sees it at one moment."""

    # per group of the job: (my GPUs there, group size, ((other model, its GPUs there), ...))
    groups: tuple[tuple[int, int, tuple[tuple[str | None, int], ...]], ...]
    # per node of the job: (my GPUs there, node size, ((other model, GPUs in other groups),...))
    nodes: tuple[tuple[int, int, tuple[tuple[str | None, int], ...]], ...]
    n_groups: int
    n_nodes: int
    n_leaves: int
    leaf_models: tuple[str | None, ...] = ()
    # per physical GPU of the job: models of the other jobs on that GPU
    gpu_models: tuple[tuple[str | None, ...], ...] = ()


def contention(entries: Sequence[tuple[int, int, tuple[tuple[str | None, int], ...]]]
               ) -> float:
    """GPU-weighted mean over the job's groups (or nodes) of sum(pressure x share)."""
    total_mine = sum(e[0] for e in entries)
    if total_mine <= 0:
        return 0.0
    out = 0.0
    for mine, size, others in entries:
        if not others or size <= 0:
            continue
        load = sum(family_profile(m).pressure * k / size for m, k in others)
        out += mine / total_mine * load
    return out


def sharing_speed(model: str | None, gpu_models: Iterable[tuple[str | None, ...]]) -> float:
    slowest = 1.0
    for others in gpu_models:
        f = 1.0
        for o in others:
            f *= sharing_factor(model, o)
        slowest = min(slowest, f)
    return slowest


def penalty(model: str | None, hood: Neighbourhood, params: PerfParams) -> float:
    scale = params.scale
    if scale == 0:
        return 0.0
    prof = family_profile(model)
    pen = params.group_contention * prof.host * contention(hood.groups)
    pen += params.node_contention * prof.host * contention(hood.nodes)
    spread = 0.0
    if hood.n_groups > hood.n_nodes:
        spread += params.cross_group
    if hood.n_nodes > 1:
        spread += params.cross_node
    if hood.n_leaves > 1:
        spread += params.cross_leaf
    pen += prof.comm * spread
    if hood.leaf_models:
        pen += params.leaf_link * prof.comm * sum(family_profile(m).comm
                                                  for m in hood.leaf_models)
    return scale * pen


def job_speed(model: str | None, hood: Neighbourhood, params: PerfParams) -> float:
    share = sharing_speed(model, hood.gpu_models) if hood.gpu_models else 1.0
    return share / (1.0 + penalty(model, hood, params))


def snapshot_neighbourhoods(snap: ClusterSnapshot, model_of: Callable[[Job], str | None]
                            ) -> dict[int, tuple[str | None, Neighbourhood]]:
    """For every running job of a real cluster's snapshot: (its model, what it shares) as the
    performance model reads it. ``model_of`` names a job's model (its signature)."""
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
    models = {j.job_id: model_of(j) for j in running}
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


def sample_colocated(hood: Neighbourhood) -> dict[str, list[str]]:
    """What a co-location sample records (the interference model's input levels): models on
    the job's own GPUs (``gpu``), elsewhere in its GPU groups (``group``), in the other groups
    of its nodes (``node``), and multi-node jobs under its leaf switches (``leaf``)."""
    gpu_level = sorted(m or "unknown" for ms in hood.gpu_models for m in ms)
    group_level = sorted(m or "unknown" for _, _, others in hood.groups for m, _ in others)
    if gpu_level:
        rest = list(group_level)
        for m in gpu_level:
            if m in rest:
                rest.remove(m)
        group_level = rest
    return {"gpu": gpu_level, "group": group_level,
            "node": sorted(m or "unknown" for _, _, others in hood.nodes for m, _ in others),
            "leaf": sorted(m or "unknown" for m in hood.leaf_models)}
