"""Simulated cluster shapes: nodes x sockets x GPUs per socket, under leaf and spine switches.

A spec string describes one or more partitions joined by ``+``::

    8x2x4                       8 nodes, 2 sockets (GPU groups) of 4 GPUs each
    8x2x4:leaf=4                ... 4 nodes per leaf switch (2 leaves under one spine)
    8x2x4:leaf=4:name=a+4x1x8:name=b    two partitions, "a" and "b"

Options after ``:``: ``leaf=N`` nodes per leaf switch (default: all nodes of the partition
under one leaf), ``name=P`` partition name (default ``gpu``, then ``gpu2``...), ``cores=N``
CPU cores per socket (default max(16, GPU slots per socket)), ``mem=N`` memory per node in
GiB (default 256), ``share=K`` Slurm GPU sharing (shards/MPS): each GPU offered as K slots
(default 1 = whole GPUs). A TOML file says the same (``[[partition]]`` tables with keys
``name``, ``nodes``, ``sockets``, ``gpus_per_socket``, ``cores_per_socket``, ``mem_gib``,
``nodes_per_leaf``, ``share``). A site's own ``slurm.conf`` (a ``*.conf`` file, a file with
``NodeName=`` lines or a folder holding one; gres.conf and topology.conf read from beside it)
is read by ``sim/site_config.py``, which lists what it could not model.

Jobs get CPUs in proportion to their GPU slots (cores per node / slots per node each), so GPUs
stay the binding resource only while a node has at least one core per GPU slot: fewer cores
given explicitly is an error that says which ``cores=`` to give.

Leaves are numbered across partitions; all leaves hang under one spine switch.
"""

from __future__ import annotations

import re
import tomllib
from pathlib import Path

from slurm_marl.sim.cluster_model import (DEFAULT_CORES_PER_SOCKET, ClusterSpecError,
                                          PartitionSpec, SimCluster, build_cluster)
from slurm_marl.sim.site_config import looks_like_slurm_conf, read_site_cluster

__all__ = ["DEFAULT_CORES_PER_SOCKET", "ClusterSpecError", "PartitionSpec", "SimCluster",
           "build_cluster", "parse_cluster"]

_SHAPE = re.compile(r"^(\d+)x(\d+)x(\d+)$")


def parse_cluster(spec: str | Path) -> SimCluster:
    text = str(spec)
    if not text.endswith(".toml") and _is_slurm_conf(text):
        return read_site_cluster(text).cluster
    if text.endswith(".toml") or (Path(text).is_file() and "x" not in Path(text).name):
        return _from_toml(Path(text))
    parts = []
    for i, chunk in enumerate(text.split("+")):
        parts.append(_parse_chunk(chunk.strip(), i, text))
    return build_cluster(parts, text)


def _is_slurm_conf(text: str) -> bool:
    if _SHAPE.match(text.split(":")[0].split("+")[0]):
        return False
    return looks_like_slurm_conf(text)


def _parse_chunk(chunk: str, index: int, whole: str) -> PartitionSpec:
    fields = chunk.split(":")
    m = _SHAPE.match(fields[0])
    if not m:
        raise ClusterSpecError(f"cluster spec {whole!r}: {fields[0]!r} is not "
                               f"NODESxSOCKETSxGPUS_PER_SOCKET (e.g. 8x2x4)")
    opts: dict = {}
    for opt in fields[1:]:
        key, sep, value = opt.partition("=")
        if not sep:
            raise ClusterSpecError(f"cluster spec {whole!r}: option {opt!r} needs key=value")
        opts[key] = value
    name = opts.pop("name", "gpu" if index == 0 else f"gpu{index + 1}")
    mapping = {"leaf": "nodes_per_leaf", "cores": "cores_per_socket", "mem": "mem_gib",
               "share": "share"}
    kwargs = {}
    for key, value in opts.items():
        if key not in mapping:
            raise ClusterSpecError(f"cluster spec {whole!r}: unknown option {key!r} "
                                   f"(known: {', '.join(sorted(mapping))}, name)")
        try:
            kwargs[mapping[key]] = int(value)
        except ValueError:
            raise ClusterSpecError(f"cluster spec {whole!r}: {key}={value!r} is not an "
                                   f"integer") from None
    part = PartitionSpec(name=name, nodes=int(m[1]), sockets=int(m[2]),
                         gpus_per_socket=int(m[3]), **kwargs)
    part.validate(f"cluster spec {whole!r}")
    return part


def _from_toml(path: Path) -> SimCluster:
    try:
        data = tomllib.loads(path.read_text(encoding="utf-8"))
    except OSError as exc:
        raise ClusterSpecError(f"cannot read cluster file {path}: {exc}") from None
    except tomllib.TOMLDecodeError as exc:
        raise ClusterSpecError(f"{path}: invalid TOML: {exc}") from None
    tables = data.get("partition")
    if not isinstance(tables, list) or not tables:
        raise ClusterSpecError(f"{path}: needs at least one [[partition]] table")
    parts = []
    allowed = set(PartitionSpec.__dataclass_fields__)
    for i, table in enumerate(tables):
        unknown = set(table) - allowed
        if unknown:
            raise ClusterSpecError(f"{path}: [[partition]] #{i + 1}: unknown key(s) "
                                   f"{sorted(unknown)}; allowed: {sorted(allowed)}")
        missing = {"nodes", "sockets", "gpus_per_socket"} - set(table)
        if missing:
            raise ClusterSpecError(f"{path}: [[partition]] #{i + 1}: missing {sorted(missing)}")
        table = dict(table)
        table.setdefault("name", "gpu" if i == 0 else f"gpu{i + 1}")
        part = PartitionSpec(**table)
        part.validate(f"{path}: [[partition]] #{i + 1}", cores_hint="cores_per_socket = {}")
        parts.append(part)
    return build_cluster(parts, str(path))
