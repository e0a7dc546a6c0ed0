"""A learned placement checkpoint: the agents and the interference model in one pair of files.

``NAME.pt`` is one ``state_dict`` (keys ``policy.*``, ``interference.*`` and, where the
agents also order, ``order.*``: ``agent/order_head.py``) written with ``torch.save``;
``NAME.json`` holds the metadata (policy config, interference metadata, the order head's,
how it was trained). Loading reads the JSON first, builds the modules from it and loads the weights
with ``torch.load(..., weights_only=True)``: a checkpoint never runs code.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path

import torch

from slurm_marl.models.interference import (InterferenceModel, ModelFileError,
                                            load_state_dict, model_paths, read_metadata)
from slurm_marl.agent.observe import LIVE_FEATURES, job_dim, level_dims
from slurm_marl.agent.order_head import OrderHead
from slurm_marl.models.policy import FORMAT as POLICY_FORMAT
from slurm_marl.models.policy import PlacementPolicy, PolicyConfig

FORMAT = "slurm-marl-learned/1"
SHIPPED_DIR = Path(__file__).resolve().parents[1] / "data"


def shipped_checkpoint(name: str = "learned_demo") -> Path:
    """A checkpoint shipped with the package (``src/slurm_marl/data/NAME.pt``)."""
    return SHIPPED_DIR / f"{name}.pt"


def policy_config(interference: InterferenceModel, agents: tuple[str, ...], mode: str,
                  hidden: int = 32) -> PolicyConfig:
    from slurm_marl.agent.observe import feature_names
    vocab = interference.vocab.families
    return PolicyConfig(level_dims=level_dims(len(vocab)), job_dim=job_dim(len(vocab)),
                        live_dim=len(LIVE_FEATURES), agents=agents, mode=mode, hidden=hidden,
                        vocab=tuple(vocab), feature_names=feature_names(vocab))


@dataclass
class LearnedCheckpoint:
    policy: PlacementPolicy
    interference: InterferenceModel
    training: dict = field(default_factory=dict)
    source: str = ""
    order: OrderHead | None = None     # the agents' order head, where they also order

    @property
    def config(self) -> PolicyConfig:
        return self.policy.config

    def state_dict(self) -> dict[str, torch.Tensor]:
        out = {f"policy.{k}": v for k, v in self.policy.state_dict().items()}
        out.update({f"interference.{k}": v
                    for k, v in self.interference.net.state_dict().items()})
        if self.order is not None:
            out.update(self.order.state_dict())
        return out

    def metadata(self) -> dict:
        meta = {"format": FORMAT, "policy_format": POLICY_FORMAT,
                "policy": self.config.to_dict(),
                "interference": self.interference.metadata(), "training": self.training}
        if self.order is not None:
            meta["order"] = self.order.metadata()
        return meta

    def save(self, path: str | Path) -> tuple[Path, Path]:
        pt, meta = model_paths(path, "policy")
        pt.parent.mkdir(parents=True, exist_ok=True)
        tmp = pt.with_suffix(".pt.tmp")
        torch.save(self.state_dict(), tmp)
        tmp.replace(pt)
        meta.write_text(json.dumps(self.metadata(), indent=2) + "\n", encoding="utf-8")
        return pt, meta

    @classmethod
    def load(cls, path: str | Path) -> "LearnedCheckpoint":
        pt, meta_path = model_paths(path, "policy")
        meta = read_metadata(meta_path)
        if meta.get("format") != FORMAT:
            raise ModelFileError(f"{meta_path}: not a learned placement checkpoint (format "
                                 f"{meta.get('format')!r}, expected {FORMAT!r})")
        if meta.get("policy_format", POLICY_FORMAT) != POLICY_FORMAT:
            raise ModelFileError(f"{meta_path}: made for another policy network (format "
                                 f"{meta.get('policy_format')!r}, this version reads "
                                 f"{POLICY_FORMAT!r}); retrain with `slurm-marl train marl`")
        state = load_state_dict(pt)
        return cls.from_parts(meta, state, str(pt))

    @classmethod
    def from_parts(cls, meta: Mapping, state: Mapping[str, torch.Tensor], source: str
                   ) -> "LearnedCheckpoint":
        interference = InterferenceModel.from_parts(
            meta.get("interference", {}), _strip(state, "interference."), source)
        try:
            config = PolicyConfig.from_dict(meta["policy"])
        except (KeyError, TypeError, ValueError) as exc:
            raise ModelFileError(f"{source}: bad policy metadata ({exc})") from None
        expected = policy_config(interference, config.agents, config.mode, config.hidden)
        if dict(config.level_dims) != expected.level_dims or \
                config.job_dim != expected.job_dim or config.live_dim != expected.live_dim:
            raise ModelFileError(
                f"{source}: made for other features (levels {dict(config.level_dims)}, job "
                f"{config.job_dim}, live {config.live_dim}; this version uses "
                f"{expected.level_dims}, {expected.job_dim}, {expected.live_dim})")
        policy = PlacementPolicy(config)
        try:
            policy.load_state_dict(_strip(state, "policy."))
        except RuntimeError as exc:
            raise ModelFileError(f"{source}: weights do not match the metadata: "
                                 f"{str(exc).splitlines()[0]}") from None
        policy.eval()
        order = None
        if "order" in meta:
            try:
                order = OrderHead.from_parts(meta["order"], state, source)
            except (TypeError, ValueError, AttributeError) as exc:
                raise ModelFileError(str(exc).splitlines()[0]) from None
            unknown = [a for a in order.weights if a not in config.agents]
            if unknown:
                raise ModelFileError(f"{source}: order head for agents {unknown} the policy "
                                     f"does not have")
        return cls(policy, interference, dict(meta.get("training", {})), source, order)


def _strip(state: Mapping[str, torch.Tensor], prefix: str) -> dict[str, torch.Tensor]:
    return {k[len(prefix):]: v for k, v in state.items() if k.startswith(prefix)}
