"""gres.conf: which device files a node's GPUs are, their type, their cores and links.

Keys (gres.conf(5), Slurm 22.05): ``NodeName`` (hostlist; a line without it applies to every
node that reads the file, so on a shared file to all nodes), ``Name``, ``Type``, ``File``
(bracket ranges such as ``/dev/nvidia[0-3]``), ``MultipleFiles`` (several files forming one
device), ``Count`` (K/M/G suffixes; with ``File`` it must equal the number of files),
``Cores`` (Slurm core indices, e.g. ``0-3``; ``CPUs`` is the pre-17.11 spelling), ``Links``
(one entry per device index: -1 = itself, 0 = no link, >0 = number of links; only on a line
with a single device), ``Flags`` and ``AutoDetect`` (nvml, nvidia, rsmi, oneapi, nrt, off).

The ``Gres=`` strings of slurm.conf and ``scontrol show node`` (``gpu:s0:2(S:0)``) are read
by ``slurm_marl.slurm_integration.text`` (``GresSpec``, ``parse_gres_list``);
``require_gres_list`` here names the config line that holds a bad one.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from slurm_marl.slurm_integration.text import GresSpec, parse_gres_list
from slurm_marl.topology.confparse import (ConfigEntry, ConfigText, IncludeDirective,
                                           SourceLine, expand_hosts, parse_config_text,
                                           parse_count, parse_index_ranges, read_config_file)

_GRES_KEYS = {"autodetect", "count", "cores", "cpus", "file", "flags", "links",
              "multiplefiles", "name", "nodename", "type"}
AUTODETECT_VALUES = ("nvml", "nvidia", "rsmi", "oneapi", "nrt", "off")


@dataclass(frozen=True)
class GresLine:
    """One gres.conf line that declares resources (not a bare ``AutoDetect=`` line).

    ``node_names`` is None for a line without ``NodeName=``: it applies to every node.
    ``files`` are the expanded device files, one per device; for ``MultipleFiles`` the
    device is one entry holding all its files joined by ``,``.
    """

    name: str
    node_names: tuple[str, ...] | None = None
    type: str | None = None
    files: tuple[str, ...] = ()
    count: int = 1
    cores: tuple[int, ...] = ()
    links: tuple[int, ...] = ()
    flags: tuple[str, ...] = ()
    autodetect: str | None = None
    source: SourceLine | None = None

    def applies_to(self, node_name: str) -> bool:
        return self.node_names is None or node_name in self.node_names


@dataclass(frozen=True)
class GresConf:
    path: str
    lines: tuple[GresLine, ...]
    autodetect: str | None = None
    node_autodetect: tuple[tuple[tuple[str, ...], str], ...] = ()
    includes: tuple[IncludeDirective, ...] = ()

    def lines_for(self, node_name: str, name: str = "gpu") -> tuple[GresLine, ...]:
        return tuple(line for line in self.lines
                     if line.name == name and line.applies_to(node_name))

    def autodetect_for(self, node_name: str) -> str | None:
        for names, mode in self.node_autodetect:
            if node_name in names:
                return mode
        return self.autodetect


def _autodetect_value(entry: ConfigEntry) -> str:
    value = (entry.get("AutoDetect") or "").strip().lower()
    if value not in AUTODETECT_VALUES:
        raise entry.error(f"AutoDetect={value!r}: expected one of {', '.join(AUTODETECT_VALUES)}")
    return value


def _files_of(entry: ConfigEntry) -> tuple[str, ...]:
    file_text = entry.get("File")
    multiple_text = entry.get("MultipleFiles")
    if file_text and multiple_text:
        raise entry.error("File= and MultipleFiles= cannot be on the same line")
    if file_text:
        files = expand_hosts(file_text, entry, "File")
        for f in files:
            if not f.startswith("/"):
                raise entry.error(f"File={file_text!r}: {f!r} is not an absolute path")
        return files
    if multiple_text:
        files = expand_hosts(multiple_text, entry, "MultipleFiles")
        return (",".join(files),)
    return ()


def _gres_line_from_entry(entry: ConfigEntry) -> GresLine:
    name = (entry.get("Name") or "").strip()
    if not name:
        raise entry.error("a gres.conf line needs Name= (or only AutoDetect=)")
    node_text = entry.get("NodeName")
    node_names = expand_hosts(node_text, entry, "NodeName") if node_text else None
    if node_text is not None and not node_names:
        raise entry.error("NodeName= is empty")
    files = _files_of(entry)
    count_text = entry.get("Count")
    count = parse_count(count_text, entry, "Count") if count_text else max(1, len(files))
    if files and count_text and count != len(files):
        raise entry.error(f"Count={count_text} but File= names {len(files)} device(s)")
    cores_text = entry.get("Cores") or entry.get("CPUs")
    cores = parse_index_ranges(cores_text.strip("[]"), entry, "Cores") if cores_text else ()
    links: tuple[int, ...] = ()
    links_text = entry.get("Links")
    if links_text:
        try:
            links = tuple(int(x) for x in links_text.split(","))
        except ValueError:
            raise entry.error(f"Links={links_text!r}: expected integers such as -1,2,0,0") \
                from None
        if any(x < -1 or x > 1024 for x in links):
            raise entry.error(f"Links={links_text!r}: values range from -1 to 1024")
        if len(files) != 1:
            raise entry.error("Links= needs exactly one device file on its line")
    flags_text = entry.get("Flags") or ""
    flags = tuple(f.strip() for f in flags_text.split(",") if f.strip())
    autodetect = _autodetect_value(entry) if entry.has("AutoDetect") else None
    gres_type = (entry.get("Type") or "").strip() or None
    return GresLine(name=name, node_names=node_names, type=gres_type, files=files, count=count,
                    cores=cores, links=links, flags=flags, autodetect=autodetect,
                    source=entry.source)


def gres_from_config(config: ConfigText) -> GresConf:
    lines: list[GresLine] = []
    autodetect: str | None = None
    node_autodetect: list[tuple[tuple[str, ...], str]] = []
    for entry in config.entries:
        unknown = set(entry.keys_lower()) - _GRES_KEYS
        if unknown:
            raise entry.error(f"unknown gres.conf key(s): {', '.join(sorted(unknown))}")
        keys = set(entry.keys_lower())
        if keys == {"autodetect"}:
            autodetect = _autodetect_value(entry)
        elif keys == {"nodename", "autodetect"}:
            names = expand_hosts(entry.get("NodeName") or "", entry, "NodeName")
            node_autodetect.append((names, _autodetect_value(entry)))
        else:
            line = _gres_line_from_entry(entry)
            if line.autodetect is not None:  # "NodeName=tux3 AutoDetect=off Name=gpu ..."
                if line.node_names is None:
                    autodetect = line.autodetect
                else:
                    node_autodetect.append((line.node_names, line.autodetect))
            lines.append(line)
    return GresConf(path=config.path, lines=tuple(lines), autodetect=autodetect,
                    node_autodetect=tuple(node_autodetect), includes=config.includes)


def parse_gres_conf_text(text: str, path: str = "gres.conf") -> GresConf:
    return gres_from_config(parse_config_text(text, path))


def parse_gres_conf(path: str | Path) -> GresConf:
    return gres_from_config(read_config_file(path))


def require_gres_list(text: str, entry: ConfigEntry, key: str = "Gres") -> tuple[GresSpec, ...]:
    specs = parse_gres_list(text)
    if specs is None:
        raise entry.error(f"{key}={text!r}: expected a list such as gpu:4 or gpu:s0:2,gpu:s1:2")
    return specs


__all__ = ["GresSpec", "GresLine", "GresConf", "parse_gres_conf", "parse_gres_conf_text",
           "require_gres_list"]
