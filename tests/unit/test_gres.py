import pytest
from hypothesis import given, strategies as st

from slurm_marl.slurm_integration import gres as G


@pytest.mark.parametrize("text,expected", [
    ("gres:gpu:2", (G.GpuRequest(2),)),
    ("gres:gpu:s1:2", (G.GpuRequest(2, "s1"),)),
    ("gres/gpu:4", (G.GpuRequest(4),)),
    ("gres:gpu", (G.GpuRequest(1),)),
    ("gres:gpu:a100", (G.GpuRequest(1, "a100"),)),
    ("gres:gpu:s0:1,gres:gpu:s1:2", (G.GpuRequest(1, "s0"), G.GpuRequest(2, "s1"))),
    ("gres:gpu:2,gres:shard:1", (G.GpuRequest(2),)),
    ("gres:shard:4", ()),
    ("", ()),
    (None, ()),
])
def test_gpu_requests(text, expected):
    reqs, problem = G.parse_gpu_request(text)
    assert problem is None and reqs == expected


def test_unreadable_count_is_a_problem_not_an_exception():
    reqs, problem = G.parse_gpu_request("gres:gpu:tesla:many")
    assert reqs == () and "many" in problem


@pytest.mark.parametrize("text,idx", [
    ("gpu:s0:2(IDX:0-1),gpu:s1:0(IDX:)", (0, 1)),
    ("gpu:2(IDX:0,2)", (0, 2)),
    ("gpu(IDX:N/A)", ()),
    ("gpu:s0:1(IDX:0),gpu:s1:2(IDX:2-3)", (0, 2, 3)),
    ("gpu:s0:2(IDX:0-1),gpu:s1:2(IDX:2-3)", (0, 1, 2, 3)),
    ("shard:2(IDX:0-1)", ()),
    ("gpu:2(IDX:9-3)", ()),
])
def test_indices(text, idx):
    assert G.parse_gres_indices(text) == idx


def test_node_gres_in_index_order():
    entries, problem = G.parse_node_gres("gpu:s0:2(S:0),gpu:s1:2(S:1)")
    assert problem is None
    assert entries == (G.NodeGpuType("s0", 2, (0,)), G.NodeGpuType("s1", 2, (1,)))
    entries, _ = G.parse_node_gres("gpu:4(S:0-1)")
    assert entries == (G.NodeGpuType(None, 4, (0, 1)),)
    assert G.parse_node_gres("(null)") == ((), None)


def test_format_always_uses_gres_colon_prefix():
    assert G.format_gpu_request({"s1": 2}) == "gres:gpu:s1:2"
    assert G.format_gpu_request({None: 3}) == "gres:gpu:3"
    assert G.format_gpu_request({"s1": 2, "s0": 1}) == "gres:gpu:s0:1,gres:gpu:s1:2"
    assert G.format_gpu_request({"s0": 0}) == ""


@given(st.lists(st.integers(0, 300), max_size=40))
def test_int_ranges_round_trip(values):
    assert G.parse_int_ranges(G.format_int_ranges(values)) == tuple(sorted(set(values)))


@given(st.text(max_size=60))
def test_never_raises_on_arbitrary_text(text):
    G.parse_gpu_request(text)
    G.parse_gres_indices(text)
    G.parse_node_gres(text)
