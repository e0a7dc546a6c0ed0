"""SiteFactor mode: a partition's order written as SiteFactor (added to Slurm's
multifactor priority) with as few writes as Priority mode, remembered in the store since
Slurm shows it only through sprio; other partitions keep Priority."""

import pytest
from agent_builders import GATED, NODES, PARTS, agent, pending

from slurm_marl.daemon.config import ConfigError, parse_config
from slurm_marl.daemon.writes import site_factor_writes
from slurm_marl.domain import ClusterSnapshot, Job, SetPriority


def test_site_factor_writes_keep_what_was_written():
    now = 1000.0
    snap = ClusterSnapshot(now, NODES, tuple(pending(i, now) for i in (1, 2, 3)), PARTS)
    order = [SetPriority(i, "las", "q", 4 - i, 0) for i in (1, 2, 3)]
    first = site_factor_writes(snap, order, 1_000_000, {})
    assert [d.job_id for d in first] == [1, 2, 3] and all(d.site_factor for d in first)
    values = [d.priority for d in first]
    assert values == sorted(values, reverse=True) and 1 <= min(values)
    written = {(d.job_id, "site_factor"): str(d.priority) for d in first}
    assert site_factor_writes(snap, order, 1_000_000, written) == []
    # job 3 moves ahead of job 2: one write
    moved = [SetPriority(1, "las", "q", 3, 0), SetPriority(3, "las", "q", 2, 0),
             SetPriority(2, "las", "q", 1, 0)]
    again = site_factor_writes(snap, moved, 1_000_000, written)
    assert len(again) == 1 and again[0].site_factor


def test_the_agent_writes_site_factor_in_its_partitions_only(tmp_path):
    now = 1000.0
    cpu_job = Job(9, name="c", partition="cpu", gpus_per_node=1, submit_time_s=now - 10,
                  eligible_time_s=now + 20, admin_comment=GATED)
    snap = ClusterSnapshot(now, NODES, (pending(1, now), pending(2, now), cpu_job), PARTS)
    decisions = [SetPriority(1, "las", "q0", 2, 0), SetPriority(2, "las", "q0", 1, 0),
                 SetPriority(9, "las", "q0", 1, 0)]
    a, sink = agent(tmp_path, snap, decisions, managed_partitions=["gpu", "cpu"],
                    site_factor_partitions=["gpu"], site_factor_max=10_000)
    a.cycle()
    prios = {d.job_id: d for d in sink.calls[0] if isinstance(d, SetPriority)}
    assert prios[1].site_factor and prios[2].site_factor and not prios[9].site_factor
    assert 10_000 >= prios[1].priority > prios[2].priority >= 1
    a.cycle()   # remembered: nothing written again
    assert not [d for c in sink.calls[1:] for d in c
                if isinstance(d, SetPriority) and d.site_factor]


def test_site_factor_partitions_must_be_managed():
    with pytest.raises(ConfigError, match="site_factor_partitions.*not in"):
        parse_config({"agent": {"managed_partitions": ["gpu"],
                                "site_factor_partitions": ["other"]}})
    with pytest.raises(ConfigError, match="site_factor_max"):
        parse_config({"agent": {"site_factor_max": 1}})
