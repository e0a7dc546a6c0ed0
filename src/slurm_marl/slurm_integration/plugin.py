"""Rendering and installing the project's job_submit.lua (the fail-open gate)."""

from __future__ import annotations

import re
from importlib import resources
from pathlib import Path

from slurm_marl.slurm_integration.text import conf_setting, parse_slurm_version
from slurm_marl.slurm_integration.vocabulary import bad_partition_name


class PluginError(ValueError):
    """The gate cannot be rendered or installed as asked."""


def enforce_binding_for(slurm_version: str) -> bool:
    """Whether the gate forces ``--gres-flags=enforce-binding`` on this Slurm: never.

    Forced, the flag changes what Slurm accepts, which the gate must not do. On 22.05 it made
    ``sbatch`` refuse every request wanting more cores than its GPUs' socket has (``-c6
    --gres=gpu:1``, ``--gres=gpu:2 -n8``, several GPU types: "Requested node configuration
    is not available"), and slurmctld logged ``gres_min_cpus ... greater than avail_cpus``
    for gated 1-CPU jobs. From 24.11 on (24.11.5, 26.05.5) it gave every job its GPUs'
    whole socket, one job per socket. Without it, Slurm still takes a job's CPUs from the
    socket of the GPUs the agent pinned while that socket has free cores (measured on
    22.05.8 and 24.11: CPU_IDs on the pinned group's socket, tests/slurm/test_unchanged.py);
    a job wanting more CPUs than that gets the rest from the other socket, as under Slurm
    alone. The version is still checked: an unreadable one is an error."""
    if parse_slurm_version(slurm_version) is None:
        raise PluginError(f"cannot tell the Slurm version from {slurm_version!r}")
    return False


def render_job_submit_lua(managed_partitions: list[str], grace_s: int,
                          agent_uids: list[int], *, slurm_version: str) -> str:
    """The gate for these partitions on this Slurm (``enforce_binding_for``)."""
    if not managed_partitions:
        raise PluginError("no managed partitions: the gate would do nothing")
    for name in managed_partitions:
        why = bad_partition_name(name)
        if why is not None:
            raise PluginError(why)
    enforce_binding = enforce_binding_for(slurm_version)
    if not 0 < grace_s <= 3600:
        raise PluginError(f"grace_s must be 1..3600 seconds, got {grace_s}")
    template = resources.files("slurm_marl.slurm_integration").joinpath(
        "job_submit.lua.in").read_text()
    uids = sorted({0, *agent_uids})
    return (template
            .replace("@MANAGED@", ", ".join(f'["{p}"] = true' for p in managed_partitions))
            .replace("@GRACE_S@", str(int(grace_s)))
            .replace("@AGENT_UIDS@", ", ".join(f"[{u}] = true" for u in uids))
            .replace("@ENFORCE_BINDING@", "true" if enforce_binding else "false"))


def gate_path(slurm_conf: Path | str) -> Path:
    """Where the gate is installed: job_submit.lua beside slurm.conf."""
    return Path(slurm_conf).parent / "job_submit.lua"


def installed_gate(slurm_conf: Path | str) -> str | None:
    """The installed gate's text (``gate_path``), None if there is none; OSError if it
    cannot be read."""
    gate = gate_path(slurm_conf)
    return gate.read_text(errors="replace") if gate.is_file() else None


def install_job_submit_lua(slurm_conf: Path, text: str) -> tuple[Path, list[str]]:
    """Write job_submit.lua beside slurm.conf; return its path and what the admin still has
    to do (JobSubmitPlugins=lua, scontrol reconfigure)."""
    slurm_conf = Path(slurm_conf)
    if not slurm_conf.exists():
        raise PluginError(f"{slurm_conf} does not exist")
    target = gate_path(slurm_conf)
    tmp = target.with_suffix(".lua.tmp")
    tmp.write_text(text)
    tmp.chmod(0o644)
    tmp.replace(target)
    todo = []
    conf = slurm_conf.read_text(errors="replace")
    plugins = conf_setting(conf, "JobSubmitPlugins")
    if not plugins or "lua" not in plugins.lower().split(","):
        todo.append(f"add `JobSubmitPlugins=lua` to {slurm_conf}")
    todo.append("run `scontrol reconfigure` to load it")
    return target, todo


def gate_mismatch(text: str | None, managed_partitions: list[str], grace_s: int) -> str | None:
    """Why the installed gate (job_submit.lua's ``text``) does not match the agent's
    managed partitions and grace, or None if it does (or is not a slurm-marl gate: that is
    ``check-slurm``'s own finding). A gate for other partitions delays jobs the agent does
    not decide by the whole grace, and leaves jobs it should decide to start on their own;
    an older gate refuses users' begin-time updates that Slurm alone accepts."""
    if not text or "slurm-marl" not in text:
        return None
    found = re.search(r"^local MANAGED_PARTITIONS = \{(.*)\}\s*$", text, re.M)
    grace = re.search(r"^local GRACE_S = (\d+)\s*$", text, re.M)
    if found is None or grace is None:
        return "the installed gate cannot be read (not one this slurm-marl renders)"
    parts = sorted(re.findall(r'\["([^"]+)"\] = true', found.group(1)))
    problems = []
    if parts != sorted(managed_partitions):
        problems.append(f"it gates partitions {', '.join(parts) or 'none'}, the agent "
                        f"manages {', '.join(sorted(managed_partitions))}")
    if int(grace.group(1)) != int(grace_s):
        problems.append(f"its grace is {grace.group(1)} s, the agent's {grace_s} s")
    if "refuse_earlier_start" in text:
        problems.append("it is an older slurm-marl's gate, which refuses users' begin-time "
                        "updates Slurm alone accepts")
    if not problems:
        return None
    return ("job_submit.lua does not match the agent: " + "; ".join(problems)
            + ": re-run `slurm-marl install-plugin`, then `scontrol reconfigure`")
