"""The Slurm-alone guard (issue 33): per job against Slurm's own policy, with and without it.

Windows, chosen by a rule fixed before any result: Philly windows of 800 rows, load
(GPU-seconds offered / (64 GPUs x the window's span)) >= 0.9 and at least one job of 8 or
more GPUs (the jobs the unguarded order makes wait); per virtual cluster the first two in
trace order: ``6214e9`` 5600 (load 1.14) and 8000 (2.43, saturated), ``6c71a0`` 0 (0.93)
and 1600 (1.13), ``b436b2`` 0 (1.54), ``ee9e8c`` 0 (2.33, saturated). Cluster: 64 GPUs,
``8x2x4:leaf=4``, as in the issue.

Each window and strength runs ``fifo-backfill`` (what a site runs without the agent) and,
for each profile, the profile as shipped and with ``[guard]`` at each slack setting; every
run is compared job by job with the ``fifo-backfill`` run (``sim/perjob.py``).

    OMP_NUM_THREADS=1 .venv/bin/python benchmarks/guard_tradeoff.py --workers 2 \
        --out /tmp/guard/tradeoff.json [--plot /tmp/guard/tradeoff.png] \
        [--model replica] [--set rewind_s=86400] [--slacks 0.1/60,0.5/600]

Prints one row per (window, strength, profile, guard): average JCT against the unguarded
profile and against fifo-backfill, the share of jobs > 1.1x and > 2x slower than under
fifo-backfill, p99 and worst ratio; and whether the issue's bound holds (<= 2% > 1.1x,
none > 2x, p99 <= 1.5, average within 1.1x of the unguarded profile).
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
CLUSTER = "8x2x4:leaf=4"
WINDOWS = [f"vc={vc},rows={a}:{a + 800}" for vc, a in [
    ("6214e9", 5600), ("6214e9", 8000), ("6c71a0", 0), ("6c71a0", 1600), ("b436b2", 0),
    ("ee9e8c", 0)]]
# (label, profile, --prediction-error)
PROFILES = {"las-consolidate": ("las-consolidate", None),
            "learned-order": ("learned-order", None),
            "learned-order, helios": ("learned-order", "helios")}
SLACKS = [(0.1, 60.0), (0.25, 300.0), (0.5, 600.0)]


def window_label(window: str) -> str:
    """A window as tables name it: ``6214e9 5600:6400``."""
    return window.replace("vc=", "").replace(",rows=", " ")


def one(window: str, label: str, profile: str, error: str | None,
        guard: tuple[float, float] | None, strength: str, model: str = "fluid",
        keys: dict | None = None) -> dict:
    from dataclasses import replace

    from slurm_marl.policy.profile import _frozen, load_profile
    from slurm_marl.sim.perjob import records
    from slurm_marl.sim.run import simulate
    prof = load_profile(profile)
    if guard is not None:
        bound = {"bound": guard[2]} if len(guard) > 2 else {}
        prof = replace(prof, guard=_frozen({"slack": guard[0], "slack_min_s": guard[1],
                                            "model": model, **(keys or {}), **bound}))
    t0 = time.perf_counter()
    run = simulate(TRACE, CLUSTER, prof, window=window, interference=strength,
                   drop_oversized=True, prediction_error=error)
    return {"window": window, "label": label, "guard": guard, "interference": strength,
            "model": model if guard is not None else None,
            "guard_keys": keys if guard is not None else None,
            "avg_jct_s": run.summary["avg_jct_s"], "preemptions": run.summary["preemptions"],
            "unfinished": run.summary["unfinished"], "jobs": records(run.outcome.jobs),
            "wall_s": round(time.perf_counter() - t0, 1)}


def guard_label(guard) -> str:
    """A guard setting as tables name it: off, "SLACK, MIN_S" or "bound B"."""
    if guard is None:
        return "off"
    if len(guard) > 2:
        return f"bound {guard[2]:g}"
    return f"{guard[0]:g}, {guard[1]:g}"


def bound_holds(row: dict) -> bool:
    """The issue's bound (``train/thresholds.py``'s, where the learned knobs obey it) and
    the average within 1.1x of the unguarded profile."""
    from slurm_marl.train.thresholds import WindowScore
    c = row["per_job"]
    score = WindowScore(row["avg_jct_s"], c["share_slower_1_1x"], c["share_slower_2x"],
                        c["p99_ratio"], c["compared_jobs"])
    return bool(score.bound_holds()) and row["avg_vs_unguarded"] <= 1.1


def main(argv=None) -> int:
    from slurm_marl.sim.perjob import per_job_comparison
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--window", action="append", help="a window (repeat); default: the six")
    ap.add_argument("--strengths", default="none,high")
    ap.add_argument("--only", action="append", default=[],
                    help=f"a profile label (repeat; default all: {', '.join(PROFILES)})")
    ap.add_argument("--model", default="fluid", choices=["fluid", "replica"],
                    help="the guard's shadow of Slurm alone ([guard] model)")
    ap.add_argument("--set", action="append", default=[], metavar="KEY=VALUE",
                    help="another [guard] key for every guarded run (repeat): rewind_s, tick_s, "
                    "protect_running=true")
    ap.add_argument("--slacks", help="guard settings SLACK/MIN_S,... (default: "
                    + ",".join(f"{a:g}/{b:g}" for a, b in SLACKS) + "); 'none' for no "
                    "slack setting (with --bounds)")
    ap.add_argument("--bounds", help="per-job bounds B,... ([guard] bound = B: the guard "
                    "spends it as each job's deadline), each run beside the slacks")
    ap.add_argument("--workers", type=int, default=1)
    ap.add_argument("--out", type=Path, required=True)
    ap.add_argument("--plot", type=Path, help="the trade-off plot (PNG)")
    ap.add_argument("--replot", type=Path, help="only plot this earlier --out file")
    args = ap.parse_args(argv)
    if args.replot is not None:
        plot(json.loads(args.replot.read_text()), args.plot or args.out)
        return 0
    keys = {}
    for item in args.set:
        key, sep, value = item.partition("=")
        if not sep:
            ap.error(f"--set {item!r}: expected KEY=VALUE")
        try:
            keys[key] = value == "true" if value in ("true", "false") else float(value)
        except ValueError:
            keys[key] = value            # a word: model-like keys (slack_on=jct)
    windows = args.window or WINDOWS
    labels = args.only or list(PROFILES)
    slacks = SLACKS if not args.slacks else [] if args.slacks == "none" else [
        tuple(float(x) for x in item.split("/")) for item in args.slacks.split(",")]
    # a bound is (0, 0, B): its slack settings unused
    slacks += [(0.0, 0.0, float(b)) for b in (args.bounds or "").split(",") if b]
    tasks = []
    for w in windows:
        for s in args.strengths.split(","):
            tasks.append((w, "fifo-backfill", "fifo-backfill", None, None, s))
            for label in labels:
                profile, error = PROFILES[label]
                for guard in [None, *slacks]:
                    tasks.append((w, label, profile, error, guard, s, args.model, keys))
    rows = []
    t0 = time.perf_counter()
    with ProcessPoolExecutor(max_workers=args.workers) as pool:
        futures = [pool.submit(one, *t) for t in tasks]
        for i, f in enumerate(as_completed(futures), 1):
            rows.append(f.result())
            print(f"[{i}/{len(tasks)}] {time.perf_counter() - t0:.0f} s", flush=True)
    base = {(r["window"], r["interference"]): r for r in rows if r["label"] == "fifo-backfill"}
    plain = {(r["window"], r["interference"], r["label"]): r for r in rows
             if r["guard"] is None}
    out = []
    for r in rows:
        if r["label"] == "fifo-backfill":
            continue
        b = base[(r["window"], r["interference"])]
        u = plain[(r["window"], r["interference"], r["label"])]
        row = {k: v for k, v in r.items() if k != "jobs"}
        row["per_job"] = per_job_comparison(r["jobs"], b["jobs"], baseline="fifo-backfill")
        row["avg_vs_fifo"] = round(r["avg_jct_s"] / b["avg_jct_s"], 4)
        row["avg_vs_unguarded"] = round(r["avg_jct_s"] / u["avg_jct_s"], 4)
        row["bound_holds"] = bound_holds(row)
        out.append(row)
    out.sort(key=lambda r: (r["window"], r["interference"], r["label"],
                            tuple(r["guard"] or (-1, -1)) + (0,) * (3 - len(r["guard"] or ()))))
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(out, indent=1) + "\n")
    print("| window | strength | profile | guard (slack, min s) | avg / unguarded | "
          "avg / fifo | > 1.1x | > 2x | p99 | worst | bound |")
    print("|---|---|---|---|---:|---:|---:|---:|---:|---:|---|")
    for r in out:
        c = r["per_job"]
        g = guard_label(r["guard"])
        print(f"| {window_label(r['window'])} | "
              f"{r['interference']} | {r['label']} | {g} | {r['avg_vs_unguarded']:.3f} | "
              f"{r['avg_vs_fifo']:.3f} | {100 * c['share_slower_1_1x']:.1f}% | "
              f"{100 * c['share_slower_2x']:.1f}% | {c['p99_ratio']:.2f} | "
              f"{c['worst_ratio']:.2f} | {'yes' if r['bound_holds'] else 'no'} |")
    if args.plot is not None:
        plot(out, args.plot)
    return 0


def plot(rows: list[dict], path: Path) -> None:
    """Per window: the average JCT against the unguarded profile (log scale) against the
    share of jobs > 1.1x slower than under fifo-backfill, one line per profile and strength
    through its guard settings (labelled by slack), dashed lines at the bound (2%, 1.1x)."""
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    windows = sorted({r["window"] for r in rows})
    cols = 3
    fig, axes = plt.subplots((len(windows) + cols - 1) // cols, cols,
                             figsize=(5 * cols, 3.8 * ((len(windows) + cols - 1) // cols)),
                             squeeze=False)
    for ax, window in zip(axes.flat, windows):
        groups: dict[tuple, list[dict]] = {}
        for r in rows:
            if r["window"] == window:
                groups.setdefault((r["label"], r["interference"]), []).append(r)
        for (label, strength), rs in sorted(groups.items()):
            rs = sorted(rs, key=lambda r: tuple(r["guard"] or (99, 99)))
            xs = [100 * r["per_job"]["share_slower_1_1x"] for r in rs]
            ys = [r["avg_vs_unguarded"] for r in rs]
            line, = ax.plot(xs, ys, marker="o", label=f"{label}, {strength}")
            for r, x, y in zip(rs, xs, ys):
                ax.annotate(guard_label(r["guard"]).split(",")[0], (x, y),
                            fontsize=7, color=line.get_color(), xytext=(3, 3),
                            textcoords="offset points")
        ax.axvline(2.0, color="grey", linestyle="--", linewidth=0.8)
        ax.axhline(1.1, color="grey", linestyle="--", linewidth=0.8)
        ax.set_yscale("log")
        ax.set_title(window_label(window), fontsize=10)
        ax.set_xlabel("jobs > 1.1x slower than fifo-backfill (%)", fontsize=8)
        ax.set_ylabel("avg JCT / unguarded (log)", fontsize=8)
        ax.legend(fontsize=6)
    for ax in list(axes.flat)[len(windows):]:
        ax.set_visible(False)
    slacks = sorted({r["guard"][0] for r in rows if r["guard"] is not None}, reverse=True)
    keys = next((r.get("guard_keys") for r in rows if r.get("guard_keys")), None) or {}
    fig.suptitle("Slurm-alone guard: each line runs off -> slack "
                 + " -> ".join(f"{x:g}" for x in slacks)
                 + (f" (slack on the {keys['slack_on']})" if "slack_on" in keys else "")
                 + " (label: slack); the bound is left of 2% and below 1.1x")
    fig.tight_layout()
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=110)
    plt.close(fig)


if __name__ == "__main__":
    raise SystemExit(main())
