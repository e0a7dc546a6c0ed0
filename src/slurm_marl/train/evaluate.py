"""Evaluation: the learned policy and the heuristics on the same held-out workload.

Every policy runs with the same order plugin and actions (``las-consolidate``'s Tiresias
2D-LAS with preemption and fit-first backfill); only the place plugin differs. The learned
profile is that profile with ``place = {learned = 1.0}`` and the checkpoint as parameter.
``las-lif``'s estimator is fitted by ``sim.run`` from a pilot run, as ``slurm-marl compare``
does.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import replace
from pathlib import Path
from types import MappingProxyType

from slurm_marl.policy.profile import Profile, load_profile
from slurm_marl.sim.cluster import SimCluster
from slurm_marl.sim.run import simulate
from slurm_marl.sim.traces import TraceJob

BASELINES = ("las-consolidate", "las-lif", "las-skew")
BASE_PROFILE = "las-consolidate"


def learned_profile(checkpoint: str | Path, *, base: str = BASE_PROFILE,
                    allow_defer: bool = True, fallback: str = "consolidate",
                    name: str = "las-learned") -> Profile:
    """``base`` with the learned place plugin (what a ``las-learned.toml`` would say)."""
    prof = load_profile(base)
    params = {"checkpoint": str(checkpoint), "fallback": fallback,
              "allow_defer": allow_defer}
    return replace(prof, name=name, place=(("learned", 1.0),),
                   place_params=MappingProxyType({"learned": MappingProxyType(params)}),
                   description=f"{prof.description}; learned placement ({Path(checkpoint).name})")


def run_policies(jobs: list[TraceJob], cluster: SimCluster, profiles: Sequence[Profile],
                 strength: str, seed: int = 0,
                 on_done: Callable[[str, dict], None] | None = None) -> list[dict]:
    rows = []
    for prof in profiles:
        run = simulate(jobs, cluster, prof, interference=strength, seed=seed,
                       drop_oversized=True)
        row = {"profile": prof.name, "interference": strength, **run.summary}
        rows.append(row)
        if on_done is not None:
            on_done(prof.name, row)
    return rows


def avg_jct(jobs: list[TraceJob], cluster: SimCluster, checkpoint: str | Path,
            strength: str, seed: int = 0) -> float:
    """Average JCT of the greedy learned policy (the trainer's validation number)."""
    run = simulate(jobs, cluster, learned_profile(checkpoint), interference=strength,
                   seed=seed, drop_oversized=True)
    return float(run.summary["avg_jct_s"])
