"""Run calls in parallel: in this process, in local processes, or as ONE Slurm array job.

``map_calls(fn, args, backend)`` calls the module-level function ``fn`` once per item of
``args`` and gives one outcome per item, in the order of ``args``: the call's return value,
or a ``CallError`` (one line) when it gave none. A failing call never stops the others.
``on_done(index, outcome, done, total)`` sees each outcome as it arrives. ``run_sweep`` (a
sweep's cells, ``run_cell``) and ``slurm-marl report --backend slurm`` run on it.

``inline``: in this process, one call after another (nothing is pickled).

``local``: ``concurrent.futures.ProcessPoolExecutor`` (standard library, so no new
dependency; ``as_completed`` drives ``on_done``), with the ``spawn`` start method so every
worker is a fresh interpreter, as a Slurm task is, and one math thread per worker.

``slurm``: submitit's ``SlurmExecutor.map_array``, so all calls are ONE ``sbatch --array``
job (``array_parallelism`` = ``workers`` tasks at a time, 1 CPU and ``mem`` each, no GPU;
one call gives a plain job). The job runs this host's ``sys.executable``, so the nodes must
share the file system (the venv, the inputs, ``slurm_folder``, under which each submission
gets a fresh folder). submitit pickles the function and each argument into that folder and
each result back (cloudpickle; results may be large objects): that is the library's own
protocol; this module writes no pickle files of its own. Progress is read from submitit's
result files and ``squeue``, never ``sacct``, so clusters without accounting work too. A
task that ends without a result (killed, out of memory), or is still unfinished after
``timeout_s`` (the array is then cancelled), gives a ``CallError`` naming its task.

A sweep's cell gives one JSON-able row: the cell's fields, ``key``, the simulation summary's
numbers, ``job_times`` (each job's JCT, for ``report.attach_per_job``, which replaces them
with ``per_job``) and ``error`` (None, or one line when that cell failed). ``RUN_FIELDS``
(``wall_s``, ``ran_on``) describe where and how long a cell ran; ``comparable`` drops them,
and what remains is identical between backends.
"""

from __future__ import annotations

import functools
import multiprocessing
import os
import shlex
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Iterator, Sequence
from concurrent.futures import ProcessPoolExecutor, as_completed
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from slurm_marl.sim.perjob import records
from slurm_marl.sim.run import simulate
from slurm_marl.slurm_integration import clients
from slurm_marl.slurm_integration.runner import SlurmError, SlurmRunner
from slurm_marl.sweep.spec import SweepCell

BACKENDS = ("local", "slurm")                  # run_sweep's (and `slurm-marl sweep run`'s)
MAP_BACKENDS = ("inline", "local", "slurm")    # map_calls'
RUN_FIELDS = ("wall_s", "ran_on")
SUMMARY_TIMING = ("sim_wall_time_s",)    # a summary field that is a wall time
JOB_TIMES = "job_times"    # [job_id, num_gpus, user, jct_s] per job (sim.perjob.records)
THREAD_VARS = ("OMP_NUM_THREADS", "MKL_NUM_THREADS", "OPENBLAS_NUM_THREADS")
SLURM_VARS = {"job_id": "SLURM_JOB_ID", "array_job_id": "SLURM_ARRAY_JOB_ID",
              "array_task_id": "SLURM_ARRAY_TASK_ID", "node": "SLURMD_NODENAME"}
GONE_GRACE_S = 10.0    # a task out of squeue may still be writing its result file

OnDone = Callable[[dict, int, int], None]   # (row, cells done, cells in all)
OnCall = Callable[[int, Any, int, int], None]   # (index, outcome, calls done, calls in all)
# what the backends report per call: (index, outcome, the Slurm task it ran as or None)
_Notify = Callable[[int, Any, "str | None"], None]


class SweepError(RuntimeError):
    """The calls could not run at all (bad backend, sbatch refused them, ...)."""


@dataclass(frozen=True)
class CallError:
    """A call that gave no result, in one line: what it raised (``ValueError: ...``, the
    same on every backend), or why it has none (``worker failed: ...``, ``Slurm task 12_3
    ended without a result: ...``, ``Slurm task 12_3 cancelled after ...``)."""

    message: str

    def __str__(self) -> str:
        return self.message


@dataclass(frozen=True)
class _SlurmOptions:
    """How the slurm backend submits (checked when it is used)."""

    folder: str | Path | None
    conf: str | Path | None
    partition: str | None
    time_min: int
    mem: str
    job_name: str
    timeout_s: float | None
    prefix: str = "map-"     # of the fresh folder per submission
    timeout_of: str = "the timeout"     # in the message of a call cancelled by it


def comparable(rows: Sequence[dict]) -> list[dict]:
    """The rows without ``RUN_FIELDS``: equal for equal inputs, whatever ran them."""
    return [{k: v for k, v in row.items() if k not in RUN_FIELDS} for row in rows]


def _one_thread() -> None:
    """One math thread per simulation (set before anything imports torch)."""
    for var in THREAD_VARS:
        os.environ[var] = "1"
    if "torch" in sys.modules:
        sys.modules["torch"].set_num_threads(1)


def _one_line(exc: BaseException) -> str:
    text = " ".join(str(exc).split()) or "(no message)"
    return f"{type(exc).__name__}: {text}"[:500]


def _guarded(fn: Callable[[Any], Any], arg: Any) -> Any:
    """``fn(arg)``, or the CallError of what it raised (in the worker or Slurm task, so an
    exception need not be picklable and submitit's traceback report is not the message)."""
    try:
        return fn(arg)
    except Exception as exc:  # noqa: BLE001 - one call's failure is that call's outcome
        return CallError(_one_line(exc))


def _error_row(cell: SweepCell, message: str, wall_s: float = 0.0) -> dict:
    return {"key": cell.key, **cell.fields(), "error": message, "wall_s": wall_s,
            "ran_on": None}


def run_cell(cell: SweepCell) -> dict:
    """Simulate one cell in this process; never raises (a failure is an ``error`` row)."""
    _one_thread()
    started = time.perf_counter()
    row = {"key": cell.key, **cell.fields()}
    try:
        run = simulate(cell.trace, cell.cluster, cell.profile, window=cell.window,
                       interference=cell.interference, seed=cell.seed,
                       drop_oversized=cell.drop_oversized,
                       prediction_error=cell.prediction_error)
        row.update({k: v for k, v in run.summary.items() if k not in SUMMARY_TIMING})
        # each job's JCT, for the report's per-job comparison (it drops them after)
        row[JOB_TIMES] = records(run.outcome.jobs)
        row["error"] = None
    except Exception as exc:  # noqa: BLE001 - one cell's failure is that cell's row
        row["error"] = _one_line(exc)
    row["wall_s"] = round(time.perf_counter() - started, 3)
    place = {name: os.environ.get(var) for name, var in SLURM_VARS.items()}
    row["ran_on"] = place if place["job_id"] else None
    return row


def map_calls(fn: Callable[[Any], Any], args: Sequence, backend: str = "local", *,
              workers: int = 2, slurm_folder: str | Path | None = None,
              slurm_conf: str | Path | None = None, partition: str | None = None,
              time_min: int = 60, mem: str = "1000M", timeout_s: float | None = None,
              job_name: str = "slurm-marl", on_done: OnCall | None = None) -> list:
    """``[fn(a) for a in args]`` on ``backend`` (``MAP_BACKENDS``), each outcome the call's
    return value or a ``CallError``, in the order of ``args``. ``fn``: a module-level
    function (the local and Slurm backends pickle it by reference), called with one
    argument. ``workers``: processes (local) or the array's ``array_parallelism`` (slurm).
    ``on_done(index, outcome, done, total)``: once per call, in the order they finish
    (inline: of ``args``), in this process. Slurm: ``slurm_folder`` (shared with the
    nodes), ``slurm_conf`` (passed to sbatch/squeue as ``SLURM_CONF``; None: the
    environment's), ``partition``, ``time_min`` (each task's limit), ``mem`` (each task's
    memory, sbatch's ``--mem``), ``job_name``, ``timeout_s`` (cancel the array and give the
    unfinished calls CallErrors after this long). Raises SweepError when nothing can run."""
    count = _counting(on_done, len(args))
    outcomes: list = [None] * len(args)

    def notify(i: int, outcome: Any, task: str | None) -> None:
        outcomes[i] = outcome
        count(i, outcome)

    _dispatch(fn, args, backend, MAP_BACKENDS, workers, _SlurmOptions(
        slurm_folder, slurm_conf, partition, time_min, mem, job_name, timeout_s), notify)
    return outcomes


class BackendError(RuntimeError):
    """A call that gave no result where the backend ran it, or calls that could not run at
    all, in one line (the commands exit 1)."""


Mapper = Callable[[Callable[[Any], Any], Sequence, "OnCall | None"], list]


def backend_mapper(backend: str, *, workers: int = 2, slurm_folder: str | Path = "slurm-runs",
                   slurm_conf: str | Path | None = None, partition: str | None = None,
                   mem: str = "4000M", time_min: int = 120, job_name: str = "slurm-marl",
                   label: Callable[[Any], str] = str) -> Mapper | None:
    """What a command's ``--backend`` runs its calls with: ``mapper(fn, args, on_done)``,
    ``map_calls`` on ``backend`` returning every call's result, or raising ``BackendError``
    that names the first failed call (``label(arg)``) and how many failed; None for
    ``inline`` (the caller runs the calls itself). ``slurm_folder`` is resolved here, so
    the nodes see an absolute path."""
    if backend not in MAP_BACKENDS:
        raise ValueError(f"--backend must be one of {', '.join(MAP_BACKENDS)}, got "
                         f"{backend!r}")
    if workers < 1:
        raise ValueError(f"--workers must be at least 1, got {workers}")
    if backend == "inline":
        return None
    folder = Path(slurm_folder).resolve()

    def mapper(fn: Callable[[Any], Any], args: Sequence, on_done: OnCall | None = None
               ) -> list:
        try:
            got = map_calls(fn, args, backend, workers=workers, slurm_folder=folder,
                            slurm_conf=slurm_conf, partition=partition, time_min=time_min,
                            mem=mem, job_name=job_name, on_done=on_done)
        except SweepError as exc:
            raise BackendError(f"--backend {backend}: {exc}") from None
        bad = [(k, r) for k, r in enumerate(got) if isinstance(r, CallError)]
        if bad:
            k, first = bad[0]
            raise BackendError(f"--backend {backend}: {len(bad)} of {len(got)} run(s) "
                               f"failed; the first ({label(args[k])}): {first}")
        return got

    return mapper


def run_sweep(cells: Sequence[SweepCell], backend: str = "local", *, workers: int = 2,
              slurm_folder: str | Path | None = None, slurm_conf: str | Path | None = None,
              partition: str | None = None, time_min: int = 60,
              timeout_s: float | None = None, on_done: OnDone | None = None) -> list[dict]:
    """Run every cell (``run_cell`` through ``map_calls``' machinery); rows come back in
    the order of ``cells``. ``workers``: processes (local) or the array's
    ``array_parallelism`` (slurm). ``slurm_conf``: passed to sbatch/squeue as
    ``SLURM_CONF`` (None: the environment's). ``timeout_s`` (slurm): cancel the array and
    give the unfinished cells error rows after this long."""
    notify_row = on_done or (lambda row, done, total: None)
    rows: list[dict | None] = [None] * len(cells)
    done = 0

    def notify(i: int, outcome: Any, task: str | None) -> None:
        nonlocal done
        if isinstance(outcome, CallError):
            outcome = _error_row(cells[i], outcome.message)
        elif task is not None and outcome.get("ran_on") is not None:
            outcome["ran_on"]["submitted_as"] = task
        rows[i] = outcome
        done += 1
        notify_row(outcome, done, len(cells))

    _dispatch(run_cell, cells, backend, BACKENDS, workers, _SlurmOptions(
        slurm_folder, slurm_conf, partition, time_min, "1000M", "slurm-marl-sweep", timeout_s,
        prefix="sweep-", timeout_of="the sweep's timeout"), notify)
    return rows  # type: ignore[return-value]


def _counting(on_done: OnCall | None, total: int) -> Callable[[int, Any], None]:
    done = 0

    def count(i: int, outcome: Any) -> None:
        nonlocal done
        done += 1
        if on_done is not None:
            on_done(i, outcome, done, total)
    return count


def _dispatch(fn, args: Sequence, backend: str, backends: tuple[str, ...], workers: int,
              slurm: _SlurmOptions, notify: _Notify) -> None:
    """Check the request, then run every call on ``backend``, ``notify`` seeing each."""
    if backend not in backends:
        raise SweepError(f"unknown backend {backend!r} (one of {', '.join(backends)})")
    if workers < 1:
        raise SweepError(f"workers must be at least 1, got {workers}")
    if backend != "inline" and "<" in getattr(fn, "__qualname__", ""):
        raise SweepError(f"{fn.__qualname__} is not a module-level function: the "
                         f"{backend} backend cannot pickle it")
    if not args:
        return
    if backend == "inline":
        for i, arg in enumerate(args):
            notify(i, _guarded(fn, arg), None)
        return
    if backend == "local":
        _run_local(fn, list(args), workers, notify)
        return
    if slurm.folder is None:
        raise SweepError("the slurm backend needs slurm_folder (shared with the nodes)")
    if slurm.conf is not None and not Path(slurm.conf).is_file():
        raise SweepError(f"slurm.conf {slurm.conf} does not exist")
    _run_slurm(fn, list(args), workers, slurm, notify)


def _run_local(fn, args: list, workers: int, notify: _Notify) -> None:
    context = multiprocessing.get_context("spawn")
    with ProcessPoolExecutor(max_workers=workers, mp_context=context,
                             initializer=_one_thread) as pool:
        futures = {pool.submit(_guarded, fn, arg): i for i, arg in enumerate(args)}
        for future in as_completed(futures):
            try:
                outcome = future.result()
            except Exception as exc:  # noqa: BLE001 - a worker died (killed, out of memory)
                outcome = CallError(f"worker failed: {_one_line(exc)}")
            notify(futures[future], outcome, None)


@contextmanager
def _environ(**values: str | None) -> Iterator[None]:
    """Set (or leave, for None) environment variables for the block, then restore them."""
    saved = {k: os.environ.get(k) for k in values}
    try:
        for key, value in values.items():
            if value is not None:
                os.environ[key] = value
        yield
    finally:
        for key, value in saved.items():
            if value is None:
                os.environ.pop(key, None)
            else:
                os.environ[key] = value


def _slurm_runner(slurm_conf: str | Path | None) -> SlurmRunner:
    """The watch's squeue and scancel: ``slurm_conf``, else the environment's SLURM_CONF;
    the clients on PATH, as submitit's sbatch."""
    return SlurmRunner(slurm_conf, timeout_s=30)


def _submit(fn, args: list, workers: int, folder: Path, opts: _SlurmOptions) -> list:
    """One array job for all calls (submitit's ``map_array``)."""
    import submitit
    from submitit.core.utils import FailedJobError

    executor = submitit.SlurmExecutor(folder=folder, python=shlex.quote(sys.executable))
    executor.update_parameters(
        job_name=opts.job_name, cpus_per_task=1, mem=opts.mem, time=opts.time_min,
        array_parallelism=workers, setup=[f"export {v}=1" for v in THREAD_VARS],
        **({"partition": opts.partition} if opts.partition else {}))
    with _environ(SLURM_CONF=str(opts.conf) if opts.conf else None):
        try:
            return executor.map_array(functools.partial(_guarded, fn), args)
        except (FailedJobError, subprocess.CalledProcessError, OSError) as exc:
            raise SweepError(f"sbatch failed: {' '.join(str(exc).split())}") from None


def _run_slurm(fn, args: list, workers: int, opts: _SlurmOptions, notify: _Notify) -> None:
    top = Path(opts.folder)     # type: ignore[arg-type] - checked in _dispatch
    top.mkdir(parents=True, exist_ok=True)
    # a fresh folder per submission: a restarted cluster reuses job ids, and submitit names
    # its result files by job id
    folder = Path(tempfile.mkdtemp(prefix=opts.prefix, dir=top.resolve()))
    jobs = _submit(fn, args, workers, folder, opts)
    array_id = jobs[0].job_id.split("_")[0]
    runner = _slurm_runner(opts.conf)
    try:
        _gather(jobs, array_id, runner, opts, notify)
    except BaseException:   # interrupted: leave nothing running on the cluster
        _scancel(array_id, runner)
        raise


def _gather(jobs: list, array_id: str, runner: SlurmRunner, opts: _SlurmOptions,
            notify: _Notify, poll_s: float = 0.5) -> None:
    pending = set(range(len(jobs)))
    timeout_s = opts.timeout_s
    deadline = None if timeout_s is None else time.monotonic() + timeout_s
    gone_since: float | None = None
    while pending:
        for i in sorted(pending):
            if jobs[i].paths.result_pickle.exists():
                pending.discard(i)
                notify(i, _job_outcome(jobs[i]), jobs[i].job_id)
        if not pending:
            break
        if _array_gone(array_id, runner):
            gone_since = gone_since or time.monotonic()
        if gone_since is not None and time.monotonic() - gone_since > GONE_GRACE_S:
            _fail_pending(jobs, pending, notify, "ended without a result")
        elif deadline is not None and time.monotonic() > deadline:
            _scancel(array_id, runner)
            _fail_pending(jobs, pending, notify,
                          f"cancelled after {opts.timeout_of} of {timeout_s:g} s")
        time.sleep(poll_s if pending else 0)


def _job_outcome(job) -> Any:
    try:
        return job.result()
    except Exception as exc:  # noqa: BLE001 - submitit's failure report, as that call's
        return CallError(f"Slurm task {job.job_id}: {_one_line(exc)}")


def _fail_pending(jobs: list, pending: set, notify: _Notify, why: str) -> None:
    for i in sorted(pending):
        tail = (jobs[i].stderr() or "").strip().splitlines()[-1:] or ["(no stderr)"]
        pending.discard(i)
        notify(i, CallError(f"Slurm task {jobs[i].job_id} {why}: {tail[0]}"), jobs[i].job_id)


def _array_gone(array_id: str, runner: SlurmRunner) -> bool:
    """No task of the array is pending or running any more (unknown: not gone)."""
    try:
        return not clients.jobs_listed(runner, [array_id])
    except (SlurmError, OSError):    # squeue failed, timed out, or could not start
        return False


def _scancel(array_id: str, runner: SlurmRunner) -> None:
    try:
        clients.cancel(runner, [array_id])
    except (SlurmError, OSError):    # tidying up: the array may be gone already
        pass
