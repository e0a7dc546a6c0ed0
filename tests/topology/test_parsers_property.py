"""Random and malformed inputs: every parser either parses or raises TopologyConfigError
naming the file and a line inside it, never another exception."""

import string

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from slurm_marl.topology.errors import TopologyConfigError
from slurm_marl.topology.gres_conf import parse_gres_conf_text
from slurm_marl.topology.hwloc import parse_hwloc_xml
from slurm_marl.topology.scontrol import parse_show_nodes, parse_show_topology
from slurm_marl.topology.slurm_conf import parse_slurm_conf_text
from slurm_marl.topology.topology_conf import parse_topology_conf_text

SYNTAX = string.ascii_letters[:8] + "nN01239=[]-,#\\\" :()/\n\t_."
KEYS = ["NodeName", "SwitchName", "Switches", "Nodes", "LinkSpeed", "Name", "Type", "File",
        "Cores", "Links", "Count", "AutoDetect", "Gres", "Sockets", "CoresPerSocket",
        "ThreadsPerCore", "RealMemory", "Feature", "PartitionName", "Default", "MaxTime",
        "Include", "Flags", "CPUs", "Boards", "State", "BlockName"]
VALUES = ["n[1-4,7]", "gpu-a[01-10]", "n[", "n[3-1]", "/dev/nvidia[0-3]", "0-3", "-1,2,0",
          "gpu:s0:2,gpu:s1:2", "gpu:4(S:0-1)", "DEFAULT", "ALL", "2-00:00:00", "x", "",
          "nvml", "off", "4G", "12", "leaf[1-2]", '"a b"', "n[1-99999999]", "-3"]

line_strategy = st.one_of(
    st.text(alphabet=SYNTAX, max_size=60),
    st.lists(st.tuples(st.sampled_from(KEYS), st.sampled_from(VALUES)), min_size=1,
             max_size=5).map(lambda kv: " ".join(f"{k}={v}" for k, v in kv)),
    st.sampled_from(VALUES).map(lambda v: f"Include {v}"),
)
file_strategy = st.lists(line_strategy, max_size=8).map(
    lambda lines: "\n".join(lines) + ("\\" if len(lines) % 3 == 1 else ""))

PARSERS = {"slurm.conf": parse_slurm_conf_text, "gres.conf": parse_gres_conf_text,
           "topology.conf": parse_topology_conf_text}


def _check_error(exc: TopologyConfigError, path: str, text: str) -> None:
    assert exc.path == path
    assert str(exc).startswith(path)
    if exc.line is not None:  # Include errors point into the included file instead
        assert 1 <= exc.line <= max(1, len(text.splitlines()))


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(text=file_strategy, kind=st.sampled_from(sorted(PARSERS)))
def test_config_files_parse_or_raise_one_error(text, kind):
    path = f"/nonexistent-dir/{kind}"
    try:
        PARSERS[kind](text, path)
    except TopologyConfigError as exc:
        _check_error(exc, path, text)


@settings(max_examples=200, deadline=None)
@given(text=file_strategy)
def test_scontrol_outputs_parse_or_raise_one_error(text):
    for parser, source in ((parse_show_nodes, "<nodes>"), (parse_show_topology, "<topo>")):
        try:
            parser(text, source)
        except TopologyConfigError as exc:
            _check_error(exc, source, text)


XML_PIECES = ['<topology version="2.0">', "</topology>", '<object type="Package" os_index="0" '
              'cpuset="0x0000000f">', '<object type="Core" os_index="x">',
              '<object type="PCIDev" pci_busid="0000:01:00.0" pci_type="0302 [10de:20b0] '
              '[10de:1450] a1">', '<object type="Bridge" gp_index="7" bridge_type="0-1">',
              "</object>", '<object type="PU" os_index="3"/>', '<object cpuset="0xzz">',
              '<object type="NUMANode" cpuset="0xf...f,0x3" local_memory="12"/>', "<", "&"]


@settings(max_examples=300, deadline=None)
@given(pieces=st.lists(st.sampled_from(XML_PIECES), max_size=10))
def test_hwloc_xml_parses_or_raises_one_error(pieces):
    text = "\n".join(pieces)
    try:
        parse_hwloc_xml(text, "lstopo.xml")
    except TopologyConfigError as exc:
        assert exc.path == "lstopo.xml"
