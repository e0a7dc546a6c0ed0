"""The daemon wired: the agent on real Slurm (the Slurm door's CLI adapters), its store,
the configured profiles and the GPU-time predictor. The one module of the daemon that
builds the Slurm door's adapters; the pipeline (``daemon/service.py``) sees only their
ports."""

from __future__ import annotations

import logging
import time
from collections.abc import Callable

from slurm_marl.daemon.config import Config
from slurm_marl.daemon.service import Agent
from slurm_marl.daemon.store import Store

log = logging.getLogger(__name__)


def _agent_profile(config: Config, name: str):
    """The profile the daemon runs: with the default Slurm-alone guard where it has none
    of its own (``agent.guard``, on by default), said in the log."""
    from slurm_marl.policy.profile import load_profile, with_default_guard

    profile = load_profile(name)
    if profile.guard:
        log.info("profile %s: its own Slurm-alone guard %s", name, dict(profile.guard))
    elif config.agent.guard:
        profile = with_default_guard(profile)
        log.info("profile %s: the default Slurm-alone guard %s (agent.guard)", name,
                 dict(profile.guard))
    else:
        log.warning("profile %s: no Slurm-alone guard (agent.guard = false): jobs may "
                    "finish later than with Slurm alone", name)
    return profile


def build_agent(config: Config, metrics=None,
                acquire: Callable[[], bool] | None = None) -> Agent | None:
    """The agent wired to real Slurm, its store and the configured policy profile.

    ``acquire`` (daemon/loop.py) is called once the profiles and the predictor have loaded
    and before the store opens: it takes the agent's locks, waiting as a standby while
    another agent holds them; None if it was stopped before (no agent then)."""
    from slurm_marl.policy.framework import build_policy
    from slurm_marl.policy.profile import ProfileError
    from slurm_marl.slurm_integration.runner import SlurmRunner
    from slurm_marl.slurm_integration.sink import CliDecisionSink
    from slurm_marl.slurm_integration.source import CliClusterSource

    runner = SlurmRunner(config.slurm.slurm_conf, timeout_s=config.slurm.command_timeout_s)
    source = CliClusterSource(runner, static_ttl_s=60.0,
                              full_read_s=config.slurm.full_read_s)
    sink = CliDecisionSink(runner, retries=config.slurm.write_retries,
                           on_write=source.invalidate,
                           on_admin_comment=source.admin_comment_written)
    policy = build_policy(_agent_profile(config, config.agent.profile))
    partition_policies = {}
    for part, name in config.agent.partition_profiles:
        try:
            partition_policies[part] = build_policy(_agent_profile(config, name))
        except ProfileError as exc:
            raise ProfileError(f"agent.partition_profiles.{part}: {exc}") from None
        log.info("partition %s: profile %s", part, name)
    predictor = None
    if config.agent.gpu_time_model:
        from slurm_marl.daemon.predictions import DaemonPredictor
        from slurm_marl.history.skill import GateParams
        predictor = DaemonPredictor(config.agent.gpu_time_model, config.agent.history or None,
                                    time.time(),
                                    gate=GateParams() if config.agent.prediction_gate else None)
    elif config.agent.history:
        log.warning("agent.history is set but agent.gpu_time_model is not: no predictions")
    if acquire is not None and not acquire():
        return None
    store = Store(config.store_path)
    return Agent(config, source, sink, store, policy, metrics=metrics, predictor=predictor,
                 partition_policies=partition_policies, gate_warning=gate_warning(config))


def gate_warning(config: Config) -> str | None:
    """Why the job_submit.lua gate beside slurm.conf does not match this agent's managed
    partitions and grace (``plugin.gate_mismatch``), or None. A gate it cannot read is not
    judged (``check-slurm`` says whether one is installed)."""
    from slurm_marl.slurm_integration.plugin import gate_mismatch, gate_path, installed_gate

    gate = gate_path(config.slurm.slurm_conf)
    try:
        text = installed_gate(config.slurm.slurm_conf)
    except OSError as exc:
        log.debug("cannot read %s: %s", gate, exc)
        return None
    why = gate_mismatch(text, list(config.agent.managed_partitions), config.agent.grace_s)
    return f"{why} ({gate})" if why else None
