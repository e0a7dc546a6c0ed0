"""The streamed JSON reader (large squeue/sinfo/scontrol answers read record by record) and
the runner that streams a real client process's output."""

import io
import json
import sys
import time

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from slurm_marl.slurm_integration.json_stream import JsonStreamError, stream_object
from slurm_marl.slurm_integration.runner import (SlurmError, SlurmOutputError, SlurmRunner,
                                                 SlurmUnavailable)

scalars = (st.none() | st.booleans() | st.integers(-10**20, 10**20)
           | st.floats(allow_nan=False, allow_infinity=False) | st.text(max_size=8))
values = st.recursive(scalars, lambda inner: st.lists(inner, max_size=4)
                      | st.dictionaries(st.text(max_size=5), inner, max_size=4), max_leaves=12)


def streamed(text, keys, chunk):
    got = {k: [] for k in keys}
    rest, counts = stream_object(io.StringIO(text).read, {k: got[k].append for k in keys},
                                 chunk=chunk)
    return rest, counts, got


@settings(max_examples=300, deadline=None)
@given(st.dictionaries(st.sampled_from(["jobs", "meta", "errors", "x", "nodes"]), values,
                       max_size=5),
       st.integers(1, 40), st.booleans())
def test_streamed_equals_json_loads_for_any_object_and_piece_size(obj, chunk, indent):
    text = json.dumps(obj, indent=2 if indent else None)
    rest, counts, got = streamed(text, ["jobs", "nodes"], chunk)
    for key in ("jobs", "nodes"):
        if isinstance(obj.get(key), list):
            assert got[key] == obj[key] and counts[key] == len(obj[key])
            assert key not in rest
        else:
            assert got[key] == [] and key not in counts
    assert rest == {k: v for k, v in obj.items() if not (k in counts)}


def test_numbers_cut_by_a_piece_boundary_are_read_whole():
    text = '{"jobs": [2.5e3, 123456789, -0.25, true, null], "n": 1e-7}'
    for chunk in range(1, len(text) + 1):
        rest, counts, got = streamed(text, ["jobs"], chunk)
        assert got["jobs"] == [2500.0, 123456789, -0.25, True, None] and rest == {"n": 1e-7}


def test_a_dropped_array_is_counted_not_kept():
    rest, counts = stream_object(io.StringIO('{"sinfo": [1, 2, 3], "meta": {}}').read,
                                 {"sinfo": None})
    assert rest == {"meta": {}} and counts == {"sinfo": 3}


@pytest.mark.parametrize("text", ["", "[]", '{"jobs": [1, 2', '{"jobs": [1 2]}', '{"a": 1',
                                  '{"a": 1} {}', '{"a" 1}', "{1: 2}", '{"jobs": [1,]}',
                                  '{"a": tru}'])
def test_anything_but_one_json_object_is_refused(text):
    with pytest.raises(JsonStreamError):
        streamed(text, ["jobs"], 3)


def test_a_value_larger_than_a_piece_costs_linear_reads():
    big = {"x": list(range(20000)), "jobs": [1]}
    reads = []
    source = io.StringIO(json.dumps(big))

    def read(n):
        reads.append(n)
        return source.read(n)

    rest, counts = stream_object(read, {"jobs": None}, chunk=64)
    assert rest["x"] == big["x"] and counts == {"jobs": 1}
    assert len(reads) < 30      # doubling, not one more piece per retry (~1,700 pieces)


# ---- the runner: a real client process ---------------------------------------------------


def client(tmp_path, body):
    """A stand-in ``squeue``: a Python script in a bin dir."""
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir(exist_ok=True)
    exe = bin_dir / "squeue"
    exe.write_text(f"#!{sys.executable}\nimport sys, time\n{body}\n")
    exe.chmod(0o755)
    return SlurmRunner("/dev/null", bin_dir=bin_dir, timeout_s=5)


def test_runner_streams_a_client_s_answer_larger_than_a_pipe(tmp_path):
    runner = client(tmp_path, (
        "jobs = ','.join('{\"job_id\": %d, \"pad\": \"%s\"}' % (i, 'x' * 500) "
        "for i in range(5000))\n"
        "sys.stderr.write('w' * 200000)\n"   # more than a pipe holds: must not block
        "sys.stdout.write('{\"meta\": {\"v\": 1}, \"jobs\": [' + jobs + '], \"errors\": []}')"))
    ids = []
    rest, counts = runner.run_json_streamed(["squeue", "--json"],
                                            {"jobs": lambda j: ids.append(j["job_id"])})
    assert ids == list(range(5000)) and counts == {"jobs": 5000}
    assert rest == {"meta": {"v": 1}, "errors": []} and runner.calls == 1


def test_runner_failed_client_is_an_error_even_after_a_good_prefix(tmp_path):
    runner = client(tmp_path, (
        "sys.stdout.write('{\"jobs\": [{\"job_id\": 1},'); sys.stdout.flush()\n"
        "sys.stderr.write('squeue: error: Unable to contact slurm controller'); sys.exit(1)"))
    with pytest.raises(SlurmUnavailable, match="Unable to contact"):
        runner.run_json_streamed(["squeue", "--json"], {"jobs": None})
    runner = client(tmp_path, "sys.stderr.write('squeue: error: Invalid user'); sys.exit(1)")
    with pytest.raises(SlurmError, match="Invalid user") as err:
        runner.run_json_streamed(["squeue", "--json"], {"jobs": None})
    assert type(err.value) is SlurmError


def test_runner_json_errors_and_bad_output_are_refused(tmp_path):
    runner = client(tmp_path, "print('{\"jobs\": [], \"errors\": [{\"error\": "
                              "\"Unable to contact slurm controller\"}]}')")
    with pytest.raises(SlurmUnavailable):
        runner.run_json_streamed(["squeue", "--json"], {"jobs": None})
    runner = client(tmp_path, "print('squeue: not json at all')")
    with pytest.raises(SlurmOutputError, match="not one JSON object"):
        runner.run_json_streamed(["squeue", "--json"], {"jobs": None})


def test_runner_times_out_a_client_that_hangs_mid_answer(tmp_path):
    runner = client(tmp_path, "sys.stdout.write('{\"jobs\": ['); sys.stdout.flush(); "
                              "time.sleep(60)")
    runner.timeout_s = 0.5
    started = time.monotonic()
    with pytest.raises(SlurmUnavailable, match="timed out"):
        runner.run_json_streamed(["squeue", "--json"], {"jobs": None})
    assert time.monotonic() - started < 10


def test_runner_stops_the_client_when_the_caller_s_handler_fails(tmp_path):
    runner = client(tmp_path, (
        "sys.stdout.write('{\"jobs\": [1, '); sys.stdout.flush()\n"
        "time.sleep(60)\nprint('2]}')"))

    def boom(item):
        raise RuntimeError("handler failed")

    started = time.monotonic()
    with pytest.raises(RuntimeError, match="handler failed"):
        runner.run_json_streamed(["squeue", "--json"], {"jobs": boom})
    assert time.monotonic() - started < 10   # killed, not waited for


def test_runner_missing_client_is_unavailable(tmp_path):
    runner = SlurmRunner("/dev/null", bin_dir=tmp_path)
    with pytest.raises(SlurmUnavailable, match="not found"):
        runner.run_json_streamed(["squeue", "--json"], {"jobs": None})


def test_clients_run_without_the_shell_s_slurm_defaults(tmp_path, monkeypatch):
    """An admin's SQUEUE_USERS, SLURM_TIME_FORMAT or SLURM_CLUSTERS would make squeue list
    another cluster's jobs, some jobs only, or times the agent cannot read: the runner's
    clients never see them; what the caller sets (``extra_env``) and the rest pass."""
    for name, value in {"SQUEUE_USERS": "alice", "SQUEUE_STATES": "R",
                        "SLURM_TIME_FORMAT": "relative", "SLURM_CLUSTERS": "other",
                        "SINFO_PARTITION": "cpu", "SBATCH_PARTITION": "cpu",
                        "KEEP_ME": "1"}.items():
        monkeypatch.setenv(name, value)
    body = ("import json, os\n"
            "print(json.dumps({k: v for k, v in os.environ.items()"
            " if k.startswith(('S', 'KEEP'))}))")
    seen = json.loads(client(tmp_path, body).run(["squeue"]).stdout)
    assert seen.get("KEEP_ME") == "1" and seen.get("SLURM_CONF") == "/dev/null"
    assert not {"SQUEUE_USERS", "SQUEUE_STATES", "SLURM_TIME_FORMAT", "SLURM_CLUSTERS",
                "SINFO_PARTITION", "SBATCH_PARTITION"} & set(seen)
    bin_dir = tmp_path / "bin"
    runner = SlurmRunner("/dev/null", bin_dir=bin_dir, timeout_s=5,
                         extra_env={"SLURM_TIME_FORMAT": "%s"})
    assert json.loads(runner.run(["squeue"]).stdout)["SLURM_TIME_FORMAT"] == "%s"


@pytest.mark.parametrize("streamed", [False, True])
def test_a_client_that_cannot_run_is_unavailable_not_a_raw_os_error(tmp_path, streamed):
    """A client the agent's user may not execute (or whose interpreter line is broken) is
    SlurmUnavailable, as a missing one is: the cycle reports it, nothing raises past it."""
    runner = client(tmp_path, "print('{}')")
    (tmp_path / "bin" / "squeue").chmod(0o644)          # not executable
    with pytest.raises(SlurmUnavailable, match="cannot run"):
        if streamed:
            runner.run_json_streamed(["squeue", "--json"], {"jobs": None})
        else:
            runner.run(["squeue"])
