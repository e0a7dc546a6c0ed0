"""Co-location: which other jobs share a GPU, a GPU group, a node or a leaf switch with a job.

The one vocabulary of the simulator, the daemon, the policies and the learned models; it
imports nothing of slurm-marl but the domain model.

Levels, closest first (``LEVELS``; a co-location sample's ``colocated`` maps each to the model
types found there):

* ``gpu``   - the job's own physical GPUs (only where GPUs are shared as slots);
* ``group`` - its GPU groups (same socket / PCIe root), jobs already listed at ``gpu`` aside;
* ``node``  - the other GPU groups of its nodes;
* ``leaf``  - other multi-node jobs under its leaf switches (only for a multi-node job).

A placement's own spread is described by span tags (``SPAN_TAGS``: ``multi_group``,
``multi_node``, ``cross_leaf``); an estimator query carries them under the key ``span``.

Also here: the poor-placement threshold (``POOR_VS_IDEAL``, ``ideal_span``), model families (``model_family``), the co-location sample's schema and its one
reader (``read_samples``), and ``ColocationIndex``: running jobs by where they hold GPUs and
what each one shares (``Neighbourhood``), kept up to date by the simulator or built from a
snapshot (``snapshot_neighbourhoods``).
"""

from __future__ import annotations

import csv
import json
import math
import re
from collections.abc import Callable, Collection, Hashable, Iterable, Sequence
from dataclasses import dataclass
from functools import lru_cache
from pathlib import Path

from slurm_marl.domain import ClusterSnapshot, Job, JobState

# -- levels and span tags ----------------------------------------------------------------

GPU, GROUP, NODE, LEAF = "gpu", "group", "node", "leaf"
LEVELS = (GPU, GROUP, NODE, LEAF)
LEVEL_NAMES = {GPU: "same physical GPU", GROUP: "same GPU group", NODE: "same node, other group",
               LEAF: "other multi-node jobs under the same leaf switch"}

SPAN = "span"   # the key of a query's span tags
MULTI_GROUP, MULTI_NODE, CROSS_LEAF = "multi_group", "multi_node", "cross_leaf"
SPAN_TAGS = (MULTI_GROUP, MULTI_NODE, CROSS_LEAF)


# A placement whose predicted speed is below this fraction of the job's ideal speed (alone,
# on the tightest placement: ``ideal_span``) is poor. The one threshold behind las-lif's
# ``defer_below``, the learned agents' defer rule (``defer_only_below``) and what-if
# heuristic (``what_if_defer_below``), and training's exploration and reward threshold.
POOR_VS_IDEAL = 0.8


def ideal_span(total_gpus: int, min_nodes: int, largest_group: int) -> tuple[int, int]:
    """(groups, nodes) of a job's tightest placement, against which a placement's predicted
    speed is measured: the fewest nodes it may use and as few GPU groups as its GPUs need
    (at least one per node)."""
    return max(min_nodes, math.ceil(max(1, total_gpus) / max(1, largest_group))), min_nodes


def span_tags(groups: int, nodes: int, leaves: int) -> tuple[str, ...]:
    """The tags of a placement over ``groups`` GPU groups, ``nodes`` nodes, ``leaves`` leaves."""
    tags = []
    if groups > nodes:
        tags.append(MULTI_GROUP)
    if nodes > 1:
        tags.append(MULTI_NODE)
    if leaves > 1:
        tags.append(CROSS_LEAF)
    return tuple(tags)


# -- model families ----------------------------------------------------------------------
# Traces name models differently (Tiresias: ``vgg19``; Gavel: ``ResNet-18 (batch size 16)``;
# the simulator: ``resnet18_bs16``); policies and models compare families: ``resnet18``.

_BATCH = re.compile(r"(_bs\d+|\s*\(.*\)\s*)$")
_PUNCT = re.compile(r"[^a-z0-9]")


@lru_cache(maxsize=4096)
def model_family(model_type: str | None) -> str:
    """``"ResNet-18 (batch size 16)"`` -> ``"resnet18"``; ``None`` -> ``"unknown"``."""
    if not model_type:
        return "unknown"
    base = _BATCH.sub("", model_type.strip())
    family = _PUNCT.sub("", base.lower())
    return family or "unknown"


# Tiresias (NSDI'19, section on profiling): models with a few large, skewed tensors are
# sensitive to consolidation. Its simulator's models.py lists tensor sizes: the largest
# tensor of VGG11/16/19 is 392 MB (>60% of the model), of AlexNet 144 MB (61%), while the
# ResNets and Inceptions have no tensor above ~9 MB. We add the embedding-dominated Gavel
# families (LM, Recommendation), whose single embedding/softmax tensors dominate likewise.
CONSOLIDATION_SENSITIVE = ("vgg11", "vgg16", "vgg19", "alexnet", "lm", "recommendation")


# -- what a running job shares -----------------------------------------------------------

Entry = tuple[int, int, tuple[tuple[str | None, int], ...]]


@dataclass(frozen=True)
class Neighbourhood:
    """What a running job shares at one moment (the performance model's input)."""

    # per group of the job: (my GPUs there, group size, ((other's label, its GPUs there), ...))
    groups: tuple[Entry, ...]
    # per node of the job: (my GPUs there, node size, ((other's label, GPUs in other groups),...))
    nodes: tuple[Entry, ...]
    n_groups: int
    n_nodes: int
    n_leaves: int
    leaf_models: tuple[str | None, ...] = ()
    # per physical GPU of the job: labels of the other jobs on that GPU
    gpu_models: tuple[tuple[str | None, ...], ...] = ()


class ColocationIndex:
    """Running jobs by where they hold GPUs, and what each one shares.

    Nodes are positions (0, 1, ...), a node's groups positions in it; ``group_sizes[n]`` the
    GPUs of each group of node n, ``leaves[n]`` its leaf switch (None: under none known). A job
    is added with a label (its model type, or its name) and its placement: ((node, group,
    GPUs), ...) in the caller's order, plus, where GPUs are shared, the keys of the physical
    GPUs its slots are on. Neighbours are listed in the order they were added."""

    def __init__(self, group_sizes: Sequence[Sequence[int]], leaves: Sequence[str | None]
                 ) -> None:
        self.group_size = [tuple(s) for s in group_sizes]
        self.node_size = [sum(s) for s in self.group_size]
        self.leaf = list(leaves)
        self.group_jobs: list[list[dict[int, int]]] = [[{} for _ in s]
                                                        for s in self.group_size]
        self.node_jobs: list[set[int]] = [set() for _ in self.group_size]
        self.leaf_multi: dict[str, set[int]] = {}      # leaf -> multi-node jobs under it
        self.gpu_jobs: dict[Hashable, list[int]] = {}  # physical GPU -> jobs on it
        self.labels: dict[int, str | None] = {}
        self.placements: dict[int, tuple[tuple[tuple[int, int, int], ...], tuple]] = {}

    def _leaves(self, nodes: Iterable[int]) -> set[str]:
        leaf = self.leaf
        return {leaf[n] for n in nodes if leaf[n] is not None}

    def add(self, job_id: int, label: str | None, allocs: Iterable[tuple[int, int, int]],
            gpus: Iterable[Hashable] = ()) -> None:
        allocs, gpus = tuple(allocs), tuple(gpus)
        self.labels[job_id] = label
        self.placements[job_id] = (allocs, gpus)
        nodes = set()
        for n, g, k in allocs:
            self.group_jobs[n][g][job_id] = k
            self.node_jobs[n].add(job_id)
            nodes.add(n)
        for key in gpus:
            self.gpu_jobs.setdefault(key, []).append(job_id)
        if len(nodes) > 1:
            for leaf in self._leaves(nodes):
                self.leaf_multi.setdefault(leaf, set()).add(job_id)

    def remove(self, job_id: int) -> None:
        allocs, gpus = self.placements.pop(job_id)
        del self.labels[job_id]
        nodes = set()
        for n, g, _ in allocs:
            self.group_jobs[n][g].pop(job_id, None)
            self.node_jobs[n].discard(job_id)
            nodes.add(n)
        for key in gpus:
            jobs = self.gpu_jobs.get(key, [])
            if job_id in jobs:
                jobs.remove(job_id)
        if len(nodes) > 1:
            for leaf in self._leaves(nodes):
                self.leaf_multi.get(leaf, set()).discard(job_id)

    def jobs_near(self, nodes: Iterable[int], leaves: Iterable[str | None]) -> set[int]:
        """Jobs on ``nodes`` and multi-node jobs under ``leaves``: whose neighbourhood a
        change there may have changed."""
        out: set[int] = set()
        for n in nodes:
            out.update(self.node_jobs[n])
        for leaf in leaves:
            out.update(self.leaf_multi.get(leaf, ()))
        return out

    def neighbourhood(self, job_id: int) -> Neighbourhood:
        allocs, gpus = self.placements[job_id]
        label, group_jobs = self.labels, self.group_jobs
        groups, nodes_seen = [], {}
        mine = {(n, g) for n, g, _ in allocs}
        for n, g, k in allocs:
            others = tuple((label[o], c) for o, c in group_jobs[n][g].items() if o != job_id)
            groups.append((k, self.group_size[n][g], others))
            nodes_seen[n] = nodes_seen.get(n, 0) + k
        nodes = []
        for n, k in nodes_seen.items():
            others = []
            for g, jobs in enumerate(group_jobs[n]):
                if (n, g) not in mine:
                    others.extend((label[o], c) for o, c in jobs.items() if o != job_id)
            nodes.append((k, self.node_size[n], tuple(others)))
        leaves = self._leaves(nodes_seen)
        leaf_models: tuple = ()
        if len(nodes_seen) > 1:
            ids: set[int] = set()
            for leaf in leaves:
                ids.update(self.leaf_multi.get(leaf, ()))
            ids.discard(job_id)
            leaf_models = tuple(label[o] for o in sorted(ids))
        gpu_models = tuple(tuple(label[o] for o in self.gpu_jobs.get(key, ()) if o != job_id)
                           for key in gpus)
        return Neighbourhood(groups=tuple(groups), nodes=tuple(nodes), n_groups=len(allocs),
                             n_nodes=len(nodes_seen), n_leaves=len(leaves),
                             leaf_models=leaf_models, gpu_models=gpu_models)


def snapshot_index(snap: ClusterSnapshot, label_of: Callable[[Job], str | None],
                   states: Collection[JobState] = (JobState.RUNNING,)
                   ) -> tuple[ColocationIndex, list[Job]]:
    """The index of a snapshot's jobs in ``states`` that hold GPUs (nodes in snapshot order,
    groups by position), and those jobs. A snapshot knows no physical GPUs of shared slots."""
    nodes = snap.nodes
    position = {n.name: k for k, n in enumerate(nodes)}
    group_of: dict[int, dict[int, int]] = {}     # per node used: GPU index -> group position
    index = ColocationIndex([[len(grp.gpu_indices) for grp in n.gpu_groups] for n in nodes],
                            [snap.leaf_of(n.name) for n in nodes])
    held = [j for j in snap.jobs if j.state in states and j.gpu_alloc]
    for j in held:
        allocs = []
        for name, indices in j.gpu_alloc:
            k = position.get(name)
            if k is None:
                continue
            gpu_group = group_of.get(k)
            if gpu_group is None:
                gpu_group = group_of[k] = {i: g for g, grp in enumerate(nodes[k].gpu_groups)
                                           for i in grp.gpu_indices}
            per_group: dict[int, int] = {}
            for i in indices:
                g = gpu_group.get(i)
                if g is not None:
                    per_group[g] = per_group.get(g, 0) + 1
            allocs.extend((k, g, c) for g, c in per_group.items())
        index.add(j.job_id, label_of(j), allocs)
    return index, held


def snapshot_neighbourhoods(snap: ClusterSnapshot, model_of: Callable[[Job], str | None]
                            ) -> dict[int, tuple[str | None, Neighbourhood]]:
    """For every running job of a snapshot: (its label, what it shares). ``model_of`` labels a
    job: its model type for the performance model, its name for a record of neighbours."""
    index, running = snapshot_index(snap, model_of)
    return {j.job_id: (index.labels[j.job_id], index.neighbourhood(j.job_id))
            for j in running}


def sample_colocated(hood: Neighbourhood) -> dict[str, list[str]]:
    """A neighbourhood as a sample's ``colocated``: the labels at each level (``LEVELS``),
    sorted, a missing label as ``unknown``; a job listed at ``gpu`` is not listed again at
    ``group``."""
    gpu_level = sorted(m or "unknown" for ms in hood.gpu_models for m in ms)
    group_level = sorted(m or "unknown" for _, _, others in hood.groups for m, _ in others)
    if gpu_level:
        rest = list(group_level)
        for m in gpu_level:
            if m in rest:
                rest.remove(m)
        group_level = rest
    return {GPU: gpu_level, GROUP: group_level,
            NODE: sorted(m or "unknown" for _, _, others in hood.nodes for m, _ in others),
            LEAF: sorted(m or "unknown" for m in hood.leaf_models)}


# -- co-location samples -----------------------------------------------------------------
# One sample is one stretch of time during which a job's neighbourhood and speed stayed the
# same (docs/simulator.md): time_s, job_id, model_type, num_gpus, groups, nodes, leaves,
# cross_leaf, colocated (level -> model types), duration_s, speed, strength. JSONL holds one
# object a line; the CSV variant these columns, each level's models joined by ``;``:
SAMPLE_CSV_COLUMNS = ("time_s", "job_id", "model_type", "num_gpus", "groups", "nodes",
                      "leaves", "cross_leaf", *(f"colocated_{lvl}" for lvl in LEVELS),
                      "duration_s", "speed", "strength")


class SampleError(ValueError):
    """A co-location sample that cannot be used; the message names the file and line."""


def check_sample(obj, where: str) -> dict:
    """``obj`` if it is a valid sample, else SampleError naming ``where``."""
    if not isinstance(obj, dict):
        raise SampleError(f"{where}: a sample must be a JSON object")
    try:
        speed = float(obj["speed"])
    except KeyError:
        raise SampleError(f"{where}: missing 'speed'") from None
    except (TypeError, ValueError):
        raise SampleError(f"{where}: speed={obj.get('speed')!r} is not a number") from None
    if not (math.isfinite(speed) and speed > 0):
        raise SampleError(f"{where}: speed={speed!r} must be a positive number")
    model = obj.get("model_type")
    if model is not None and not isinstance(model, str):
        raise SampleError(f"{where}: model_type must be a string or null")
    for key in ("num_gpus", "groups", "nodes", "leaves"):
        value = obj.get(key, 1)
        if isinstance(value, bool) or not isinstance(value, int) or value < 1:
            raise SampleError(f"{where}: {key}={value!r} must be an integer >= 1")
    coloc = obj.get("colocated", {})
    if not isinstance(coloc, dict):
        raise SampleError(f"{where}: 'colocated' must map a level to model names")
    for level, models in coloc.items():
        if not isinstance(models, (list, tuple)) or not all(
                isinstance(m, str) for m in models):
            raise SampleError(f"{where}: colocated.{level} must be a list of names")
    return obj


def _csv_sample(row: dict) -> dict:
    """A CSV row as the sample its JSONL line would be (missing optional columns left out;
    ``num_gpus`` defaults to ``groups``)."""
    out: dict = {}
    for key, kind in (("time_s", float), ("job_id", int)):
        if row.get(key):
            out[key] = kind(row[key])
    out["model_type"] = row["model_type"] or None
    out["num_gpus"] = int(row.get("num_gpus") or row["groups"])
    for key in ("groups", "nodes", "leaves"):
        out[key] = int(row[key])
    out["cross_leaf"] = out["leaves"] > 1
    out["colocated"] = {lvl: [m for m in (row.get(f"colocated_{lvl}") or "").split(";") if m]
                        for lvl in LEVELS}
    out["duration_s"] = float(row.get("duration_s") or 1.0)
    out["speed"] = float(row["speed"])
    if row.get("strength"):
        out["strength"] = row["strength"]
    return out


def read_samples(path: str | Path) -> list[dict]:
    """Co-location samples from JSONL (one object a line) or CSV (``SAMPLE_CSV_COLUMNS``),
    validated; errors (SampleError) name the file and line."""
    path = Path(path)
    if not path.is_file():
        raise SampleError(f"samples file {path} does not exist")
    out: list[dict] = []
    try:
        with open(path, newline="" if path.suffix == ".csv" else None,
                  encoding="utf-8") as fh:
            if path.suffix == ".csv":
                reader = csv.DictReader(fh)
                for row in reader:
                    where = f"{path}:{reader.line_num}"
                    try:
                        sample = _csv_sample(row)
                    except (KeyError, TypeError, ValueError) as exc:
                        raise SampleError(f"{where}: bad sample row ({exc})") from None
                    out.append(check_sample(sample, where))
                return out
            for line_no, line in enumerate(fh, 1):
                if not line.strip():
                    continue
                try:
                    obj = json.loads(line)
                except json.JSONDecodeError as exc:
                    raise SampleError(f"{path}:{line_no}: invalid JSON: {exc.msg}") from None
                out.append(check_sample(obj, f"{path}:{line_no}"))
    except UnicodeDecodeError:
        raise SampleError(f"{path}: not a UTF-8 text file") from None
    return out
