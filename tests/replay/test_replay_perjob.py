"""Per job on real Slurm (issue 33), without Slurm: each run's jobs against Slurm alone,
matched by trace job id, in trace seconds; the noise floor and the jobs beyond it; the report
compare_replay writes and renders, with the runs themselves faked."""

import io
import json

import pytest
from rich.console import Console

from slurm_marl.replay.perjob import beyond_noise_floor, per_job_report, ratio_series, \
    trace_job_times
from slurm_marl.replay.plan import plan_replay
from slurm_marl.replay.runner import JobTimes, ReplayResult
from slurm_marl.sim.perjob import JobTime
from slurm_marl.sim.traces import TraceJob
from slurm_marl.testcluster import ClusterSpec

SPEC = ClusterSpec(nodes=4, sockets=2, gpus_per_socket=2, nodes_per_leaf=2)
# trace ids that are not plan indexes (job 20 is too large for 16 GPUs and dropped)
TRACE = [TraceJob(10, 0.0, 1000.0, 1, user="vcA"), TraceJob(20, 5.0, 100.0, 32),
         TraceJob(30, 10.0, 2000.0, 4, user="vcA"), TraceJob(40, 20.0, 300.0, 8, user="vcB")]
SPEEDUP = 100.0


def plan():
    return plan_replay(TRACE, SPEC, speedup=SPEEDUP, seed=0)


def run_jobs(p, jct_trace_s, first_slurm_id=1, order=None):
    """A run's JobTimes: plan job k ends ``jct_trace_s[k]`` trace seconds (None: never)
    after its planned arrival; Slurm ids numbered from ``first_slurm_id`` in ``order``."""
    order = order or range(len(p.jobs))
    ids = {k: first_slurm_id + n for n, k in enumerate(order)}
    out = []
    for k, job in enumerate(p.jobs):
        end = None if jct_trace_s[k] is None else job.arrival_s + jct_trace_s[k] / p.speedup
        out.append(JobTimes(k, ids[k], job.arrival_s, job.arrival_s,
                            None if end is None else job.arrival_s, end))
    return out


def test_trace_job_times_are_trace_seconds_by_trace_job_id():
    p = plan()
    assert [j.trace_job_id for j in p.jobs] == [10, 30, 40]
    times = trace_job_times(p, run_jobs(p, [1500.0, None, 450.0]))
    assert times == [JobTime(10, 1, "vcA", pytest.approx(1500.0)),
                     JobTime(30, 4, "vcA", None), JobTime(40, 8, "vcB", pytest.approx(450.0))]
    # result.json's dicts give the same (its times are wall seconds after the start)
    as_saved = json.loads(json.dumps([j.__dict__ for j in run_jobs(p, [1500.0, None, 450.0])]))
    assert trace_job_times(p, as_saved) == times


def test_trace_job_times_refuses_results_of_another_plan():
    p = plan()
    with pytest.raises(ValueError, match="index 3 is not a job of the plan"):
        trace_job_times(p, [JobTimes(3, 1, 0.0, 0.0)])
    with pytest.raises(ValueError, match="trace job 99.*results of another plan"):
        trace_job_times(p, [JobTimes(0, 1, 0.0, 0.0, trace_job_id=99)])


def test_jobs_match_by_trace_id_not_slurm_id_and_the_floor_is_in_trace_seconds():
    p = plan()
    alone = trace_job_times(p, run_jobs(p, [1000.0, 4000.0, 300.0]))
    # the agent's cluster ran them in another order, so Slurm numbered them differently
    agent = trace_job_times(p, run_jobs(p, [3000.0, 4000.0, 500.0], order=[2, 0, 1]))
    report = per_job_report({"slurm": alone, "agent": agent}, "slurm",
                            labels={"slurm": "Slurm alone", "agent": "agent (x)"})
    got = report["runs"]["agent"]
    assert report["noise_floor"] is None and got["beyond_noise_floor"] is None
    assert report["seconds"] == "trace" and report["floor_s"] == 600.0
    assert got["baseline"] == "Slurm alone" and got["compared_jobs"] == 3
    # trace job 40: 300 -> 500 trace s is under the 600 s floor: 500/600, not 500/300
    assert got["worst_job"]["job_id"] == 10 and got["worst_ratio"] == 3.0
    assert got["jobs_slower_1_1x"] == 1 and got["jobs_slower_2x"] == 1
    assert got["by_gpus"]["5-8"]["worst_ratio"] == round(500 / 600, 4)
    assert set(report["runs"]) == {"agent"}
    series = ratio_series({"slurm": alone, "agent": agent}, "slurm",
                          {"agent": "agent (x)"})
    assert sorted(series["agent (x)"]) == pytest.approx([500 / 600, 1.0, 3.0])


@pytest.mark.parametrize("ratio, beyond", [(1.6, False), (1.8, True)])
def test_beyond_the_noise_floor_needs_more_than_its_worst_ratio(ratio, beyond):
    """Noise worst 1.7: a job at 1.6x is within Slurm's own noise, one at 1.8x is not."""
    p = plan()
    alone = trace_job_times(p, run_jobs(p, [1000.0, 2000.0, 1000.0]))
    noise = trace_job_times(p, run_jobs(p, [1700.0, 2000.0, 1000.0]))   # worst 1.7
    agent = trace_job_times(p, run_jobs(p, [1000.0, 2000.0 * ratio, 1000.0]))
    report = per_job_report({"slurm": alone, "agent": agent, "slurm-noise": noise},
                            "slurm", "slurm-noise")
    assert report["noise_floor"]["worst_ratio"] == 1.7
    assert report["noise_floor"]["worst_job"]["job_id"] == 10
    got = report["runs"]["agent"]["beyond_noise_floor"]
    assert got["noise_worst_ratio"] == 1.7 and got["min_ratio"] == 1.5
    assert got["jobs"] == int(beyond)
    assert [j["job_id"] for j in got["job_list"]] == ([30] if beyond else [])
    if beyond:
        assert got["job_list"][0] == {"job_id": 30, "num_gpus": 4, "user": "vcA",
                                      "baseline_jct_s": 2000.0, "jct_s": 3600.0,
                                      "ratio": 1.8}


def test_beyond_the_noise_floor_needs_1_5x_even_when_the_noise_is_low():
    a = [JobTime(1, 1, "", 1000.0), JobTime(2, 1, "", 1000.0), JobTime(3, 1, "", 1000.0)]
    b = [JobTime(1, 1, "", 1400.0), JobTime(2, 1, "", 1500.0), JobTime(3, 1, "", 2500.0)]
    got = beyond_noise_floor(b, a, noise_worst_ratio=1.0)
    assert [j["job_id"] for j in got["job_list"]] == [3] and got["jobs"] == 1


def test_report_needs_the_runs_it_names():
    with pytest.raises(ValueError, match="no run 'slurm'"):
        per_job_report({"agent": []}, "slurm")
    with pytest.raises(ValueError, match="no noise-floor run"):
        per_job_report({"slurm": []}, "slurm", "slurm-noise")


# compare_replay end to end, the real-Slurm runs faked: each run's jobs take the plan's
# work times a run-specific factor, plus 10 trace seconds (the trace's jobs run 121-164 s,
# under the 600 s floor)
FACTORS = {"slurm": [1.0] * 8, "slurm-noise": [5.0, 1.0, 1.0, 1.0, 1.0, 1.0, 1.0, 1.0],
           "agent": [1.0, 10.0, 3.0, 0.5, 0.5, 0.5, 0.5, 0.5]}


def fake_run_replay(calls):
    def run(plan, spec, mode, out, **kwargs):
        key = out.name
        calls.append((key, mode))
        jobs = [JobTimes(k, 100 + k, j.arrival_s, j.arrival_s, j.arrival_s,
                         j.arrival_s + j.work_s * FACTORS[key][k] + 10.0 / plan.speedup,
                         trace_job_id=j.trace_job_id)
                for k, j in enumerate(plan.jobs)]
        return ReplayResult(mode, kwargs.get("profile", "slurm"), plan.speedup, jobs)
    return run


@pytest.fixture
def faked(monkeypatch):
    calls = []
    monkeypatch.setattr("slurm_marl.replay.runner.run_replay", fake_run_replay(calls))
    return calls


def replay(tmp_path, noise_floor, modes=("slurm", "agent")):
    from slurm_marl.replay.cli import compare_replay, default_runs
    from slurm_marl.shared_data import data_file

    return compare_replay(data_file("traces/tiresias_60_job.csv"), "rows=0:8", speedup=10.0,
                          nodes=4, gpus_per_socket=4,
                          runs=default_runs(modes, "las-consolidate"), interference="none",
                          out=tmp_path, seed=0, console=Console(file=io.StringIO()),
                          noise_floor=noise_floor)


def test_compare_replay_writes_per_job_the_noise_floor_and_the_ratio_plot(tmp_path, faked):
    from slurm_marl.replay.cli import render

    report = replay(tmp_path, noise_floor=True)
    assert faked == [("slurm", "slurm"), ("agent", "agent"), ("slurm-noise", "slurm")]
    saved = json.loads((tmp_path / "replay.json").read_text())
    per_job = saved["per_job"]
    assert per_job == json.loads(json.dumps(report["per_job"]))
    assert per_job["noise_run"] == "slurm-noise" and set(per_job["runs"]) == {"agent"}
    # job 0: 164 s of work 5x in the noise run, (820 + 10) / 600; job 1 (8 GPUs): 147 s
    # of work 10x under the agent, 2.47x; job 2's 3x stays under the floor
    assert per_job["noise_floor"]["worst_job"]["job_id"] == 0
    assert per_job["noise_floor"]["worst_ratio"] == round(830 / 600, 4)
    agent = per_job["runs"]["agent"]
    assert agent["compared_jobs"] == 8 and agent["worst_job"]["job_id"] == 1
    assert [j["job_id"] for j in agent["beyond_noise_floor"]["job_list"]] == [1]
    assert saved["runs"]["slurm-noise"] == "Slurm alone, 2nd run (noise floor)"
    assert saved["simulated"]["slurm-noise"] == saved["simulated"]["slurm"]
    assert (tmp_path / "jct_ratio_cdf.png").stat().st_size > 0
    buf = io.StringIO()
    render(saved, Console(file=buf, width=1000))
    text = buf.getvalue()
    assert "per job against Slurm alone" in text and "JCT in trace seconds" in text
    assert "per job by GPUs per job" in text and "worst users" not in text
    assert "noise floor (Slurm alone against itself, 8 jobs)" in text
    assert ("agent (las-consolidate): 1 job > 1.5x and beyond the noise floor (worst "
            f"{per_job['noise_floor']['worst_ratio']:.2f}x): #1 ") in text


def test_compare_replay_without_a_noise_floor_says_so(tmp_path, faked):
    from slurm_marl.replay.cli import render

    (tmp_path / "jct_ratio_cdf.png").write_text("an earlier replay's")
    report = replay(tmp_path, noise_floor=False)
    assert [k for k, _ in faked] == ["slurm", "agent"]
    assert report["per_job"]["noise_floor"] is None
    assert report["per_job"]["runs"]["agent"]["beyond_noise_floor"] is None
    assert (tmp_path / "jct_ratio_cdf.png").read_bytes()[:4] == b"\x89PNG"
    buf = io.StringIO()
    render(report, Console(file=buf, width=1000))
    assert "no noise floor: Slurm alone ran once (--noise-floor runs it twice)" in buf.getvalue()


def test_compare_replay_without_slurm_alone_has_no_per_job(tmp_path, faked):
    (tmp_path / "jct_ratio_cdf.png").write_text("an earlier replay's")
    report = replay(tmp_path, noise_floor=False, modes=("agent",))
    assert report["per_job"] is None and not (tmp_path / "jct_ratio_cdf.png").exists()
    with pytest.raises(ValueError, match="needs a Slurm-alone run"):
        replay(tmp_path, noise_floor=True, modes=("agent",))


def test_replay_cli_refuses_a_noise_floor_without_slurm_alone(faked):
    from typer.testing import CliRunner

    from slurm_marl.cli import app

    res = CliRunner().invoke(app, ["replay", "--mode", "agent", "--noise-floor"])
    assert res.exit_code == 2 and "--noise-floor compares a second Slurm-alone run" in \
        res.output and faked == []
    res = CliRunner().invoke(app, ["replay", "--mode", "alone"])
    assert res.exit_code == 2 and "--mode is both, slurm or agent" in res.output
