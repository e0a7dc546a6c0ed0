"""Issue 36's held-out measure: the agents choosing the order as well as the placement,
against the fixed rules with the same predictions and guard, per job against Slurm alone.

    OMP_NUM_THREADS=1 .venv/bin/python benchmarks/agents_order.py \
        --checkpoint /path/order_demo.pt --workers 2 --out /tmp/agents_order.json \
        [--strengths none,high] [--predictions learned,helios] [--guard] [--window W ...]

Cluster: the demo checkpoint's (``4x2x2:name=gpu``, 16 GPUs). Windows: the six Philly
windows ``benchmarks/learned_clock_step.py`` fixed before any result, none of which the
checkpoint or the order head trained on (their training windows: docs/learning.md); the
table prints each one's load (GPU-seconds offered / (16 GPUs x the window's span)).

Each (window, strength, predictions) runs:

* ``fifo-backfill``: Slurm alone, the per-job baseline;
* ``las-lif``: fixed rules without predictions (2D-LAS, least interference);
* ``learned-order``: fixed rules with the predictions (the in-queue predicted order, least
  interference): the teacher;
* ``agents place``: ``learned-order``'s order, the checkpoint's agents placing
  (``order_window = 0``);
* ``agents order+place``: the same agents also picking which job of a queue starts next
  (the checkpoint's order head).

With ``--guard`` every profile but ``fifo-backfill`` runs behind the daemon's default
Slurm-alone guard (``with_default_guard``). Predictions: ``learned`` (learned in the run
from the history before the window) or ``helios`` (``sim/predictions.py``). Prints, per
row, each profile's average JCT as a ratio to the best fixed rule of that row (the lower of
``las-lif`` and ``learned-order``) and, per job against ``fifo-backfill``, the share of jobs
> 1.1x slower and the worst ratio; then the issue's summary: the agents' ratio to the best
fixed rule on average and at worst.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import time
from concurrent.futures import ProcessPoolExecutor, as_completed
from pathlib import Path

os.environ.setdefault("OMP_NUM_THREADS", "1")

from learned_clock_step import TRACE, WINDOWS  # noqa: E402 (the same held-out windows)

CLUSTER = "4x2x2:name=gpu"
GPUS = 16
FIXED = ("las-lif", "learned-order")
PROFILES = ("fifo-backfill",) + FIXED + ("agents place", "agents order+place")


ORACLE = ("oracle order 4", "oracle order 16")   # --oracle: the headroom of in-queue order


class OraclePicker:
    """Not a product part: picks, among the jobs offered, the one with the least true GPU-time
    left (``Job.duration_s``, which only the simulator knows): what any order head choosing
    within the same windows could reach at best (clairvoyant shortest-remaining-first)."""

    key = "oracle"

    def __init__(self, window: int) -> None:
        self.pick_window = window

    def pick_next(self, window, state):
        def left(job):
            total = (job.duration_s or 0.0) * max(1, job.num_gpus)
            return total - (job.progress_gpu_s or 0.0)
        best = min(range(len(window)), key=lambda i: (left(window[i]), i))
        return best, "least true GPU-time left"


def with_oracle(window: int):
    """Patch the simulator's policy builder (in this worker) to add the oracle picker to the
    policy it builds; returns the undo."""
    import slurm_marl.sim.run as simrun
    original = simrun.build_policy

    def build(prof, **context):
        policy = original(prof, **context)
        policy._picker = OraclePicker(window)
        policy._pick_group = policy.order.pick_group
        return policy
    simrun.build_policy = build
    return lambda: setattr(simrun, "build_policy", original)


def with_params(prof, params: dict):
    """``prof`` with more parameters for its learned place plugin (``--learned-param``)."""
    if not params:
        return prof
    from dataclasses import replace
    from types import MappingProxyType
    place = {k: dict(v) for k, v in prof.place_params.items()}
    place["learned"] = {**place.get("learned", {}), **params}
    return replace(prof, place_params=MappingProxyType(place))


def profile_for(label: str, checkpoint: str, guard: bool, params: dict | None = None):
    from slurm_marl.policy.profile import load_profile, with_default_guard
    from slurm_marl.train.order import agents_profile
    if label == "agents place":
        return with_params(agents_profile(checkpoint, 0, guard=guard), params or {})
    if label == "agents order+place":
        from slurm_marl.agent.checkpoint import LearnedCheckpoint
        head = LearnedCheckpoint.load(checkpoint).order
        return with_params(agents_profile(checkpoint, head.window if head else 0,
                                          guard=guard), params or {})
    prof = load_profile("learned-order" if label in ORACLE else label)
    return with_default_guard(prof) if guard and label != "fifo-backfill" else prof


def one(window: str, strength: str, predictions: str, label: str, checkpoint: str,
        guard: bool, params: dict | None = None) -> dict:
    import torch
    torch.set_num_threads(1)
    from slurm_marl.sim.cluster import parse_cluster
    from slurm_marl.sim.perjob import records
    from slurm_marl.sim.run import simulate
    from slurm_marl.train.workload import load_workload
    cluster = parse_cluster(CLUSTER)
    jobs = load_workload(TRACE, window, cluster)
    t0 = time.perf_counter()
    undo = with_oracle(int(label.split()[-1])) if label in ORACLE else (lambda: None)
    run = simulate(jobs, cluster, profile_for(label, checkpoint, guard, params),
                   interference=strength,
                   seed=0, drop_oversized=True, trace_source=(TRACE, window),
                   prediction_error=None if predictions == "learned" else predictions)
    undo()
    span = max(j.submit_time_s for j in jobs) - min(j.submit_time_s for j in jobs)
    load = sum(j.num_gpus * j.duration_s for j in jobs) / (GPUS * span) if span else None
    return {"window": window, "strength": strength, "predictions": predictions,
            "label": label, "guard": guard and label != "fifo-backfill",
            "avg_jct_s": run.summary["avg_jct_s"], "unfinished": run.summary["unfinished"],
            "load": load, "jobs": records(run.outcome.jobs),
            "wall_s": round(time.perf_counter() - t0, 1)}


def summarise(rows: list[dict]) -> list[dict]:
    labels = PROFILES + tuple(o for o in ORACLE if any(r["label"] == o for r in rows))
    """One line per (window, strength, predictions): ratios to the best fixed rule and per
    job against fifo-backfill."""
    from slurm_marl.sim.perjob import per_job_comparison
    by: dict[tuple, dict[str, dict]] = {}
    for r in rows:
        by.setdefault((r["window"], r["strength"], r["predictions"]), {})[r["label"]] = r
    out = []
    for key, runs in sorted(by.items()):
        if not all(p in runs for p in labels):
            continue
        best = min(FIXED, key=lambda p: runs[p]["avg_jct_s"])
        line = {"window": key[0], "strength": key[1], "predictions": key[2],
                "load": runs["fifo-backfill"]["load"], "best_fixed": best, "profiles": {}}
        for p in labels:
            c = per_job_comparison(runs[p]["jobs"], runs["fifo-backfill"]["jobs"])
            line["profiles"][p] = {
                "avg_jct_s": runs[p]["avg_jct_s"],
                "vs_best_fixed": runs[p]["avg_jct_s"] / runs[best]["avg_jct_s"],
                "share_slower_1_1x": c["share_slower_1_1x"],
                "share_slower_2x": c["share_slower_2x"], "p99_ratio": c["p99_ratio"],
                "worst_ratio": c["worst_ratio"], "wall_s": runs[p]["wall_s"]}
        out.append(line)
    return out


def print_table(lines: list[dict]) -> None:
    short = {"fifo-backfill": "slurm", "las-lif": "lif", "learned-order": "l-order",
             "agents place": "ag-place", "agents order+place": "ag-order",
             ORACLE[0]: "oracle4", ORACLE[1]: "oracle16"}
    labels = [p for p in short if p != "fifo-backfill" and lines and p in lines[0]["profiles"]]
    print("window                      str   pred     load | " + " | ".join(
        f"{short[p]:>8} avg  >1.1x  worst" for p in labels))
    for ln in lines:
        cells = []
        for p in labels:
            v = ln["profiles"][p]
            cells.append(f"{v['vs_best_fixed']:>12.3f} {v['share_slower_1_1x']:>6.3f} "
                         f"{v['worst_ratio']:>6.2f}")
        print(f"{ln['window']:<27} {ln['strength']:<5} {ln['predictions']:<7} "
              f"{ln['load']:>5.2f} | " + " | ".join(cells))
    agents = [ln["profiles"]["agents order+place"]["vs_best_fixed"] for ln in lines]
    place = [ln["profiles"]["agents place"]["vs_best_fixed"] for ln in lines]
    for o in ORACLE:
        if lines and o in lines[0]["profiles"]:
            v = [ln["profiles"][o]["vs_best_fixed"] for ln in lines]
            print(f"{o} (clairvoyant picks, learned-order's placement) vs the best fixed "
                  f"rule: mean {statistics.mean(v):.3f}, best {min(v):.3f}")
    if agents:
        print(f"agents order+place vs the best fixed rule: mean {statistics.mean(agents):.3f}, "
              f"worst {max(agents):.3f} over {len(agents)} rows (issue: mean <= 0.97, "
              f"none > 1.01); agents place only: mean {statistics.mean(place):.3f}, "
              f"worst {max(place):.3f}")


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--checkpoint", help="the agents with their order head (required)")
    ap.add_argument("--window", action="append", help="a window (repeat); default: the six")
    ap.add_argument("--strengths", default="none,high")
    ap.add_argument("--predictions", default="learned,helios")
    ap.add_argument("--guard", action="store_true", help="the default guard on every "
                    "profile but fifo-backfill")
    ap.add_argument("--oracle", action="store_true", help="also the clairvoyant pickers "
                    "(windows of 4 and 16): the headroom of choosing within a queue")
    ap.add_argument("--learned-param", action="append", default=[], metavar="KEY=VALUE",
                    help="a parameter of the agents' learned place plugin (repeat), e.g. "
                    "max_agent_jobs=8 and past_depth=fallback as the shipped las-learned")
    ap.add_argument("--workers", type=int, default=1)
    ap.add_argument("--out", type=Path, help="JSON of every run and the table (required)")
    ap.add_argument("--resummarise", type=Path, metavar="RUNS_JSONL",
                    help="only print the table of an earlier (perhaps partial) run")
    args = ap.parse_args(argv)
    if args.resummarise is not None:
        print_table(summarise([json.loads(x) for x in args.resummarise.read_text().split("\n")
                               if x.strip()]))
        return 0
    if args.checkpoint is None or args.out is None:
        ap.error("--checkpoint and --out are required")
    params = {}
    for item in args.learned_param:
        key, sep, value = item.partition("=")
        if not sep:
            ap.error(f"--learned-param {item!r}: expected KEY=VALUE")
        params[key] = int(value) if value.lstrip("-").isdigit() else value
    items = [(w, s, p, label, args.checkpoint, args.guard, params)
             for w in (args.window or WINDOWS) for s in args.strengths.split(",")
             for p in args.predictions.split(",")
             for label in PROFILES + (ORACLE if args.oracle else ())]
    rows = []
    args.out.parent.mkdir(parents=True, exist_ok=True)
    partial = args.out.with_suffix(".runs.jsonl")     # every run as it ends (a long run
    partial.write_text("")                            # stopped early keeps what ended)
    with ProcessPoolExecutor(max(1, args.workers)) as pool:
        futures = [pool.submit(one, *it) for it in items]
        for n, fut in enumerate(as_completed(futures), 1):
            r = fut.result()
            rows.append(r)
            with partial.open("a") as fh:
                fh.write(json.dumps(r) + "\n")
            print(f"[{n}/{len(items)}] {r['window']} {r['strength']} {r['predictions']} "
                  f"{r['label']}: {r['avg_jct_s']:.0f} s ({r['wall_s']} s)", flush=True)
    lines = summarise(rows)
    args.out.write_text(json.dumps({"rows": [{k: v for k, v in r.items() if k != "jobs"}
                                             for r in rows], "table": lines,
                                    "checkpoint": args.checkpoint, "guard": args.guard,
                                    "learned_params": params},
                                   indent=2) + "\n")
    print_table(lines)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
