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

from collections.abc import Iterable, Sequence
from dataclasses import dataclass

from slurm_marl.colocation import Neighbourhood
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
