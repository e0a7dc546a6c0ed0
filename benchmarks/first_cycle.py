"""Benchmark: two profiles' first daemon cycle, each in a fresh process, as a daemon starts.

    OMP_NUM_THREADS=1 .venv/bin/python benchmarks/first_cycle.py \
        [--profile las-learned --against las-consolidate] [--pairs 6] \
        [--nodes 2000 --pending 1000] [-- BENCH_DAEMON_ARGS ...] [--json]

Each pair runs ``benchmarks/bench_daemon.py --cycles 1`` once for each profile, one after
the other (which goes first alternates from pair to pair), each in its own process: nothing
one profile's cycle filled (module-level memos, the snapshot's parsed nodes) is there for
the other's. ``bench_daemon --against`` measures two agents on the same snapshots in one
process, which steadies later cycles' ratio but favours whichever decides the first cycle
second. This machine's speed drifts from minute to minute, so the result is the median of
the pairs' ratios (and of each profile's times), with every pair shown. Arguments after
``--`` go to both runs (``--learned-agents`` is always given: an untrained agent per
partition, which ``las-consolidate`` ignores).
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent


def first_cycle(profile: str, nodes: int, pending: int, extra: list[str]) -> float:
    cmd = [sys.executable, str(HERE / "bench_daemon.py"), "--nodes", str(nodes),
           "--pending", str(pending), "--cycles", "1", "--profile", profile,
           "--learned-agents", "--json", *extra]
    env = dict(os.environ, OMP_NUM_THREADS="1")
    out = subprocess.run(cmd, check=True, capture_output=True, text=True, env=env).stdout
    return float(json.loads(out)["first_cycle_s"])


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--profile", default="las-learned")
    ap.add_argument("--against", default="las-consolidate")
    ap.add_argument("--pairs", type=int, default=6)
    ap.add_argument("--nodes", type=int, default=2000)
    ap.add_argument("--pending", type=int, default=1000)
    ap.add_argument("--json", action="store_true")
    ap.add_argument("extra", nargs="*", help="after --: more bench_daemon.py arguments")
    args = ap.parse_args()
    if args.pairs < 1:
        ap.error("--pairs must be >= 1")
    pairs = []
    for i in range(args.pairs):
        order = (args.profile, args.against) if i % 2 else (args.against, args.profile)
        got = {p: first_cycle(p, args.nodes, args.pending, args.extra) for p in order}
        pairs.append({"first": order[0], args.profile: got[args.profile],
                      args.against: got[args.against],
                      "ratio": got[args.profile] / got[args.against]})
        if not args.json:
            print(f"pair {i + 1}: {args.profile} {got[args.profile]:.3f} s, {args.against} "
                  f"{got[args.against]:.3f} s, ratio {pairs[-1]['ratio']:.2f} "
                  f"({order[0]} first)", flush=True)
    out = {"profile": args.profile, "against": args.against, "nodes": args.nodes,
           "pending": args.pending, "extra": args.extra, "pairs": pairs,
           "median_ratio": statistics.median(p["ratio"] for p in pairs),
           "median_s": statistics.median(p[args.profile] for p in pairs),
           "against_median_s": statistics.median(p[args.against] for p in pairs)}
    out["ratio_of_medians"] = out["median_s"] / out["against_median_s"]
    if args.json:
        print(json.dumps(out, indent=2))
        return
    print(f"{args.profile}'s first cycle over {args.against}'s: median of the pairs' ratios "
          f"{out['median_ratio']:.2f}, ratio of the medians {out['ratio_of_medians']:.2f} "
          f"({out['median_s']:.3f} s against {out['against_median_s']:.3f} s)")


if __name__ == "__main__":
    main()
