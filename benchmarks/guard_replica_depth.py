"""How often, and how far back, the guard's replica revises its past (issue 33), and how many
replica cycles a guard step costs, in guarded simulations of the six windows of
``guard_tradeoff.py``: the numbers that scale the replica's cost at 10,000 nodes (a replica
cycle there costs about what one ``fifo-backfill`` cycle of the cluster does).

    OMP_NUM_THREADS=1 .venv/bin/python benchmarks/guard_replica_depth.py \
        [--window N ...] [--tick-s 60] [--rewind-s 86400] [--strength none]

The counts come from wrapping ``ReplicaShadow._rewind`` and ``_recompute`` in this process
(the policy is built inside ``simulate``); decisions are unchanged by it.
"""

from __future__ import annotations

import argparse
import os
import statistics
from dataclasses import replace

os.environ.setdefault("OMP_NUM_THREADS", "1")

from guard_tradeoff import CLUSTER, TRACE, WINDOWS, window_label  # noqa: E402

from slurm_marl.policy import replica as R  # noqa: E402
from slurm_marl.policy.profile import _frozen, load_profile  # noqa: E402
from slurm_marl.sim.run import simulate  # noqa: E402


def _q(xs: list[float], p: float) -> float:
    return sorted(xs)[int(p * (len(xs) - 1))] if xs else 0.0


def measure(window: str, tick_s: float, rewind_s: float, strength: str) -> dict:
    depths: list[float] = []
    per_step: list[int] = []
    rewind, recompute = R.ReplicaShadow._rewind, R.ReplicaShadow._recompute

    def counted_rewind(self, t):
        depths.append(self.clock - t)
        return rewind(self, t)

    def counted_recompute(self, now_s):
        before = self.cycles
        recompute(self, now_s)
        per_step.append(self.cycles - before)

    R.ReplicaShadow._rewind, R.ReplicaShadow._recompute = counted_rewind, counted_recompute
    try:
        profile = replace(load_profile("las-consolidate"), guard=_frozen({
            "slack": 0.1, "slack_min_s": 60, "model": "replica", "rewind_s": rewind_s,
            "protect_running": True, "tick_s": tick_s}))
        run = simulate(TRACE, CLUSTER, profile, window=window, interference=strength,
                       drop_oversized=True)
    finally:
        R.ReplicaShadow._rewind, R.ReplicaShadow._recompute = rewind, recompute
    return {"window": window, "sim_cycles": run.outcome.cycles, "steps": len(per_step),
            "replica_cycles": sum(per_step),
            "per_step_mean": statistics.mean(per_step) if per_step else 0.0,
            "per_step_p99": _q(per_step, 0.99), "per_step_max": max(per_step, default=0),
            "revisions": len(depths), "depth_p50_s": _q(depths, 0.5),
            "depth_p90_s": _q(depths, 0.9), "depth_max_s": max(depths, default=0.0)}


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--window", type=int, action="append",
                    help=f"index into the six windows (repeat; default all): {WINDOWS}")
    ap.add_argument("--tick-s", type=float, default=60.0)
    ap.add_argument("--rewind-s", type=float, default=86400.0)
    ap.add_argument("--strength", default="none")
    args = ap.parse_args(argv)
    print("| window | guard steps | replica cycles per step: mean / p99 / max | revisions | "
          "depth p50 / p90 / max (s) |")
    print("|---|---:|---:|---:|---:|")
    for i in args.window or range(len(WINDOWS)):
        r = measure(WINDOWS[i], args.tick_s, args.rewind_s, args.strength)
        print(f"| {window_label(r['window'])} | {r['steps']:,} | "
              f"{r['per_step_mean']:.2f} / {r['per_step_p99']:.0f} / {r['per_step_max']} | "
              f"{r['revisions']} | {r['depth_p50_s']:,.0f} / {r['depth_p90_s']:,.0f} / "
              f"{r['depth_max_s']:,.0f} |", flush=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
