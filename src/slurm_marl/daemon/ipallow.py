"""The unit's IP allow list: a drop-in with the addresses the agent must reach.

The shipped unit says ``IPAddressDeny=any`` and ``IPAddressAllow=localhost``. systemd applies
them to the whole unit, the Slurm commands the agent runs included, and checks the peer's
address (destination going out, source coming in). So a site adds, in a drop-in:

- every slurmctld of slurm.conf (``SlurmctldHost``, the primary and backups, or the older
  ``ControlMachine``/``ControlAddr``/``BackupController``/``BackupAddr``), all addresses its
  name resolves to: squeue, sinfo and scontrol connect there;
- the name servers of ``/etc/resolv.conf`` (the commands resolve slurmctld's name);
- whatever the admin names (``extra``): Prometheus servers when the metrics listen on a
  non-loopback address, a directory server NSS reaches over IP.

The agent calls no ``sacct``/``sacctmgr`` at run time, so slurmdbd needs no entry. Loopback
addresses are left out: ``localhost`` is in the unit already.
"""

from __future__ import annotations

import ipaddress
import re
import socket
from dataclasses import dataclass
from pathlib import Path

from slurm_marl.topology.confparse import read_config_file

DROPIN = "/etc/systemd/system/slurm-marl.service.d/ipaddress.conf"
RESOLV_CONF = "/etc/resolv.conf"


class AllowError(ValueError):
    """A host that does not resolve, or a slurm.conf naming no slurmctld."""


@dataclass(frozen=True)
class Peer:
    """One name to allow, why, and where it was found."""

    host: str
    why: str


def _host_of(value: str) -> str:
    """``SlurmctldHost=ctl1(10.0.0.1)``: the address in parentheses, else the name."""
    m = re.fullmatch(r"\s*([^()\s]+)\s*(?:\(\s*([^()\s]+)\s*\))?\s*", value)
    if not m:
        raise AllowError(f"cannot read SlurmctldHost={value}")
    return m.group(2) or m.group(1)


def slurmctld_peers(slurm_conf: str | Path) -> list[Peer]:
    """Every slurmctld slurm.conf names, primary first, each with its ``path:line``."""
    peers: list[Peer] = []
    legacy: dict[str, tuple[str, str]] = {}
    for entry in read_config_file(slurm_conf).entries:
        for key, value in entry.pairs:
            k = key.lower()
            if k == "slurmctldhost":
                peers.append(Peer(_host_of(value), f"SlurmctldHost={value} ({entry.source})"))
            elif k in ("controlmachine", "controladdr", "backupcontroller", "backupaddr"):
                legacy[k] = (value, f"{key}={value} ({entry.source})")
    if not peers:
        for name, addr in (("controlmachine", "controladdr"),
                           ("backupcontroller", "backupaddr")):
            chosen = legacy.get(addr) or legacy.get(name)
            if chosen:
                peers.append(Peer(_host_of(chosen[0]), chosen[1]))
    if not peers:
        raise AllowError(f"{slurm_conf} names no SlurmctldHost (nor ControlMachine)")
    return peers


def name_servers(resolv_conf: str | Path = RESOLV_CONF) -> list[Peer]:
    """The ``nameserver`` lines of resolv.conf (none if it cannot be read)."""
    try:
        text = Path(resolv_conf).read_text()
    except OSError:
        return []
    return [Peer(parts[1], f"nameserver in {resolv_conf}")
            for parts in (line.split() for line in text.splitlines())
            if len(parts) >= 2 and parts[0] == "nameserver"]


def addresses(host: str) -> list[str]:
    """An address or network as given; a name resolved to all its addresses."""
    try:
        return [str(ipaddress.ip_network(host, strict=False))
                if "/" in host else str(ipaddress.ip_address(host))]
    except ValueError:
        pass
    try:
        infos = socket.getaddrinfo(host, None, proto=socket.IPPROTO_TCP)
    except (socket.gaierror, UnicodeError) as exc:
        reason = exc.strerror if isinstance(exc, socket.gaierror) else str(exc)
        raise AllowError(f"{host} does not resolve ({reason})") from None
    return list(dict.fromkeys(str(ipaddress.ip_address(info[4][0].split("%")[0]))
                              for info in infos))


def _loopback(addr: str) -> bool:
    return ipaddress.ip_network(addr, strict=False).is_loopback


def render_dropin(peers: list[Peer], sources: str) -> str:
    """The drop-in: one commented ``IPAddressAllow=`` line per peer with addresses to add."""
    lines = [f"# {DROPIN}", f"# written by `slurm-marl install-plugin --ip-allow` from {sources}",
             "# The unit allows localhost; these are the other addresses the agent and the",
             "# Slurm commands it runs must reach. Re-run after changing them.",
             "[Service]"]
    seen: set[str] = set()
    for peer in peers:
        try:
            found = addresses(peer.host)
        except AllowError as exc:
            raise AllowError(f"{exc}: {peer.why}") from None
        new = [a for a in found if a not in seen and not _loopback(a)]
        seen.update(found)
        if new:
            lines.append(f"# {peer.host}: {peer.why}")
            lines.append("IPAddressAllow=" + " ".join(new))
        else:
            lines.append(f"# {peer.host}: {peer.why}: loopback or listed above, nothing to add")
    return "\n".join(lines) + "\n"


def metrics_note(address: str, port: int, enabled: bool) -> str | None:
    """A warning when the metrics listen beyond loopback: scrapers need an entry."""
    if not enabled:
        return None
    try:
        if all(_loopback(a) for a in addresses(address)):
            return None
    except AllowError:
        pass
    return (f"metrics listen on {address}:{port}: name your Prometheus servers with --allow, "
            "or IPAddressDeny drops their requests")
