"""`slurm-marl report` end to end on real Slurm (issue 34): Slurm alone (no gate, no agent)
runs a short window of GPU jobs on the test cluster with slurmdbd; `report` reads their
saved `sacct --json` and the cluster's own slurm.conf, and its Slurm-alone simulation
(fifo-backfill, no interference) must start the jobs about when Slurm did.

The rule: every job of the window is compared, the simulated mean wait is within
``WAIT_RATIO`` of the recorded one (simulated / recorded), and the median and p90 of the
per-job start errors (|simulated start - recorded start|) are at most
``MEDIAN_ERROR_S`` / ``P90_ERROR_S``. The window queues (a recorded mean wait of at least
``MIN_RECORDED_WAIT_S``), so a simulator that started everything at once, or much later,
fails. What the bounds were chosen from is in docs/operations.md ("How close the simulator
comes on real Slurm")."""

from __future__ import annotations

import json
import subprocess
import time
from datetime import datetime, timedelta
from pathlib import Path

import pytest
from slurmtest import SLURM_MARL
from test_history_live import acct_cluster  # noqa: F401  (the cluster with slurmdbd)

pytestmark = pytest.mark.slurm

# (GPUs, seconds of sleep, time limit in minutes) per job; a wave is submitted at once,
# WAVE_GAP_S after the one before. 8 GPUs on 2 nodes: the waves queue.
WAVES = [
    [(1, 3, 1), (2, 5, 1), (4, 2, 1), (1, 4, 2), (3, 6, 1), (2, 3, 2), (1, 5, 1),
     (4, 4, 1), (2, 2, 1), (1, 6, 2)],
    [(3, 3, 1), (1, 2, 1), (2, 4, 2), (4, 3, 1), (1, 5, 1), (2, 6, 1), (1, 3, 2),
     (3, 2, 1)],
    [(2, 4, 1), (1, 3, 1), (4, 5, 2), (1, 2, 1), (2, 3, 1), (3, 4, 1)],
]
WAVE_GAP_S = 8.0

WAIT_RATIO = (0.3, 1.0)
MEDIAN_ERROR_S = 6.0
P90_ERROR_S = 12.0
MIN_RECORDED_WAIT_S = 3.0


def disagreements(got: dict) -> list[str]:
    """Where a calibration (the report's ``calibration.all``) breaks the rule: none when
    the simulation agrees with what sacct recorded."""
    out = []
    if not WAIT_RATIO[0] <= (got["wait_ratio"] or 0) <= WAIT_RATIO[1]:
        out.append(f"wait ratio {got['wait_ratio']} outside {WAIT_RATIO}")
    if got["median_start_error_s"] > MEDIAN_ERROR_S:
        out.append(f"median start error {got['median_start_error_s']} s > {MEDIAN_ERROR_S}")
    if got["p90_start_error_s"] > P90_ERROR_S:
        out.append(f"p90 start error {got['p90_start_error_s']} s > {P90_ERROR_S}")
    return out


def report(history: Path | str, slurm_conf: Path, *more: str, env: dict | None = None
           ) -> dict:
    """``slurm-marl report --json`` through the command line, Slurm alone and Tiresias
    without interference (``env``: the cluster's, for ``--history sacct``)."""
    proc = subprocess.run(
        [*SLURM_MARL, "report", "--history", str(history), "--slurm-conf", str(slurm_conf),
         "--profiles", "fifo-backfill,las-consolidate", "--strengths", "none", "--json",
         *more], env=env, capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr
    return json.loads(proc.stdout)


def first_node_only(etc: Path, folder: Path) -> Path:
    """The cluster's slurm.conf, gres.conf and topology.conf with node n2 taken out, in
    ``folder``: half the GPUs, the simulator's cluster if it read the site wrong."""
    for name in ("slurm.conf", "gres.conf", "topology.conf"):
        lines = [line.replace("n[1-2]", "n1") for line in
                 (etc / name).read_text().splitlines() if not line.startswith("NodeName=n2 ")]
        (folder / name).write_text("\n".join(lines) + "\n")
    return folder / "slurm.conf"


def test_report_s_slurm_alone_simulation_matches_sacct(acct_cluster, tmp_path):  # noqa: F811
    c = acct_cluster
    ids = []
    for k, wave in enumerate(WAVES):
        if k:
            time.sleep(WAVE_GAP_S)
        for gpus, sleep_s, limit_min in wave:
            ids.append(c.sbatch("-J", f"w{k}-g{gpus}", "-N", "1", f"--gres=gpu:{gpus}",
                                "-t", str(limit_min), seconds=sleep_s, gated=False))
    listed = ",".join(map(str, ids))

    def ended():
        out = c.run("sacct", "-a", "-X", "-n", "-P", "-j", listed,
                    "--format=JobID,State").stdout
        states = dict(line.split("|", 1) for line in out.splitlines() if line)
        return all(states.get(str(i)) == "COMPLETED" for i in ids)

    c.wait_for(ended, 120, "the window's jobs to be completed in accounting")
    history = tmp_path / "sacct.json"
    history.write_text(c.run("sacct", "--json", "-a", "-j", listed).stdout)
    html, out = tmp_path / "report.html", tmp_path / "report.json"
    doc = report(history, c.local.slurm_conf, "--html", str(html), "--out", str(out))
    assert doc["bad_rows"] == 0 and doc["jobs"]["left_out"] == {}
    assert doc["jobs"]["in_period"] == doc["jobs"]["simulated"] == len(ids)
    cal = doc["calibration"]
    assert (cal["profile"], cal["interference"]) == ("fifo-backfill", "none")
    assert cal["compared_jobs"] == len(ids) and cal["not_compared"] == 0
    got = cal["all"]
    worst = json.dumps(cal["worst_jobs"])
    assert got["recorded_mean_wait_s"] >= MIN_RECORDED_WAIT_S, got
    assert not disagreements(got), (disagreements(got), got, worst)
    # the report's own tolerance, max(10% of the recorded JCT, 60 s), holds every job
    assert got["share_within_tolerance"] == 1.0, (got, worst)
    las = [r for r in doc["what_if"]["results"] if r["profile"] == "las-consolidate"]
    assert len(las) == 1 and las[0]["per_job"]["compared_jobs"] == len(ids)
    page = html.read_text()
    assert page.startswith("<!DOCTYPE html>") and 'src="data:image/png;base64,' in page
    assert json.loads(out.read_text())["calibration"] == cal
    # read from sacct now (--history sacct) over the window's submissions: the same
    last = datetime.fromisoformat(doc["period"]["last_submit"]) + timedelta(seconds=1)
    assert report("sacct", c.local.slurm_conf, "--from", doc["period"]["first_submit"],
                  "--to", last.isoformat(), env=c.local.env)["calibration"] == cal
    # the rule can fail: the same history on a cluster read wrong (half its GPUs) breaks it
    (tmp_path / "half").mkdir()
    half = report(history, first_node_only(c.local.slurm_conf.parent, tmp_path / "half"))
    assert half["cluster"]["gpus"] == doc["cluster"]["gpus"] // 2
    assert half["calibration"]["compared_jobs"] == len(ids)
    assert disagreements(half["calibration"]["all"]), half["calibration"]["all"]
