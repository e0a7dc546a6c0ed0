"""map_calls (issue 34): any module-level function over a list of arguments, inline or in
local processes (the Slurm array path: tests/slurm/test_map_calls_slurm.py)."""

from __future__ import annotations

import os
from dataclasses import dataclass

import pytest

from slurm_marl.sweep import CallError, SweepError, map_calls


@dataclass(frozen=True)
class Point:
    index: int
    value: float


def points(n: int) -> list[Point]:
    """A largish result: n small dataclass instances (n < 0 raises)."""
    if n < 0:
        raise ValueError(f"negative\ncount {n}")
    return [Point(i, i / 2) for i in range(n)]


def where(_arg) -> tuple[int, str | None]:
    return os.getpid(), os.environ.get("OMP_NUM_THREADS")


def exits(_arg) -> None:
    os._exit(3)   # the worker process dies: no exception to report


@pytest.mark.parametrize("backend", ["inline", "local"])
def test_results_in_the_order_of_args_and_a_raising_call_is_its_error(backend):
    args = [3, 20_000, -1, 0, 5]
    seen = []
    got = map_calls(points, args, backend, workers=2,
                    on_done=lambda i, out, done, total: seen.append((i, out, done, total)))
    assert got[0] == [Point(0, 0.0), Point(1, 0.5), Point(2, 1.0)]
    assert got[1] == points(20_000) and got[3] == [] and got[4] == points(5)
    assert got[2] == CallError("ValueError: negative count -1")      # one line
    assert isinstance(got[2], CallError) and str(got[2]) == got[2].message
    assert not any(isinstance(g, CallError) for i, g in enumerate(got) if i != 2)
    assert sorted(i for i, *_ in seen) == list(range(5))
    assert [done for _, _, done, _ in seen] == [1, 2, 3, 4, 5]
    assert {total for *_, total in seen} == {5}
    assert all(out is got[i] for i, out, *_ in seen)    # on_done sees the outcome itself
    if backend == "inline":
        assert [i for i, *_ in seen] == list(range(5))


def test_inline_runs_in_this_process_local_in_one_thread_workers():
    me = os.getpid()
    assert map_calls(where, [0, 1], "inline") == [(me, os.environ.get("OMP_NUM_THREADS"))] * 2
    local = map_calls(where, list(range(4)), "local", workers=2)
    assert all(pid != me and threads == "1" for pid, threads in local)
    assert len({pid for pid, _ in local}) <= 2


def test_a_dead_worker_is_an_error_for_its_call_not_a_crash():
    got = map_calls(exits, [0], "local", workers=1)
    assert isinstance(got[0], CallError) and got[0].message.startswith("worker failed: ")


def test_nothing_to_run_and_bad_requests():
    assert map_calls(points, [], "local") == [] and map_calls(points, [], "slurm") == []
    with pytest.raises(SweepError, match="unknown backend 'cloud' .one of inline, local, slurm"):
        map_calls(points, [1], "cloud")
    with pytest.raises(SweepError, match="workers must be at least 1"):
        map_calls(points, [1], "local", workers=0)
    with pytest.raises(SweepError, match="not a module-level function"):
        map_calls(lambda n: n, [1], "local")
    assert map_calls(lambda n: n + 1, [1], "inline") == [2]     # inline pickles nothing
    with pytest.raises(SweepError, match="slurm_folder"):
        map_calls(points, [1], "slurm")
    with pytest.raises(SweepError, match="does not exist"):
        map_calls(points, [1], "slurm", slurm_folder="/tmp", slurm_conf="/no/such/slurm.conf")


def test_backend_mapper_gives_every_result_or_one_line_naming_the_first_failure(tmp_path):
    """``backend_mapper``: a command's ``--backend`` (issue 36: `train order`; the site
    report): None for inline, every result in order, or ``BackendError`` naming how many
    failed and the first by its label; bad settings are a ``ValueError`` (exit 2)."""
    from slurm_marl.sweep import BackendError, backend_mapper

    assert backend_mapper("inline") is None
    mapper = backend_mapper("local", workers=2, label=lambda n: f"points({n})")
    seen = []
    assert mapper(points, [2, 1], lambda *a: seen.append(a[0])) == [points(2), points(1)]
    assert sorted(seen) == [0, 1]
    with pytest.raises(BackendError) as err:
        mapper(points, [1, -2, -3])
    assert str(err.value) == ("--backend local: 2 of 3 run(s) failed; the first "
                              "(points(-2)): ValueError: negative count -2")
    slurm = backend_mapper("slurm", slurm_conf=tmp_path / "missing.conf")
    with pytest.raises(BackendError, match="missing.conf does not exist"):
        slurm(points, [1])
    for bad, says in ((dict(backend="cloud"), "--backend must be one of inline, local, slurm"),
                      (dict(backend="local", workers=0), "--workers must be at least 1")):
        with pytest.raises(ValueError, match=says):
            backend_mapper(**bad)
