"""Emulated interference on the real cluster: the simulator's performance model, applied to
what Slurm actually placed.

The fake GPUs are /dev/null, so nothing physical slows a job down. The oracle watches the
running jobs (one snapshot per tick), works out for each replay job what it shares (GPU group,
node, leaf links with other multi-node jobs), asks ``sim.perf.job_speed`` how fast it runs
there, and writes that speed to ``<dir>/speed/<jobid>``. Each job's payload advances at that
speed. So the agent's placements change real completion times through the same documented
model the simulator uses.
"""

from __future__ import annotations

import logging
import os
import threading
import time
from pathlib import Path

from slurm_marl.domain import ClusterSnapshot, Job
from slurm_marl.replay.plan import parse_job_name
from slurm_marl.colocation import Neighbourhood, snapshot_neighbourhoods
from slurm_marl.sim.perf import PerfParams, job_speed

log = logging.getLogger(__name__)


def _model(job: Job) -> str | None:
    parsed = parse_job_name(job.name)
    return parsed[1] if parsed else None


def neighbourhoods(snap: ClusterSnapshot) -> dict[int, tuple[str | None, Neighbourhood]]:
    """For every running replay job: (its model, from its name; what it shares)."""
    return snapshot_neighbourhoods(snap, _model)


def speeds(snap: ClusterSnapshot, params: PerfParams) -> dict[int, float]:
    return {jid: job_speed(model, hood, params)
            for jid, (model, hood) in neighbourhoods(snap).items()}


class Oracle:
    """A background thread writing each running job's speed every ``tick_s``."""

    def __init__(self, source, directory: Path, params: PerfParams, tick_s: float = 0.5):
        self.source = source
        self.dir = Path(directory) / "speed"
        self.dir.mkdir(parents=True, exist_ok=True)
        self.params = params
        self.tick_s = tick_s
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="oracle", daemon=True)
        self.ticks = 0
        self.errors = 0
        self.speed_sum = 0.0
        self.speed_n = 0

    def start(self) -> "Oracle":
        self._thread.start()
        return self

    def stop(self) -> None:
        self._stop.set()
        self._thread.join(timeout=10)

    def tick(self) -> dict[int, float]:
        current = speeds(self.source.snapshot(), self.params)
        for jid, speed in current.items():
            tmp = self.dir / f".{jid}.tmp"
            tmp.write_text(f"{speed:.6f}\n")
            os.replace(tmp, self.dir / str(jid))
            self.speed_sum += speed
            self.speed_n += 1
        return current

    def _run(self) -> None:
        while not self._stop.is_set():
            started = time.monotonic()
            try:
                self.tick()
                self.ticks += 1
            except Exception as exc:  # a missed tick only delays speed changes
                self.errors += 1
                log.debug("oracle tick failed: %s", exc)
            self._stop.wait(max(0.0, self.tick_s - (time.monotonic() - started)))
