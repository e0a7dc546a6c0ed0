"""One fake of each Slurm port (``slurm_marl.slurm_integration.ports``), shared by all tests.

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
from collections.abc import Iterable

from slurm_marl.domain import ClusterSnapshot, Decision
from slurm_marl.slurm_integration.ports import (ClusterSource, DecisionSink, WriteResult,
                                                WriteStatus)


class PortViolation(BaseException):
    """Code under test used a fake beyond the port it fakes."""


def port_methods(port: type) -> dict[str, inspect.Signature]:
    """The methods a port (a Protocol class) declares, with their signatures."""
    return {name: inspect.signature(fn) for name, fn in vars(port).items()
            if not name.startswith("_") and inspect.isfunction(fn)}


def _shape(sig: inspect.Signature) -> list[tuple]:
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
            if _shape(inspect.signature(own[name])) != _shape(sig):
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
