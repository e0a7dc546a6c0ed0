"""Decisions hashed, to show a restructuring changes none (issue 35).

    PYTHONPATH=<tree>/src OMP_NUM_THREADS=1 .venv/bin/python <tree>/benchmarks/decision_hashes.py
        [--only daemon|sim] [--json]

Run it on the code before and after a change (each tree's own copy, its ``src`` first on
``PYTHONPATH``) and compare the printed hashes; a line that differs names the profile and
the run whose decisions changed.

- **daemon**: the daemon's own ``Agent.cycle`` on a generated cluster that moves and carries
  out the agent's decisions (``bench_daemon.LoopSource``: 300 nodes, 200 pending, 10 runs
  ending and 10 jobs arriving a cycle, 6 cycles, a fixed clock), with a sink that takes
  every write and says it was done, so translation, write planning, in-flight holds,
  leases and the store's records all run. Hashed per cycle: the decisions, the writes
  handed to the sink, the jobs the guard protects; at the end every table of the store
  but the cycle timings. Every built-in profile, without and with the daemon's default
  guard; ``las-learned`` with untrained agents (one per partition) so its agents decide.
- **sim**: ``slurm-marl simulate --json --out`` of every built-in profile on rows 0-300 of
  the bundled Philly trace's ``6c71a0``, high interference, on ``8x2x4``: the summary but
  its wall time, and every job's row (``jobs.csv``).
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import sqlite3
import subprocess
import sys
import tempfile
from dataclasses import replace
from pathlib import Path

import torch

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))

from bench_daemon import LoopSource, pending_jobs  # noqa: E402

from slurm_marl.daemon.config import parse_config  # noqa: E402
from slurm_marl.daemon.service import Agent  # noqa: E402
from slurm_marl.daemon.store import Store  # noqa: E402
from slurm_marl.policy.framework import build_policy  # noqa: E402
from slurm_marl.policy.profile import builtin_profiles, load_profile, with_default_guard  # noqa: E402
from slurm_marl.slurm_integration.ports import WriteResult, WriteStatus  # noqa: E402
from slurm_marl.topology.synthetic import synthetic_snapshot  # noqa: E402

NOW = 1_800_000_000.0
TRACE = HERE.parent / "src" / "slurm_marl" / "data" / "public" / "traces" / "philly.csv"


class TakingSink:
    """Takes every write, says it was done, and keeps what it was handed."""

    def __init__(self) -> None:
        self.handed: list = []

    def apply(self, decisions, snapshot=None):
        self.handed.append(repr(decisions))
        return [WriteResult(d, WriteStatus.OK) for d in decisions]

    def repair_half_done(self, snapshot):
        return []

    def starts_done(self):
        return None


def _digest(parts) -> str:
    h = hashlib.sha256()
    for p in parts:
        h.update(p.encode())
        h.update(b"\0")
    return h.hexdigest()[:16]


def _store_rows(path: Path) -> list[str]:
    con = sqlite3.connect(path)
    try:
        tables = [r[0] for r in con.execute(
            "SELECT name FROM sqlite_master WHERE type='table' ORDER BY name")]
        out = []
        for t in tables:
            if t in ("cycles", "meta") or t.startswith("sqlite_"):
                continue
            rows = sorted(repr(r) for r in con.execute(f"SELECT * FROM {t}"))  # noqa: S608
            out.append(f"{t}:{len(rows)}:" + "|".join(rows))
        return out
    finally:
        con.close()


def daemon_hash(name: str, guard: bool) -> str:
    base = synthetic_snapshot(300, busy_fraction=0.6, seed=0)
    partitions = [p.name for p in base.partitions]
    snap = replace(base, time_s=NOW,
                   jobs=base.jobs + tuple(pending_jobs(200, partitions, NOW)))
    profile = load_profile(name)
    if guard:
        profile = with_default_guard(profile)
    context = {}
    if any(key == "learned" for key, _ in profile.place):
        from bench_models import model_parts
        torch.manual_seed(0)
        context["learned_checkpoint"] = model_parts(tuple(partitions))
    parts = []
    with tempfile.TemporaryDirectory() as tmp:
        cfg = parse_config({"agent": {"shadow": False, "managed_partitions": partitions,
                                      "preempt_partitions": partitions, "profile": name,
                                      "state_dir": tmp}})
        source = LoopSource(snap, 10, 60.0)
        sink = TakingSink()
        store = Store(Path(tmp) / "s.sqlite")
        agent = Agent(cfg, source, sink=sink, store=store,
                      policy=build_policy(profile, **context), clock=lambda: source.now)
        for _ in range(6):
            report = agent.cycle()
            if report.error is not None:
                raise SystemExit(f"{name}: cycle {report.cycle}: {report.error}")
            parts += [repr(report.decisions), repr(report.protected),
                      sink.handed[-1] if sink.handed else ""]
            sink.handed.clear()
            source.apply(report.decisions)
        store.close()
        parts += _store_rows(Path(tmp) / "s.sqlite")
    return _digest(parts)


def sim_hash(name: str) -> str:
    with tempfile.TemporaryDirectory() as tmp:
        out = subprocess.run(
            [sys.executable, "-m", "slurm_marl.cli", "simulate", "--trace", str(TRACE),
             "--window", "vc=6c71a0,rows=0:300", "--cluster", "8x2x4", "--profile", name,
             "--interference", "high", "--json", "--out", tmp],
            capture_output=True, text=True, env={**os.environ, "OMP_NUM_THREADS": "1"},
            check=False)
        if out.returncode != 0:
            raise SystemExit(f"simulate {name}: {out.stderr.strip()[-500:]}")
        summary = json.loads(out.stdout)
        summary.pop("sim_wall_time_s", None)
        summary.pop("trace", None)
        jobs = (Path(tmp) / "jobs.csv").read_text()
    return _digest([json.dumps(summary, sort_keys=True), jobs])


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--only", choices=("daemon", "sim"))
    ap.add_argument("--profile", action="append", help="only these profiles")
    ap.add_argument("--json", action="store_true")
    args = ap.parse_args()
    torch.set_num_threads(1)
    names = args.profile or list(builtin_profiles())
    result = {}
    for name in names:
        if args.only in (None, "daemon"):
            for guard in (False, True):
                key = f"daemon {name}{' +guard' if guard else ''}"
                result[key] = daemon_hash(name, guard)
                if not args.json:
                    print(f"{key:<40} {result[key]}", flush=True)
        if args.only in (None, "sim"):
            key = f"sim {name}"
            result[key] = sim_hash(name)
            if not args.json:
                print(f"{key:<40} {result[key]}", flush=True)
    if args.json:
        print(json.dumps(result, indent=2))


if __name__ == "__main__":
    main()
