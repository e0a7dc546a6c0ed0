"""Does the report's prediction hold on real Slurm? (issue 34)

A Philly window becomes a site's history the way a site's own would: it is replayed on a
fresh local Slurm cluster with Slurm alone, accounting on, and read back with ``sacct``
(``replay --mode slurm`` with slurmdbd). Its times are scaled back to trace seconds (the
replay runs ``--speedup`` times faster), so the history reads as a site's month would.
``slurm-marl report --tune`` then reads that history and the cluster's own slurm.conf /
gres.conf / topology.conf (the files the replay's cluster runs with), learns the 2D-LAS
knobs and recommends a profile, and predicts its average JCT (its ``recommended`` what-if
row). Last, the same window is replayed with the agent running the recommended profile,
and the measured JCT is set against the prediction, on average and per job against the
Slurm-alone run.

What a Philly window loses as a site history: Philly has no users, accounts, job names
or time limits (every replayed job is the benchmark's user, and its time limit is the
replay's), so the report's waits by user / account have one group and ``learned-order``
would have nothing to learn from: it is left out here. The window's jobs are the whole
history, so the tuning splits the period (its first two thirds learn, its last third
evaluates) and the recommended rows run partly on the jobs the knobs were learned on; the
report says so. What is compared is the report's prediction with real Slurm running its
recommendation, not how the knobs generalise.

Interference: ``none`` by default. The recorded run times of a site hold whatever slowed its
jobs under Slurm alone's placements, and the report runs them as they were; with simulated
interference on top, the what-if would count it twice. With ``--interference medium`` the
replays' payloads run at the interference model's speeds and the report is asked for that
strength too: the comparison then also tests that assumption.

    python benchmarks/report_replay.py                     # ~20 min: two replays, one report
    python benchmarks/report_replay.py --slurm-version 24.11 --json
"""

from __future__ import annotations

import argparse
import json
import math
import subprocess
import sys
import time
from dataclasses import replace
from datetime import datetime
from pathlib import Path

from slurm_marl.history.records import read_history, write_history
from slurm_marl.replay.cli import replay_spec
from slurm_marl.replay.perjob import per_job_report, trace_job_times
from slurm_marl.replay.plan import plan_replay
from slurm_marl.replay.runner import run_replay
from slurm_marl.shared_data import data_file
from slurm_marl.sim.traces import load_trace
from slurm_marl.testcluster.spec import render_configs

WINDOW = "vc=6214e9,rows=8750:8950"
ORIGIN = datetime(2017, 12, 1, 8, 0).timestamp()    # the history's first submission
PROFILES = "fifo-backfill,las-consolidate"
TOLERANCE = 0.10


def scaled_history(jobs, speedup: float):
    """The replay's sacct jobs with their times in trace seconds after ``ORIGIN``."""
    t0 = min(j.submit_s for j in jobs)

    def at(t):
        return None if t is None else ORIGIN + (t - t0) * speedup

    return [replace(j, submit_s=at(j.submit_s), start_s=at(j.start_s), end_s=at(j.end_s),
                    time_limit_s=None if j.time_limit_s is None
                    else j.time_limit_s * speedup) for j in jobs]


def site_files(spec, folder: Path) -> Path:
    """slurm.conf, gres.conf, topology.conf of the replay's cluster shape, in ``folder``."""
    folder.mkdir(parents=True, exist_ok=True)
    texts = render_configs(spec, folder, 6817, [6818 + k for k in range(spec.nodes)],
                           "localhost")
    for name, text in texts.items():
        (folder / name).write_text(text)
    return folder / "slurm.conf"


def avg(values):
    return sum(values) / len(values) if values else math.nan


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--window", default=WINDOW)
    ap.add_argument("--speedup", type=float, default=60.0)
    ap.add_argument("--interference", default="none")
    ap.add_argument("--slurm-version", default=None)
    ap.add_argument("--out", type=Path, default=Path("out/report-replay"))
    ap.add_argument("--json", action="store_true")
    args = ap.parse_args(argv)
    out = args.out.resolve()
    out.mkdir(parents=True, exist_ok=True)
    log = (lambda *a: print(*a, file=sys.stderr, flush=True))
    spec = replay_spec(nodes=8, gpus_per_socket=4, slurm_version=args.slurm_version)
    trace = load_trace(data_file("traces/philly.csv"), args.window)
    plan = plan_replay(trace, spec, args.speedup, seed=0)
    started = time.time()

    def ticker():
        said = set()

        def tick(what, done, total):
            if (done == total or done % 50 == 0) and (what, done) not in said:
                said.add((what, done))
                log(f"  {what}: {done}/{total} ({time.time() - started:.0f} s)")
        return tick

    # 1. the site's history: Slurm alone, as sacct recorded it
    log(f"1/3 Slurm alone on {len(plan.jobs)} jobs of {args.window}, accounting on")
    sacct_csv = out / "sacct-history.csv"
    slurm = run_replay(plan, spec, "slurm", out / "slurm", interference=args.interference,
                       progress=ticker(), timeout_s=2400, history_out=sacct_csv)
    history = scaled_history(read_history(sacct_csv), args.speedup)
    site_csv = out / "site-history.csv"
    write_history(site_csv, history)
    conf = site_files(spec, out / "site")
    # 2. the report on it
    log("2/3 slurm-marl report --tune")
    report_json = out / "report.json"
    cmd = [sys.executable, "-m", "slurm_marl.cli", "report", "--history", str(site_csv),
           "--slurm-conf", str(conf), "--profiles", PROFILES,
           "--strengths", args.interference, "--tune", "--profiles-out", str(out / "tuned"),
           "--json", "--out", str(report_json), "--html", str(out / "report.html")]
    t = time.time()
    proc = subprocess.run(cmd, capture_output=True, text=True)
    report_s = time.time() - t
    if proc.returncode != 0:
        log(proc.stderr)
        return 1
    doc = json.loads(report_json.read_text())
    rec = doc["tuning"]["recommended"]
    predicted = rec["predicted"][args.interference]
    (chosen,) = rec["profiles_by_partition"].values()
    part = next(iter(rec["profiles_by_partition"]))
    profile = next((p["profile_file"] for p in doc["tuning"]["partitions"]
                    if p["partition"] == part and p["profile_file"]), chosen)
    fifo = next(r for r in doc["what_if"]["results"] if r["profile"] == "fifo-backfill")
    # 3. the recommendation on real Slurm
    log(f"3/3 the agent with the recommended profile ({profile})")
    agent = run_replay(plan, spec, "agent", out / "agent", profile=str(profile),
                       interference=args.interference, progress=ticker(), timeout_s=2400)
    measured = {"slurm": avg(slurm.jct_trace_s()), "agent": avg(agent.jct_trace_s())}
    per_job = per_job_report({"slurm": trace_job_times(plan, slurm.jobs),
                              "agent": trace_job_times(plan, agent.jobs)}, "slurm")
    errors = {"agent": measured["agent"] / predicted["avg_jct_s"] - 1,
              "slurm": measured["slurm"] / fifo["all"]["avg_jct_s"] - 1,
              "ratio": (measured["agent"] / measured["slurm"])
              / predicted["avg_jct_ratio"] - 1}
    result = {
        "window": args.window, "speedup": args.speedup, "interference": args.interference,
        "slurm_version": doc_version(spec), "jobs": len(plan.jobs),
        "completed": {"slurm": len(slurm.completed()), "agent": len(agent.completed())},
        "report_s": round(report_s, 1), "report_split": doc["tuning"]["split"],
        "learned_in_period": rec["learned_in_period"],
        "recommended": rec["profiles_by_partition"], "profile_used": str(profile),
        "calibration": doc["calibration"]["all"],
        "predicted_avg_jct_s": {"recommended": predicted["avg_jct_s"],
                                "fifo-backfill": fifo["all"]["avg_jct_s"],
                                "ratio": predicted["avg_jct_ratio"]},
        "measured_avg_jct_s": {k: round(v, 1) for k, v in measured.items()},
        "measured_ratio": round(measured["agent"] / measured["slurm"], 4),
        "error": {k: round(v, 4) for k, v in errors.items()},
        "within_tolerance": abs(errors["agent"]) <= TOLERANCE,
        "per_job_measured": {k: per_job["runs"]["agent"][k] for k in (
            "compared_jobs", "share_slower_1_1x", "share_slower_2x", "p99_ratio",
            "worst_ratio")},
        "per_job_predicted": {k: predicted[k] for k in ("share_slower_1_1x", "worst_ratio")},
        "wall_s": round(time.time() - started, 1),
    }
    (out / "result.json").write_text(json.dumps(result, indent=2))
    if args.json:
        print(json.dumps(result, indent=2))
    else:
        print(f"{result['jobs']} jobs, Slurm {result['slurm_version']}, interference "
              f"{args.interference}; recommended {rec['profiles_by_partition']}")
        print(f"avg JCT (trace s): predicted {predicted['avg_jct_s']:,.0f}, measured "
              f"{measured['agent']:,.0f} ({errors['agent']:+.1%}); Slurm alone predicted "
              f"{fifo['all']['avg_jct_s']:,.0f}, measured {measured['slurm']:,.0f} "
              f"({errors['slurm']:+.1%}); ratio predicted {predicted['avg_jct_ratio']:.3f}, "
              f"measured {result['measured_ratio']:.3f}")
        print(f"within {TOLERANCE:.0%}: {result['within_tolerance']}; details: "
              f"{out / 'result.json'}")
    return 0


def doc_version(spec) -> str:
    from slurm_marl.testcluster.versions import label
    return label(spec.slurm_version)


if __name__ == "__main__":
    sys.exit(main())
