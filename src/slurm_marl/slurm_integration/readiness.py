"""`slurm-marl check-slurm`: is this Slurm ready for the agent? Plain words for an admin.

Reads what any user may read (``scontrol show config``, ``scontrol show node -o``, the
job_submit.lua beside slurm.conf, and ``sacctmgr`` where accounting exists) and says, for
each thing the agent relies on, whether it is ready, what is missing and how to fix it.
``check(...)`` is pure over those texts, so it is tested on recorded outputs; the command
gathers them.

Levels: ``ok``; ``warn`` (the agent works, less well or with a manual step); ``missing``
(the agent cannot do its job: it must not be started, or it would leave every job to
Slurm). The exit status is 1 when anything is missing.
"""

from __future__ import annotations

import json
import os
import pwd
import re
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Annotated, Optional

import typer

from slurm_marl.slurm_integration.plugin import (PluginError, enforce_binding_for, gate_mismatch,
                                                 installed_gate)
from slurm_marl.slurm_integration.runner import SlurmError, SlurmRunner
from slurm_marl.slurm_integration.text import parse_kv_line, parse_node_gres

SUPPORTED_SERIES = ("22.05", "24.11", "26.05")
GATE_MARK = "slurm-marl:v1"        # job_submit.lua.in's marker


@dataclass(frozen=True)
class Check:
    name: str
    level: str          # ok | warn | missing
    found: str
    advice: str = ""


def parse_show_config(text: str) -> dict[str, str]:
    """``Key = value`` lines of ``scontrol show config`` (the same on 22.05-26.05)."""
    out = {}
    for line in text.splitlines():
        m = re.match(r"^([A-Za-z][A-Za-z0-9_]*)\s*=\s?(.*)$", line.strip())
        if m:
            out[m.group(1)] = m.group(2).strip()
    return out


def priority_weight_sum(cfg: dict[str, str]) -> int:
    """The sum of the PriorityWeight* factors (TRES weights excluded): what a SiteFactor is
    sized against (above it the agent's order dominates, below it only nudges)."""
    total = 0
    for key, value in cfg.items():
        if key.startswith("PriorityWeight") and key != "PriorityWeightTRES":
            m = re.match(r"^\d+", value)
            total += int(m.group(0)) if m else 0
    return total


def gres_groups(node_lines: str) -> tuple[int, int, list[str]]:
    """(nodes with GPUs, of them with every GPU entry typed and bound to one socket, names
    of those that are not) from ``scontrol show node -o``."""
    with_gpus = per_socket = 0
    loose = []
    for line in node_lines.splitlines():
        if not line.startswith("NodeName="):
            continue
        kv = parse_kv_line(line)
        entries, _ = parse_node_gres(kv.get("Gres"))
        if not entries:
            continue
        with_gpus += 1
        if all(e.type and len(e.sockets) == 1 for e in entries):
            per_socket += 1
        else:
            loose.append(kv.get("NodeName", "?"))
    return with_gpus, per_socket, loose


def check(cfg: dict[str, str], node_lines: str, gate_text: str | None,
          agent_user: str, admin_level: str | None,
          expect: tuple[list[str], int] | None = None) -> list[Check]:
    """Every readiness check over the gathered texts, in the order they are shown.
    ``gate_text``: job_submit.lua beside slurm.conf (None: absent); ``admin_level``: the
    agent user's AdminLevel in accounting (None: no accounting to ask); ``expect``: the
    agent's managed partitions and grace, which the installed gate must match."""
    return [_check_version(cfg), _check_select(cfg), _check_priority(cfg),
            _check_gate(cfg, gate_text, expect), _check_topology(cfg), _check_gres(node_lines),
            _check_accounting(cfg), _check_rights(cfg, agent_user, admin_level)]


def _check_version(cfg: dict[str, str]) -> Check:
    version = cfg.get("SLURM_VERSION", "")
    series = ".".join(version.split(".")[:2])
    return Check("Slurm version", "ok" if series in SUPPORTED_SERIES else "warn",
                 version or "unknown",
                 "" if series in SUPPORTED_SERIES else
                 f"tested on {', '.join(SUPPORTED_SERIES)}; the agent refuses JSON "
                 "layouts it does not know rather than misread them")


def _check_select(cfg: dict[str, str]) -> Check:
    select = cfg.get("SelectType", "")
    return Check("GPU-aware node selection", "ok" if select == "select/cons_tres"
                 else "missing", select or "unknown",
                 "" if select == "select/cons_tres" else
                 "set SelectType=select/cons_tres: the agent pins GPUs per socket")


def _check_priority(cfg: dict[str, str]) -> Check:
    prio = cfg.get("PriorityType", "")
    weights = priority_weight_sum(cfg)
    if prio == "priority/multifactor":
        return Check("priority plugin", "ok", f"{prio}, PriorityWeight* sum {weights}",
                     "the agent may write its order as Priority (overrides every factor) "
                     f"or as SiteFactor (added to them: above {weights} it dominates)")
    return Check("priority plugin", "ok" if prio else "warn", prio or "unknown",
                 "the agent writes its order as Priority; fair-share needs "
                 "PriorityType=priority/multifactor with slurmdbd")


def _check_gate(cfg: dict[str, str], gate_text: str | None,
                expect: tuple[list[str], int] | None = None) -> Check:
    """The job_submit gate: installed, matching the agent's partitions and grace
    (``expect``, when given) and forcing GRES enforce-binding exactly where this version's
    gate should (an older slurm-marl's gate forced it everywhere)."""
    plugins = [p.strip().split("/")[-1] for p in cfg.get("JobSubmitPlugins", "").split(",")]
    has_lua = "lua" in plugins
    gate_ok = gate_text is not None and GATE_MARK in gate_text
    forces = "ENFORCE_BINDING = false" not in (gate_text or "")  # older gates always forced it
    try:
        wants = enforce_binding_for(cfg.get("SLURM_VERSION", ""))
    except PluginError:  # version unknown: nothing to compare against
        wants = None
    if has_lua and gate_ok and wants is not None and forces != wants:
        return Check(
            "job_submit gate", "warn",
            f"installed gate {'forces' if forces else 'does not force'} GRES "
            f"enforce-binding (an older slurm-marl's gate)",
            "re-run `slurm-marl install-plugin`: a forced enforce-binding makes sbatch "
            "refuse jobs wanting more cores than their GPUs' socket (22.05) and gives every "
            "job its GPUs' whole socket (24.11 on)")
    why = gate_mismatch(gate_text, *expect) if expect is not None and gate_ok else None
    if has_lua and why is not None:
        found, _, advice = why.partition(": re-run ")
        return Check("job_submit gate", "warn", found, "re-run " + advice)
    if has_lua and gate_ok:
        return Check("job_submit gate", "ok", "JobSubmitPlugins=lua, slurm-marl gate "
                     "installed" + (f" for {', '.join(expect[0])}, {expect[1]} s"
                                    if expect is not None else ""))
    what = ("JobSubmitPlugins has no lua" if not has_lua else
            "job_submit.lua is not the slurm-marl gate" if gate_text is not None else
            "no job_submit.lua beside slurm.conf")
    return Check("job_submit gate", "warn", what,
                 "run `slurm-marl install-plugin`, add JobSubmitPlugins=lua, then "
                 "`scontrol reconfigure`; without it Slurm may start a job before "
                 "the agent decides it (it still reorders and pins waiting jobs)")


def _check_topology(cfg: dict[str, str]) -> Check:
    topo = cfg.get("TopologyPlugin", "")
    return Check("network topology", "ok" if topo == "topology/tree" else "warn",
                 topo or "none", "" if topo == "topology/tree" else
                 "with TopologyPlugin=topology/tree and topology.conf the agent keeps "
                 "multi-node jobs under one leaf switch; without it the cluster is flat")


def _check_gres(node_lines: str) -> Check:
    with_gpus, per_socket, loose = gres_groups(node_lines)
    if not with_gpus:
        return Check("GPUs in gres.conf", "missing", "no node has a GPU GRES",
                     "declare GPUs in gres.conf (Name=gpu) and GresTypes=gpu")
    if per_socket == with_gpus:
        return Check("GPU groups per socket", "ok",
                     f"{with_gpus} GPU nodes, every GPU typed and bound to one socket")
    return Check("GPU groups per socket", "warn",
                 f"{per_socket} of {with_gpus} GPU nodes typed per socket (not: "
                 f"{', '.join(loose[:5])}{' ...' if len(loose) > 5 else ''})",
                 "type each socket's GPUs (gres.conf: Type=s0 with Cores= of socket "
                 "0, ...): the agent can only choose a GPU group on such nodes")


def _check_accounting(cfg: dict[str, str]) -> Check:
    accounting = cfg.get("AccountingStorageType", "")
    has_dbd = accounting.endswith("slurmdbd")
    return Check("accounting (slurmdbd)", "ok" if has_dbd else "warn",
                 accounting or "none", "" if has_dbd else
                 "without slurmdbd: no sacct history to learn GPU-time from "
                 "(`slurm-marl history import`), and no fair-share")


def _check_rights(cfg: dict[str, str], agent_user: str, admin_level: str | None) -> Check:
    """The agent updates other users' jobs: it must be root, SlurmUser, or an operator or
    administrator in accounting."""
    slurm_user = cfg.get("SlurmUser", "").split("(")[0]
    if agent_user in ("root", slurm_user):
        return Check("agent's rights", "ok", f"runs as {agent_user} (root or SlurmUser)")
    if admin_level and admin_level.lower() in ("operator", "administrator"):
        return Check("agent's rights", "ok", f"{agent_user}: AdminLevel {admin_level}")
    has_dbd = cfg.get("AccountingStorageType", "").endswith("slurmdbd")
    return Check("agent's rights", "missing",
                 f"{agent_user}: " + (f"AdminLevel {admin_level or 'None'}"
                                      if has_dbd else "not root or SlurmUser"),
                 f"`sacctmgr modify user {agent_user} set adminlevel=operator` "
                 "(needs slurmdbd), or run the agent as SlurmUser: it updates other "
                 "users' jobs")


def gather(slurm_conf: Path | None, expect: tuple[list[str], int] | None = None
           ) -> tuple[list[Check], dict]:
    runner = SlurmRunner(slurm_conf, timeout_s=30)
    cfg = parse_show_config(runner.run_checked(["scontrol", "show", "config"]))
    nodes = runner.run_checked(["scontrol", "show", "node", "-o"])
    conf_path = Path(slurm_conf or os.environ.get("SLURM_CONF") or "/etc/slurm/slurm.conf")
    gate_text = installed_gate(conf_path)
    user = pwd.getpwuid(os.geteuid()).pw_name
    level = None
    if cfg.get("AccountingStorageType", "").endswith("slurmdbd"):
        res = runner.run(["sacctmgr", "-n", "-P", "show", "user", user, "format=adminlevel"])
        level = res.stdout.strip().splitlines()[0] if res.ok and res.stdout.strip() else None
    return check(cfg, nodes, gate_text, user, level, expect), cfg


def check_slurm(
    slurm_conf: Annotated[Optional[Path], typer.Option(
        "--slurm-conf", help="slurm.conf of the cluster (default: $SLURM_CONF)")] = None,
    managed: Annotated[Optional[str], typer.Option(
        help="the agent's managed partitions (agent.managed_partitions, comma-separated): "
             "also check that the installed gate gates exactly these")] = None,
    grace_s: Annotated[Optional[int], typer.Option(
        help="with --managed: the agent's grace (agent.grace_s; default 30)")] = None,
    as_json: Annotated[bool, typer.Option("--json", help="Print JSON.")] = False,
) -> None:
    """Say what in this Slurm is ready for the agent, what is missing and how to fix it
    (exit 1 when something the agent needs is missing)."""
    expect = None
    if managed is not None:
        expect = ([p.strip() for p in managed.split(",") if p.strip()],
                  30 if grace_s is None else grace_s)
    elif grace_s is not None:
        typer.echo("error: --grace-s goes with --managed", err=True)
        raise typer.Exit(2)
    try:
        checks, _ = gather(slurm_conf, expect)
    except SlurmError as exc:
        typer.echo(f"error: cannot read Slurm's configuration: {exc}", err=True)
        raise typer.Exit(2)
    missing = [c for c in checks if c.level == "missing"]
    if as_json:
        typer.echo(json.dumps({"ready": not missing, "checks": [asdict(c) for c in checks]},
                              indent=2))
    else:
        mark = {"ok": "ok     ", "warn": "warn   ", "missing": "MISSING"}
        for c in checks:
            typer.echo(f"{mark[c.level]} {c.name}: {c.found}")
            if c.advice and c.level != "ok":
                typer.echo(f"        -> {c.advice}")
        typer.echo("ready for the agent" if not missing else
                   f"not ready: {len(missing)} thing(s) missing")
    raise typer.Exit(1 if missing else 0)
