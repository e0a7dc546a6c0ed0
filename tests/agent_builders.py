"""A daemon agent on a hand-built two-node cluster with a fixed list of decisions and the
shared fake sink: the daemon's and the admission's tests build on it."""

from fakes import FakeClusterSource, FakeDecisionSink
from slurm_marl.daemon.config import parse_config
from slurm_marl.daemon.service import Agent
from slurm_marl.daemon.store import Store
from slurm_marl.domain import GpuGroup, Job, Node, Partition

NODES = tuple(Node(name=n, partitions=("gpu",), cpus=8, real_memory_mib=16000,
                   gpu_groups=(GpuGroup(0, (0, 1), "s0", 0), GpuGroup(1, (2, 3), "s1", 1)))
              for n in ("n1", "n2"))
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
    return Job(jid, name=f"j{jid}", partition="gpu", gpus_per_node=1, submit_time_s=now - 5,
               eligible_time_s=now + eligible_in, **kw)
