"""The Slurm-text toolkit (slurm_marl.slurm_integration.text): hand-built inputs,
one test per behaviour.

Recorded output is read through the callers' tests (tests/slurm_integration/test_parse.py,
tests/topology/test_scontrol.py).
"""

import string

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from slurm_marl.slurm_integration import text as T
from slurm_marl.slurm_integration.text import GpuRequest, GresSpec, SlurmTextError
from slurm_marl.slurm_integration.text import gres as G

# ---------------------------------------------------------------------------------------
# Key=Value records


def test_kv_line_keeps_values_with_spaces():
    kv = T.parse_kv_line("NodeName=n1 OS=Linux 6.1 #1 SMP RealMemory=16000 Gres=gpu:s0:2(S:0)")
    assert kv["OS"] == "Linux 6.1 #1 SMP" and kv["RealMemory"] == "16000"
    assert kv["Gres"] == "gpu:s0:2(S:0)"


def test_job_keys_with_slashes_and_colons_are_keys():
    kv = T.parse_kv_line("JobId=7 NtasksPerN:B:S:C=0:0:*:* Socks/Node=* TRES=cpu=1,gres/gpu=2")
    assert kv == {"JobId": "7", "NtasksPerN:B:S:C": "0:0:*:*", "Socks/Node": "*",
                  "TRES": "cpu=1,gres/gpu=2"}


def test_node_field_splitting_keeps_blanks_in_values_and_reason_ends_the_line():
    assert T.split_fields("NodeName=a OS=Linux 6 #1 SMP  RealMemory=5 Reason=x=y z",
                          to_end=("Reason",)) == [
        ("NodeName", "a"), ("OS", "Linux 6 #1 SMP"), ("RealMemory", "5"), ("Reason", "x=y z")]
    assert T.split_fields("A=1 Reason=x B=2") == [("A", "1"), ("Reason", "x"), ("B", "2")]


def test_records_join_the_multiline_form_and_name_the_bad_line():
    text = "NodeName=n1 Arch=x86_64\n   OS=Linux 6 #1\n\nNodeName=n2\n   Reason=a b=c\n"
    assert T.scontrol_records(text, "NodeName", to_end=("Reason",)) == [
        (1, [("NodeName", "n1"), ("Arch", "x86_64"), ("OS", "Linux 6 #1")]),
        (4, [("NodeName", "n2"), ("Reason", "a b=c")])]
    with pytest.raises(SlurmTextError) as info:
        T.scontrol_records("NodeName=n1\n!!!\n", "NodeName")
    assert info.value.line == 2 and "Key=Value" in info.value.reason
    with pytest.raises(SlurmTextError, match="NodeName= record first"):
        T.scontrol_records("Arch=x86_64\n", "NodeName")


def test_switch_lines():
    leaf = T.parse_switch_line("SwitchName=leaf1 Level=0 LinkSpeed=1 Nodes=n[1-2]")
    assert leaf == T.LiveSwitch("leaf1", 0, 1, ("n1", "n2"), ())
    spine = T.parse_switch_line("SwitchName=spine Level=1 Nodes=n[1-4] Switches=leaf[1-2]")
    assert spine.to_domain().nodes == () and spine.to_domain().switches == ("leaf1", "leaf2")
    assert T.parse_switch_line("No topology information available") is None
    assert T.parse_switch_line("   ") is None


@pytest.mark.parametrize("line,needle", [
    ("SwitchName=a Level=x", "Level='x': expected an integer"),
    ("SwitchName=a LinkSpeed=fast", "LinkSpeed='fast'"),
    ("SwitchName=a Nodes=n[1-", "Nodes='n[1-': bad hostlist"),
    ("SwitchName=a Level=0 junk", "expected Key=Value, found 'junk'"),
    ("SwitchName= a", "expected Key=Value, found 'a'"),
    ("SwitchName=a 1A=2", "invalid key '1A'"),
    ("SwitchName=a Level=0 level=1", "given twice"),
    ("Level=0 Nodes=n1", "expected SwitchName="),
])
def test_bad_switch_lines(line, needle):
    with pytest.raises(SlurmTextError, match=needle.replace("[", r"\[")):
        T.parse_switch_line(line)


# ---------------------------------------------------------------------------------------
# hostlists


def test_hostlists():
    assert T.expand_hostlist("n[1-3,7]") == ("n1", "n2", "n3", "n7")
    assert T.expand_hostlist("gpu-a[01-03]") == ("gpu-a01", "gpu-a02", "gpu-a03")
    assert T.collapse_hosts(["n1", "n2", "n3", "n7"]) == "n[1-3,7]"
    assert T.collapse_hosts(["n1"]) == "n1"
    for bad in ("n[1-", "n]", "n[3-1]"):
        with pytest.raises(SlurmTextError, match="bad hostlist"):
            T.expand_hostlist(bad)


def test_host_fields_of_slurm_output():
    for empty in (None, "", "  ", "(null)", "None", "N/A"):
        assert T.expand_host_field(empty) == ()
    assert T.expand_host_field(" n[1-2] ") == ("n1", "n2")
    with pytest.raises(ValueError, match="bad hostlist 'n\\[1-'"):
        T.expand_host_field("n[1-")


# ---------------------------------------------------------------------------------------
# index ranges, counts, TRES, memory, time


def test_index_ranges_and_counts():
    assert T.parse_index_ranges("0-3,8") == (0, 1, 2, 3, 8)
    assert T.parse_index_ranges(" 0 - 1 , 4") == (0, 1, 4)
    for bad in ("3-1", "", "N/A", "a-b", "1,,2", "-1"):
        assert T.parse_index_ranges(bad) is None, bad
    assert T.parse_index_ranges("0-9", limit=5) is None
    assert T.parse_count("20M") == 20 * 1024 ** 2 and T.parse_count("4") == 4
    assert T.parse_count("x") is None and T.parse_count("2X") is None


@given(st.lists(st.integers(0, 300), max_size=40))
def test_index_ranges_round_trip(values):
    assert T.parse_index_ranges(T.format_index_ranges(values)) == (
        tuple(sorted(set(values))) or None)


def test_tres_and_memory():
    assert G.parse_tres("cpu=8,mem=16000M,gres/gpu=4") == (
        ("cpu", "8"), ("mem", "16000M"), ("gres/gpu", "4"))
    assert G.parse_tres("(null)") == () and G.parse_tres("") == ()
    assert T.memory_mib("16000M") == 16000 and T.memory_mib("2G") == 2048
    assert T.memory_mib("x") is None


@pytest.mark.parametrize("text,seconds", [
    ("60", 3600.0), ("1:30", 90.0), ("1:00:00", 3600.0), ("2-0", 172800.0),
    ("1-2:3", 93780.0), ("1-2:3:4", 93784.0), ("INFINITE", None), ("UNLIMITED", None)])
def test_time_limits(text, seconds):
    assert T.parse_time_limit_s(text) == seconds


def test_bad_time_limit_raises():
    for bad in ("soon", "1-x", "1:2:3:4"):
        with pytest.raises(ValueError):
            T.parse_time_limit_s(bad)


# ---------------------------------------------------------------------------------------
# GRES: the strict reading (slurm.conf, scontrol show node)


@pytest.mark.parametrize("text,expected", [
    ("gpu:4", (GresSpec("gpu", None, 4),)),
    ("gpu:s0:2(S:0),gpu:s1:2(S:1)", (GresSpec("gpu", "s0", 2, sockets=(0,)),
                                     GresSpec("gpu", "s1", 2, sockets=(1,)))),
    ("gpu:4(S:0-1)", (GresSpec("gpu", None, 4, sockets=(0, 1)),)),
    ("gpu:s1:2(IDX:2-3)", (GresSpec("gpu", "s1", 2, indices=(2, 3)),)),
    ("gpu:s0:0(IDX:N/A)", (GresSpec("gpu", "s0", 0),)),
    ("gpu:a100:4(S:0-1)(IDX:0,2)", (GresSpec("gpu", "a100", 4, sockets=(0, 1),
                                             indices=(0, 2)),)),
    ("gpu:a100:8,bandwidth:lustre:no_consume:4G", (
        GresSpec("gpu", "a100", 8),
        GresSpec("bandwidth", "lustre", 4 * 1024 ** 3, no_consume=True))),
    ("gpu", (GresSpec("gpu", None, 1),)),
    ("gpu:a100", (GresSpec("gpu", "a100", 1),)),
    ("(null)", ()),
])
def test_gres_lists(text, expected):
    assert G.parse_gres_list(text) == expected


@pytest.mark.parametrize("text", ["gpu:a:b:4", "gpu:4(S:x)", "gpu::2", "gp u:2", "gpu:2(S:0",
                                  "gpu:a100=2"])
def test_bad_gres_lists(text):
    assert G.parse_gres_list(text) is None


def test_gres_spec_text_and_gpu_count():
    specs = G.parse_gres_list("gpu:s0:2(S:0),gpu:s1:2(S:1),mps:200")
    assert [str(s) for s in specs] == ["gpu:s0:2", "gpu:s1:2", "mps:200"]
    assert G.gpu_count_of(specs) == 4 and G.gpu_count_of(specs, "mps") == 200


@settings(max_examples=300, deadline=None)
@given(text=st.text(alphabet=string.ascii_letters[:8] + "nN01239=[]-,#\\\" :()/\n\t_.",
                    max_size=40))
def test_gres_lists_parse_or_return_none(text):
    result = G.parse_gres_list(text)
    assert result is None or isinstance(result, tuple)


# ---------------------------------------------------------------------------------------
# GRES: the lenient reading of squeue / sinfo fields


@pytest.mark.parametrize("text,expected", [
    ("gres:gpu:2", (GpuRequest(2),)),
    ("gres:gpu:s1:2", (GpuRequest(2, "s1"),)),
    ("gres/gpu:4", (GpuRequest(4),)),
    ("gres:gpu", (GpuRequest(1),)),
    ("gres:gpu:a100", (GpuRequest(1, "a100"),)),
    ("gres:gpu:s0:1,gres:gpu:s1:2", (GpuRequest(1, "s0"), GpuRequest(2, "s1"))),
    ("gres:gpu:2,gres:shard:1", (GpuRequest(2),)),
    ("gres:shard:4", ()),
    ("gres/gpu=2", ()),  # a TRES count names no GRES "gpu" item
    ("", ()),
    (None, ()),
])
def test_gpu_requests(text, expected):
    reqs, problem = G.parse_gpu_request(text)
    assert problem is None and reqs == expected


@pytest.mark.parametrize("text", ["gres:gpu:tesla:many", "gres/gpu:a100=2"])
def test_unreadable_gpu_request_is_a_problem_not_an_exception(text):
    reqs, problem = G.parse_gpu_request(text)
    assert reqs == () and text.split(":")[-1] in problem


def test_request_totals_and_types():
    reqs, _ = G.parse_gpu_request("gres:gpu:s0:1,gres:gpu:s1:2")
    assert G.total_gpus(reqs) == 3 and G.single_type(reqs) is None
    assert G.single_type((GpuRequest(2, "s1"),)) == "s1"


@pytest.mark.parametrize("text,idx", [
    ("gpu:s0:2(IDX:0-1),gpu:s1:0(IDX:)", (0, 1)),
    ("gpu:2(IDX:0,2)", (0, 2)),
    ("gpu(IDX:N/A)", ()),
    ("gpu:s0:1(IDX:0),gpu:s1:2(IDX:2-3)", (0, 2, 3)),
    ("gpu:s0:2(IDX:0-1),gpu:s1:2(IDX:2-3)", (0, 1, 2, 3)),
    ("shard:2(IDX:0-1)", ()),
    ("gpu:2(IDX:9-3)", ()),
    ("gpu:s0:2(IDX:0-1),gpu:s1:2(IDX:x)", (0, 1)),  # an unreadable item holds none
])
def test_indices(text, idx):
    assert G.parse_gres_indices(text) == idx


def test_node_gres_in_index_order():
    entries, problem = G.parse_node_gres("gpu:s0:2(S:0),gpu:s1:2(S:1),mps:200(S:0-1)")
    assert problem is None
    assert entries == (GresSpec("gpu", "s0", 2, sockets=(0,)),
                       GresSpec("gpu", "s1", 2, sockets=(1,)))
    entries, _ = G.parse_node_gres("gpu:4(S:0-1)")
    assert entries == (GresSpec("gpu", None, 4, sockets=(0, 1)),)
    assert G.parse_node_gres("(null)") == ((), None)
    entries, problem = G.parse_node_gres("gpu:s0:2(S:0),gpu:a:b:2")
    assert entries == (GresSpec("gpu", "s0", 2, sockets=(0,)),) and "gpu:a:b:2" in problem


def test_format_always_uses_gres_colon_prefix():
    assert G.format_gpu_request({"s1": 2}) == "gres:gpu:s1:2"
    assert G.format_gpu_request({None: 3}) == "gres:gpu:3"
    assert G.format_gpu_request({"s1": 2, "s0": 1}) == "gres:gpu:s0:1,gres:gpu:s1:2"
    assert G.format_gpu_request({"s0": 0}) == ""


@given(st.text(max_size=60))
def test_lenient_readers_never_raise_on_arbitrary_text(text):
    G.parse_gpu_request(text)
    G.parse_gres_indices(text)
    G.parse_node_gres(text)


def test_gpu_groups_number_entries_in_order_and_bind_one_socket():
    entries = (GresSpec("gpu", "s0", 2, sockets=(0,)), GresSpec("gpu", "x", 1, sockets=(0, 1)))
    first, second = G.gpu_groups(entries, cores_per_socket=2)
    assert (first.gpu_indices, first.socket, first.core_ids) == ((0, 1), 0, (0, 1))
    assert (second.gpu_indices, second.socket, second.core_ids) == ((2,), None, (0, 1, 2, 3))
    assert G.gpu_groups(entries)[0].core_ids == ()


# ---------------------------------------------------------------------------------------
# versions


@pytest.mark.parametrize("text, release, series", [
    ("slurm 24.11.5", "24.11.5", "24.11"), ("slurm-wlm 22.05.8\n", "22.05.8", "22.05"),
    ("slurm 26.05.0-0rc1", "26.05.0-0rc1", "26.05")])
def test_version_of_scontrol_answer(text, release, series):
    assert T.version_of_answer(text) == T.SlurmVersion(release, series)
    assert T.parse_slurm_version(text) == T.SlurmVersion(release, series)


@pytest.mark.parametrize("text", ["", "slurm-wlm", "slurm 24", "oops 24.11.5",
                                  "slurm 24.11.5 extra", "slurm 24.11rc1", "24.11.5"])
def test_version_of_answer_wants_the_two_words(text):
    assert T.version_of_answer(text) is None


def test_a_bare_release_is_a_version_given_by_hand():
    assert T.parse_slurm_version("24.11") == T.SlurmVersion("24.11", "24.11")
    assert T.parse_slurm_version("unknown") is None and T.parse_slurm_version(None) is None


# ---------------------------------------------------------------------------------------
# configuration files


def test_conf_setting_is_the_last_line_setting_the_key():
    text = ("# JobSubmitPlugins=old\nJobSubmitPlugins=lua\nInclude /etc/slurm/more.conf\n"
            "jobsubmitplugins=\"lua,all_partitions\" # a comment\nSelectType=select/cons_tres\n")
    assert T.conf_setting(text, "JobSubmitPlugins") == "lua,all_partitions"
    assert T.conf_setting(text, "PriorityType") is None
    assert T.conf_setting("JobSubmitPlugins = lua\n", "JobSubmitPlugins") == "lua"


def test_conf_pairs_are_strict():
    assert T.split_conf_pairs('Reason="disk full" State=DRAIN') == (
        ("Reason", "disk full"), ("State", "DRAIN"))
    with pytest.raises(SlurmTextError, match="given twice"):
        T.split_conf_pairs("A=1 a=2")
