"""One fake of each Slurm port (``slurm_marl.slurm_integration.ports``) and of each state
store port (``slurm_marl.daemon.store.ports``), shared by all tests.

``from fakes import FakeClusterSource, FakeDecisionSink`` works in any test folder: pytest's
default ("prepend") import mode puts ``tests/`` on ``sys.path`` when it loads
``tests/conftest.py``, as it puts a test's own folder there (``from policy_builders ...``).

A fake implements its port and nothing more. Calling a method the port does not declare,
or calling a declared one with arguments the port's signature does not take, raises
``PortViolation``: a BaseException, so the agent's catch-all around a cycle (``except
Exception``) cannot turn it into a logged cycle error, and the test fails. A fake that
misses a port method, or adds a public one, is a TypeError when this module is imported.
"""

from __future__ import annotations

import functools
import inspect
import io
import json
from collections.abc import Callable, Iterable
from dataclasses import replace
from typing import Any

from slurm_marl.daemon.store import JobRecord, decision_payload
from slurm_marl.daemon.store.ports import (DecisionLog, GuardSet, JobRecords, Predictions,
                                           Reservations, SpeedSamples, WrittenState)
from slurm_marl.domain import ClusterSnapshot, Decision
from slurm_marl.slurm_integration.ports import (ClusterSource, DecisionSink, WriteResult,
                                                WriteStatus)
from slurm_marl.slurm_integration.json_stream import CHUNK, JsonStreamError, stream_object
from slurm_marl.slurm_integration.runner import CommandResult, SlurmRunner


class PortViolation(BaseException):
    """Code under test used a fake beyond the port it fakes."""


def port_methods(port: type) -> dict[str, inspect.Signature]:
    """The methods a port (a Protocol class) declares, with their signatures."""
    return {name: inspect.signature(fn) for name, fn in vars(port).items()
            if not name.startswith("_") and inspect.isfunction(fn)}


def signature_shape(sig: inspect.Signature) -> list[tuple]:
    """What two signatures must share to take the same calls: each parameter's name,
    kind and default."""
    return [(p.name, p.kind, p.default) for p in sig.parameters.values()]


def _checked(port: type, name: str, sig: inspect.Signature, fn):
    @functools.wraps(fn)
    def method(self, *args, **kwargs):
        try:
            sig.bind(self, *args, **kwargs)
        except TypeError as exc:
            raise PortViolation(f"{port.__name__}.{name}{sig} does not take "
                                f"args={args!r} kwargs={kwargs!r}: {exc}") from None
        return fn(self, *args, **kwargs)
    return method


class _PortFake:
    """Base of the fakes: ``class F(_PortFake, port=SomePort)`` checks F against the port
    and makes every use beyond it loud (module docstring)."""

    port: type

    def __init_subclass__(cls, *, port: type, **kwargs) -> None:
        super().__init_subclass__(**kwargs)
        cls.port = port
        declared = port_methods(port)
        own = {name: fn for name, fn in vars(cls).items()
               if not name.startswith("_") and inspect.isfunction(fn)}
        if declared.keys() != own.keys():
            raise TypeError(f"{cls.__name__} must define exactly the methods of "
                            f"{port.__name__}: missing {sorted(declared.keys() - own.keys())}, "
                            f"not in the port {sorted(own.keys() - declared.keys())}")
        for name, sig in declared.items():
            if signature_shape(inspect.signature(own[name])) != signature_shape(sig):
                raise TypeError(f"{cls.__name__}.{name}{inspect.signature(own[name])} differs "
                                f"from {port.__name__}.{name}{sig}")
            setattr(cls, name, _checked(port, name, sig, own[name]))

    def __getattr__(self, name: str):
        # Only reached for names the fake does not have.
        if name.startswith("__"):  # Python's own probes (copy, pickle, ...)
            raise AttributeError(name)
        raise PortViolation(f"{type(self).__name__}.{name}: {self.port.__name__} declares no "
                            f"{name!r} (it declares {sorted(port_methods(self.port))}); "
                            f"add it to the port first")


class FakeClusterSource(_PortFake, port=ClusterSource):
    """Hands out ``snap`` (assign another one between cycles); while ``error`` is set,
    raises it instead (a ``SlurmUnavailable``: the controller does not answer)."""

    def __init__(self, snap: ClusterSnapshot, error: BaseException | None = None) -> None:
        self.snap = snap
        self.error = error
        self.reads = 0

    def snapshot(self) -> ClusterSnapshot:
        self.reads += 1
        if self.error is not None:
            raise self.error
        return self.snap

    def queue_fingerprint(self, partitions: tuple[str, ...]) -> str | None:
        """``snap``'s pending, running and completing jobs of ``partitions``, as a string
        (None while ``error`` is set)."""
        if self.error is not None:
            return None
        return " ".join(f"{j.job_id}:{j.state.value}" for j in sorted(
            self.snap.jobs, key=lambda j: j.job_id)
            if j.is_pending or j.is_running or j.state.value == "COMPLETING"
            if set(j.partition.split(",")) & set(partitions))


class FakeDecisionSink(_PortFake, port=DecisionSink):
    """Records what it is asked to write and answers ``status`` for every decision;
    ``repair_half_done`` records its snapshot and answers ``repaired``; ``starts_done``
    answers ``done_at``."""

    def __init__(self, status: WriteStatus = WriteStatus.OK, repaired: Iterable[int] = ()
                 ) -> None:
        self.calls: list[list[Decision]] = []                # the decisions of each apply
        self.snapshots: list[ClusterSnapshot | None] = []    # the snapshot of each apply
        self.repairs: list[ClusterSnapshot] = []             # each repair_half_done's
        self.status = status
        self.repaired = list(repaired)
        self.done_at: float | None = None   # what ``starts_done`` answers

    def apply(self, decisions: list[Decision],
              snapshot: ClusterSnapshot | None = None) -> list[WriteResult]:
        self.calls.append(list(decisions))
        self.snapshots.append(snapshot)
        return [WriteResult(d, self.status) for d in decisions]

    def repair_half_done(self, snapshot: ClusterSnapshot) -> list[int]:
        self.repairs.append(snapshot)
        return list(self.repaired)

    def starts_done(self) -> float | None:
        return self.done_at


Answer = tuple[int, str, str]   # a client's exit status, stdout, stderr


class ScriptedRunner(SlurmRunner):
    """Stands in for ``SlurmRunner``: records each call's arguments in ``calls`` and
    answers (exit status, stdout, stderr) from ``script``, either one answer for every call
    or a function of the call's arguments (which may also raise, e.g. ``SlurmUnavailable``
    as the real runner does for a timeout or a missing client).

    Only the running of a client is scripted: ``run_checked`` and ``run_json`` are
    ``SlurmRunner``'s own, on top of the scripted ``run``, and ``run_json_streamed`` hands
    the scripted stdout to the real streaming parser (``json_stream.stream_object``, read
    ``chunk`` characters at a time) and raises what ``SlurmRunner.run_json_streamed``
    raises (``SlurmRunner.streamed_answer``): a failed client, an answer that is not one
    JSON object, JSON ``errors``.
    Each method takes what ``SlurmRunner``'s takes (checked when this module is imported).
    ``calls`` (a list of argument lists) replaces ``SlurmRunner``'s call counter."""

    def __init__(self, script: Answer | Callable[[list[str]], Answer] = (0, "", ""),
                 chunk: int = CHUNK) -> None:
        super().__init__("/nonexistent/slurm.conf")     # never read: no client runs
        self.script = script
        self.chunk = chunk
        self.calls: list[list[str]] = []

    def _answer(self, args: list[str]) -> Answer:
        self.calls.append(list(args))
        return self.script(list(args)) if callable(self.script) else self.script

    def run(self, args: list[str], timeout_s: float | None = None) -> CommandResult:
        rc, out, err = self._answer(args)
        return CommandResult(list(args), rc, out, err)

    def run_json_streamed(self, args: list[str],
                          items: dict[str, Callable[[Any], None] | None]
                          ) -> tuple[dict, dict[str, int]]:
        rc, out, err = self._answer(args)
        # as the real runner: the elements are handed over before the exit status is known
        parsed: tuple[dict, dict[str, int]] | None = None
        problem: JsonStreamError | None = None
        try:
            parsed = stream_object(io.StringIO(out).read, items, chunk=self.chunk)
        except JsonStreamError as exc:
            problem = exc
        return self.streamed_answer(args, rc, err, parsed, problem)


for _name in ("run", "run_checked", "run_json", "run_json_streamed"):
    if (signature_shape(inspect.signature(getattr(ScriptedRunner, _name)))
            != signature_shape(inspect.signature(getattr(SlurmRunner, _name)))):
        raise TypeError(f"ScriptedRunner.{_name} must take what SlurmRunner.{_name} takes")


# ---- the state store's ports (``slurm_marl.daemon.store.ports``) ---------------------------
# In memory, each as the SQLite adapter behaves (tests/daemon/test_store_ports.py runs the
# same checks on both). Records come back as copies, as rows read from a file do.

class FakeJobRecords(_PortFake, port=JobRecords):
    def __init__(self) -> None:
        self.rows: dict[int, JobRecord] = {}
        self._live: dict[int, JobRecord] | None = None

    def get(self, job_ids: Iterable[int] | None = None) -> dict[int, JobRecord]:
        ids = sorted(self.rows) if job_ids is None else [i for i in job_ids if i in self.rows]
        return {i: replace(self.rows[i]) for i in ids}

    def live(self, job_ids: Iterable[int]) -> dict[int, JobRecord]:
        ids = list(job_ids)
        if self._live is None:
            out = {rec.job_id: rec for rec in self.unfinished()}
        else:
            listed = set(ids)
            out = {i: rec for i, rec in self._live.items()
                   if rec.finished_s is None or i in listed}
        out.update(self.get([i for i in ids if i not in out]))
        self._live = out
        return out

    def forget_live(self) -> None:
        self._live = None

    def unfinished(self) -> list[JobRecord]:
        return [replace(r) for _, r in sorted(self.rows.items()) if r.finished_s is None]

    def signatures(self) -> dict[tuple[str, str], str]:
        return {(r.user, r.name): r.model_type for _, r in sorted(self.rows.items())
                if r.model_type is not None}

    def save(self, records: Iterable[JobRecord]) -> None:
        self.rows.update({r.job_id: replace(r) for r in records})

    def set_queues(self, items: Iterable[tuple[int, int]]) -> None:
        for job_id, queue in items:
            if job_id in self.rows:
                self.rows[job_id].queue = queue
            if self._live is not None and job_id in self._live:
                self._live[job_id].queue = queue


class FakeWrittenState(_PortFake, port=WrittenState):
    def __init__(self) -> None:
        self.values: dict[tuple[int, str], str] = {}

    def get(self, job_ids: Iterable[int]) -> dict[tuple[int, str], str]:
        ids = set(job_ids)
        return {key: v for key, v in self.values.items() if key[0] in ids}

    def mark(self, items: Iterable[tuple[int, str, str]], now_s: float) -> None:
        self.values.update({(j, k): v for j, k, v in items})

    def forget(self, job_id: int, kinds: Iterable[str]) -> None:
        for kind in kinds:
            self.values.pop((job_id, kind), None)


class FakeReservations(_PortFake, port=Reservations):
    def __init__(self) -> None:
        self.rows: dict[str, dict] = {}

    def active(self) -> dict[str, dict]:
        return {n: dict(r) for n, r in self.rows.items() if r["ended_s"] is None}

    def add(self, name: str, job_id: int, nodes: str, now_s: float) -> None:
        row = self.rows.setdefault(name, {"name": name, "created_s": now_s})
        row.update(job_id=job_id, nodes=nodes, ended_s=None)

    def end(self, name: str, now_s: float) -> None:
        if name in self.rows:
            self.rows[name]["ended_s"] = now_s


_OUTCOME_COLUMNS = ("job_id", "run", "user", "name", "model_type", "num_gpus", "nodes",
                    "gpu_alloc", "colocated", "start_s", "end_s", "state")


class FakeDecisionLog(_PortFake, port=DecisionLog):
    """``cycle_rows``: the cycle reports ``cycles`` reads (the store writes them)."""

    def __init__(self) -> None:
        self.rows: list[dict] = []
        self.cycle_rows: list[dict] = []
        self.outcome_rows: dict[tuple[int, int], dict] = {}

    def record(self, cycle: int, now_s: float,
               rows: Iterable[tuple[Decision, str, str]]) -> None:
        for d, status, message in rows:
            payload = json.loads(json.dumps(decision_payload(d), default=str))
            self.rows.append({"id": len(self.rows) + 1, "cycle": cycle, "time_s": now_s,
                              "job_id": d.job_id, "kind": type(d).__name__,
                              "plugin": d.plugin, "reason": d.reason, "payload": payload,
                              "status": status, "message": message})

    def record_outcome(self, job_id: int, run: int, **values) -> None:
        row = dict.fromkeys(_OUTCOME_COLUMNS)
        row.update(job_id=job_id, run=run, **values)
        self.outcome_rows[(job_id, run)] = row

    def decisions(self, job_id: int | None = None, limit: int = 50,
                  kind: str | None = None, since_s: float | None = None) -> list[dict]:
        rows = [r for r in reversed(self.rows)
                if (job_id is None or r["job_id"] == job_id) and (not kind or r["kind"] == kind)
                and (since_s is None or r["time_s"] >= since_s)]
        return [dict(r) for r in rows[:limit]]

    def cycles(self, limit: int = 10) -> list[dict]:
        return [dict(r) for r in sorted(self.cycle_rows, key=lambda r: -r["cycle"])[:limit]]

    def outcomes(self) -> list[dict]:
        # SQLite orders NULL first
        return [dict(r) for r in sorted(self.outcome_rows.values(),
                                        key=lambda r: (r["end_s"] is not None, r["end_s"] or 0))]


class FakeGuardSet(_PortFake, port=GuardSet):
    def __init__(self) -> None:
        self.protected: dict[int, tuple[float, float | None]] = {}

    def set(self, protected: dict[int, tuple[float, float | None]]) -> None:
        self.protected = dict(protected)

    def get(self) -> dict[int, dict]:
        return {j: {"job_id": j, "protected_s": since, "shadow_start_s": start}
                for j, (since, start) in self.protected.items()}


class FakePredictions(_PortFake, port=Predictions):
    """Keeps every history row: the SQLite adapter's pruning drops only rows no feature
    reads (its own tests cover it), so what ``history`` feeds the features is the same."""

    def __init__(self) -> None:
        self.made: dict[int, tuple] = {}
        self.scored_rows: list[tuple] = []      # with their id first
        self.history_rows: list[tuple] = []     # with their id first
        self._ids = 0                           # ids are never reused (AUTOINCREMENT)

    def _next_id(self) -> int:
        self._ids += 1
        return self._ids

    def live(self) -> list[tuple]:
        return [self.made[j] for j in sorted(self.made)]

    def scored(self, window: int) -> list[tuple]:
        kept = []
        for part in {r[2] for r in self.scored_rows}:
            kept += [r for r in self.scored_rows if r[2] == part][-window:] if window else []
        return sorted(kept)

    def history(self) -> list[tuple]:
        return list(self.history_rows)

    def save(self, made: Iterable[tuple], scored: Iterable[tuple],
             dropped: Iterable[int], window: int,
             dropped_scored: Iterable[int] = (), history: Iterable[tuple] = (),
             dropped_history: Iterable[int] = (), keep_recent: int = 10,
             keep_submits_s: float = 2 * 86400.0,
             prune_every: int = 1000) -> None:
        self.made.update({row[0]: tuple(row) for row in made})
        for job_id in dropped:
            self.made.pop(job_id, None)
        gone = set(dropped_scored)
        self.scored_rows = [r for r in self.scored_rows if r[0] not in gone]
        scored = [(self._next_id(), *row) for row in scored]
        self.scored_rows += scored
        for part in {row[2] for row in scored}:
            rows = [r for r in self.scored_rows if r[2] == part]
            old = {r[0] for r in rows[:max(len(rows) - window, 0)]}
            self.scored_rows = [r for r in self.scored_rows if r[0] not in old]
        gone = set(dropped_history)
        self.history_rows = [r for r in self.history_rows if r[0] not in gone]
        self.history_rows += [(self._next_id(), *row) for row in history]


class FakeSpeedSamples(_PortFake, port=SpeedSamples):
    def __init__(self) -> None:
        self.stored: list[str] = []     # as JSON, like the table

    def add(self, samples: Iterable[dict]) -> int:
        rows = [(int(s["job_id"]), json.dumps(s, sort_keys=True)) for s in samples]
        self.stored += [text for _, text in rows]
        return len(rows)

    def all(self) -> list[dict]:
        return [json.loads(text) for text in self.stored]
