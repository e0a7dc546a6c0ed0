"""Hierarchical GNN encoder: GPU -> GPU group -> node -> leaf -> spine, then back down.

Zhao & Wu (IEEE TNSM 2022) encode a partition's topology level by level, so one agent can
reason about thousands of servers. The hierarchy is a tree with contiguous children
(``topology/features.py``), so message passing is two sweeps of scatter operations:

* bottom-up: each level's embedding is an MLP of its own features and the mean of its
  children's embeddings (``index_add_`` over the parent index, divided by child counts);
* top-down: leaf, node and group embeddings are refined with their parent's refined
  embedding (residual), so a group embedding sees its node, leaf and spine context.

The encoder takes dimensions, not data (as PyG's ``hetero_conv_dblp`` example): features per
level come in as ``x[level]`` with any leading batch dims (``[..., rows, dim]``) and the
parent index per level (``parent[level]``, shared by the batch).
"""

from __future__ import annotations

from collections.abc import Mapping

import torch
from torch import nn

LEVELS = ("gpu", "gpu_group", "node", "leaf", "spine")


def squash(x: torch.Tensor) -> torch.Tensor:
    """Counts and fractions on one scale: sign(x) * log(1 + |x|)."""
    return torch.sign(x) * torch.log1p(torch.abs(x))


def mean_by_parent(h: torch.Tensor, parent: torch.Tensor, n_parent: int) -> torch.Tensor:
    """Mean of child rows per parent row along dim -2; parents without children get 0."""
    shape = list(h.shape)
    shape[-2] = n_parent
    out = h.new_zeros(shape).index_add_(h.dim() - 2, parent, h)
    counts = torch.bincount(parent, minlength=n_parent).clamp_min(1).to(h.dtype)
    return out / counts.unsqueeze(-1)


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
