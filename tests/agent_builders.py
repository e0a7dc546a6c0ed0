"""A daemon agent on a hand-built two-node cluster with a fixed list of decisions and the
shared fake sink: the daemon's and the admission's tests build on it."""

from fakes import FakeClusterSource, FakeDecisionSink
from slurm_marl.daemon.config import parse_config
from slurm_marl.daemon.service import Agent
from slurm_marl.daemon.store import Store
from slurm_marl.domain import GpuGroup, Job, Node, Partition
from slurm_marl.slurm_integration.marker import Marker

# the gate's marker of a `--gres=gpu:1` job that named no nodes
GATED = Marker("gres:gpu:1", "", "").render()

NODES = tuple(Node(name=n, partitions=parts, cpus=8, real_memory_mib=16000,
                   gpu_groups=(GpuGroup(0, (0, 1), "s0", 0), GpuGroup(1, (2, 3), "s1", 1)))
              for n, parts in (("n1", ("gpu", "cpu")), ("n2", ("gpu",))))
PARTS = (Partition("gpu", ("n1", "n2"), True), Partition("cpu", ("n1",)))


class FixedPolicy:
    def __init__(self, decisions):
        self.decisions = decisions

    def run_cycle(self, snapshot):
        return [d for d in self.decisions if snapshot.job(d.job_id) is not None]


def agent(tmp_path, snap, decisions, **agent_cfg):
    cfg = parse_config({"agent": {"state_dir": str(tmp_path), "interval_s": 1, "grace_s": 30,
                                  **agent_cfg}})
    sink = FakeDecisionSink()
    return Agent(cfg, FakeClusterSource(snap), sink, Store(tmp_path / "s.sqlite"),
                 FixedPolicy(decisions)), sink


def pending(jid, now, eligible_in=20, **kw):
    """A waiting job submitted 10 s ago, marked by the gate; by default eligible when
    the gate's grace of the agent's config (30 s) ends, as the gate sets it."""
    fields = dict(name=f"j{jid}", partition="gpu", gpus_per_node=1, submit_time_s=now - 10,
                  eligible_time_s=now + eligible_in, admin_comment=GATED)
    return Job(jid, **{**fields, **kw})
