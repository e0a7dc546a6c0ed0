"""How well does the guard's shadow estimate a job's Slurm-alone start? (issue 33)

The guard protects a job once it waits past its *shadow start*: the start its shadow of
Slurm's own policy gives it from what is known at decision time. A shadow that runs ahead
of the real ``fifo-backfill`` protects jobs Slurm alone would not yet have started (it costs
the average); one that runs behind protects too late (the bound fails). This measures that
error directly, before any slack is tuned: the profile runs unguarded with a *passive*
shadow (it observes every step, protects nothing), and each job's shadow start, as
estimated at the first step it lies in the past (the estimate the guard acts on; else the
last estimate), is compared with the job's actual start in a ``fifo-backfill`` run of the
same window.

Per job: error = (shadow start - fifo-backfill start) / max(fifo-backfill JCT, 600 s), the
scale of the bound (a job may finish 10% of its Slurm-alone JCT late). Reported: its
p10/p50/p90 over all jobs, the share of jobs more than 0.1 early (protected before Slurm
alone would start them: costs the average) and more than 0.1 late (protected too late for
the bound), for 1-GPU and multi-GPU jobs apart, and the jobs the shadow never started.

Shadow variants (``--variant``, repeat):

- ``mean``: the estimate of session 31: the mean of the ended runs longer than the job's
  run so far (the runs still alive are left out).
- ``kmmean``: as shipped: the mean length of a run longer than the job's run so far on the
  Kaplan-Meier curve of ended and alive runs (``policy/survival.py`` ``Survival``).
- ``km50``, ``km25``: the length by which such a run has ended with probability 50% (the
  conditional median) or 75% on the same curve.
- ``known``: a live job's length is unknown until it ends: it holds its shadow GPUs until
  then (the shadow can only lag Slurm alone, never run ahead on lengths).
- ``oracle``: the true lengths (from the trace; a diagnostic only, it sees the future):
  what remains is the error of the fluid model itself (no node packing, no backfill).

    OMP_NUM_THREADS=1 .venv/bin/python benchmarks/guard_shadow_error.py --workers 2 \
        --out /tmp/guard/shadow_error.json
"""

from __future__ import annotations

import argparse
import json
import math
import os
import time
from concurrent.futures import ProcessPoolExecutor
from pathlib import Path

os.environ.setdefault("OMP_NUM_THREADS", "1")

# the same trace, cluster and six windows as the trade-off (run from benchmarks/)
# (imported after the thread setting)
from guard_tradeoff import CLUSTER, TRACE, WINDOWS, window_label  # noqa: E402

VARIANTS = ("mean", "kmmean", "km50", "km25", "known", "oracle")
FLOOR_S = 600.0
SLACK = 0.1


def _starts(window: str, profile: str, strength: str) -> dict[int, tuple[float, float, float]]:
    """{job id: (submit, first start, finish)} of one unguarded run."""
    from slurm_marl.sim.run import simulate
    run = simulate(TRACE, CLUSTER, profile, window=window, interference=strength,
                   drop_oversized=True)
    return {j.job_id: (j.submit_s, j.first_start_s, j.finish_s) for j in run.outcome.jobs
            if j.first_start_s is not None and j.finish_s is not None}


def shadow_run(window: str, profile: str, strength: str, variant: str,
               durations: dict[int, float]) -> dict[int, float]:
    """{job id: its shadow start in a passive shadow} for one unguarded run: as estimated
    at the first step it lies in the past, else the last estimate."""
    from dataclasses import replace

    from slurm_marl.policy import guard
    from slurm_marl.policy.profile import _frozen, load_profile
    from slurm_marl.sim.run import simulate
    due: dict[int, float] = {}
    passed: set[int] = set()
    original = guard.SlurmAloneShadow.observe

    def observe(self, jobs, now_s):
        original(self, jobs, now_s)
        # the shadow start as estimated when it first lies in the past (the estimate the
        # guard acts on); until then the latest estimate
        for job_id, start in self.starts.items():
            if job_id not in passed:
                due[job_id] = start
                if now_s >= start:
                    passed.add(job_id)

    guard.SlurmAloneShadow.observe = observe
    if variant == "mean":
        def mean_longer(self, ran_s):
            longer = [t for t in self.lengths if t > ran_s]
            return sum(longer) / len(longer) if longer else ran_s
        guard.SlurmAloneShadow.expected_length = mean_longer
    elif variant == "kmmean":
        guard.SlurmAloneShadow.expected_length = \
            lambda self, ran_s: self.survival.conditional_mean(ran_s)
    elif variant.startswith("km"):
        guard.SlurmAloneShadow.expected_length = \
            lambda self, ran_s, _q=int(variant[2:]) / 100: quantile(self.survival, ran_s, _q)
    elif variant == "known":
        guard.SlurmAloneShadow.expected_length = lambda self, ran_s: math.inf
    elif variant == "oracle":
        # the live job's true length: the observe loop hands run_s only, so patch the
        # list it is computed from (a diagnostic: this sees the future)
        def shadow_starts(jobs, capacity, base=None, _orig=guard.shadow_starts):
            return _orig([(j, s, g, durations.get(j, ln)) for j, s, g, ln in jobs],
                         capacity, base)
        guard.shadow_starts = shadow_starts
    prof = load_profile(profile)
    # passive: never due by the settings, so nothing is protected and the order is the
    # unguarded one; the recorded due times use slack 0
    prof = replace(prof, guard=_frozen({"slack": 1e9, "slack_min_s": 1e12}))
    simulate(TRACE, CLUSTER, prof, window=window, interference=strength,
             drop_oversized=True)
    return due


def quantile(km, ran_s: float, q: float) -> float:
    """The length by which a run longer than ``ran_s`` has ended with probability ``1 - q``
    on the Kaplan-Meier curve ``km``: the first event time where S has fallen to q
    S(ran_s); ``ran_s`` while no run has ended, infinite where S never falls that far."""
    import bisect
    if not km.times:
        return ran_s
    lo = bisect.bisect_right(km.times, ran_s)
    i = bisect.bisect_left(km.neg_s, -q * km.s(ran_s), lo)
    return km.times[i] if i < len(km.times) else math.inf


def one(window: str, profile: str, strength: str, variants: list[str]) -> dict:
    t0 = time.perf_counter()
    fifo = _starts(window, "fifo-backfill", strength)
    gpus = _gpus(window)
    durations = {j: f - s for j, (_, s, f) in fifo.items()}
    out = {"window": window, "profile": profile, "strength": strength, "variants": {}}
    for v in variants:
        due = shadow_run(window, profile, strength, v, durations)
        err = {"all": [], "1": [], ">1": []}
        never = 0
        for j, (sub, start, fin) in fifo.items():
            d = due.get(j)
            if d is None:
                never += 1
                continue
            e = (d - start) / max(fin - sub, FLOOR_S)
            err["all"].append(e)
            err["1" if gpus[j] <= 1 else ">1"].append(e)
        out["variants"][v] = {"jobs": len(fifo), "never": never, **{
            k: {"jobs": len(xs), "p10": _q(xs, 0.1), "p50": _q(xs, 0.5), "p90": _q(xs, 0.9),
                "early_share": _share(xs, lambda e: e < -SLACK),
                "late_share": _share(xs, lambda e: e > SLACK)}
            for k, xs in err.items()}}
    out["wall_s"] = round(time.perf_counter() - t0, 1)
    return out


def _gpus(window: str) -> dict[int, int]:
    from slurm_marl.sim.traces import load_trace
    return {j.job_id: j.num_gpus for j in load_trace(TRACE, window)}


def _share(xs: list[float], pred) -> float | None:
    return round(sum(1 for x in xs if pred(x)) / len(xs), 4) if xs else None


def _q(xs: list[float], q: float) -> float | None:
    if not xs:
        return None
    xs = sorted(xs)
    return round(xs[min(len(xs) - 1, int(q * len(xs)))], 3)


def _pct(x: float | None) -> str:
    return "-" if x is None else f"{100 * x:.1f}%"


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--window", action="append", help="a window (repeat); default: the six")
    ap.add_argument("--profile", default="las-consolidate")
    ap.add_argument("--strength", default="none")
    ap.add_argument("--variant", action="append", choices=VARIANTS)
    ap.add_argument("--workers", type=int, default=1)
    ap.add_argument("--out", type=Path, required=True)
    args = ap.parse_args(argv)
    windows = args.window or WINDOWS
    variants = args.variant or list(VARIANTS)
    with ProcessPoolExecutor(max_workers=args.workers, max_tasks_per_child=1) as pool:
        # one process per (window, variant): the variants patch the guard module
        futures = [(w, v, pool.submit(one, w, args.profile, args.strength, [v]))
                   for w in windows for v in variants]
        rows: dict[str, dict] = {}
        for w, v, f in futures:
            r = f.result()
            rows.setdefault(w, {k: r[k] for k in ("window", "profile", "strength")}
                            ).setdefault("variants", {})[v] = r["variants"][v]
            print(f"{w} {v}: {r['variants'][v]} ({r['wall_s']} s)", flush=True)
    out = list(rows.values())
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(out, indent=1) + "\n")
    print("| window | shadow | p10 / p50 / p90 | early > 0.1 | late > 0.1 | 1-GPU early / late "
          "| multi-GPU early / late | never |")
    print("|---|---|---:|---:|---:|---:|---:|---:|")
    for r in out:
        for v, m in r["variants"].items():
            a, one_, multi = m["all"], m["1"], m[">1"]
            print(f"| {window_label(r['window'])} | {v} | "
                  f"{a['p10']} / {a['p50']} / {a['p90']} | {_pct(a['early_share'])} | "
                  f"{_pct(a['late_share'])} | {_pct(one_['early_share'])} / "
                  f"{_pct(one_['late_share'])} | {_pct(multi['early_share'])} / "
                  f"{_pct(multi['late_share'])} | {m['never']} |")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
