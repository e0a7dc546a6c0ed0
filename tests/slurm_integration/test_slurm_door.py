"""The Slurm door: every Slurm client command line is built in ``slurm_integration`` and run
by its ``SlurmRunner`` (explicit SLURM_CONF, the chroot's ``bin_dir``, no client defaults
from the shell). A scan of the source for argv literals outside the door, and the door's
client functions against stand-in clients."""

import ast
import json
import os
import sys
from datetime import datetime
from pathlib import Path

import pytest

import slurm_marl
from slurm_marl.slurm_integration import clients
from slurm_marl.slurm_integration.runner import (SlurmError, SlurmOutputError, SlurmRunner,
                                                 SlurmUnavailable)

CLIENTS = {"sbatch", "sacct", "squeue", "scancel", "scontrol", "sinfo", "sacctmgr", "srun",
           "salloc"}
# the door itself, and the test-cluster harness (it starts and drives its own clusters)
ALLOWED = ("slurm_integration", "testcluster")


def argv_literals(path: Path) -> list[str]:
    """``file:line client`` for each list or tuple literal that starts with a client name."""
    hits = []
    for node in ast.walk(ast.parse(path.read_text(), filename=str(path))):
        if isinstance(node, (ast.List, ast.Tuple)) and node.elts:
            first = node.elts[0]
            if (isinstance(first, ast.Constant) and isinstance(first.value, str)
                    and first.value in CLIENTS):
                hits.append((node.lineno, first.value))
    return [f"{path}:{line} {name}" for line, name in sorted(hits)]


def test_no_slurm_client_command_line_outside_the_door():
    root = Path(slurm_marl.__file__).parent
    outside = [p for p in sorted(root.rglob("*.py"))
               if p.relative_to(root).parts[0] not in ALLOWED]
    assert len(outside) > 20    # the scan sees the package
    found = [hit for p in outside for hit in argv_literals(p)]
    assert not found, ("Slurm client command lines outside slurm_integration (build them in "
                       "slurm_integration/clients.py):\n" + "\n".join(found))


def test_the_scan_finds_an_argv_in_a_list_or_a_tuple(tmp_path):
    src = tmp_path / "m.py"
    src.write_text('import subprocess\nsubprocess.run(["squeue", "-h"])\n'
                   'CMD = ("scancel", "1")\nNAMES = ["sinfo is not first", "squeue"]\n')
    assert argv_literals(src) == [f"{src}:2 squeue", f"{src}:3 scancel"]


# ---- the door's client functions, against stand-in clients -------------------------------


def stand_in(bin_dir, name, body):
    """A stand-in client ``name`` in ``bin_dir``: a Python script that appends its
    arguments (and the SLURM_CONF and PATH it was given) to ``name.calls``, then runs
    ``body``."""
    bin_dir.mkdir(exist_ok=True)
    log = bin_dir / f"{name}.calls"
    exe = bin_dir / name
    exe.write_text(f"#!{sys.executable}\nimport json, os, sys, time\n"
                   f"with open({str(log)!r}, 'a') as f:\n"
                   "    f.write(json.dumps([sys.argv[1:], os.environ.get('SLURM_CONF'),\n"
                   "                        os.environ.get('PATH')]) + '\\n')\n"
                   f"{body}\n")
    exe.chmod(0o755)


def calls(bin_dir, name):
    """The argument lists the stand-in ``name`` was called with."""
    log = bin_dir / f"{name}.calls"
    if not log.exists():
        return []
    return [json.loads(line)[0] for line in log.read_text().splitlines()]


def runner_of(bin_dir, timeout_s=5.0):
    return SlurmRunner("/dev/null", bin_dir=bin_dir, timeout_s=timeout_s)


FAIL = "sys.stderr.write({!r}); sys.exit(1)"
UNREACHABLE = FAIL.format("squeue: error: Unable to contact slurm controller (connect failure)")
SLOW = "time.sleep(10)"


def test_slurm_version_is_the_answer_and_a_failure_is_an_error(tmp_path):
    bin_dir = tmp_path / "bin"
    stand_in(bin_dir, "scontrol", "print('slurm 24.11.5')")
    assert clients.slurm_version(runner_of(bin_dir)) == "slurm 24.11.5"
    assert calls(bin_dir, "scontrol") == [["--version"]]
    # a failure is SlurmError even in words that read as "unreachable": it asks no daemon
    stand_in(bin_dir, "scontrol", FAIL.format("unable to contact slurm controller"))
    with pytest.raises(SlurmError) as err:
        clients.slurm_version(runner_of(bin_dir))
    assert type(err.value) is SlurmError and err.value.message == (
        "unable to contact slurm controller")
    stand_in(bin_dir, "scontrol", SLOW)
    with pytest.raises(SlurmUnavailable):
        clients.slurm_version(runner_of(bin_dir, timeout_s=0.5))
    with pytest.raises(SlurmUnavailable):
        clients.slurm_version(runner_of(tmp_path / "empty"))


def test_install_plugin_s_version_question_says_how_to_give_it(tmp_path, monkeypatch):
    from slurm_marl.daemon.cli import _scontrol_version
    from slurm_marl.slurm_integration.plugin import PluginError

    bin_dir, conf = tmp_path / "bin", tmp_path / "slurm.conf"
    conf.write_text("")
    monkeypatch.setenv("PATH", f"{bin_dir}:{os.environ['PATH']}")
    stand_in(bin_dir, "scontrol", "print('slurm 22.05.8 ')")
    assert _scontrol_version(conf) == "slurm 22.05.8"
    stand_in(bin_dir, "scontrol", FAIL.format("scontrol: error: no way\n"))
    with pytest.raises(PluginError, match=r"^scontrol --version failed \(scontrol: error: "
                                          r"no way\); give --slurm-version$"):
        _scontrol_version(conf)
    (bin_dir / "scontrol").unlink()
    monkeypatch.setenv("PATH", str(bin_dir))
    with pytest.raises(PluginError, match=r"^cannot run scontrol --version \(Slurm client "
                                          r"not found: .*\); give --slurm-version$"):
        _scontrol_version(conf)


def test_submit_batch_gives_the_job_id_of_either_parsable_form(tmp_path):
    bin_dir = tmp_path / "bin"
    stand_in(bin_dir, "sbatch", "print('4711')")
    runner = runner_of(bin_dir)
    assert clients.submit_batch(runner, ["-J", "a b", "--requeue"], "exec sleep 1") == 4711
    assert calls(bin_dir, "sbatch") == [["--parsable", "-J", "a b", "--requeue", "--wrap",
                                         "exec sleep 1"]]
    stand_in(bin_dir, "sbatch", "print('12;cluster2')")
    assert clients.submit_batch(runner, [], "true") == 12
    stand_in(bin_dir, "sbatch", "print('Submitted batch job 12')")
    with pytest.raises(SlurmOutputError, match="not a job id"):
        clients.submit_batch(runner, [], "true")


def test_submit_batch_refused_or_not_run_is_an_error_with_sbatch_s_words(tmp_path):
    bin_dir = tmp_path / "bin"
    refused = "sbatch: error: Batch job submission failed: Invalid partition name specified"
    stand_in(bin_dir, "sbatch", f"print('noise'); {FAIL.format(refused + chr(10))}")
    with pytest.raises(SlurmError) as err:
        clients.submit_batch(runner_of(bin_dir), [], "true")
    assert type(err.value) is SlurmError and err.value.message == refused
    stand_in(bin_dir, "sbatch", SLOW)
    with pytest.raises(SlurmUnavailable, match="timed out"):   # the call's timeout
        clients.submit_batch(runner_of(bin_dir, timeout_s=60), [], "true", timeout_s=0.5)


def test_a_replay_s_refused_submission_is_a_replay_error_with_sbatch_s_words(tmp_path):
    from slurm_marl.replay.plan import ReplayJob
    from slurm_marl.replay.runner import ReplayError, _submit

    bin_dir = tmp_path / "bin"
    job = ReplayJob(index=3, trace_job_id=9, arrival_s=0.0, work_s=1.0, num_gpus=8,
                    node_count=2, gpus_per_node=4, model_type="bert")
    stand_in(bin_dir, "sbatch", "print('7')")
    assert _submit(runner_of(bin_dir), job, tmp_path / "out", "exec true") == 7
    assert calls(bin_dir, "sbatch") == [[
        "--parsable", f"--chdir={tmp_path}/out", "--output=/dev/null", "--requeue",
        "-J", job.name, "--gres=gpu:4", "-N", "2", "--wrap", "exec true"]]
    stand_in(bin_dir, "sbatch", FAIL.format("sbatch: error: QOSMaxGRESPerUser\n"))
    with pytest.raises(ReplayError, match=rf"^sbatch of {job.name} failed: sbatch: error: "
                                          r"QOSMaxGRESPerUser$"):
        _submit(runner_of(bin_dir), job, tmp_path / "out", "exec true")


def test_jobs_listed_reads_squeue_s_lines_and_a_forgotten_job_as_none(tmp_path):
    bin_dir = tmp_path / "bin"
    stand_in(bin_dir, "squeue", "print('12_3'); print('12_[4-9]'); print()")
    runner = runner_of(bin_dir)
    assert clients.jobs_listed(runner, ["12"]) == ["12_3", "12_[4-9]"]
    assert clients.jobs_listed(runner, [12, 13]) == ["12_3", "12_[4-9]"]
    assert calls(bin_dir, "squeue") == [["-h", "-j", "12", "-o", "%i"],
                                        ["-h", "-j", "12,13", "-o", "%i"]]
    stand_in(bin_dir, "squeue", "")
    assert clients.jobs_listed(runner, ["12"]) == []
    stand_in(bin_dir, "squeue", FAIL.format(
        "slurm_load_jobs error: Invalid job id specified\n"))
    assert clients.jobs_listed(runner, ["12"]) == []
    stand_in(bin_dir, "squeue", FAIL.format("squeue: error: something else\n"))
    with pytest.raises(SlurmError) as err:
        clients.jobs_listed(runner, ["12"])
    assert type(err.value) is SlurmError and err.value.message == "squeue: error: something else"
    stand_in(bin_dir, "squeue", UNREACHABLE)
    with pytest.raises(SlurmUnavailable):
        clients.jobs_listed(runner, ["12"])


@pytest.mark.parametrize("body, gone", [
    ("print('12_3')", False),
    ("", True),
    (FAIL.format("slurm_load_jobs error: Invalid job id specified"), True),
    (FAIL.format("squeue: error: something else"), False),   # unknown: not gone
    (UNREACHABLE, False),
    (SLOW, False),
    (None, False),                                            # no squeue at all
], ids=["listed", "none", "forgotten", "failed", "unreachable", "timed-out", "missing"])
def test_a_sweep_s_array_is_gone_only_when_squeue_says_so(tmp_path, body, gone):
    from slurm_marl.sweep.run import _array_gone

    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    if body is not None:
        stand_in(bin_dir, "squeue", body)
    assert _array_gone("12", runner_of(bin_dir, timeout_s=0.5 if body == SLOW else 5)) is gone


def test_a_sweep_s_clients_come_from_path_with_its_slurm_conf(tmp_path, monkeypatch):
    """The sweep's squeue and scancel: found on PATH (as submitit's sbatch), SLURM_CONF
    the sweep's or else the environment's, no client defaults from the shell."""
    from slurm_marl.sweep.run import _array_gone, _slurm_runner

    bin_dir = tmp_path / "bin"
    stand_in(bin_dir, "squeue", "print(os.environ.get('SQUEUE_USERS', ''), end='')")
    monkeypatch.setenv("PATH", f"{bin_dir}:{os.environ['PATH']}")
    monkeypatch.setenv("SLURM_CONF", "/etc/from-env.conf")
    monkeypatch.setenv("SQUEUE_USERS", "nobody")
    assert _array_gone("12", _slurm_runner(tmp_path / "slurm.conf"))
    assert _array_gone("12", _slurm_runner(None))
    got = [json.loads(line) for line in (bin_dir / "squeue.calls").read_text().splitlines()]
    assert [conf for _, conf, _ in got] == [str(tmp_path / "slurm.conf"), "/etc/from-env.conf"]
    assert {path for _, _, path in got} == {os.environ["PATH"]}


def test_cancel_runs_scancel_and_a_failure_is_an_error(tmp_path):
    bin_dir = tmp_path / "bin"
    stand_in(bin_dir, "scancel", "")
    clients.cancel(runner_of(bin_dir), ["12", 13])
    assert calls(bin_dir, "scancel") == [["12", "13"]]
    stand_in(bin_dir, "scancel", FAIL.format("scancel: error: Kill job error on job id 12"))
    with pytest.raises(SlurmError, match="Kill job error"):
        clients.cancel(runner_of(bin_dir), ["12"])


@pytest.mark.parametrize("body", ["", FAIL.format("scancel: error: Invalid job id 12"), SLOW,
                                  None], ids=["ok", "failed", "timed-out", "missing"])
def test_a_sweep_s_tidying_up_ignores_every_failure(tmp_path, body):
    from slurm_marl.sweep.run import _scancel

    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    if body is not None:
        stand_in(bin_dir, "scancel", body)
    _scancel("12", runner_of(bin_dir, timeout_s=0.5 if body == SLOW else 5))
    if body != SLOW:     # a slow stand-in may be stopped before it writes its call down
        assert calls(bin_dir, "scancel") == ([] if body is None else [["12"]])


def test_sacct_argv_and_its_lines(tmp_path):
    from slurm_marl.history.sacct import TEXT_FIELDS

    since, until = 1714550400.0, 1714636800.0
    stamp = [datetime.fromtimestamp(t).strftime("%Y-%m-%dT%H:%M:%S") for t in (since, until)]
    argv = clients.sacct_argv(TEXT_FIELDS, since, until)
    assert argv == ["sacct", "-a", "-X", "-P", "-n", "--format=" + ",".join(TEXT_FIELDS),
                    f"--starttime={stamp[0]}", f"--endtime={stamp[1]}"]
    bin_dir = tmp_path / "bin"
    stand_in(bin_dir, "sacct", "print('1|a'); print('2|b')")
    assert clients.accounting_lines(runner_of(bin_dir), TEXT_FIELDS, since, until) == [
        "1|a", "2|b"]
    assert calls(bin_dir, "sacct") == [argv[1:]]
    stand_in(bin_dir, "sacct", FAIL.format("sacct: error: Problem talking to the database"))
    with pytest.raises(SlurmError, match="Problem talking to the database"):
        clients.accounting_lines(runner_of(bin_dir), TEXT_FIELDS, since, until)
