"""Metrics of a simulation and its outputs: JSON summary, per-job CSV, JCT CDF plot, samples.

JCT = finish - submit. Queueing delay = first start - submit. Wait = all time spent pending
(including after preemptions); the longest wait is the starvation figure. GPU utilisation =
GPU-seconds held by running jobs / (GPUs x makespan), makespan = last finish - first submit.
"""

from __future__ import annotations

import csv
import json
import math
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import IO

from slurm_marl.sim.jobs import SimJob, SimOutcome


def percentile(values: Sequence[float], q: float) -> float:
    """Linear-interpolated percentile (numpy's default), ``q`` in [0, 100]."""
    if not values:
        return math.nan
    xs = sorted(values)
    pos = (len(xs) - 1) * q / 100.0
    lo = math.floor(pos)
    hi = min(lo + 1, len(xs) - 1)
    return xs[lo] + (xs[hi] - xs[lo]) * (pos - lo)


def summarize(outcome: SimOutcome) -> dict:
    done = [j for j in outcome.jobs if j.finish_s is not None]
    jct = [j.finish_s - j.submit_s for j in done]
    delay = [j.first_start_s - j.submit_s for j in done]
    wait = [j.pending_total_s for j in done]
    if outcome.jobs:
        first = min(j.submit_s for j in outcome.jobs)
        last = max((j.finish_s for j in done), default=first)
    else:
        first = last = 0.0
    makespan = last - first
    gpu_s = sum(j.num_gpus * j.run_total_s for j in outcome.jobs)
    util = gpu_s / (outcome.total_gpus * makespan) if makespan > 0 and outcome.total_gpus \
        else 0.0
    run_s = sum(j.run_total_s for j in done)
    mean_speed = (sum(j.speed_weighted_s for j in done) / run_s) if run_s > 0 else 1.0
    return {
        "jobs": len(outcome.jobs), "finished": len(done), "unfinished": outcome.unfinished,
        "avg_jct_s": _r(sum(jct) / len(jct)) if jct else None,
        "median_jct_s": _r(percentile(jct, 50)), "p95_jct_s": _r(percentile(jct, 95)),
        "avg_queue_delay_s": _r(sum(delay) / len(delay)) if delay else None,
        "median_queue_delay_s": _r(percentile(delay, 50)),
        "p95_queue_delay_s": _r(percentile(delay, 95)),
        "longest_wait_s": _r(max(wait)) if wait else None,
        "makespan_s": _r(makespan), "gpu_utilisation": _r(util, 4),
        "mean_speed": _r(mean_speed, 4),
        "preemptions": outcome.preemptions, "reservations": outcome.reservations,
        "cycles": outcome.cycles, "sim_wall_time_s": _r(outcome.wall_time_s, 3),
    }


def _r(x, digits: int = 2):
    if x is None or (isinstance(x, float) and math.isnan(x)):
        return None
    return round(float(x), digits)


JOB_COLUMNS = ["job_id", "model_type", "num_gpus", "submit_time_s", "first_start_s",
               "finish_s", "jct_s", "queue_delay_s", "wait_s", "run_s", "duration_s",
               "mean_speed", "preemptions", "last_nodes"]


def job_rows(jobs: Sequence[SimJob]) -> list[list]:
    rows = []
    for j in jobs:
        fin = j.finish_s
        rows.append([
            j.job_id, j.model_type or "", j.num_gpus, _r(j.submit_s, 3),
            _r(j.first_start_s, 3), _r(fin, 3),
            _r(fin - j.submit_s, 3) if fin is not None else None,
            _r(j.first_start_s - j.submit_s, 3) if j.first_start_s is not None else None,
            _r(j.pending_total_s, 3), _r(j.run_total_s, 3), _r(j.duration_s, 3),
            _r(j.speed_weighted_s / j.run_total_s, 4) if j.run_total_s > 0 else None,
            j.preemptions, " ".join(j.last_nodes)])
    return rows


def write_jobs_csv(path: Path, jobs: Sequence[SimJob]) -> None:
    with open(path, "w", newline="", encoding="utf-8") as fh:
        w = csv.writer(fh)
        w.writerow(JOB_COLUMNS)
        w.writerows(job_rows(jobs))


SAMPLE_CSV_COLUMNS = ["time_s", "job_id", "model_type", "num_gpus", "groups", "nodes",
                      "leaves", "cross_leaf", "colocated_gpu", "colocated_group",
                      "colocated_node", "colocated_leaf", "duration_s", "speed", "strength"]


def write_samples(path: Path, samples: Sequence[Mapping]) -> None:
    """JSONL (one sample per line) or, for a ``.csv`` path, flat columns with the
    co-located model types of each level joined by ``;``."""
    if path.suffix == ".csv":
        with open(path, "w", newline="", encoding="utf-8") as fh:
            w = csv.writer(fh)
            w.writerow(SAMPLE_CSV_COLUMNS)
            for s in samples:
                c = s["colocated"]
                w.writerow([s["time_s"], s["job_id"], s["model_type"], s["num_gpus"],
                            s["groups"], s["nodes"], s["leaves"], int(s["cross_leaf"]),
                            ";".join(c["gpu"]), ";".join(c["group"]), ";".join(c["node"]),
                            ";".join(c["leaf"]), s["duration_s"], s["speed"], s["strength"]])
        return
    with open(path, "w", encoding="utf-8") as fh:
        for s in samples:
            fh.write(json.dumps(s, separators=(",", ":")) + "\n")


# The size of the plots below: FIGSIZE_IN inches at DPI dots per inch (704 x 462 pixels).
FIGSIZE_IN, DPI = (6.4, 4.2), 110


def figure_px() -> tuple[int, int]:
    """Width and height in pixels of a figure of ``FIGSIZE_IN`` at ``DPI``."""
    return round(FIGSIZE_IN[0] * DPI), round(FIGSIZE_IN[1] * DPI)


def pyplot():
    """matplotlib's pyplot on the Agg backend (no display), imported on first use."""
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    return plt


def plot_jct_cdf(path: Path, series: Mapping[str, Sequence[float]], title: str) -> None:
    """One JCT CDF line per series (log x axis), written with matplotlib's Agg backend."""
    _plot_cdf(path, series, title, "job completion time (s)", (), "lower right")


def plot_ratio_cdf(path: Path | IO[bytes], series: Mapping[str, Sequence[float]], title: str,
                   xlabel: str, marks: Sequence[float] = (1.1, 2.0)) -> None:
    """One CDF line per series of per-job JCT ratios (``sim/perjob.py``), log x axis, a
    dashed vertical line at each of ``marks``; matplotlib's Agg backend. ``path`` may be a
    binary file object (PNG)."""
    _plot_cdf(path, series, title, xlabel, marks, "upper left")


def _plot_cdf(path: Path | IO[bytes], series: Mapping[str, Sequence[float]], title: str,
              xlabel: str, marks: Sequence[float], legend_at: str) -> None:
    plt = pyplot()
    fig, ax = plt.subplots(figsize=FIGSIZE_IN, dpi=DPI)
    for label, values in series.items():
        xs = sorted(v for v in values if v is not None and v > 0)
        if not xs:
            continue
        ys = [(i + 1) / len(xs) for i in range(len(xs))]
        ax.step(xs, ys, where="post", label=label)
    for mark in marks:
        ax.axvline(mark, color="grey", linestyle="--", linewidth=0.8)
        ax.annotate(f"{mark:g}x", (mark, 0.02), xytext=(3, 0), textcoords="offset points",
                    fontsize=7, color="grey")
    ax.set_xscale("log")
    ax.set_xlabel(xlabel)
    ax.set_ylabel("fraction of jobs")
    ax.set_title(title, fontsize=10)
    ax.grid(True, which="both", alpha=0.3)
    ax.legend(fontsize=8, loc=legend_at)
    fig.tight_layout()
    fig.savefig(path)
    plt.close(fig)


def jcts(jobs: Sequence[SimJob]) -> list[float]:
    return [j.finish_s - j.submit_s for j in jobs if j.finish_s is not None]
