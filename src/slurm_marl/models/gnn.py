"""Hierarchical GNN encoder: GPU -> GPU group -> node -> leaf -> spine, then back down.

Zhao & Wu (IEEE TNSM 2022) encode a partition's topology level by level, so one agent can
reason about thousands of servers. The hierarchy is a tree (``agent/features.py``): each
level is a bipartite graph whose edges run from every row to its one parent
(``parent[level]``), so message passing is two sweeps over those edges, built on PyG:

* bottom-up: each level's embedding is an MLP of its own features and the mean of its
  children's embeddings (``torch_geometric.utils.scatter(..., reduce="mean")`` over the
  parent index; a parent without children gets zeros);
* top-down: leaf, node and group embeddings are refined with their parent's refined
  embedding (residual), so a group embedding sees its node, leaf and spine context. Every
  row has exactly one parent, so its message is a gather of the parent row (the
  ``index_select`` PyG's ``MessagePassing`` lifts with), not a reduction.

The encoder takes dimensions, not data (as PyG's ``hetero_conv_dblp`` example): features per
level come in as ``x[level]`` with any leading batch dims (``[..., rows, dim]``) and the
parent index per level (``parent[level]``, shared by the batch).

This replaced hand-made ``index_add_`` code with the same parameters and outputs; the two
were measured side by side (``benchmarks/bench_models.py --encoder-vs REV``;
docs/benchmarks.md, section 3). A ``MessagePassing`` layer (``aggr="mean"``) for the
bottom-up sweep computes the same but was slower at 2,000 and 10,000 nodes, and more so with
the top-down sweep as ``MessagePassing`` too, so the scatter utility is used directly.
"""

from __future__ import annotations

from collections.abc import Mapping

import torch
from torch import nn
from torch_geometric.utils import scatter

LEVELS = ("gpu", "gpu_group", "node", "leaf", "spine")


def squash(x: torch.Tensor) -> torch.Tensor:
    """Counts and fractions on one scale: sign(x) * log(1 + |x|)."""
    return torch.sign(x) * torch.log1p(torch.abs(x))


def mean_by_parent(h: torch.Tensor, parent: torch.Tensor, n_parent: int) -> torch.Tensor:
    """Mean of child rows per parent row along dim -2; parents without children get 0.

    PyG's scatter along dim 0 of a 2-D tensor; leading batch dims are moved behind the rows
    and flattened first (``scatter`` along dim -2 of a 3-D tensor broadcasts the index to
    every element and takes a slower path than ``index_add_`` on a batch: docs/benchmarks.md,
    "3. Inference and training cost")."""
    if h.dim() == 2:
        return scatter(h, parent, dim=0, dim_size=n_parent, reduce="mean")
    rows_first = h.movedim(-2, 0)
    pooled = scatter(rows_first.reshape(rows_first.shape[0], -1), parent, dim=0,
                     dim_size=n_parent, reduce="mean")
    return pooled.reshape(n_parent, *rows_first.shape[1:]).movedim(0, -2)


def mlp(width_in: int, width_out: int, hidden: int | None = None) -> nn.Sequential:
    hidden = hidden or width_out
    return nn.Sequential(nn.Linear(width_in, hidden), nn.ReLU(), nn.Linear(hidden, width_out))


class HierarchicalEncoder(nn.Module):
    def __init__(self, dims: Mapping[str, int], hidden: int = 32) -> None:
        super().__init__()
        missing = [lvl for lvl in LEVELS if lvl not in dims]
        if missing:
            raise ValueError(f"encoder dims lack level(s) {missing}")
        self.dims = {lvl: int(dims[lvl]) for lvl in LEVELS}
        self.hidden = hidden
        self.up = nn.ModuleDict()
        for i, level in enumerate(LEVELS):
            width = self.dims[level] + (hidden if i > 0 else 0)
            self.up[level] = mlp(width, hidden)
        self.down = nn.ModuleDict({level: mlp(2 * hidden, hidden)
                                   for level in ("leaf", "node", "gpu_group")})

    def forward(self, x: Mapping[str, torch.Tensor], parent: Mapping[str, torch.Tensor]
                ) -> dict[str, torch.Tensor]:
        """Embeddings per level, ``[..., rows, hidden]``; groups, nodes and leaves refined
        top-down."""
        h: dict[str, torch.Tensor] = {}
        below = None
        for i, level in enumerate(LEVELS):
            feats = squash(x[level])
            if i > 0:
                child = LEVELS[i - 1]
                pooled = mean_by_parent(below, parent[child], feats.shape[-2])
                feats = torch.cat([feats, pooled], dim=-1)
            h[level] = torch.relu(self.up[level](feats))
            below = h[level]
        for level, upper in (("leaf", "spine"), ("node", "leaf"), ("gpu_group", "node")):
            context = h[upper].index_select(h[upper].dim() - 2, parent[level])
            h[level] = h[level] + self.down[level](torch.cat([h[level], context], dim=-1))
        return h
