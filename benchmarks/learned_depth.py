"""Benchmark: what bounding the agents' depth per cycle (the learned plugin's
``max_agent_jobs``, and who places the jobs past it, ``past_depth``) does to the shipped
``las-learned`` profile's JCT, in the simulator, against a baseline setting, per job.

    OMP_NUM_THREADS=1 .venv/bin/python benchmarks/learned_depth.py \
        [--baseline 32:what_if] [--settings 8:fallback,16:fallback] \
        [--reference fifo-backfill,las-consolidate] [--strengths high,none] \
        [--seeds 0,1,2] [--workers 2] [--checkpoint PT --cluster SPEC] [--json]

The profile is ``las-learned`` as shipped (``policy/profiles/las-learned.toml``: its
order, its ``clock_step_s``, its ``max_agent_jobs`` and ``past_depth``), on the shipped
demo checkpoint's cluster (``4x2x2:name=gpu``), on the six held-out Philly windows of
``benchmarks/learned_clock_step.py`` (chosen before any result, none trained on). Each
setting ``N:WHO``, and the baseline (default: the shipped settings as they are), replaces
only ``max_agent_jobs`` (N, 0: no bound) and ``past_depth`` (WHO: ``what_if`` or
``fallback``). Per window, strength and simulator seed: the average JCT as a ratio to the
baseline's, and per job against it (a job's ratio is its JCT over max(its JCT with the
baseline, 600 s)): the share more than 1.1x slower, the worst; and how many jobs in the run
were, at least once, past the agents' depth (a cycle in which the agents did not decide
them). With ``--reference P,...`` each profile P runs on the same runs too: every
setting's and the baseline's average JCT against it, and per job (the share more than 1.1x
slower, the worst), e.g. against ``fifo-backfill``, Slurm's own policy. The simulator is
deterministic: a difference is a decision made otherwise, not noise.
"""

from __future__ import annotations

import argparse
import json
import statistics
from concurrent.futures import ProcessPoolExecutor
from dataclasses import replace
from types import MappingProxyType

from learned_clock_step import TRACE, WINDOWS

FLOOR_S = 600.0


def run_one(args: tuple) -> dict:
    checkpoint, cluster, window, strength, setting, seed = args
    import torch
    torch.set_num_threads(1)
    import slurm_marl.agent.learned as learned
    from slurm_marl.policy.profile import load_profile
    from slurm_marl.sim.cluster import parse_cluster
    from slurm_marl.sim.perjob import job_times
    from slurm_marl.sim.run import simulate
    from slurm_marl.train.workload import load_workload

    past: set[int] = set()
    original = learned.LearnedPlacement.plugin_for

    def counted(self, job, state):        # benchmark instrumentation only
        plugin = original(self, job, state)
        if self.max_agent_jobs and plugin is self.past_depth_plugin and \
                self._agent_of(job, state) is not None:
            past.add(job.job_id)
        return plugin
    learned.LearnedPlacement.plugin_for = counted
    sim_cluster = parse_cluster(cluster)
    jobs = load_workload(TRACE, window, sim_cluster)
    if isinstance(setting, str):           # a reference profile, as shipped
        prof = load_profile(setting)
    else:
        prof = load_profile("las-learned")
        params = dict(prof.place_params["learned"], checkpoint=checkpoint)
        if setting is not None:
            depth, who = setting
            params.update(max_agent_jobs=depth, past_depth=who)
        prof = replace(prof, place_params=MappingProxyType({"learned": MappingProxyType(
            params)}))
    run = simulate(jobs, sim_cluster, prof, interference=strength, seed=seed,
                   drop_oversized=True)
    learned.LearnedPlacement.plugin_for = original
    jct = {t.job_id: t.jct_s for t in job_times(run.outcome.jobs) if t.jct_s is not None}
    return {"window": window, "strength": strength, "setting": setting, "seed": seed,
            "avg_jct_s": run.summary["avg_jct_s"], "past_depth_jobs": len(past),
            "jct": jct}


def per_job(mine: dict, theirs: dict) -> tuple[float, float]:
    """(share of jobs more than 1.1x slower, worst ratio) of one run's JCTs against
    another's, each job's ratio its JCT over max(the other's, ``FLOOR_S``)."""
    ratios = [mine[i] / max(theirs[i], FLOOR_S) for i in mine.keys() & theirs.keys()]
    return sum(x > 1.1 for x in ratios) / len(ratios), max(ratios)


def parse_settings(text: str) -> list[tuple[int, str]]:
    out = []
    for item in text.split(","):
        depth, _, who = item.partition(":")
        out.append((int(depth), who or "what_if"))
    return out


def main() -> None:
    from slurm_marl.agent.checkpoint import shipped_checkpoint

    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--settings", default="8:fallback",
                    help="N:WHO,... (max_agent_jobs N, past_depth WHO) against the baseline")
    ap.add_argument("--baseline", default="",
                    help="N:WHO the settings are compared with (default: as shipped)")
    ap.add_argument("--strengths", default="high,none")
    ap.add_argument("--seeds", default="0,1,2")
    ap.add_argument("--checkpoint", default=str(shipped_checkpoint()))
    ap.add_argument("--cluster", default="4x2x2:name=gpu")
    ap.add_argument("--windows", default=",".join(WINDOWS).replace(",vc=", ";vc="),
                    help="windows separated by ';'")
    ap.add_argument("--reference", default="",
                    help="profiles (comma-separated, e.g. las-consolidate) every setting and "
                    "the baseline are also compared with, on average and per job")
    ap.add_argument("--workers", type=int, default=2)
    ap.add_argument("--json", action="store_true")
    args = ap.parse_args()
    try:
        settings = parse_settings(args.settings)
        baseline = parse_settings(args.baseline)[0] if args.baseline else None
    except ValueError:
        ap.error(f"--settings {args.settings!r} / --baseline {args.baseline!r}: expected "
                 f"N:WHO,... (e.g. 8:fallback)")
    if any(who not in ("what_if", "fallback") or depth < 0
           for depth, who in settings + ([baseline] if baseline else [])):
        ap.error("--settings / --baseline: N >= 0, WHO what_if or fallback")
    if baseline in settings:
        ap.error(f"--baseline {args.baseline!r} is among --settings")
    references = [r for r in args.reference.split(",") if r]
    windows = args.windows.split(";")
    tasks = [(args.checkpoint, args.cluster, w, s, setting, int(seed))
             for w in windows for s in args.strengths.split(",")
             for seed in args.seeds.split(",")
             for setting in [baseline] + settings + references]
    with ProcessPoolExecutor(args.workers) as pool:
        runs = list(pool.map(run_one, tasks))
    by = {(r["window"], r["strength"], r["seed"], r["setting"]): r for r in runs}
    rows = []
    for (w, s, seed, setting), r in by.items():
        if setting == baseline or isinstance(setting, str):
            continue
        base = by[(w, s, seed, baseline)]
        share, worst = per_job(r["jct"], base["jct"])
        rows.append({"window": w, "strength": s, "seed": seed,
                     "setting": f"{setting[0]}:{setting[1]}",
                     "avg_vs_baseline": r["avg_jct_s"] / base["avg_jct_s"],
                     "share_slower_1_1x": share, "worst_ratio": worst,
                     # per job against each reference (e.g. fifo-backfill: Slurm alone)
                     **{f"jobs_vs_{ref}": per_job(r["jct"], by[(w, s, seed, ref)]["jct"])
                        for ref in references},
                     **{f"baseline_jobs_vs_{ref}": per_job(base["jct"],
                                                          by[(w, s, seed, ref)]["jct"])
                        for ref in references},
                     "past_depth_jobs": r["past_depth_jobs"],
                     **{f"vs_{ref}": r["avg_jct_s"] / by[(w, s, seed, ref)]["avg_jct_s"]
                        for ref in references},
                     **{f"baseline_vs_{ref}": base["avg_jct_s"]
                        / by[(w, s, seed, ref)]["avg_jct_s"] for ref in references},
                     "baseline_past_depth_jobs": base["past_depth_jobs"]})
    summary = {}
    for setting in sorted({r["setting"] for r in rows}):
        mine = [r for r in rows if r["setting"] == setting]
        avg = [r["avg_vs_baseline"] for r in mine]
        summary[setting] = {"runs": len(mine), "mean_avg_vs_baseline": statistics.mean(avg),
                            "min": min(avg), "max": max(avg),
                            "runs_changed": sum(abs(a - 1.0) > 1e-12 for a in avg),
                            "runs_with_past_depth_jobs": sum(r["past_depth_jobs"] > 0
                                                             for r in mine),
                            "worst_job_ratio": max(r["worst_ratio"] for r in mine)}
        for ref in references:
            for who, col in (("setting", f"vs_{ref}"), ("baseline", f"baseline_vs_{ref}")):
                v = [r[col] for r in mine]
                jobs = [r[col.replace("vs_", "jobs_vs_")] for r in mine]
                summary[setting][f"{who}_vs_{ref}"] = {
                    "mean": statistics.mean(v), "max": max(v),
                    "mean_share_slower_1_1x": statistics.mean(j[0] for j in jobs),
                    "max_share_slower_1_1x": max(j[0] for j in jobs),
                    "worst_job_ratio": max(j[1] for j in jobs)}
    if args.json:
        print(json.dumps({"rows": rows, "summary": summary}, indent=2))
        return
    print(f"{'window':<26} {'str':<5} seed {'setting':<11} {'avg/base':>11} "
          f"{'>1.1x':>6} {'worst':>6} {'past-depth jobs (baseline)':>26}")
    for r in sorted(rows, key=lambda r: (r["setting"], r["window"], r["strength"],
                                         r["seed"])):
        print(f"{r['window']:<26} {r['strength']:<5} {r['seed']:>4} {r['setting']:<11} "
              f"{r['avg_vs_baseline']:>11.4f} {r['share_slower_1_1x']:>6.3f} "
              f"{r['worst_ratio']:>6.2f} {r['past_depth_jobs']:>15} "
              f"({r['baseline_past_depth_jobs']})")
    for setting, v in summary.items():
        print(f"{setting}: mean {v['mean_avg_vs_baseline']:.4f} of the baseline's "
              f"average JCT (min {v['min']:.4f}, max {v['max']:.4f}); {v['runs_changed']} "
              f"of {v['runs']} runs changed, {v['runs_with_past_depth_jobs']} with jobs "
              f"past the depth; worst job {v['worst_job_ratio']:.2f}x")
        for ref in references:
            a, b = v[f"setting_vs_{ref}"], v[f"baseline_vs_{ref}"]
            print(f"  against {ref}: {setting} mean {a['mean']:.4f} (worst run "
                  f"{a['max']:.4f}), baseline mean {b['mean']:.4f} (worst run {b['max']:.4f})")
            print(f"    per job: {setting} {a['mean_share_slower_1_1x']:.3f} of jobs > 1.1x "
                  f"slower (at most {a['max_share_slower_1_1x']:.3f} in a run), worst "
                  f"{a['worst_job_ratio']:.2f}x; baseline {b['mean_share_slower_1_1x']:.3f} "
                  f"(at most {b['max_share_slower_1_1x']:.3f}), worst "
                  f"{b['worst_job_ratio']:.2f}x")


if __name__ == "__main__":
    main()
