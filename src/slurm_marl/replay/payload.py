"""The program a replayed batch job runs: an emulated training job on fake GPUs.

It advances its progress at the speed the interference oracle writes for it
(``<dir>/speed/<jobid>``, 1.0 until the oracle has seen it) and ends when its work is done.
Progress is checkpointed to ``<dir>/progress/<jobid>`` (work done and the time), so a job Tiresias preempted
(requeued) resumes where it stopped, after a restart delay, as in the simulator.
Standard library only: dozens of these run at once on a small machine.
"""

from __future__ import annotations

import argparse
import os
import signal
import time
from pathlib import Path


def _read_float(path: Path, default: float) -> float:
    """The first number in ``path`` (a progress file also carries the time it was written)."""
    try:
        text = path.read_text().split()
        return float(text[0]) if text else default
    except (OSError, ValueError):
        return default


def _progress(done: float) -> str:
    # "<seconds of work at full speed> <unix time>": the agent's progress reader
    # (`agent.progress_dir`) turns two such lines into an observed speed.
    return f"{done:.4f} {time.time():.3f}\n"


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
    state = {"done": done}

    def _checkpoint_and_stop(signum, _frame):
        # Slurm signals a requeued (preempted) job with SIGTERM, KillWait before SIGKILL: a
        # training job checkpoints here, so it resumes where it stopped, as in the simulator.
        _write(progress_file, _progress(state["done"]))
        log.write(f"stop {time.time():.3f}\n")
        log.close()
        os._exit(0)

    signal.signal(signal.SIGTERM, _checkpoint_and_stop)
    while done < args.work:
        time.sleep(args.tick)
        now = time.monotonic()
        done += _read_float(speed_file, 1.0) * (now - last)
        state["done"] = done
        last = now
        if now - saved > 0.5:
            _write(progress_file, _progress(done))
            saved = now
    _write(progress_file, _progress(done))
    log.write(f"end {time.time():.3f}\n")
    log.close()
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
