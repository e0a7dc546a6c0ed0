"""Admin commands over the agent: run, decisions, explain, queues, status, install-plugin.

The read commands open the agent's state store (readable by the admin group only: the
daemon runs with umask 027), so ordinary users cannot see other users' decisions.
"""

from __future__ import annotations

import datetime as dt
import json
import sqlite3
import sys
import time
from contextlib import contextmanager
from pathlib import Path
from typing import Annotated, Optional

import typer
from rich.table import Table

from slurm_marl.console import output_console

ConfigOpt = Annotated[Optional[Path], typer.Option(
    "--config", "-c", help="agent config (default /etc/slurm-marl/config.toml)")]
StoreOpt = Annotated[Optional[Path], typer.Option(
    "--store", help="state store (default: from the config)")]
JsonOpt = Annotated[bool, typer.Option("--json", help="machine-readable output")]


def _fail(exc: BaseException | str) -> typer.Exit:
    """One line on stderr (no traceback); exit status 2: the configuration, profile or
    store cannot be used."""
    text = " ".join(line.strip() for line in str(exc).splitlines() if line.strip())
    typer.echo(f"error: {text or type(exc).__name__}", err=True)
    return typer.Exit(2)


def _load(config: Optional[Path]):
    from slurm_marl.daemon.config import ConfigError, load_config

    try:
        return load_config(config)
    except ConfigError as exc:
        raise _fail(exc)


def _store(config: Optional[Path], store: Optional[Path]):
    """The store, opened read-only: these commands never create, migrate or write it."""
    from slurm_marl.daemon.store import Store, StoreError

    path = store if store is not None else _load(config).store_path
    try:
        return Store.open_readonly(path)
    except StoreError as exc:
        raise _fail(exc)


@contextmanager
def _reading(st):
    """A store that opened but fails while read (damaged pages, missing tables): the same
    one-line error as one that does not open."""
    try:
        yield st
    except sqlite3.Error as exc:
        raise _fail(f"cannot read state store {st.path}: {exc}")


def format_time(ts: float | None) -> str:
    if not ts:
        return "-"
    return dt.datetime.fromtimestamp(ts).strftime("%Y-%m-%d %H:%M:%S")


def describe_decision(d: dict) -> str:
    p = d.get("payload") or {}
    kind = d["kind"]
    if kind == "SetPriority":
        return f"priority {p.get('priority')} (queue {p.get('queue')})"
    if kind == "Place":
        allocs = ", ".join(f"{a['node']}:g{a['group']}x{a['gpus']}" for a in p.get("allocs", []))
        return f"{'start on' if p.get('start_now') else 'wait for'} {allocs or p.get('nodes')}"
    if kind == "Reserve":
        return f"reserve {','.join(p.get('nodes', []))} as {p.get('name')}"
    if kind == "EndReservation":
        return f"end reservation {p.get('name')}"
    if kind == "Defer":
        return f"keep waiting {p.get('seconds', 0):.0f} s (lease)"
    if kind == "Release":
        return "start as Slurm decides (StartTime=now)" if d.get("status") == "ok" \
            else "left to Slurm"
    return kind.lower()


def run(config: ConfigOpt = None,
        shadow: bool = typer.Option(False, help="decide and log, write nothing to Slurm"),
        cycles: Optional[int] = typer.Option(None, help="stop after this many cycles")) -> None:
    """Run the agent (what systemd starts)."""
    from dataclasses import replace

    from slurm_marl.daemon.leader import LockError
    from slurm_marl.daemon.loop import run_daemon, setup_logging
    from slurm_marl.daemon.store import StoreError
    from slurm_marl.history.records import HistoryError, ModelError
    from slurm_marl.policy.profile import ProfileError

    from slurm_marl.daemon.config import ConfigError, check_slurm_conf

    cfg = _load(config)
    try:
        check_slurm_conf(cfg)
    except ConfigError as exc:
        raise _fail(exc)
    if shadow:
        cfg = replace(cfg, agent=replace(cfg.agent, shadow=True))
    setup_logging(cfg.log.level)
    try:
        raise typer.Exit(run_daemon(cfg, max_cycles=cycles))
    except (StoreError, ProfileError, ModelError, HistoryError, LockError) as exc:
        raise _fail(exc)


def decisions(config: ConfigOpt = None, store: StoreOpt = None,
              job: Optional[int] = typer.Option(None, help="only this job"),
              kind: Optional[str] = typer.Option(None, help="SetPriority, Place, Reserve, ..."),
              since: Optional[float] = typer.Option(None, help="only the last N minutes"),
              limit: int = typer.Option(50, min=1, max=100000),
              json_output: JsonOpt = False) -> None:
    """Recent decisions with their reasons and Slurm's answers."""
    st = _store(config, store)
    since_s = time.time() - since * 60 if since else None
    with _reading(st):
        rows = st.log.decisions(job_id=job, kind=kind, since_s=since_s, limit=limit)
    if json_output:
        json.dump(rows, sys.stdout, indent=2)
        sys.stdout.write("\n")
        return
    table = Table(title=f"Decisions ({len(rows)})")
    for col in ("time", "cycle", "job", "decision", "plugin", "reason", "Slurm"):
        table.add_column(col)
    for r in rows:
        answer = r["status"] + (f": {r['message']}" if r["message"] else "")
        table.add_row(format_time(r["time_s"]), str(r["cycle"]), str(r["job_id"]),
                      describe_decision(r), r["plugin"] or "", r["reason"] or "", answer)
    output_console().print(table)


def explain(job_id: int, config: ConfigOpt = None, store: StoreOpt = None,
            json_output: JsonOpt = False) -> None:
    """Why this job got its nodes, GPU group and priority."""
    st = _store(config, store)
    with _reading(st):
        rec = st.records.get([job_id]).get(job_id)
        rows = st.log.decisions(job_id=job_id, limit=200)
    if rec is None and not rows:
        typer.echo(f"job {job_id}: the agent has no record of it (not in a managed "
                   "partition, or older than the store's retention)", err=True)
        raise typer.Exit(1)
    latest: dict[str, dict] = {}
    repairs = [r for r in rows if r["plugin"] == "repair"]   # GPU requests given back
    for r in rows:  # newest first
        if r["plugin"] != "repair":
            latest.setdefault(r["kind"], r)
    info = {"job_id": job_id, "record": vars(rec) if rec else None,
            "latest": latest, "repairs": repairs, "history": rows}
    if json_output:
        json.dump(info, sys.stdout, indent=2, default=str)
        sys.stdout.write("\n")
        return
    con = output_console()
    con.print(f"[bold]job {job_id}[/]")
    if rec:
        con.print(f"  user {rec.user}, name {rec.name}, partition {rec.partition}, "
                  f"{rec.num_gpus} GPU(s), state {rec.last_state}")
        running = ""
        if rec.run_start_s and rec.last_state == "RUNNING":
            running = f" + current run since {format_time(rec.run_start_s)}"
        con.print(f"  attained service {rec.attained_gpu_s:.0f} GPU-s in finished runs"
                  f"{running}; last run {rec.last_run_s:.0f} s; preempted {rec.preemptions}x")
        con.print(f"  2D-LAS queue {rec.queue if rec.queue is not None else '-'}; waiting "
                  f"since {format_time(rec.queue_since_s)}")
    for kind in ("SetPriority", "Place", "Reserve", "Preempt", "Defer", "EndReservation",
                 "Release"):
        r = latest.get(kind)
        if not r:
            continue
        con.print(f"  [bold]{kind}[/] at {format_time(r['time_s'])}: {describe_decision(r)}")
        con.print(f"    by {r['plugin'] or '-'}: {r['reason'] or '-'}")
        scores = (r.get("payload") or {}).get("scores") or []
        if scores:
            con.print("    scores: " + ", ".join(f"{k} {v:.3f}" for k, v in scores))
        con.print(f"    Slurm: {r['status']}{': ' + r['message'] if r['message'] else ''}")
    for r in repairs:
        con.print(f"  [bold]GPU request repaired[/] at {format_time(r['time_s'])}: "
                  f"{r['reason']}")


def queues(config: ConfigOpt = None, store: StoreOpt = None,
           json_output: JsonOpt = False) -> None:
    """Pending jobs by 2D-LAS queue, as the agent last ranked them."""
    st = _store(config, store)
    with _reading(st):
        recs = [r for r in st.records.get().values()
                if r.last_state == "PENDING" and r.finished_s is None]
        guarded = st.guard.get()
    recs.sort(key=lambda r: (r.queue if r.queue is not None else 99, r.queue_since_s or 0,
                             r.job_id))
    if json_output:
        json.dump([{**vars(r), "guard": guarded.get(r.job_id)} for r in recs], sys.stdout,
                  indent=2)
        sys.stdout.write("\n")
        return
    table = Table(title="2D-LAS queues (pending jobs)")
    for col in ("queue", "job", "user", "GPUs", "attained GPU-s", "waiting since",
                "preemptions", "guard"):
        table.add_column(col)
    for r in recs:
        g = guarded.get(r.job_id)
        mark = "-" if g is None else (
            "protected" + (f": Slurm alone from {format_time(g['shadow_start_s'])}"
                           if g.get("shadow_start_s") is not None else ""))
        table.add_row(str(r.queue if r.queue is not None else "-"), str(r.job_id), r.user,
                      str(r.num_gpus), f"{r.attained_gpu_s:.0f}", format_time(r.queue_since_s),
                      str(r.preemptions), mark)
    output_console().print(table)


def status(config: ConfigOpt = None, store: StoreOpt = None,
           json_output: JsonOpt = False) -> None:
    """Is the agent cycling, and how are its writes going."""
    from slurm_marl.daemon.health import read_health, verdict

    st = _store(config, store)
    with _reading(st):
        cycles = st.log.cycles(limit=20)
    last = cycles[0] if cycles else None
    now = time.time()
    cfg = _load(config) if store is None or config is not None else None
    health = read_health(st.path)
    info = {"last_cycle": last, "recent_errors": [c for c in cycles if c["error"]][:5],
            "age_s": (now - last["time_s"]) if last else None,
            "store": str(st.path),
            # health (daemon/health.py): the store's last cycle or, newer, the agent's side
            # file (written even when the store cannot be)
            **verdict(last, health, now, cfg.agent.interval_s if cfg else None),
            "agent_report": health}
    if cfg is not None:
        info["agent_lock"] = _lock_state(cfg)
    if json_output:
        json.dump(info, sys.stdout, indent=2)
        sys.stdout.write("\n")
        return
    if "agent_lock" in info:
        typer.echo(_lock_line(info["agent_lock"]))
    typer.echo("health: " + ("ok" if info["healthy"] else "FAILING: "
                             + "; ".join(info["problems"])))
    for text in info["warnings"]:
        typer.echo(f"warning: {text}")
    if not last:
        typer.echo("the agent has not run a cycle yet")
        raise typer.Exit(1)
    typer.echo(f"last cycle {last['cycle']} at {format_time(last['time_s'])} "
               f"({info['age_s']:.0f} s ago), {last['duration_s']:.3f} s: "
               f"{last['pending']} pending, {last['running']} running, "
               f"{last['decisions']} decisions, {last['written']} written, "
               f"{last['refused']} refused")
    if last.get("protected") is not None:
        typer.echo(f"{last['protected']} job(s) protected by the Slurm-alone guard (waiting "
                   "past the start Slurm's own order would have given them, or running "
                   "after it): `slurm-marl queues` marks them")
    for c in info["recent_errors"]:
        typer.echo(f"  cycle {c['cycle']} at {format_time(c['time_s'])}: {c['error']}")


def _lock_state(cfg) -> dict:
    """The cluster lock of ``cfg`` (daemon/leader.py): its path, whether an agent holds it
    now, and who the holder said it is."""
    from slurm_marl.daemon.leader import (LockError, cluster_lock_path, lock_is_held,
                                          read_holder)

    try:
        path = cluster_lock_path(cfg.agent.lock_file, cfg.slurm.slurm_conf)
    except LockError as exc:
        return {"path": None, "held": None, "holder": None, "error": str(exc)}
    held = lock_is_held(path)
    return {"path": str(path), "held": held,
            "holder": read_holder(path) if held else None,
            "error": None if held is not None else "cannot open the lock file"}


def _lock_line(state: dict) -> str:
    from slurm_marl.daemon.leader import holder_text

    if state["path"] is None or state["held"] is None:
        return f"agent lock {state['path'] or '?'}: {state['error']}"
    if state["held"]:
        return f"agent lock {state['path']}: held by {holder_text(state['holder'])}"
    return f"agent lock {state['path']}: free (no agent is acting on this cluster)"


def _scontrol_version(slurm_conf: Path) -> str:
    """``scontrol --version`` ("slurm 24.11.5"); a PluginError saying how to give it."""
    from slurm_marl.slurm_integration.clients import slurm_version
    from slurm_marl.slurm_integration.plugin import PluginError
    from slurm_marl.slurm_integration.runner import SlurmError, SlurmRunner, SlurmUnavailable

    if not slurm_conf.exists():  # scontrol would retry reading it for a minute
        raise PluginError(f"{slurm_conf} does not exist, so scontrol cannot tell the Slurm "
                          "version; give --slurm-version")
    try:
        return slurm_version(SlurmRunner(slurm_conf, timeout_s=15))
    except SlurmUnavailable as exc:
        raise PluginError(f"cannot run scontrol --version ({exc.message}); give "
                          "--slurm-version") from None
    except SlurmError as exc:
        raise PluginError(f"scontrol --version failed ({exc.message}); give "
                          "--slurm-version") from None


def _print_ip_allow(cfg, slurm_conf: Path, allow: list[str]) -> None:
    """The drop-in for the unit's IPAddressAllow (daemon/ipallow.py) on stdout."""
    from slurm_marl.daemon import ipallow
    from slurm_marl.topology.errors import TopologyConfigError

    try:
        peers = ipallow.slurmctld_peers(slurm_conf)
        peers += ipallow.name_servers()
        peers += [ipallow.Peer(host, "--allow") for host in allow]
        text = ipallow.render_dropin(peers, f"{slurm_conf} and {ipallow.RESOLV_CONF}")
    except (ipallow.AllowError, TopologyConfigError, OSError) as exc:
        raise _fail(exc)
    note = ipallow.metrics_note(cfg.metrics.address, cfg.metrics.port, cfg.metrics.enabled)
    if note and not allow:
        typer.echo(f"warning: {note}", err=True)
    typer.echo(text, nl=False)


def install_plugin(config: ConfigOpt = None,
                   slurm_conf: Annotated[Optional[Path], typer.Option(
                       help="slurm.conf (default: from the config)")] = None,
                   agent_uid: list[int] = typer.Option([], help="uid the agent runs as "
                                                       "(may move start times)"),
                   print_only: bool = typer.Option(False, "--print",
                                                   help="print the script, write nothing"),
                   slurm_version: Annotated[Optional[str], typer.Option(
                       help="the site's Slurm version, e.g. 24.11.5 (default: "
                            "`scontrol --version`); it decides whether the gate forces "
                            "GRES enforce-binding (22.05 only)")] = None,
                   ip_allow: bool = typer.Option(
                       False, "--ip-allow",
                       help="print the unit's IPAddressAllow drop-in instead (slurmctld "
                            "hosts of slurm.conf, name servers, --allow), write nothing"),
                   allow: list[str] = typer.Option(
                       [], help="with --ip-allow: also allow this host, address or network "
                                "(Prometheus servers, an LDAP server)")
                   ) -> None:
    """Write the fail-open gate (job_submit.lua) beside slurm.conf (--ip-allow: print the
    unit's IP allow list drop-in)."""
    from slurm_marl.slurm_integration.plugin import (PluginError, install_job_submit_lua,
                                                     render_job_submit_lua)

    cfg = _load(config)
    if ip_allow:
        _print_ip_allow(cfg, slurm_conf or Path(cfg.slurm.slurm_conf), allow)
        return
    if allow:
        raise _fail("--allow goes with --ip-allow")
    try:
        version = slurm_version or _scontrol_version(slurm_conf or Path(cfg.slurm.slurm_conf))
        text = render_job_submit_lua(list(cfg.agent.managed_partitions), cfg.agent.grace_s,
                                     agent_uid, slurm_version=version)
        if print_only:
            typer.echo(text)
            return
        target, todo = install_job_submit_lua(slurm_conf or Path(cfg.slurm.slurm_conf), text)
    except (PluginError, OSError) as exc:
        typer.echo(f"error: {exc}", err=True)
        raise typer.Exit(2)
    typer.echo(f"wrote {target}")
    for step in todo:
        typer.echo(f"then: {step}")
