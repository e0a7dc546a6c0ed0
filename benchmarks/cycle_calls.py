"""Where an agent's cycle spends its time, from its DEBUG log: each Slurm client call's
seconds (the runner logs ``ARGS -> rc N in S s``), summed per kind of call and divided by
the cycles (``daemon: cycle N: S s, ...`` lines).

    .venv/bin/python benchmarks/cycle_calls.py AGENT.LOG [AGENT.LOG ...] [--json]

``benchmarks/burst.py --keep-log DIR`` keeps such logs. A call belongs to the cycle whose
line follows it (the probe between cycles counts with the next one).
"""

from __future__ import annotations

import argparse
import json
import re
import sys
from collections import Counter
from pathlib import Path

CALL = re.compile(r"runner: (?P<args>.*?) -> rc -?\d+ in (?P<s>[\d.]+) s")
CYCLE = re.compile(r"daemon: cycle \d+: (?P<s>[\d.]+) s")

# (kind, test on the command line), first match wins
KINDS = [
    ("squeue --json (every job)", lambda a: a.startswith("squeue --json") and "--jobs=" not in a),
    ("squeue --json --jobs (changed jobs)", lambda a: a.startswith("squeue --json")),
    ("scontrol show job -d -o (changed jobs, 22.05)", lambda a: a.startswith("scontrol show job")),
    ("lease renewals (StartTime=now+N)", lambda a: a.startswith("scontrol update")
     and re.search(r"StartTime=now\+\d+$", a) is not None),
    ("starts and other updates", lambda a: a.startswith("scontrol update")),
    ("squeue -j (GPU requests around starts)", lambda a: a.startswith("squeue -h -j")),
    ("squeue listing (what changed)", lambda a: a.startswith("squeue -h --states=all")),
    ("probe (queue fingerprint)", lambda a: a.startswith("squeue -h -t")),
    ("node reads", lambda a: a.startswith(("sinfo", "scontrol show node"))),
    ("other", lambda a: True),
]


def profile(text: str) -> dict:
    seconds: Counter = Counter()
    calls: Counter = Counter()
    cycles: list[float] = []
    pending: list[tuple[str, float]] = []
    for line in text.splitlines():
        m = CALL.search(line)
        if m:
            args = m["args"]
            kind = next(k for k, test in KINDS if test(args))
            pending.append((kind, float(m["s"])))
            continue
        m = CYCLE.search(line)
        if m:
            cycles.append(float(m["s"]))
            for kind, s in pending:
                seconds[kind] += s
                calls[kind] += 1
            pending = []
    n = len(cycles) or 1
    return {"cycles": len(cycles),
            "cycle_s_mean": round(sum(cycles) / n, 3),
            "by_kind": {k: {"s_per_cycle": round(seconds[k] / n, 3),
                            "calls_per_cycle": round(calls[k] / n, 1),
                            "ms_per_call": round(1000 * seconds[k] / calls[k], 1)}
                        for k, _ in seconds.most_common()}}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("logs", nargs="+", type=Path)
    ap.add_argument("--json", action="store_true")
    args = ap.parse_args()
    out = {}
    for path in args.logs:
        try:
            out[str(path)] = profile(path.read_text(errors="replace"))
        except OSError as exc:
            sys.exit(f"cycle_calls: cannot read {path}: {exc.strerror}")
    if args.json:
        print(json.dumps(out, indent=1))
        return
    for path, p in out.items():
        print(f"{path}: {p['cycles']} cycles, {p['cycle_s_mean']} s each")
        for kind, v in p["by_kind"].items():
            print(f"  {kind:48s} {v['s_per_cycle']:6.3f} s/cycle {v['calls_per_cycle']:5.1f} "
                  f"calls/cycle {v['ms_per_call']:7.1f} ms/call")


if __name__ == "__main__":
    main()
