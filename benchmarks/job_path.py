"""One pending job followed through one daemon cycle, from the Slurm read to the written
decision: which project code it passes through.

    PYTHONPATH=<tree>/src OMP_NUM_THREADS=1 .venv/bin/python benchmarks/job_path.py [--json]

Run it on two trees (each tree's ``src`` first on ``PYTHONPATH``, this script from either)
to compare the shape of the cycle before and after a restructuring. A small generated
cluster (4 nodes, idle) with one pending 2-GPU job, the daemon's own ``Agent.cycle`` with
``las-consolidate``, not in shadow mode, a sink that takes every write. The cycle is run
once to warm caches (imports, the store's schema), then a second agent on a fresh store
runs the measured cycle with ``sys.setprofile`` on. Counted:

- ``calls``: calls of project functions (``slurm_marl``) during the cycle, and how many
  distinct functions, files and packages they belong to;
- ``from_service``: calls made from ``daemon/service.py`` into another project file (how
  often the cycle comes back to the hub to hand on);
- ``service_files``: the project files ``daemon/service.py`` calls into directly;
- ``snapshots``, ``jobs``: ``ClusterSnapshot`` and ``Job`` objects built during the cycle
  (a view, a ``dataclasses.replace``: the snapshot and its job rebuilt on their way to the
  policy).
"""

from __future__ import annotations

import argparse
import json
import sys
import tempfile
from collections import Counter
from dataclasses import replace
from pathlib import Path

import torch

import slurm_marl
from slurm_marl.daemon.config import parse_config
from slurm_marl.daemon.service import Agent
from slurm_marl.daemon.store import Store
from slurm_marl.domain import ClusterSnapshot, Job
from slurm_marl.policy.framework import build_policy
from slurm_marl.policy.profile import load_profile
from slurm_marl.slurm_integration.ports import WriteResult, WriteStatus
from slurm_marl.topology.synthetic import synthetic_snapshot

NOW = 1_800_000_000.0
ROOT = str(Path(slurm_marl.__file__).resolve().parent) + "/"


class Source:
    def __init__(self, snap: ClusterSnapshot) -> None:
        self.snap = snap

    def snapshot(self) -> ClusterSnapshot:
        return self.snap


class TakingSink:
    def __init__(self) -> None:
        self.handed: list = []

    def apply(self, decisions, snapshot=None):
        self.handed.extend(decisions)
        return [WriteResult(d, WriteStatus.OK) for d in decisions]

    def repair_half_done(self, snapshot):
        return []

    def starts_done(self):
        return None


def _cluster() -> ClusterSnapshot:
    base = synthetic_snapshot(4, busy_fraction=0.0, seed=0)
    part = base.partitions[0].name
    job = Job(job_id=101, gpus_per_job=2, partition=part, submit_time_s=NOW - 120,
              queue_since_s=NOW - 120, eligible_time_s=NOW - 120, time_limit_s=3600.0,
              user="alice", account="ml", model_type="resnet50")
    return replace(base, time_s=NOW, jobs=(job,)), part


def _agent(tmp: str, snap: ClusterSnapshot, part: str) -> tuple[Agent, TakingSink]:
    cfg = parse_config({"agent": {"shadow": False, "managed_partitions": [part],
                                  "preempt_partitions": [part],
                                  "profile": "las-consolidate", "state_dir": tmp}})
    sink = TakingSink()
    agent = Agent(cfg, Source(snap), sink=sink, store=Store(Path(tmp) / "s.sqlite"),
                  policy=build_policy(load_profile("las-consolidate")), clock=lambda: NOW)
    return agent, sink


def _rel(filename: str) -> str | None:
    return filename[len(ROOT):] if filename.startswith(ROOT) else None


def measure() -> dict:
    snap, part = _cluster()
    with tempfile.TemporaryDirectory() as warm:
        _agent(warm, snap, part)[0].cycle()
    built: Counter = Counter()
    inits = {cls: cls.__init__ for cls in (ClusterSnapshot, Job)}

    def counting(cls):
        init = inits[cls]

        def counting_init(self, *args, **kwargs):
            built[cls.__name__] += 1
            init(self, *args, **kwargs)
        return counting_init

    calls: Counter = Counter()
    from_service: Counter = Counter()

    def profile(frame, event, arg):
        if event != "call":
            return
        callee = _rel(frame.f_code.co_filename)
        if callee is None or frame.f_code.co_name == "counting_init":
            return
        calls[(callee, frame.f_code.co_name)] += 1
        back = frame.f_back
        caller = _rel(back.f_code.co_filename) if back is not None else None
        if caller == "daemon/service.py" and callee != caller:
            from_service[callee] += 1

    with tempfile.TemporaryDirectory() as tmp:
        agent, sink = _agent(tmp, snap, part)
        for cls in inits:
            cls.__init__ = counting(cls)
        sys.setprofile(profile)
        try:
            report = agent.cycle()
        finally:
            sys.setprofile(None)
            for cls, init in inits.items():
                cls.__init__ = init
    if report.error is not None:
        raise SystemExit(f"the cycle failed: {report.error}")
    files = {f for f, _ in calls}
    return {
        "decisions": sorted(type(d).__name__ for d in report.decisions),
        "written": sorted(type(d).__name__ for d in sink.handed),
        "calls": sum(calls.values()),
        "functions": len(calls),
        "files": len(files),
        "packages": len({f.split("/")[0] if "/" in f else "(root)" for f in files}),
        "from_service": sum(from_service.values()),
        "service_files": len(from_service),
        "snapshots": built["ClusterSnapshot"],
        "jobs": built["Job"],
    }


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--json", action="store_true")
    args = ap.parse_args()
    torch.set_num_threads(1)
    out = measure()
    if args.json:
        print(json.dumps(out, indent=2))
        return
    for key, value in out.items():
        print(f"{key:>14}: {value}")


if __name__ == "__main__":
    main()
