"""The Slurm ports: complete for what the daemon calls, met by the CLI adapters and by the
shared fakes, which fail loudly beyond them; and the Slurm vocabulary the daemon uses."""

from __future__ import annotations

import ast
import inspect
import typing
from pathlib import Path

import pytest

from fakes import FakeClusterSource, FakeDecisionSink, PortViolation, _PortFake, port_methods
from slurm_marl.daemon import service
from slurm_marl.daemon.config import parse_config
from slurm_marl.daemon.service import Agent
from slurm_marl.daemon.store import Store
from slurm_marl.domain import ClusterSnapshot, Partition, SetPriority
from slurm_marl.slurm_integration import marker, ports, runner, sink, vocabulary
from slurm_marl.slurm_integration.ports import ClusterSource, DecisionSink
from slurm_marl.slurm_integration.sink import CliDecisionSink
from slurm_marl.slurm_integration.source import CliClusterSource

DAEMON = Path(service.__file__).parent
PORT_OF = {"source": ClusterSource, "sink": DecisionSink}


def daemon_calls() -> set[tuple[str, str]]:
    """(source|sink, name) of every ``<x>.source.<name>`` / ``<x>.sink.<name>`` in the
    daemon's code."""
    found = set()
    for path in DAEMON.glob("*.py"):
        for node in ast.walk(ast.parse(path.read_text())):
            if (isinstance(node, ast.Attribute) and isinstance(node.value, ast.Attribute)
                    and node.value.attr in PORT_OF):
                found.add((node.value.attr, node.attr))
    return found


def test_the_ports_declare_every_call_the_daemon_makes():
    calls = daemon_calls()
    assert {("source", "snapshot"), ("sink", "apply"), ("sink", "repair_half_done")} <= calls
    for which, name in calls:
        assert name in port_methods(PORT_OF[which]), f"the daemon calls {which}.{name}"


def test_the_agent_names_the_port_types_and_the_ports_the_errors():
    hints = typing.get_type_hints(Agent.__init__)
    assert hints["source"] is ClusterSource and hints["sink"] is DecisionSink
    assert ports.SlurmError is runner.SlurmError
    assert issubclass(ports.SlurmUnavailable, ports.SlurmError)
    assert issubclass(ports.SlurmOutputError, ports.SlurmError)


def test_the_cli_adapters_and_the_fakes_are_the_ports():
    for adapter, port in ((CliClusterSource, ClusterSource), (CliDecisionSink, DecisionSink)):
        assert issubclass(adapter, port)
        for name, sig in port_methods(port).items():
            assert list(inspect.signature(getattr(adapter, name)).parameters) == \
                list(sig.parameters), f"{adapter.__name__}.{name}"
    assert isinstance(FakeClusterSource(ClusterSnapshot(0.0)), ClusterSource)
    assert isinstance(FakeDecisionSink(), DecisionSink)
    with pytest.raises(PortViolation):   # even probing for another port's method is loud
        isinstance(FakeClusterSource(ClusterSnapshot(0.0)), DecisionSink)


def test_the_fakes_fail_loudly_beyond_their_port():
    fake = FakeDecisionSink()
    with pytest.raises(PortViolation, match="read_request"):
        fake.read_request(1)
    with pytest.raises(PortViolation, match="does not take"):
        fake.apply([], None, True)
    with pytest.raises(PortViolation, match="does not take"):
        fake.repair_half_done(snap=ClusterSnapshot(0.0))
    assert fake.apply([], snapshot=None) == []
    assert fake.repair_half_done(ClusterSnapshot(0.0)) == []
    with pytest.raises(TypeError, match="missing"):
        class Partial(_PortFake, port=DecisionSink):
            def apply(self, decisions, snapshot=None):
                return []
    with pytest.raises(TypeError, match="not in the port"):
        class Extra(_PortFake, port=ClusterSource):
            def snapshot(self):
                return None

            def queue_fingerprint(self, partitions):
                return None

            def jobs(self):
                return []
    with pytest.raises(TypeError, match="differs"):
        class Other(_PortFake, port=ClusterSource):
            def snapshot(self, fresh=False):
                return None

            def queue_fingerprint(self, partitions):
                return None


def cfg(tmp_path, **agent):
    return parse_config({"agent": {"state_dir": str(tmp_path), "interval_s": 1, **agent}})


def test_a_port_violation_is_not_swallowed_by_the_agents_catch_all(tmp_path):
    snap = ClusterSnapshot(1000.0)
    a = Agent(cfg(tmp_path), FakeClusterSource(snap), FakeClusterSource(snap),
              Store(tmp_path / "s.sqlite"), policy=None)
    with pytest.raises(PortViolation, match="repair_half_done"):
        a.cycle()


class NoDecisions:
    def run_cycle(self, snapshot):
        return []


def test_a_source_error_is_a_failed_cycle_and_repairs_run_on_every_active_cycle(tmp_path):
    snap = ClusterSnapshot(1000.0, partitions=(Partition("gpu"),))  # the managed one exists
    down = ports.SlurmUnavailable(["squeue", "--json"], 1, "unable to contact slurm controller")
    source, fake_sink = FakeClusterSource(snap, error=down), FakeDecisionSink()
    a = Agent(cfg(tmp_path), source, fake_sink, Store(tmp_path / "s.sqlite"), NoDecisions())
    report = a.cycle()
    assert report.error == "slurm: unable to contact slurm controller"
    assert fake_sink.repairs == [] and fake_sink.calls == []
    source.error = None
    assert a.cycle().error is None and a.cycle().error is None
    assert fake_sink.repairs == [snap, snap] and source.reads == 3
    shadow = FakeDecisionSink()
    b = Agent(cfg(tmp_path / "b", shadow=True), FakeClusterSource(snap), shadow,
              Store(tmp_path / "b.sqlite"), NoDecisions())
    b.cycle()
    b.cycle()
    assert shadow.repairs == [] and shadow.calls == []


def test_the_fake_sink_answers_its_status_for_every_decision():
    fake = FakeDecisionSink(status=ports.WriteStatus.REFUSED, repaired=[4])
    d = SetPriority(1, "las", "", 5, 0)
    [res] = fake.apply([d])
    assert res.decision is d and not res.ok and fake.snapshots == [None]
    assert fake.repair_half_done(ClusterSnapshot(0.0)) == [4]


def test_slurm_vocabulary():
    assert vocabulary.reservation_name(5) == "slurm-marl-5"
    assert vocabulary.is_agent_reservation("slurm-marl-5")
    assert not any(vocabulary.is_agent_reservation(n) for n in (None, "", "maint", "slurm-"))
    assert vocabulary.MAX_PRIORITY == 2**32 - 3   # below NO_VAL (0xfffffffe)
    for reason in ("JobHeldUser", "JobHeldAdmin", "Dependency", "DependencyNeverSatisfied",
                   "PartitionDown", "ReqNodeNotAvail, UnavailableNodes:n1"):
        assert vocabulary.unschedulable(reason), reason
    for reason in ("", "Priority", "Resources", "BeginTime", "ReqNodeNotAvail"):
        assert not vocabulary.unschedulable(reason), reason


def test_what_the_marker_says_of_a_request_is_the_sinks_too():
    # moved from the sink to the marker module; the sink's names stay the same functions
    assert sink.user_gpu_request is marker.user_gpu_request
    assert sink.requested_gpu_fields is marker.requested_gpu_fields
