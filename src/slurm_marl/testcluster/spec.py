"""The shape of a local cluster (``ClusterSpec``) and the Slurm configuration files written
for it (``render_configs``): slurm.conf, gres.conf (fake GPUs typed per socket), topology.conf,
and for a chroot's Slurm its ``PluginDir`` and a cgroup.conf."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from slurm_marl.slurm_integration.text import collapse_hosts
from slurm_marl.testcluster import accounting as acct
from slurm_marl.testcluster import versions


@dataclass(frozen=True)
class ClusterSpec:
    """Shape of the local cluster: ``nodes`` x ``sockets`` x ``gpus_per_socket`` fake GPUs."""

    nodes: int = 4
    sockets: int = 2
    cores_per_socket: int = 4
    gpus_per_socket: int = 2
    nodes_per_leaf: int = 2
    memory_mib: int = 16000
    partition: str = "gpu"
    # Extra partitions as (name, node indices starting at 1); the main partition has all.
    extra_partitions: tuple[tuple[str, tuple[int, ...]], ...] = ()
    sched_interval_s: int = 5
    job_submit_lua: str | None = None
    extra_slurm_conf: str = ""
    # Slurm's credential lifetime, which is also how long a requeued job waits before it
    # may start again (Slurm's default: 120 s).
    cred_expire_s: int | None = None
    # slurmdbd + a private MariaDB on loopback, so sacct and fair-share work
    accounting: bool = False
    # None: the host's Slurm (22.05); "24.11" / "26.05": that Slurm from a Debian chroot
    slurm_version: str | None = None
    # Nodes with their own slurmd: the first ``slurmd_nodes`` (None: all). The others are
    # stand-in nodes for scale measurements: configured in one hostlist line, their address
    # the first node's slurmd (which answers slurmctld's pings for them), resumed to idle by
    # the harness. They take allocations that start no process (``salloc --no-shell``);
    # a job script sent to one would run on the first node's slurmd, so tests and benchmarks
    # give them none.
    slurmd_nodes: int | None = None
    # Host folders a chroot's Slurm must see at the same paths (bound read-only into the
    # chroot), e.g. the interpreter and virtualenv a job runs; nothing for the host's Slurm.
    host_paths: tuple[str, ...] = ()

    def __post_init__(self) -> None:
        object.__setattr__(self, "slurm_version", versions.normalise(self.slurm_version))
        if self.slurmd_nodes is not None and not 1 <= self.slurmd_nodes <= self.nodes:
            raise ValueError(f"slurmd_nodes must be between 1 and nodes ({self.nodes}), "
                             f"got {self.slurmd_nodes}")

    @property
    def node_names(self) -> list[str]:
        return [f"n{i}" for i in range(1, self.nodes + 1)]

    @property
    def daemon_node_names(self) -> list[str]:
        """The nodes that get a slurmd of their own."""
        names = self.node_names
        return names if self.slurmd_nodes is None else names[:self.slurmd_nodes]

    @property
    def stand_in_node_names(self) -> list[str]:
        return self.node_names[len(self.daemon_node_names):]

    @property
    def gpus_per_node(self) -> int:
        return self.sockets * self.gpus_per_socket

    @property
    def leaves(self) -> dict[str, list[str]]:
        names = self.node_names
        per = max(1, self.nodes_per_leaf)
        return {f"leaf{k // per + 1}": names[k:k + per] for k in range(0, len(names), per)}


def render_configs(spec: ClusterSpec, root: Path, ctld_port: int, node_ports: list[int],
                   hostname: str, acct_ports: acct.AccountingPorts | None = None,
                   plugin_dir: Path | None = None) -> dict[str, str]:
    """The text of slurm.conf, gres.conf and topology.conf for ``spec`` under ``root``
    (accounting through slurmdbd on ``acct_ports`` when given). With a chroot's
    ``plugin_dir`` also ``PluginDir=`` and a cgroup.conf turning cgroups off (Slurm >= 23.11
    stops on a host whose /sys/fs/cgroup its chroot cannot use)."""
    gres_types = ",".join(f"gpu:s{s}:{spec.gpus_per_socket}" for s in range(spec.sockets))
    lines = [
        "# written by slurm-marl's local cluster harness",
        "ClusterName=slurmmarl",
        f"SlurmctldHost={hostname}(127.0.0.1)",
        f"SlurmctldPort={ctld_port}",
        "CommunicationParameters=NoInAddrAny",
        "AuthType=auth/munge",
        "CredType=cred/munge",
        f"AuthInfo=socket={root}/munge/munge.sock"
        + (f",cred_expire={spec.cred_expire_s}" if spec.cred_expire_s else ""),
        "SlurmUser=root",
        "SlurmdUser=root",
        f"StateSaveLocation={root}/state",
        f"SlurmdSpoolDir={root}/spool/%n",
        f"SlurmctldPidFile={root}/run/slurmctld.pid",
        f"SlurmdPidFile={root}/run/slurmd-%n.pid",
        f"SlurmctldLogFile={root}/log/slurmctld.log",
        f"SlurmdLogFile={root}/log/slurmd-%n.log",
        "SlurmctldDebug=info",
        "SlurmdDebug=info",
        "MailProg=/bin/true",
        "ProctrackType=proctrack/pgid",
        "TaskPlugin=task/none",
        *(acct.slurm_conf_lines(root, acct_ports) if acct_ports else
          ["JobAcctGatherType=jobacct_gather/none",
           "AccountingStorageType=accounting_storage/none"]),
        "MpiDefault=none",
        "SchedulerType=sched/backfill",
        f"SchedulerParameters=sched_interval={spec.sched_interval_s},"
        f"bf_interval={spec.sched_interval_s},batch_sched_delay=0",
        "SelectType=select/cons_tres",
        "SelectTypeParameters=CR_Core_Memory",
        "DefMemPerCPU=1000",
        "PriorityType=priority/basic",
        "GresTypes=gpu",
        "TopologyPlugin=topology/tree",
        "SlurmdParameters=config_overrides",
        "ReturnToService=2",
        "JobRequeue=1",
        "MinJobAge=300",
        "MaxJobCount=20000",
        "KillWait=2",
        # stand-in nodes' pings all go through one slurmd, too slowly for a timeout at
        # 10,000 nodes: none (Slurm never sets a node DOWN for not answering)
        f"SlurmdTimeout={0 if spec.stand_in_node_names else 30}",
        "InactiveLimit=0",
        *([f"PluginDir={plugin_dir}"] if plugin_dir else []),
    ]
    if spec.job_submit_lua:
        lines.append("JobSubmitPlugins=lua")
    if spec.extra_slurm_conf:
        lines.append(spec.extra_slurm_conf.strip())
    shape = (f"Sockets={spec.sockets} CoresPerSocket={spec.cores_per_socket} ThreadsPerCore=1 "
             f"RealMemory={spec.memory_mib} Gres={gres_types} State=UNKNOWN")
    for name, port in zip(spec.daemon_node_names, node_ports):
        lines.append(f"NodeName={name} NodeHostname={name} NodeAddr=127.0.0.1 Port={port} {shape}")
    stand_ins = spec.stand_in_node_names
    if stand_ins:
        lines.append(f"NodeName={collapse_hosts(stand_ins)} NodeAddr=127.0.0.1 "
                     f"Port={node_ports[0]} {shape}")
    all_nodes = collapse_hosts(spec.node_names)
    lines.append(f"PartitionName={spec.partition} Nodes={all_nodes} Default=YES "
                 "MaxTime=INFINITE State=UP")
    for pname, idx in spec.extra_partitions:
        lines.append(f"PartitionName={pname} Nodes={','.join(f'n{i}' for i in idx)} "
                     "MaxTime=INFINITE State=UP")

    gres = ["# GPU groups: each socket's GPUs get their own type and core binding", "AutoDetect=off"]
    for s in range(spec.sockets):
        first, last = s * spec.gpus_per_socket, (s + 1) * spec.gpus_per_socket - 1
        cores = f"{s * spec.cores_per_socket}-{(s + 1) * spec.cores_per_socket - 1}"
        files = f"{root}/dev/nvidia[{first}-{last}]" if last > first else f"{root}/dev/nvidia{first}"
        gres.append(f"NodeName={all_nodes} Name=gpu Type=s{s} File={files} Cores={cores}")

    topo = [f"SwitchName={leaf} Nodes={collapse_hosts(nodes)}"
            for leaf, nodes in spec.leaves.items()]
    leaves = list(spec.leaves)
    topo.append(f"SwitchName=spine Switches={','.join(leaves)}")
    confs = {"slurm.conf": "\n".join(lines) + "\n", "gres.conf": "\n".join(gres) + "\n",
             "topology.conf": "\n".join(topo) + "\n"}
    if plugin_dir:
        confs["cgroup.conf"] = "CgroupPlugin=disabled\n"
    return confs
