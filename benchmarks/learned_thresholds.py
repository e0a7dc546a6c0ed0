"""2D-LAS knobs learned by policy search (CEM) against the fixed rules, on held-out windows.

For each of the six held-out windows of ``prediction_order.py`` (chosen before any result),
``train/thresholds.py`` learns the 2D-LAS knobs (number of queues and boundaries,
starve limit, preemption) on that virtual cluster's earlier rows: the most recent
``--train-windows`` windows of ``--train-rows`` rows before the held-out window's first row
with load >= 0.9 (never a row of any of the six held-out windows), at the same interference
strength. Then the held-out window runs the learned profile, las-consolidate (Tiresias'
fixed thresholds 3250/7200/18000 GPU-s, preemption) and the FIFO profiles (same consolidate
placement). A window with no earlier rows (``ee9e8c,rows=0:800``) has nothing to learn from:
the learner keeps its starting point, the fixed thresholds.

With ``--validation-windows V`` (default 1; 0 = no guard) the most recent V busy windows
before the held-out one validate and the ``--train-windows`` before them train: the learned
knobs are kept only if they beat the fixed ones there by ``--min-gain`` (default 2%), as
``slurm-marl train thresholds`` does.

The search and the guard are subject to the per-job bound against ``fifo-backfill`` (issue
33; ``train/thresholds.py``), as ``train thresholds`` is by default; ``--no-bound`` ranks by
average JCT alone, as every run of this benchmark before that did.

    OMP_NUM_THREADS=1 .venv/bin/python benchmarks/learned_thresholds.py --strengths none,high \
        --out /tmp/thr/learned.json

One process, one simulation at a time. Prints one table per strength: average JCT per
profile and its ratio to las-consolidate.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
from pathlib import Path

os.environ.setdefault("OMP_NUM_THREADS", "1")
sys.path.insert(0, str(Path(__file__).resolve().parent))

from prediction_order import CLUSTER, TRACE, WINDOWS  # noqa: E402

FIXED = "las-consolidate"
FIFOS = ("fifo-consolidate", "fifo-backfill")


def learn_and_run(window: str, strength: str, args) -> dict:
    from slurm_marl.sim.cluster import parse_cluster
    from slurm_marl.sim.run import simulate
    from slurm_marl.sim.traces import Window, load_trace
    from slurm_marl.train.thresholds import (CemConfig, cem_search, guard, history_windows,
                                             simulator_evaluator, split_history)
    cluster = parse_cluster(args.cluster)
    win = Window.parse(window)
    t0 = time.perf_counter()
    found = history_windows(args.trace, win.cluster, win.first_row, cluster,
                            rows=args.train_rows,
                            count=args.train_windows + args.validation_windows,
                            exclude=WINDOWS)
    assert all(w.end_row <= win.first_row for w in found)
    checks, train = split_history(found, args.validation_windows)
    cfg = CemConfig(population=args.population, iterations=args.iterations, seed=args.seed)
    result = cem_search(simulator_evaluator(train, cluster, strength), cfg,
                        bound=args.bound) if train else None
    verdict = guard(result, checks, cluster, strength, args.min_gain) if result else None
    learn_s = time.perf_counter() - t0
    jobs = load_trace(args.trace, window)
    rec = {"window": window, "interference": strength,
           "train_windows": [{"window": w.window, "load": round(w.load, 2)} for w in train],
           "search": result.as_dict() if result else None, "learn_wall_s": round(learn_s, 1),
           "validation": verdict.as_dict() if verdict else None, "runs": {}}
    learned = (verdict.kept if verdict else result.best.knobs) if result else None
    profiles = [("learned", learned.profile() if learned else FIXED), ("fixed", FIXED)] + \
        [(f, f) for f in FIFOS]
    for label, prof in profiles:
        run = simulate(jobs, cluster, prof, interference=strength, drop_oversized=True)
        s = run.summary
        rec["runs"][label] = {"avg_jct_s": s["avg_jct_s"], "preemptions": s["preemptions"],
                              "unfinished": s["unfinished"]}
    rec["learned"] = learned.describe() if learned else "no history: fixed thresholds kept"
    if verdict is not None and not verdict.learned_kept \
            and result.best.knobs.canonical() != result.start.knobs.canonical():
        rec["learned"] += f" (guard: {result.best.knobs.describe()} not kept, validation " \
            f"ratio {verdict.ratio if verdict.ratio is None else round(verdict.ratio, 3)})"
    return rec


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--trace", default=TRACE)
    ap.add_argument("--cluster", default=CLUSTER)
    ap.add_argument("--window", action="append", help="a window (repeat); default: the six")
    ap.add_argument("--strengths", default="none,high")
    ap.add_argument("--population", type=int, default=8)
    ap.add_argument("--iterations", type=int, default=4)
    ap.add_argument("--train-windows", type=int, default=2)
    ap.add_argument("--validation-windows", type=int, default=1)
    ap.add_argument("--min-gain", type=float, default=0.02)
    ap.add_argument("--train-rows", type=int, default=500)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--bound", action=argparse.BooleanOptionalAction, default=True,
                    help="search subject to the per-job bound (default); --no-bound: JCT only")
    ap.add_argument("--out", type=Path)
    args = ap.parse_args(argv)
    windows = args.window or WINDOWS
    strengths = [s for s in args.strengths.split(",") if s]
    recs = []
    for s in strengths:
        for w in windows:
            rec = learn_and_run(w, s, args)
            recs.append(rec)
            r = rec["runs"]
            print(f"{w} {s}: learned {r['learned']['avg_jct_s']:,.0f} fixed "
                  f"{r['fixed']['avg_jct_s']:,.0f} fifo {r['fifo-consolidate']['avg_jct_s']:,.0f}"
                  f" [{rec['learned']}] (learn {rec['learn_wall_s']} s)", flush=True)
            if args.out:
                args.out.parent.mkdir(parents=True, exist_ok=True)
                args.out.write_text(json.dumps(recs, indent=2) + "\n")
    labels = ["learned", "fixed", *FIFOS]
    for s in strengths:
        print(f"\n### interference {s}\n")
        print("| window | learned knobs | " + " | ".join(labels) + " |")
        print("|---|---|" + "---:|" * len(labels))
        ratios: dict[str, list[float]] = {lab: [] for lab in labels}
        for rec in (r for r in recs if r["interference"] == s):
            base = rec["runs"]["fixed"]["avg_jct_s"]
            cells = []
            for lab in labels:
                jct = rec["runs"][lab]["avg_jct_s"]
                ratios[lab].append(jct / base)
                cells.append(f"{jct:,.0f} ({jct / base:.3f})")
            print(f"| {rec['window']} | {rec['learned']} | " + " | ".join(cells) + " |")
        mean = [f"{sum(v) / len(v):.3f}" if v else "-" for v in ratios.values()]
        print("| mean ratio to fixed | | " + " | ".join(mean) + " |")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
