"""Ordering with predicted GPU-time against Tiresias' 2D-LAS (issue 16), on held-out windows.

Windows (chosen before any result, from benchmarks/headroom_scan.py's 13 windows that no
training, validation or evaluation used): the six with load >= 0.9, because ordering only
matters where jobs wait. Cluster: the 64-GPU, two-partition cluster of the learned-agent
evaluations. Each window runs every profile at each interference strength; predictions come
from ``--prediction-error`` (``helios``: the truth perturbed to Helios' estimator error,
seed 0; ``oracle``: the truth) or, for the "learned" runs, from the predictor trained in
the run on the jobs that finished before each submission (Philly's own features: the
virtual cluster and GPU count; ``sim/online_prediction.py``).

    OMP_NUM_THREADS=1 .venv/bin/python benchmarks/prediction_order.py --workers 2 \
        --out /tmp/pred/order.json

Prints one table per strength: average JCT per profile and its ratio to the better of
las-consolidate and las-lif (2D-LAS with the best heuristic placement).
"""

from __future__ import annotations

import argparse
import json
import os
import time
from concurrent.futures import ProcessPoolExecutor, as_completed
from pathlib import Path

os.environ.setdefault("OMP_NUM_THREADS", "1")

from slurm_marl.shared_data import data_file  # noqa: E402 (after the thread setting)

TRACE = str(data_file("traces/philly.csv"))
CLUSTER = "4x2x4:leaf=2:name=a+4x2x4:leaf=2:name=b"
WINDOWS = [f"vc={vc},rows={a}:{a + 800}" for vc, a in [
    ("6214e9", 10000), ("6214e9", 15000), ("6214e9", 30000), ("6c71a0", 4000),
    ("b436b2", 2400), ("ee9e8c", 0)]]
BASELINES = ("las-consolidate", "las-lif")
# (label, profile, prediction error, order parameters replaced)
RUNS = [("las-consolidate", "las-consolidate", None, {}), ("las-lif", "las-lif", None, {}),
        ("srtf (clairvoyant)", "srtf-consolidate", None, {}),
        ("remaining, helios", "predicted-las", "helios", {"rule": "remaining"}),
        ("in LAS queues, helios", "predicted-las", "helios", {"rule": "in_las_queues"}),
        ("remaining, oracle", "predicted-las", "oracle", {"rule": "remaining"}),
        ("in LAS queues, oracle", "predicted-las", "oracle", {"rule": "in_las_queues"}),
        # no --prediction-error: predictions learned in the run from finished jobs only
        ("remaining, learned", "predicted-las", None, {"rule": "remaining"}),
        ("in LAS queues, learned", "predicted-las", None, {"rule": "in_las_queues"}),
        ("learned-order", "learned-order", None, {}),
        ("learned-order, helios", "learned-order", "helios", {})]


def one(window: str, label: str, profile: str, error: str | None, order_params: dict,
        strength: str, trace: str, cluster: str) -> dict:
    from dataclasses import replace

    from slurm_marl.policy.profile import _frozen, load_profile
    from slurm_marl.sim.run import simulate
    prof = load_profile(profile)
    if order_params:
        prof = replace(prof, name=label, order_params=_frozen({**prof.order_params,
                                                                **order_params}))
    t0 = time.perf_counter()
    run = simulate(trace, cluster, prof, window=window, interference=strength,
                   drop_oversized=True, prediction_error=error)
    s = run.summary
    return {"window": window, "label": label, "profile": profile, "prediction_error": error,
            "order_params": order_params,
            "interference": strength, "avg_jct_s": s["avg_jct_s"],
            "preemptions": s["preemptions"], "unfinished": s["unfinished"],
            "wall_s": round(time.perf_counter() - t0, 1)}


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--trace", default=TRACE)
    ap.add_argument("--cluster", default=CLUSTER)
    ap.add_argument("--window", action="append", help="a window (repeat); default: the six")
    ap.add_argument("--strengths", default="none,low,medium,high")
    ap.add_argument("--only", action="append", default=[],
                    help="a label to run (repeat; default all)")
    ap.add_argument("--errors", default="",
                    help="instead of the default runs: the two 2D-LAS baselines and "
                         "predicted-las (rule remaining) at each of these comma-separated "
                         "prediction errors, e.g. helios*0.25,helios*0.5")
    ap.add_argument("--workers", type=int, default=1)
    ap.add_argument("--out", type=Path)
    args = ap.parse_args(argv)
    windows = args.window or WINDOWS
    strengths = [s for s in args.strengths.split(",") if s]
    runs = [r for r in RUNS if not args.only or r[0] in args.only]
    if args.errors:
        runs = RUNS[:2] + [(f"remaining, {e}", "predicted-las", e, {"rule": "remaining"})
                           for e in args.errors.split(",") if e]
    tasks = [(w, *r, s, args.trace, args.cluster) for s in strengths for w in windows
             for r in runs]
    from rich.progress import Progress
    rows = []
    with ProcessPoolExecutor(max_workers=args.workers) as pool, Progress() as bar:
        task = bar.add_task("simulations", total=len(tasks))
        futures = [pool.submit(one, *t) for t in tasks]
        for f in as_completed(futures):
            rows.append(f.result())
            bar.update(task, advance=1)
            r = rows[-1]
            print(f"done {len(rows)}/{len(tasks)}: {r['window']} {r['label']} "
                  f"{r['interference']} {r['avg_jct_s']} ({r['wall_s']} s)", flush=True)
    if args.out:
        args.out.parent.mkdir(parents=True, exist_ok=True)
        args.out.write_text(json.dumps(rows, indent=2) + "\n")
    for s in strengths:
        print(f"\n### interference {s}\n")
        labels = [r[0] for r in runs]
        print("| window | " + " | ".join(labels) + " |")
        print("|---|" + "---:|" * len(labels))
        ratios: dict[str, list[float]] = {lab: [] for lab in labels}
        for w in windows:
            got = {r["label"]: r for r in rows if r["window"] == w and r["interference"] == s}
            base = min((got[b]["avg_jct_s"] for b in BASELINES if b in got), default=None)
            cells = []
            for lab in labels:
                r = got.get(lab)
                if r is None or r["avg_jct_s"] is None:
                    cells.append("-")
                    continue
                ratio = r["avg_jct_s"] / base if base else None
                if ratio is not None:
                    ratios[lab].append(ratio)
                cells.append(f"{r['avg_jct_s']:,.0f}" + (f" ({ratio:.2f})" if ratio else ""))
            print(f"| {w} | " + " | ".join(cells) + " |")
        mean = [f"{sum(v) / len(v):.3f}" if v else "-" for v in ratios.values()]
        print("| mean ratio to best 2D-LAS | " + " | ".join(mean) + " |")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
