"""The program a replayed batch job runs: an emulated training job on fake GPUs.

It advances its progress at the speed the interference oracle writes for it
(``<dir>/speed/<jobid>``, 1.0 until the oracle has seen it) and ends when its work is done.
Progress is checkpointed to ``<dir>/progress/<jobid>``, so a job Tiresias preempted
(requeued) resumes where it stopped, after a restart delay, as in the simulator.
Standard library only: dozens of these run at once on a small machine.
"""

from __future__ import annotations

import argparse
import os
import time
from pathlib import Path


def _read_float(path: Path, default: float) -> float:
    try:
        return float(path.read_text().strip() or default)
    except (OSError, ValueError):
        return default


def _write(path: Path, text: str) -> None:
    tmp = path.with_name(f".{path.name}.tmp")
    tmp.write_text(text)
    os.replace(tmp, path)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--work", type=float, required=True, help="seconds of work at speed 1")
    ap.add_argument("--dir", type=Path, required=True, help="replay folder")
    ap.add_argument("--restart-delay", type=float, default=0.0)
    ap.add_argument("--tick", type=float, default=0.1)
    args = ap.parse_args(argv)
    job_id = os.environ.get("SLURM_JOB_ID", "0")
    restarts = int(os.environ.get("SLURM_RESTART_COUNT", "0") or 0)
    for sub in ("progress", "jobs", "speed"):
        (args.dir / sub).mkdir(parents=True, exist_ok=True)
    progress_file = args.dir / "progress" / job_id
    speed_file = args.dir / "speed" / job_id
    log = (args.dir / "jobs" / f"{job_id}.log").open("a")
    log.write(f"start {time.time():.3f} {restarts} {os.environ.get('SLURM_JOB_NODELIST', '')}"
              f" {os.environ.get('CUDA_VISIBLE_DEVICES', '')}\n")
    log.flush()
    done = _read_float(progress_file, 0.0) if restarts else 0.0
    if restarts and args.restart_delay > 0:
        time.sleep(args.restart_delay)  # reload the checkpoint, rebuild the input pipeline
    last = time.monotonic()
    saved = last
    while done < args.work:
        time.sleep(args.tick)
        now = time.monotonic()
        done += _read_float(speed_file, 1.0) * (now - last)
        last = now
        if now - saved > 1.0:
            _write(progress_file, f"{done:.4f}\n")
            saved = now
    _write(progress_file, f"{done:.4f}\n")
    log.write(f"end {time.time():.3f}\n")
    log.close()
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
