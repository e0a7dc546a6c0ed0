"""Slurm's text, read in one place: the Slurm door, the topology parsers, the simulator's
site files and the sacct import all call this package.

Pure functions, no I/O; nothing of the project is imported but ``slurm_marl.domain``, and
this is the one package that imports python-hostlist. One module per concern:

- ``conf``: the configuration-file syntax of slurm.conf, gres.conf and topology.conf;
- ``records``: ``Key=Value`` records as ``scontrol show <thing> [-o]`` prints them;
- ``hostlists``: hostlists (``n[1-3,7]``);
- ``quantities``: index ranges (``0-3,5``), counts with K/M/G/T/P suffixes, memory sizes
  and time limits;
- ``nodes``: node records of ``scontrol show node [-o]``;
- ``switches``: switch lines of ``scontrol show topology``;
- ``gres``: GRES and TRES strings (GPU configuration, requests, held indices) and the GPU
  groups a node's GRES gives;
- ``versions``: Slurm's version and release series.

Strict readers raise ``SlurmTextError`` (a ValueError carrying ``reason`` and, for
multi-line text, ``line``) or return None. The names below are the package's API; callers
import them from here.
"""

from slurm_marl.slurm_integration.text.conf import (conf_setting, logical_lines, split_conf_pairs,
                                                    strip_comment)
from slurm_marl.slurm_integration.text.errors import SlurmTextError
from slurm_marl.slurm_integration.text.gres import (GpuRequest, GresSpec, format_gpu_request,
                                                    gpu_count_of, gpu_groups, parse_gpu_request,
                                                    parse_gres_indices, parse_gres_item,
                                                    parse_gres_list, parse_gres_used,
                                                    parse_node_gres, parse_tres, single_type,
                                                    split_outside_parens, total_gpus)
from slurm_marl.slurm_integration.text.hostlists import (NULL_WORDS, collapse_hosts,
                                                         expand_host_field, expand_hostlist)
from slurm_marl.slurm_integration.text.nodes import LiveNode, parse_node_records
from slurm_marl.slurm_integration.text.quantities import (format_index_ranges, memory_mib,
                                                          parse_count, parse_index_ranges,
                                                          parse_time_limit_s)
from slurm_marl.slurm_integration.text.records import (parse_kv_line, scontrol_records,
                                                       split_fields, strict_fields)
from slurm_marl.slurm_integration.text.switches import LiveSwitch, parse_switch_line
from slurm_marl.slurm_integration.text.versions import (SlurmVersion, parse_slurm_version,
                                                        version_of_answer)

__all__ = [
    "NULL_WORDS", "GpuRequest", "GresSpec", "LiveNode", "LiveSwitch", "SlurmTextError",
    "SlurmVersion", "collapse_hosts", "conf_setting", "expand_host_field", "expand_hostlist",
    "format_gpu_request", "format_index_ranges", "gpu_count_of", "gpu_groups", "logical_lines",
    "memory_mib", "parse_count", "parse_gpu_request", "parse_gres_indices", "parse_gres_item",
    "parse_gres_list", "parse_gres_used", "parse_index_ranges", "parse_kv_line",
    "parse_node_gres", "parse_node_records", "parse_slurm_version", "parse_switch_line",
    "parse_time_limit_s", "parse_tres", "scontrol_records", "single_type", "split_conf_pairs",
    "split_fields", "split_outside_parens", "strict_fields", "strip_comment", "total_gpus",
    "version_of_answer",
]
