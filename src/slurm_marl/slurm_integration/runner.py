"""Running Slurm's own client commands: SLURM_CONF always set, timeouts, counted calls."""

from __future__ import annotations

import io
import json
import logging
import os
import shutil
import subprocess
import tempfile
import threading
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable

from slurm_marl.slurm_integration.json_stream import JsonStreamError, stream_object

log = logging.getLogger(__name__)

# Messages Slurm clients print when the controller cannot be reached (22.05 wording).
_UNAVAILABLE_MARKERS = (
    "unable to contact slurm controller",
    "socket timed out",
    "connection refused",
    "zero bytes were transmitted",
    "communication connection failure",
    "slurm_persist_conn",
    "unable to establish controller machine",
    "timed out waiting",
    # scontrol update/requeue print this when slurmctld is down (22.05, after ~9 s)
    "unexpected message received",
)


# What slurmctld answers when it is up but will not take the request now (EAGAIN): seen on
# 24.11+ for job updates under load ("Resource temporarily unavailable for job N"), the
# update not applied. Worth a retry; not a sign the controller is down.
_BUSY_MARKERS = ("resource temporarily unavailable",)


class SlurmError(RuntimeError):
    """A Slurm client command failed; ``message`` is Slurm's own words."""

    def __init__(self, command: list[str], returncode: int, message: str) -> None:
        self.command = command
        self.returncode = returncode
        self.message = message.strip()
        super().__init__(f"`{' '.join(command)}` failed (rc {returncode}): {self.message}")


class SlurmUnavailable(SlurmError):
    """slurmctld did not answer (stopped, restarting, or unreachable)."""


class SlurmOutputError(SlurmError):
    """A client answered with something this Slurm layer cannot read."""


@dataclass(frozen=True)
class CommandResult:
    command: list[str]
    returncode: int
    stdout: str
    stderr: str

    @property
    def ok(self) -> bool:
        return self.returncode == 0

    @property
    def message(self) -> str:
        return (self.stderr.strip() or self.stdout.strip())


def looks_unavailable(text: str) -> bool:
    low = text.lower()
    return any(m in low for m in _UNAVAILABLE_MARKERS)


def looks_busy(text: str) -> bool:
    """slurmctld answered but asks to try again later (EAGAIN)."""
    low = text.lower()
    return any(m in low for m in _BUSY_MARKERS)


# Environment variables that change what a Slurm client lists or how it prints it: input
# defaults (``SQUEUE_USERS``, ``SQUEUE_STATES``, ``SINFO_PARTITION``, ``SBATCH_*``, ...), the
# cluster asked (``SLURM_CLUSTERS``) and the time format (``SLURM_TIME_FORMAT=relative``
# prints "Tomorrow 10:00"). The agent's reads would miss jobs or misread times under an
# admin's shell settings, so its clients run without them (``extra_env`` may set one).
_CLIENT_DEFAULT_PREFIXES = ("SQUEUE_", "SINFO_", "SCONTROL_", "SCANCEL_", "SACCT_",
                            "SBATCH_", "SALLOC_", "SRUN_", "SPRIO_", "SSHARE_")
_CLIENT_DEFAULTS = frozenset({"SLURM_TIME_FORMAT", "SLURM_CLUSTERS", "SLURM_BITSTR_LEN",
                              "SLURM_DEBUG_FLAGS", "SLURM_HINT", "SLURM_JSON",
                              "SLURM_YAML"})


def client_env(environ: dict[str, str]) -> dict[str, str]:
    """``environ`` without the variables that change a Slurm client's answer."""
    return {k: v for k, v in environ.items()
            if k not in _CLIENT_DEFAULTS and not k.startswith(_CLIENT_DEFAULT_PREFIXES)}


class SlurmRunner:
    """Runs ``squeue``/``sinfo``/``scontrol`` with an explicit SLURM_CONF, in an
    environment without the variables that would change their answers (``client_env``).

    ``calls`` counts client invocations so a benchmark can show that a snapshot costs a fixed
    number of calls whatever the number of jobs.
    """

    def __init__(self, slurm_conf: str | Path | None = None, timeout_s: float = 30.0,
                 bin_dir: str | Path | None = None,
                 extra_env: dict[str, str] | None = None) -> None:
        self.slurm_conf = str(slurm_conf) if slurm_conf else os.environ.get("SLURM_CONF")
        self.timeout_s = timeout_s
        self.bin_dir = Path(bin_dir) if bin_dir else None
        self.calls = 0
        env = dict(client_env(dict(os.environ)), **(extra_env or {}))
        if self.slurm_conf:
            env["SLURM_CONF"] = self.slurm_conf
        else:
            log.warning("SLURM_CONF is not set: Slurm clients will look the controller up "
                        "in DNS; give slurm_conf ([slurm] slurm_conf in the agent's config, "
                        "--slurm-conf on the command line) or set SLURM_CONF")
        self._env = env

    def _exe(self, name: str) -> str:
        if self.bin_dir is not None:
            return str(self.bin_dir / name)
        return shutil.which(name) or name

    def run(self, args: list[str], timeout_s: float | None = None) -> CommandResult:
        """Run one client command. Never raises for a non-zero exit; raises
        SlurmUnavailable only when the binary is missing or cannot be run, or the call
        times out."""
        cmd = [self._exe(args[0]), *args[1:]]
        self.calls += 1
        started = time.monotonic()
        try:
            proc = subprocess.run(cmd, env=self._env, capture_output=True, text=True,
                                  timeout=timeout_s or self.timeout_s)
        except OSError as exc:
            raise _not_run(args, exc) from exc
        except subprocess.TimeoutExpired as exc:
            raise SlurmUnavailable(args, -1, f"timed out after {exc.timeout:.0f} s") from exc
        log.debug("%s -> rc %d in %.3f s", " ".join(args), proc.returncode,
                  time.monotonic() - started)
        return CommandResult(list(args), proc.returncode, proc.stdout, proc.stderr)

    def run_checked(self, args: list[str]) -> str:
        """Run a read command; raise SlurmUnavailable / SlurmError on failure."""
        res = self.run(args)
        if res.ok:
            return res.stdout
        raise failure(args, res.returncode, res.message)

    def run_json(self, args: list[str]) -> dict:
        out = self.run_checked(args)
        try:
            data = json.loads(out)
        except json.JSONDecodeError as exc:
            raise SlurmOutputError(args, 0, f"not JSON ({exc}): {out[:200]!r}") from exc
        if not isinstance(data, dict):
            raise SlurmOutputError(args, 0, "JSON answer is not an object")
        self._raise_json_errors(args, data)
        return data

    def run_json_streamed(self, args: list[str],
                          items: dict[str, Callable[[Any], None] | None]
                          ) -> tuple[dict, dict[str, int]]:
        """``run_json`` for a large answer: the top-level arrays named in ``items`` are
        handed over element by element as the client prints them (``json_stream``), never
        held whole. Returns (the rest of the answer, {key: elements handed over}).

        The elements are handed over before the client's exit status is known: a caller
        must drop what it gathered when this raises. Raises as ``run_json`` does: a failed
        or timed-out client, an answer that is not one JSON object, or JSON ``errors``."""
        cmd = [self._exe(args[0]), *args[1:]]
        self.calls += 1
        started = time.monotonic()
        timeout = self.timeout_s
        with tempfile.TemporaryFile() as err:
            try:
                proc = subprocess.Popen(cmd, env=self._env, stdout=subprocess.PIPE,
                                        stderr=err)
            except OSError as exc:
                raise _not_run(args, exc) from exc
            timed_out = threading.Event()

            def kill() -> None:
                timed_out.set()
                proc.kill()

            timer = threading.Timer(timeout, kill)
            timer.start()
            parsed: tuple[dict, dict[str, int]] | None = None
            problem: JsonStreamError | None = None
            try:
                with io.TextIOWrapper(proc.stdout, encoding="utf-8",
                                      errors="replace") as text:
                    try:
                        parsed = stream_object(text.read, items)
                    except JsonStreamError as exc:
                        problem = exc
                rc = proc.wait()
            finally:
                timer.cancel()
                if proc.poll() is None:     # a caller's item handler raised
                    proc.kill()
                    proc.wait()
            err.seek(0)
            stderr = err.read().decode("utf-8", errors="replace")
        log.debug("%s -> rc %d in %.3f s (streamed)", " ".join(args), rc,
                  time.monotonic() - started)
        if timed_out.is_set():
            raise SlurmUnavailable(args, -1, f"timed out after {timeout:.0f} s")
        return self.streamed_answer(args, rc, stderr, parsed, problem)

    @classmethod
    def streamed_answer(cls, args: list[str], rc: int, stderr: str,
                        parsed: tuple[dict, dict[str, int]] | None,
                        problem: JsonStreamError | None) -> tuple[dict, dict[str, int]]:
        """A streamed answer once the client has exited: raise for a failed client, an
        answer that is not one JSON object or JSON ``errors``, else return it."""
        if rc != 0:
            raise failure(args, rc, stderr.strip() or (_errors_text(parsed[0]) if parsed
                                                        else "") or f"exit status {rc}")
        if problem is not None or parsed is None:
            raise SlurmOutputError(args, 0, f"not one JSON object: {problem}")
        cls._raise_json_errors(args, parsed[0])
        return parsed

    @staticmethod
    def _raise_json_errors(args: list[str], data: dict) -> None:
        errors = data.get("errors") or []
        if errors:
            text = _errors_text(data)
            if looks_unavailable(text):
                raise SlurmUnavailable(args, 0, text)
            raise SlurmError(args, 0, text)


def _not_run(args: list[str], exc: OSError) -> SlurmUnavailable:
    """A client that could not be started: missing (127), or not executable, with a bad
    interpreter line, no processes left (126)."""
    if isinstance(exc, FileNotFoundError):
        return SlurmUnavailable(args, 127, f"Slurm client not found: {exc}")
    return SlurmUnavailable(args, 126, f"Slurm client cannot run: {exc}")


def failure(args: list[str], returncode: int, message: str) -> SlurmError:
    """A failed client call: SlurmUnavailable when slurmctld did not answer or asked to try
    again later, else SlurmError."""
    if looks_unavailable(message) or looks_busy(message):
        return SlurmUnavailable(args, returncode, message)
    return SlurmError(args, returncode, message)


def _errors_text(data: dict) -> str:
    errors = data.get("errors") or []
    if not isinstance(errors, list):
        errors = [errors]
    return "; ".join(str(e.get("error", e)) if isinstance(e, dict) else str(e)
                     for e in errors)
