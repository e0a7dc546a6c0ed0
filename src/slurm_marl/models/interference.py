"""The interference (reward) model: predicted speed of a job given what it shares (Harmony).

Harmony (INFOCOM'19) trains a supervised model on historical samples of (job, co-located
jobs, placement) -> observed speed, so that a placement policy gets a reward for placements
history never tried. Ours reads the co-location samples the simulator (or the daemon's log)
emits and never the simulator's ground truth.

Input, per sample or query:

* the job's model family (an embedding; the vocabulary is fitted from the samples, unknown
  families share row 0), ``log2`` of its GPU count and its placement shape: the span tags
  ``multi_group``, ``multi_node``, ``cross_leaf`` (``colocation.span_tags`` of groups /
  nodes / leaves);
* the co-located jobs per level (``colocation.LEVELS``: ``gpu`` shared GPU, ``group`` same
  GPU group, ``node`` same node other groups, ``leaf`` multi-node jobs under the same leaf): a
  count vector over the vocabulary per level, pooled as a sum of neighbour embeddings (a
  count matrix times the embedding table) plus the neighbour count.

Output: speed in (0, 1] relative to running alone, as ``exp(-softplus(z))`` so a prediction is
never above 1 or negative. Implements the estimator protocol of ``policy/interference.py``
(``predict_speed(job, colocated_by_level)``), so least-interference can use it.

Files: ``NAME.pt`` holds the ``state_dict`` (``torch.save``), ``NAME.json`` the metadata
(vocabulary, dims, metrics). Loading is always ``torch.load(..., weights_only=True)``.
Samples are read by ``colocation.read_samples``.
"""

from __future__ import annotations

import json
import math
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
import torch
from torch import nn

from slurm_marl.colocation import LEVELS, SPAN, SPAN_TAGS, model_family, span_tags
from slurm_marl.domain import Job

FORMAT = "slurm-marl-interference/1"
SHAPE_FEATURES = ("log2_gpus", *SPAN_TAGS)
UNKNOWN = "unknown"


class ModelFileError(ValueError):
    """A model file that cannot be used; the message names the file."""


@dataclass(frozen=True)
class Vocabulary:
    """Model families seen in training; row 0 is ``unknown`` (and every unseen family)."""

    families: tuple[str, ...]

    def __post_init__(self) -> None:
        if not self.families or self.families[0] != UNKNOWN:
            raise ValueError("a vocabulary starts with 'unknown'")
        object.__setattr__(self, "_index", {f: i for i, f in enumerate(self.families)})

    @classmethod
    def fit(cls, model_types: Iterable[str | None]) -> "Vocabulary":
        seen = sorted({model_family(m) for m in model_types} - {UNKNOWN})
        return cls((UNKNOWN, *seen))

    def __len__(self) -> int:
        return len(self.families)

    def index(self, model_type: str | None) -> int:
        return self._index.get(model_family(model_type), 0)  # type: ignore[attr-defined]


@dataclass
class EncodedSamples:
    """Samples as tensors: what the network eats."""

    job: torch.Tensor        # int64 [B]
    counts: torch.Tensor     # float32 [B, len(LEVELS), V]
    shape: torch.Tensor      # float32 [B, len(SHAPE_FEATURES)]
    speed: torch.Tensor      # float32 [B]
    job_ids: list = field(default_factory=list)
    model_types: list = field(default_factory=list)

    def __len__(self) -> int:
        return int(self.job.shape[0])

    def subset(self, rows: np.ndarray) -> "EncodedSamples":
        idx = torch.as_tensor(rows, dtype=torch.long)
        return EncodedSamples(self.job[idx], self.counts[idx], self.shape[idx],
                              self.speed[idx], [self.job_ids[i] for i in rows],
                              [self.model_types[i] for i in rows])


def shape_vector(num_gpus: int, tags: Iterable[str]) -> list[float]:
    tags = set(tags)
    return [math.log2(max(1, num_gpus)), *(float(t in tags) for t in SPAN_TAGS)]


def encode_samples(samples: Sequence[Mapping], vocab: Vocabulary) -> EncodedSamples:
    """Validated samples (``colocation.read_samples``) as tensors over ``vocab``."""
    n, v = len(samples), len(vocab)
    job = np.zeros(n, dtype=np.int64)
    counts = np.zeros((n, len(LEVELS), v), dtype=np.float32)
    shape = np.zeros((n, len(SHAPE_FEATURES)), dtype=np.float32)
    speed = np.zeros(n, dtype=np.float32)
    level_row = {lvl: i for i, lvl in enumerate(LEVELS)}
    for i, s in enumerate(samples):
        job[i] = vocab.index(s.get("model_type"))
        for level, models in (s.get("colocated") or {}).items():
            row = level_row.get(level)
            if row is None:
                continue
            for m in models:
                counts[i, row, vocab.index(m)] += 1.0
        tags = span_tags(int(s.get("groups", 1)), int(s.get("nodes", 1)),
                         int(s.get("leaves", 1)))
        shape[i] = shape_vector(int(s.get("num_gpus", 1)), tags)
        speed[i] = float(s["speed"])
    return EncodedSamples(torch.from_numpy(job), torch.from_numpy(counts),
                          torch.from_numpy(shape), torch.from_numpy(speed),
                          [s.get("job_id") for s in samples],
                          [s.get("model_type") for s in samples])


class InterferenceNet(nn.Module):
    """Job embedding + per-level pooled neighbour embeddings + shape -> speed in (0, 1]."""

    def __init__(self, n_families: int, embed_dim: int = 8, hidden: int = 64) -> None:
        super().__init__()
        self.n_families = n_families
        self.job_embed = nn.Embedding(n_families, embed_dim)
        self.neighbour_embed = nn.Parameter(torch.randn(len(LEVELS), n_families, embed_dim)
                                            * 0.3)
        width = embed_dim + len(LEVELS) * (embed_dim + 1) + len(SHAPE_FEATURES)
        self.mlp = nn.Sequential(nn.Linear(width, hidden), nn.ReLU(),
                                 nn.Linear(hidden, hidden), nn.ReLU(),
                                 nn.Linear(hidden, 1))

    def forward(self, job: torch.Tensor, counts: torch.Tensor, shape: torch.Tensor
                ) -> torch.Tensor:
        pooled = torch.einsum("blv,lve->ble", counts, self.neighbour_embed)
        total = counts.sum(-1, keepdim=True)
        x = torch.cat([self.job_embed(job), pooled.flatten(1),
                       torch.log1p(total).flatten(1), shape], dim=-1)
        return torch.exp(-nn.functional.softplus(self.mlp(x).squeeze(-1)))


class InterferenceModel:
    """A trained ``InterferenceNet`` with its vocabulary: the estimator the policies use."""

    def __init__(self, net: InterferenceNet, vocab: Vocabulary, embed_dim: int, hidden: int,
                 metrics: Mapping | None = None) -> None:
        self.net = net.eval()
        self.vocab = vocab
        self.embed_dim = embed_dim
        self.hidden = hidden
        self.metrics = dict(metrics or {})
        self._memo: dict = {}
        self._quick: dict = {}    # predict_speed's queries as asked -> speed

    @classmethod
    def new(cls, vocab: Vocabulary, embed_dim: int = 8, hidden: int = 64,
            seed: int = 0) -> "InterferenceModel":
        torch.manual_seed(seed)
        return cls(InterferenceNet(len(vocab), embed_dim, hidden), vocab, embed_dim, hidden)

    # -- predictions ---------------------------------------------------------------------
    @torch.no_grad()
    def predict_tensors(self, job: torch.Tensor, counts: torch.Tensor, shape: torch.Tensor
                        ) -> torch.Tensor:
        return self.net(job, counts, shape)

    def query_tensors(self, model_type: str | None, num_gpus: int,
                      colocated_by_level: Mapping[str, Sequence[str]]
                      ) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        counts = torch.zeros(1, len(LEVELS), len(self.vocab))
        tags: Sequence[str] = ()
        for level, models in colocated_by_level.items():
            if level == SPAN:
                tags = tuple(models)
                continue
            if level not in LEVELS:
                continue
            row = LEVELS.index(level)
            for m in models:
                counts[0, row, self.vocab.index(m)] += 1.0
        shape = torch.tensor([shape_vector(num_gpus, tags)], dtype=torch.float32)
        return torch.tensor([self.vocab.index(model_type)]), counts, shape

    def predict_speed(self, job: Job, colocated_by_level: Mapping[str, Sequence[str]]
                      ) -> float:
        """The estimator protocol of ``policy/interference.py`` (memoised per query). A
        query asked again as it was (same levels in the same order, tuples: how least
        interference asks for every candidate) is found by its items as given, without
        building the canonical key; any other query goes through the canonical key."""
        try:
            quick = (job.model_type, job.num_gpus, tuple(colocated_by_level.items()))
            hit = self._quick.get(quick)
        except TypeError:    # lists among the values: not hashable as given
            quick, hit = None, None
        if hit is not None:
            return hit
        key = (self.vocab.index(job.model_type), job.num_gpus,
               tuple(sorted((k, tuple(v)) for k, v in colocated_by_level.items())))
        speed = self._memo.get(key)
        if speed is None:
            speed = float(self.predict_tensors(*self.query_tensors(
                job.model_type, job.num_gpus, colocated_by_level))[0])
            if len(self._memo) > 100_000:
                self._memo.clear()
            self._memo[key] = speed
        if quick is not None:
            if len(self._quick) > 100_000:
                self._quick.clear()
            self._quick[quick] = speed
        return speed

    # -- files ---------------------------------------------------------------------------
    def metadata(self) -> dict:
        return {"format": FORMAT, "vocab": list(self.vocab.families),
                "embed_dim": self.embed_dim, "hidden": self.hidden, "levels": list(LEVELS),
                "shape_features": list(SHAPE_FEATURES), "metrics": self.metrics}

    def save(self, directory: str | Path, name: str = "interference") -> tuple[Path, Path]:
        directory = Path(directory)
        directory.mkdir(parents=True, exist_ok=True)
        pt, meta = directory / f"{name}.pt", directory / f"{name}.json"
        torch.save(self.net.state_dict(), pt)
        meta.write_text(json.dumps(self.metadata(), indent=2) + "\n", encoding="utf-8")
        return pt, meta

    @classmethod
    def from_parts(cls, meta: Mapping, state: Mapping[str, torch.Tensor], source: str
                   ) -> "InterferenceModel":
        """From metadata and a state_dict already loaded (both files, or a bundle)."""
        if meta.get("format") != FORMAT:
            raise ModelFileError(f"{source}: not an interference model (format "
                                 f"{meta.get('format')!r}, expected {FORMAT!r})")
        if list(meta.get("levels", ())) != list(LEVELS) or \
                list(meta.get("shape_features", ())) != list(SHAPE_FEATURES):
            raise ModelFileError(f"{source}: made for other input features "
                                 f"({meta.get('levels')}, {meta.get('shape_features')})")
        try:
            vocab = Vocabulary(tuple(meta["vocab"]))
            embed_dim, hidden = int(meta["embed_dim"]), int(meta["hidden"])
        except (KeyError, TypeError, ValueError) as exc:
            raise ModelFileError(f"{source}: bad metadata ({exc})") from None
        net = InterferenceNet(len(vocab), embed_dim, hidden)
        try:
            net.load_state_dict(state)
        except RuntimeError as exc:
            raise ModelFileError(f"{source}: weights do not match the metadata: "
                                 f"{str(exc).splitlines()[0]}") from None
        return cls(net, vocab, embed_dim, hidden, meta.get("metrics"))

    @classmethod
    def load(cls, path: str | Path) -> "InterferenceModel":
        """``path`` is the ``.pt`` file, the ``.json`` file, or a directory holding
        ``interference.pt`` / ``interference.json``."""
        pt, meta_path = model_paths(path, "interference")
        meta = read_metadata(meta_path)
        state = load_state_dict(pt)
        return cls.from_parts(meta, state, str(pt))


def model_paths(path: str | Path, default_name: str) -> tuple[Path, Path]:
    path = Path(path)
    if path.is_dir():
        path = path / f"{default_name}.pt"
    stem = path.with_suffix("") if path.suffix in (".pt", ".json") else path
    return stem.with_suffix(".pt"), stem.with_suffix(".json")


def read_metadata(path: Path) -> dict:
    if not path.is_file():
        raise ModelFileError(f"model metadata {path} does not exist")
    try:
        meta = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError) as exc:
        raise ModelFileError(f"cannot read {path}: {exc}") from None
    except json.JSONDecodeError as exc:
        raise ModelFileError(f"{path}:{exc.lineno}: invalid JSON: {exc.msg}") from None
    if not isinstance(meta, dict):
        raise ModelFileError(f"{path}: metadata must be a JSON object")
    return meta


def load_state_dict(path: Path) -> dict:
    """A ``state_dict`` saved with ``torch.save``, loaded with ``weights_only=True``."""
    if not path.is_file():
        raise ModelFileError(f"model weights {path} do not exist")
    try:
        state = torch.load(path, map_location="cpu", weights_only=True)
    except Exception as exc:  # torch raises many kinds for a corrupt or foreign file
        raise ModelFileError(f"cannot load weights from {path}: "
                             f"{type(exc).__name__}: {str(exc).splitlines()[0] if str(exc) else ''}"
                             ) from None
    if not isinstance(state, dict) or not all(isinstance(v, torch.Tensor)
                                              for v in state.values()):
        raise ModelFileError(f"{path}: not a state_dict of tensors")
    return state
