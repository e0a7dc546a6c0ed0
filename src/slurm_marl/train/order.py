"""Training the agents' order head (``agent/order_head.py``) on simulated JCT.

The head's weights are searched by the cross-entropy method (CEM): each iteration samples
candidate weights around a mean (the mean itself included), runs each in the simulator on
every training task (a window, an interference strength, a kind of predictions), keeps the
best few and moves the mean and spread to theirs. The search starts at the order plugin's
order (``KEEP_ORDER``: the warm start is an exact copy of the teacher, ``learned-order``'s
in-queue order, with the agents placing), so every candidate is measured against it.

A candidate's profile is ``learned-order``'s (2D-LAS queues, waiting jobs by predicted
remaining GPU-time, preemption, backfill) with the checkpoint's agents placing and, with
``order_window`` jobs offered at once, ordering (``policy.plugins.Picker``). Its fitness,
lower is better, is the mean over tasks of

    avg JCT / the warm start's avg JCT
    + max(0, its share of jobs > 1.1x slower than under fifo-backfill - the warm start's)

so a candidate gains nothing by making more jobs lose against Slurm's own policy than the
warm start does (the per-job bound; the Slurm-alone guard holds it at run time, where it is
evaluated: ``benchmarks/agents_order.py``). Training runs do not run the guard: on the
saturated demo-cluster windows one guarded run takes minutes.

Predictions: ``learned`` (learned in the run from the history before the window,
``sim/online_prediction.py``) or a quality of ``sim/predictions.py`` (``helios``).

The runs go through a ``mapper`` (``sweep.backend_mapper``: `slurm-marl train order
--backend local | slurm`): the baselines as one batch, then each iteration's candidates x
tasks as one batch (on Slurm, one array job each). Candidates' checkpoints are written into
a folder beside ``out`` (the nodes must share it), removed at the end.
"""

from __future__ import annotations

import json
import tempfile
from collections.abc import Callable, Sequence
from dataclasses import dataclass, replace
from pathlib import Path
from types import MappingProxyType

import numpy as np

from slurm_marl.agent.order_head import KEEP_ORDER, ORDER_FEATURES, OrderHead

BASE_PROFILE = "learned-order"


@dataclass(frozen=True)
class Task:
    """One training simulation: a window of the trace, a strength, a kind of predictions."""

    window: str
    strength: str
    predictions: str          # "learned" or a prediction_error quality


def agents_profile(checkpoint: str | Path, order_window: int, base: str = BASE_PROFILE,
                   guard: bool = False):
    """``base``'s order and actions, the checkpoint's agents placing and, with
    ``order_window`` > 1, ordering; with ``guard``, behind the daemon's default guard."""
    from slurm_marl.policy.profile import load_profile, with_default_guard
    prof = load_profile(base)
    params = {"checkpoint": str(checkpoint), "fallback": "consolidate", "allow_defer": True,
              "order_window": int(order_window)}
    prof = replace(prof, name=f"agents[{Path(checkpoint).stem},window={order_window}]",
                   place=(("learned", 1.0),),
                   place_params=MappingProxyType({"learned": MappingProxyType(params)}))
    return with_default_guard(prof) if guard else prof


def simulate_task(args: tuple) -> dict:
    """One run (in a worker): (trace, cluster, task, profile or checkpoint, window, seed)
    -> its average JCT and each finished job's JCT."""
    trace, cluster, task, what, order_window, seed = args
    import torch
    torch.set_num_threads(1)
    from slurm_marl.sim.cluster import parse_cluster
    from slurm_marl.sim.perjob import job_times
    from slurm_marl.sim.run import simulate
    from slurm_marl.train.workload import load_workload
    sim_cluster = parse_cluster(cluster)
    jobs = load_workload(trace, task.window, sim_cluster)
    prof = what if order_window is None else agents_profile(what, order_window)
    run = simulate(jobs, sim_cluster, prof, interference=task.strength, seed=seed,
                   drop_oversized=True, prediction_error=None
                   if task.predictions == "learned" else task.predictions,
                   trace_source=(trace, task.window))
    jct = {t.job_id: t.jct_s for t in job_times(run.outcome.jobs) if t.jct_s is not None}
    return {"avg_jct_s": float(run.summary["avg_jct_s"]), "jct": jct}


def share_slower(jct: dict, fifo: dict) -> float:
    """The share of jobs (finished in both) more than 1.1x slower than in ``fifo``, each
    job's ratio as ``sim/perjob.py`` takes it (``job_ratios``: over max(fifo's, 600 s))."""
    from slurm_marl.sim.perjob import SLOWER, JobTime, job_ratios

    def times(jcts: dict) -> list[JobTime]:
        return [JobTime(i, 1, "", t) for i, t in jcts.items()]
    ratios = job_ratios(times(jct), times(fifo))
    return sum(r > SLOWER for r in ratios.values()) / len(ratios) if ratios else 0.0


def fitness(runs: Sequence[dict], base: Sequence[dict], fifo: Sequence[dict]) -> float:
    """Lower is better (module docstring); one run per task in each sequence."""
    terms = []
    for mine, start, slurm in zip(runs, base, fifo):
        extra = share_slower(mine["jct"], slurm["jct"]) - share_slower(start["jct"],
                                                                       slurm["jct"])
        terms.append(mine["avg_jct_s"] / start["avg_jct_s"] + max(0.0, extra))
    return float(np.mean(terms))


@dataclass
class Search:
    """The CEM's settings."""

    population: int = 8
    iterations: int = 5
    elite: int = 3
    sigma: float = 0.5
    min_sigma: float = 0.05
    seed: int = 0


def run_inline(fn: Callable, args: Sequence, on_done: Callable | None = None) -> list:
    """``[fn(a) for a in args]`` in this process, ``on_done(index, outcome, done, total)``
    after each: the mapper of ``--backend inline``."""
    results = []
    for i, arg in enumerate(args):
        results.append(fn(arg))
        if on_done is not None:
            on_done(i, results[-1], i + 1, len(args))
    return results


def train_order(checkpoint: Path, trace: Path, tasks: Sequence[Task], cluster: str,
                out: Path, *, order_window: int = 4, search: Search = Search(),
                mapper: Callable | None = None, sim_seed: int = 0,
                progress: Callable[[int, int, str], None] | None = None) -> dict:
    """Search the order head's weights (module docstring); writes ``out``.pt/.json (the
    checkpoint with the best head found, the warm start if none beat it) and
    ``out``.history.json. Returns the history. ``mapper(fn, args, on_done)`` runs each
    batch of simulations (None: ``run_inline``); it raises if a run gives no result."""
    from slurm_marl.agent.checkpoint import LearnedCheckpoint
    ckpt = LearnedCheckpoint.load(checkpoint)
    agents = ckpt.config.agents
    rng = np.random.default_rng(search.seed)
    dim = len(ORDER_FEATURES)
    mean = np.array(KEEP_ORDER, dtype=np.float64)
    sigma = np.full(dim, search.sigma)
    runs_total = len(tasks) * (2 + search.iterations * search.population)
    done = 0
    history: dict = {"features": list(ORDER_FEATURES), "window": order_window,
                     "tasks": [t.__dict__ for t in tasks], "iterations": []}
    trace, checkpoint = Path(trace).resolve(), Path(checkpoint).resolve()
    out = Path(out)
    out.parent.mkdir(parents=True, exist_ok=True)
    run_batch = mapper or run_inline
    with tempfile.TemporaryDirectory(prefix=f"{out.name}.cem-", dir=out.parent) as tmp:
        def run_all(items: list, label: str) -> list[dict]:
            nonlocal done
            first = done

            def seen(index: int, outcome, finished: int, total: int) -> None:
                if progress is not None:
                    progress(first + finished, runs_total, label)
            results = run_batch(simulate_task, items, seen)
            done = first + len(items)
            return results

        # the baselines as one batch: fifo-backfill, then the warm start, per task
        both = run_all([(str(trace), cluster, t, "fifo-backfill", None, sim_seed)
                        for t in tasks]
                       + [(str(trace), cluster, t, str(checkpoint), 0, sim_seed)
                          for t in tasks], "fifo-backfill and the warm start")
        fifo, base = both[:len(tasks)], both[len(tasks):]
        history["warm_start_fitness"] = fitness(base, base, fifo)    # 1.0 by definition
        best_w, best_fit = mean.copy(), history["warm_start_fitness"]
        for it in range(search.iterations):
            cands = [mean.copy()] + [mean + sigma * rng.standard_normal(dim)
                                     for _ in range(search.population - 1)]
            items, paths = [], []
            for k, w in enumerate(cands):
                path = Path(tmp) / f"it{it}_c{k}"
                ckpt.order = OrderHead.shared(agents, w, order_window)
                ckpt.save(path)
                paths.append(path)
                items += [(str(trace), cluster, t, str(path) + ".pt", order_window, sim_seed)
                          for t in tasks]
            results = run_all(items, f"iteration {it + 1}")
            n = len(tasks)
            fits = [fitness(results[k * n:(k + 1) * n], base, fifo)
                    for k in range(len(cands))]
            order = np.argsort(fits, kind="stable")
            elite = np.array([cands[i] for i in order[:search.elite]])
            mean = elite.mean(0)
            sigma = np.maximum(elite.std(0), search.min_sigma)
            if fits[order[0]] < best_fit:
                best_fit, best_w = fits[order[0]], cands[order[0]].copy()
            history["iterations"].append({
                "fitness": [round(f, 5) for f in fits],
                "weights": [[round(float(x), 4) for x in w] for w in cands],
                "best_fitness": round(best_fit, 5)})
    history["best_fitness"] = best_fit
    history["best_weights"] = [float(x) for x in best_w]
    ckpt.order = OrderHead.shared(agents, best_w, order_window, training={
        "method": "cem", "fitness": round(best_fit, 5),
        "warm_start_fitness": round(history["warm_start_fitness"], 5),
        "tasks": [t.__dict__ for t in tasks], "cluster": cluster,
        "population": search.population, "iterations": search.iterations,
        "elite": search.elite, "sigma": search.sigma, "seed": search.seed})
    ckpt.save(out)
    Path(str(out) + ".history.json").write_text(json.dumps(history, indent=2) + "\n")
    return history
