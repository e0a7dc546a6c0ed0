"""Rendering and installing the project's job_submit.lua (the fail-open gate)."""

from __future__ import annotations

import re
from importlib import resources
from pathlib import Path

_NAME_RE = re.compile(r"^[A-Za-z0-9_.-]+$")


class PluginError(ValueError):
    """The gate cannot be rendered or installed as asked."""


def enforce_binding_for(slurm_version: str) -> bool:
    """Whether the gate forces ``--gres-flags=enforce-binding`` on this Slurm.

    On 22.05 it keeps a job's CPUs on the socket of its GPUs (gres.conf ``Cores=``). From
    24.11 on (measured on 24.11.5 and 26.05.5) the flag makes every job take *all* the
    cores of its GPUs' socket: a 1-CPU, 1-GPU job got CPU_IDs=0-7, so one job ran per socket
    and the others waited ("Resources", "ReqNodeNotAvail, May be reserved for other job").
    Without it those versions still take the CPUs from the bound socket (CPU_IDs=0, then 1).
    23.x was not measured; it is treated as the later versions."""
    m = re.search(r"(\d+)\.(\d+)", slurm_version or "")
    if m is None:
        raise PluginError(f"cannot tell the Slurm version from {slurm_version!r}")
    return (int(m[1]), int(m[2])) < (23, 0)


def render_job_submit_lua(managed_partitions: list[str], grace_s: int,
                          agent_uids: list[int], *, slurm_version: str) -> str:
    """The gate for these partitions on this Slurm (``enforce_binding_for``)."""
    if not managed_partitions:
        raise PluginError("no managed partitions: the gate would do nothing")
    for name in managed_partitions:
        if not _NAME_RE.match(name):
            raise PluginError(f"partition name {name!r} is not a plain Slurm name")
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


def install_job_submit_lua(slurm_conf: Path, text: str) -> tuple[Path, list[str]]:
    """Write job_submit.lua beside slurm.conf; return its path and what the admin still has
    to do (JobSubmitPlugins=lua, scontrol reconfigure)."""
    slurm_conf = Path(slurm_conf)
    if not slurm_conf.exists():
        raise PluginError(f"{slurm_conf} does not exist")
    target = slurm_conf.parent / "job_submit.lua"
    tmp = target.with_suffix(".lua.tmp")
    tmp.write_text(text)
    tmp.chmod(0o644)
    tmp.replace(target)
    todo = []
    conf = slurm_conf.read_text(errors="replace")
    plugins = re.findall(r"^\s*JobSubmitPlugins\s*=\s*(\S+)", conf, re.M | re.I)
    if not plugins or "lua" not in plugins[-1].lower().split(","):
        todo.append(f"add `JobSubmitPlugins=lua` to {slurm_conf}")
    todo.append("run `scontrol reconfigure` to load it")
    return target, todo
