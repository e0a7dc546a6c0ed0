"""How the cluster is wired: Slurm's files, live ``scontrol`` views, node probes, one graph.

Parsers (pure, typed, frozen results; every error is a ``TopologyConfigError`` naming the
file and line): ``topology_conf``, ``slurm_conf``, ``gres_conf``, ``scontrol`` (live views),
``hwloc``. ``probe`` runs on compute nodes (NVML / hwloc / sysfs). ``graph`` merges it all
into a networkx graph with the helpers placement needs; ``layout`` gives the GPU groups the
Slurm layer puts into ``Node.gpu_groups``. ``features`` (imports torch, so import it
explicitly) turns graph + snapshot into per-level tensors for the learned models.
"""

from slurm_marl.topology.errors import TopologyConfigError
from slurm_marl.topology.graph import (DEFAULT_BANDWIDTH_GBPS, GroupFreeGpus,
                                       build_topology_graph, free_gpus_by_group, gpu_groups_of,
                                       hop_distance, nodes_under_switch, partitions_of)
from slurm_marl.topology.layout import snapshot_layout_from_files

__all__ = ["TopologyConfigError", "DEFAULT_BANDWIDTH_GBPS", "GroupFreeGpus",
           "build_topology_graph", "free_gpus_by_group", "gpu_groups_of", "hop_distance",
           "nodes_under_switch", "partitions_of", "snapshot_layout_from_files"]
