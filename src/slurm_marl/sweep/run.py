"""Run a sweep's cells in parallel: local processes (the default) or one Slurm array job.

``local``: ``concurrent.futures.ProcessPoolExecutor`` (standard library, so no new
dependency; ``as_completed`` drives the progress callback), with the ``spawn`` start method
so every worker is a fresh interpreter, as a Slurm task is.

``slurm``: submitit's ``SlurmExecutor.map_array``, so the whole sweep is ONE ``sbatch
--array`` job (``array_parallelism`` tasks at a time, 1 CPU and 1000 MB each, no GPU). The
job runs this host's ``sys.executable``, so the nodes must share the file system (the venv,
the trace, ``slurm_folder``, under which each sweep gets a fresh folder). submitit pickles the function and each cell into
``slurm_folder`` and each result back (cloudpickle): that is the library's own protocol;
this module writes no pickle files of its own. Progress is read from submitit's result
files and ``squeue``, never ``sacct``, so clusters without accounting work too.

Each cell gives one JSON-able row: the cell's fields, ``key``, the simulation summary's
numbers, ``job_times`` (each job's JCT, for ``report.attach_per_job``, which replaces them
with ``per_job``) and ``error`` (None, or one line when that cell failed: a failing cell
never stops the sweep). ``RUN_FIELDS`` (``wall_s``, ``ran_on``) describe where and how long a cell ran;
``comparable`` drops them, and what remains is identical between backends.
"""

from __future__ import annotations

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
from pathlib import Path

from slurm_marl.sim.perjob import records
from slurm_marl.sim.run import simulate
from slurm_marl.sweep.spec import SweepCell

BACKENDS = ("local", "slurm")
RUN_FIELDS = ("wall_s", "ran_on")
SUMMARY_TIMING = ("sim_wall_time_s",)    # a summary field that is a wall time
JOB_TIMES = "job_times"    # [job_id, num_gpus, user, jct_s] per job (sim.perjob.records)
THREAD_VARS = ("OMP_NUM_THREADS", "MKL_NUM_THREADS", "OPENBLAS_NUM_THREADS")
SLURM_VARS = {"job_id": "SLURM_JOB_ID", "array_job_id": "SLURM_ARRAY_JOB_ID",
              "array_task_id": "SLURM_ARRAY_TASK_ID", "node": "SLURMD_NODENAME"}
GONE_GRACE_S = 10.0    # a task out of squeue may still be writing its result file

OnDone = Callable[[dict, int, int], None]   # (row, cells done, cells in all)


class SweepError(RuntimeError):
    """The sweep could not run at all (bad backend, sbatch refused it, ...)."""


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


def run_sweep(cells: Sequence[SweepCell], backend: str = "local", *, workers: int = 2,
              slurm_folder: str | Path | None = None, slurm_conf: str | Path | None = None,
              partition: str | None = None, time_min: int = 60,
              timeout_s: float | None = None, on_done: OnDone | None = None) -> list[dict]:
    """Run every cell; rows come back in the order of ``cells``. ``workers``: processes
    (local) or the array's ``array_parallelism`` (slurm). ``slurm_conf``: passed to
    sbatch/squeue as ``SLURM_CONF`` (None: the environment's). ``timeout_s`` (slurm): cancel
    the array and give the unfinished cells error rows after this long."""
    if backend not in BACKENDS:
        raise SweepError(f"unknown backend {backend!r} (one of {', '.join(BACKENDS)})")
    if workers < 1:
        raise SweepError(f"workers must be at least 1, got {workers}")
    notify = on_done or (lambda row, done, total: None)
    if not cells:
        return []
    if backend == "local":
        return _run_local(list(cells), workers, notify)
    if slurm_folder is None:
        raise SweepError("the slurm backend needs slurm_folder (shared with the nodes)")
    if slurm_conf is not None and not Path(slurm_conf).is_file():
        raise SweepError(f"slurm.conf {slurm_conf} does not exist")
    return _run_slurm(list(cells), workers, Path(slurm_folder), slurm_conf, partition,
                      time_min, timeout_s, notify)


def _run_local(cells: list[SweepCell], workers: int, notify: OnDone) -> list[dict]:
    rows: list[dict | None] = [None] * len(cells)
    context = multiprocessing.get_context("spawn")
    with ProcessPoolExecutor(max_workers=workers, mp_context=context,
                             initializer=_one_thread) as pool:
        futures = {pool.submit(run_cell, cell): i for i, cell in enumerate(cells)}
        for done, future in enumerate(as_completed(futures), 1):
            i = futures[future]
            try:
                rows[i] = future.result()
            except Exception as exc:  # noqa: BLE001 - a worker died (killed, out of memory)
                rows[i] = _error_row(cells[i], f"worker failed: {_one_line(exc)}")
            notify(rows[i], done, len(cells))
    return rows  # type: ignore[return-value]


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


def _slurm_env(slurm_conf: str | Path | None) -> dict[str, str]:
    return dict(os.environ, **({"SLURM_CONF": str(slurm_conf)} if slurm_conf else {}))


def _submit(cells: list[SweepCell], workers: int, folder: Path, slurm_conf, partition,
            time_min: int) -> list:
    """One array job for all cells (submitit's ``map_array``)."""
    import submitit
    from submitit.core.utils import FailedJobError

    executor = submitit.SlurmExecutor(folder=folder, python=shlex.quote(sys.executable))
    executor.update_parameters(
        job_name="slurm-marl-sweep", cpus_per_task=1, mem="1000M", time=time_min,
        array_parallelism=workers, setup=[f"export {v}=1" for v in THREAD_VARS],
        **({"partition": partition} if partition else {}))
    with _environ(SLURM_CONF=str(slurm_conf) if slurm_conf else None):
        try:
            return executor.map_array(run_cell, cells)
        except (FailedJobError, subprocess.CalledProcessError, OSError) as exc:
            raise SweepError(f"sbatch failed: {' '.join(str(exc).split())}") from None


def _run_slurm(cells: list[SweepCell], workers: int, folder: Path, slurm_conf, partition,
               time_min: int, timeout_s: float | None, notify: OnDone) -> list[dict]:
    folder.mkdir(parents=True, exist_ok=True)
    # a fresh folder per sweep: a restarted cluster reuses job ids, and submitit names its
    # result files by job id
    folder = Path(tempfile.mkdtemp(prefix="sweep-", dir=folder.resolve()))
    jobs = _submit(cells, workers, folder, slurm_conf, partition, time_min)
    array_id = jobs[0].job_id.split("_")[0]
    env = _slurm_env(slurm_conf)
    try:
        return _gather(cells, jobs, array_id, env, timeout_s, notify)
    except BaseException:   # interrupted: leave nothing running on the cluster
        _scancel(array_id, env)
        raise


def _gather(cells: list[SweepCell], jobs: list, array_id: str, env: dict,
            timeout_s: float | None, notify: OnDone, poll_s: float = 0.5) -> list[dict]:
    rows: list[dict | None] = [None] * len(cells)
    pending = set(range(len(cells)))
    deadline = None if timeout_s is None else time.monotonic() + timeout_s
    gone_since: float | None = None
    while pending:
        for i in sorted(pending):
            if jobs[i].paths.result_pickle.exists():
                rows[i] = _job_row(cells[i], jobs[i])
                pending.discard(i)
                notify(rows[i], len(cells) - len(pending), len(cells))
        if not pending:
            break
        if _array_gone(array_id, env):
            gone_since = gone_since or time.monotonic()
        if gone_since is not None and time.monotonic() - gone_since > GONE_GRACE_S:
            _fail_pending(cells, jobs, rows, pending, notify, "ended without a result")
        elif deadline is not None and time.monotonic() > deadline:
            _scancel(array_id, env)
            _fail_pending(cells, jobs, rows, pending, notify,
                          f"cancelled after the sweep's timeout of {timeout_s:g} s")
        time.sleep(poll_s if pending else 0)
    return rows  # type: ignore[return-value]


def _job_row(cell: SweepCell, job) -> dict:
    try:
        row = job.result()
    except Exception as exc:  # noqa: BLE001 - submitit's failure report, as that cell's row
        return _error_row(cell, f"Slurm task {job.job_id}: {_one_line(exc)}")
    if row.get("ran_on") is not None:
        row["ran_on"]["submitted_as"] = job.job_id
    return row


def _fail_pending(cells, jobs, rows, pending: set, notify: OnDone, why: str) -> None:
    for i in sorted(pending):
        tail = (jobs[i].stderr() or "").strip().splitlines()[-1:] or ["(no stderr)"]
        rows[i] = _error_row(cells[i], f"Slurm task {jobs[i].job_id} {why}: {tail[0]}")
        pending.discard(i)
        notify(rows[i], len(cells) - len(pending), len(cells))


def _array_gone(array_id: str, env: dict) -> bool:
    """No task of the array is pending or running any more (unknown: not gone)."""
    try:
        proc = subprocess.run(["squeue", "-h", "-j", array_id, "-o", "%i"], env=env,
                              capture_output=True, text=True, timeout=30)
    except (OSError, subprocess.TimeoutExpired):
        return False
    if proc.returncode != 0:
        return "invalid job id" in proc.stderr.lower()
    return not proc.stdout.strip()


def _scancel(array_id: str, env: dict) -> None:
    try:
        subprocess.run(["scancel", array_id], env=env, capture_output=True, timeout=30)
    except (OSError, subprocess.TimeoutExpired):
        pass
