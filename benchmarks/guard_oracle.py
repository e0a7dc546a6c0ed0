"""How much does the guard cost with a perfect shadow? (issue 33; a diagnostic: it sees the
future.)

The guard protects a job once it waits past its shadow start (plus a slack): it ranks first,
is never preempted, and no later arrival passes it while it is blocked. Whether the per-job
bound and the average can both hold depends on two things: how far the shadow is from
Slurm alone, and what protecting costs the others even when the shadow is exact. This
measures the second: the shadow is replaced by the ``fifo-backfill`` run itself (each job's
real start and run time there), and a job is protected

- ``wait``: at its ``fifo-backfill`` start plus ``slack`` x its ``fifo-backfill`` wait
  (at least 60 s): the guard's own rule, with an exact shadow;
- ``finish``: at the latest start from which it still finishes within (1 + ``slack``) x its
  ``fifo-backfill`` JCT (floored at 600 s, as the bound is), less a minute: the most
  lenient rule that keeps the bound, knowing every length.

    OMP_NUM_THREADS=1 .venv/bin/python benchmarks/guard_oracle.py --window 3 --rule finish \\
        --slack 0.1 [--slack 0.3 ...] [--profile las-consolidate] [--strength none]

Prints per setting: average JCT against the unguarded profile, jobs > 1.1x and > 2x slower
than under ``fifo-backfill``, p99 and worst ratio (``sim/perjob.py``).
"""

from __future__ import annotations

import argparse
import os
from dataclasses import replace

os.environ.setdefault("OMP_NUM_THREADS", "1")

# (imported after the thread setting)
from guard_tradeoff import CLUSTER, PROFILES, TRACE, WINDOWS  # noqa: E402


def run(window: str, label: str, strength: str, rule: str | None, slack: float) -> dict:
    from slurm_marl.policy import guard
    from slurm_marl.policy.profile import _frozen, load_profile
    from slurm_marl.sim.perjob import per_job_comparison, records
    from slurm_marl.sim.run import simulate
    profile, error = PROFILES[label]

    def sim(prof):
        return simulate(TRACE, CLUSTER, prof, window=window, interference=strength,
                        drop_oversized=True, prediction_error=error)

    fifo = simulate(TRACE, CLUSTER, "fifo-backfill", window=window, interference=strength,
                    drop_oversized=True)
    plain = sim(load_profile(profile))
    real = {j.job_id: (j.submit_s, j.first_start_s, j.finish_s) for j in fifo.outcome.jobs
            if j.finish_s is not None}

    def due_s(self, job_id):
        if job_id not in real:
            return None
        submit, start, finish = real[job_id]
        if rule == "wait":
            return start + max(60.0, slack * (start - submit))
        jct = max(finish - submit, 600.0)
        return max(start, submit + (1 + slack) * jct - (finish - start) - 60.0)

    def recompute(self, now_s):
        self.starts = {j: real[j][1] for j in self.seen if j in real}

    guard.SlurmAloneShadow.due_s = due_s
    guard.SlurmAloneShadow._recompute = recompute
    guarded = sim(replace(load_profile(profile), guard=_frozen({"slack": slack,
                                                                "slack_min_s": 60.0})))
    c = per_job_comparison(records(guarded.outcome.jobs), records(fifo.outcome.jobs),
                           baseline="fifo-backfill")
    return {"avg_vs_unguarded": guarded.summary["avg_jct_s"] / plain.summary["avg_jct_s"],
            "avg_vs_fifo": guarded.summary["avg_jct_s"] / fifo.summary["avg_jct_s"], **c}


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--window", type=int, required=True,
                    help=f"index into the six windows: {WINDOWS}")
    ap.add_argument("--rule", choices=["wait", "finish"], default="finish")
    ap.add_argument("--slack", type=float, action="append")
    ap.add_argument("--profile", default="las-consolidate", choices=list(PROFILES))
    ap.add_argument("--strength", default="none")
    args = ap.parse_args(argv)
    window = WINDOWS[args.window]
    for slack in args.slack or [0.1]:
        r = run(window, args.profile, args.strength, args.rule, slack)
        print(f"{window} {args.profile} {args.strength} {args.rule} slack {slack:g}: "
              f"avg/unguarded {r['avg_vs_unguarded']:.2f} avg/fifo {r['avg_vs_fifo']:.2f} "
              f"> 1.1x {100 * r['share_slower_1_1x']:.1f}% > 2x {100 * r['share_slower_2x']:.1f}% "
              f"p99 {r['p99_ratio']:.2f} worst {r['worst_ratio']:.2f}", flush=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
