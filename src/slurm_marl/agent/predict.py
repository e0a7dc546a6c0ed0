"""The interference model's predictions for a job's candidate placements, batched: the
job's own predicted speed on each, the slowdown it would impose on its new neighbours there
(Harmony's reward is the difference), and its ideal speed (alone, on the tightest possible
placement), against which a placement is judged poor or not.
"""

from __future__ import annotations


import numpy as np
import torch

from slurm_marl.agent.views import Topology
from slurm_marl.colocation import GROUP, LEAF, MULTI_GROUP, NODE, ideal_span, span_tags
from slurm_marl.colocation import LEVELS as COLOC_LEVELS
from slurm_marl.domain import Job
from slurm_marl.models.interference import InterferenceModel, shape_vector
from slurm_marl.placement_shapes import PlacementState


def distinct_rows(rows: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """(index of the first of each distinct row, each row's distinct row) of a float array
    ``[n, ...]`` of counts: small non-negative integers are coded exactly in one int64 per
    row (base at most 22 for 14 digits); anything else is compared as raw bytes."""
    flat = rows.reshape(len(rows), -1)
    top = float(flat.max()) if flat.size else 0.0
    base = int(top) + 1
    if flat.size and float(flat.min()) >= 0.0 and base ** flat.shape[1] < 2 ** 62 and \
            np.array_equal(flat, np.floor(flat)):
        code = flat.astype(np.int64) @ (np.int64(base) ** np.arange(flat.shape[1],
                                                                   dtype=np.int64))
    else:
        flat = np.ascontiguousarray(flat)
        code = flat.view(np.dtype((np.void, flat.shape[1] * flat.itemsize))).ravel()
    _, first, inverse = np.unique(code, return_index=True, return_inverse=True)
    return first, inverse.reshape(-1)


class Predictor:
    """Predictions of one interference model, with its per-family tables memoised.
    ``dedupe`` (default): the model runs once per distinct candidate row (False: once per
    candidate, the reference the tests compare with)."""

    dedupe = True

    def __init__(self, model: InterferenceModel) -> None:
        self.model = model
        self.vocab = model.vocab
        self._imposed: dict[int, tuple[np.ndarray, np.ndarray]] = {}
        self._ideal: dict[tuple, float] = {}

    @property
    def n_vocab(self) -> int:
        return len(self.vocab)

    def imposed_tables(self, family: int) -> tuple[np.ndarray, np.ndarray]:
        """(group, node) vectors over families: the predicted slowdown (1 - speed) of a
        1-GPU neighbour of each family when a job of ``family`` joins its group / node."""
        hit = self._imposed.get(family)
        if hit is not None:
            return hit
        v = self.n_vocab
        jobs = torch.arange(v).repeat(2)
        counts = torch.zeros(2 * v, len(COLOC_LEVELS), v)
        counts[:v, COLOC_LEVELS.index(GROUP), family] = 1.0
        counts[v:, COLOC_LEVELS.index(NODE), family] = 1.0
        shape = torch.tensor([shape_vector(1, ())] * (2 * v), dtype=torch.float32)
        speed = self.model.predict_tensors(jobs, counts, shape).numpy()
        out = (1.0 - speed[:v]).astype(np.float32), (1.0 - speed[v:]).astype(np.float32)
        out[0][0] = out[1][0] = 0.0  # unknown neighbours: no claim
        self._imposed[family] = out
        return out

    def ideal_speed(self, job: Job, total: int, state: PlacementState) -> float:
        """Predicted speed alone on the tightest possible placement (fewest nodes, then
        fewest groups): what a placement's predicted speed is measured against."""
        groups, nodes = ideal_span(total, state.min_nodes(job), state.largest_group_cap)
        key = (self.vocab.index(job.model_type), total, groups, nodes)
        hit = self._ideal.get(key)
        if hit is None:
            tags = span_tags(groups, nodes, 1)
            counts = torch.zeros(1, len(COLOC_LEVELS), self.n_vocab)
            shape = torch.tensor([shape_vector(total, tags)], dtype=torch.float32)
            hit = self._ideal[key] = float(self.model.predict_tensors(
                torch.tensor([key[0]]), counts, shape)[0])
        return hit

    def predict(self, job: Job, total: int, single: np.ndarray, splits: tuple,
                 other_rows: list, counts: np.ndarray, node_counts: np.ndarray,
                 state: PlacementState, top: Topology):
        """Predicted speed of the job and the slowdown it imposes on its new neighbours, for
        the single-group candidates, the one-node splits (arrays) and the others (lists)."""
        v = self.n_vocab
        fam = self.vocab.index(job.model_type)
        lvl_group, lvl_node = COLOC_LEVELS.index(GROUP), COLOC_LEVELS.index(NODE)
        lvl_leaf = COLOC_LEVELS.index(LEAF)
        sp_cand, sp_row, n_split = splits
        n_single, n_other = len(single), len(other_rows)
        total_rows = n_single + n_split + n_other
        if total_rows == 0:
            empty = np.zeros(0, dtype=np.float32)
            return empty, empty, empty, empty, [], []
        batch = np.zeros((total_rows, len(COLOC_LEVELS), v), dtype=np.float32)
        shape = np.zeros((total_rows, 4), dtype=np.float32)
        if n_single:
            batch[:n_single, lvl_group] = counts[single]
            batch[:n_single, lvl_node] = node_counts[top.group_node[single]] - counts[single]
            shape[:n_single] = shape_vector(total, ())
        if n_split:
            part = batch[n_single:n_single + n_split]
            group_level = np.zeros((n_split, v), dtype=np.float32)
            np.add.at(group_level, sp_cand, counts[sp_row])
            first = np.unique(sp_cand, return_index=True)[1]
            part[:, lvl_group] = group_level
            part[:, lvl_node] = node_counts[top.group_node[sp_row[first]]] - group_level
            shape[n_single:n_single + n_split] = shape_vector(total, (MULTI_GROUP,))
        leaf_counts = None
        for i, (allocs, grows) in enumerate(other_rows, start=n_single + n_split):
            nrows = sorted({int(top.group_node[r]) for r in grows})
            batch[i, lvl_group] = counts[grows].sum(0)
            batch[i, lvl_node] = node_counts[nrows].sum(0) - batch[i, lvl_group]
            nodes = {n for n, _, _ in allocs}
            leaves = {state.leaf_of[n] for n in nodes}
            if len(nodes) > 1:
                if leaf_counts is None:
                    leaf_counts = self._leaf_counts(state)
                for leaf in leaves:
                    vec = leaf_counts.get(leaf)
                    if vec is not None:
                        batch[i, lvl_leaf] += vec
            shape[i] = shape_vector(total, span_tags(len(allocs), len(nodes), len(leaves)))
        # Candidates of one shape with the same neighbours get the same predictions: the
        # model runs once per distinct row of each block (one-group candidates, one-node
        # splits), so the predictions stay a function of this observation alone.
        speed = np.empty(total_rows, dtype=np.float32)
        imposed = np.empty(total_rows, dtype=np.float32)
        t_group, t_node = self.imposed_tables(fam)
        for lo, hi in ((0, n_single), (n_single, n_single + n_split),
                       (n_single + n_split, total_rows)):
            if hi == lo:
                continue
            part = batch[lo:hi]
            first, inverse = (distinct_rows(part[:, [lvl_group, lvl_node]])
                              if self.dedupe and hi - lo > 1 and lo < n_single + n_split
                              else (None, None))
            part_shape = shape[lo:hi]
            if first is not None:
                part, part_shape = part[first], part_shape[first]
            out = self.model.predict_tensors(
                torch.full((len(part),), fam, dtype=torch.long),
                torch.from_numpy(np.ascontiguousarray(part)),
                torch.from_numpy(np.ascontiguousarray(part_shape))).numpy()
            out_imposed = part[:, lvl_group] @ t_group + part[:, lvl_node] @ t_node
            if first is not None:
                out, out_imposed = out[inverse], out_imposed[inverse]
            speed[lo:hi], imposed[lo:hi] = out, out_imposed
        a, b = n_single, n_single + n_split
        return (speed[:a], imposed[:a], speed[a:b], imposed[a:b], speed[b:].tolist(),
                imposed[b:].tolist())

    def _leaf_counts(self, state: PlacementState) -> dict:
        out = {}
        for leaf, models in state.leaf_multinode.items():
            vec = np.zeros(self.n_vocab, dtype=np.float32)
            for m in models:
                vec[self.vocab.index(m)] += 1.0
            out[leaf] = vec
        return out
