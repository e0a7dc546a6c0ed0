import pytest

from slurm_marl.sim.cluster import ClusterSpecError, parse_cluster


def test_nodes_groups_and_leaves():
    c = parse_cluster("8x2x4:leaf=4")
    assert len(c.nodes) == 8 and c.total_gpus == 64
    n = c.nodes[0]
    assert n.name == "gpu01" and [g.gpu_indices for g in n.gpu_groups] == [
        (0, 1, 2, 3), (4, 5, 6, 7)]
    assert n.cpus == 32 and n.real_memory_mib == 256 * 1024
    leaves = [s for s in c.switches if s.is_leaf]
    assert [len(s.nodes) for s in leaves] == [4, 4]
    spine = [s for s in c.switches if not s.is_leaf][0]
    assert spine.switches == ("leaf1", "leaf2")
    assert {n.leaf_switch for n in c.nodes[:4]} == {"leaf1"}


def test_several_partitions_and_options():
    c = parse_cluster("2x1x4:name=a:cores=8:mem=64+3x2x2:name=b")
    assert [p.name for p in c.partitions] == ["a", "b"]
    assert c.partitions[0].default and not c.partitions[1].default
    assert [n.name for n in c.nodes] == ["a01", "a02", "b01", "b02", "b03"]
    assert c.nodes[0].cpus == 8 and c.nodes[0].real_memory_mib == 64 * 1024
    assert len({n.leaf_switch for n in c.nodes}) == 2


def test_gpu_sharing_offers_slots_slot_major():
    c = parse_cluster("1x2x2:share=2")
    n = c.nodes[0]
    assert [g.gpu_indices for g in n.gpu_groups] == [(0, 1, 4, 5), (2, 3, 6, 7)]
    assert c.physical_gpu(n.name, 5) == 1 and c.total_gpus == 4


def test_toml_cluster(tmp_path):
    path = tmp_path / "c.toml"
    path.write_text('[[partition]]\nname = "big"\nnodes = 3\nsockets = 2\n'
                    'gpus_per_socket = 4\nnodes_per_leaf = 2\n')
    c = parse_cluster(path)
    assert len(c.nodes) == 3 and len([s for s in c.switches if s.is_leaf]) == 2
    path.write_text('[[partition]]\nnodes = 3\n')
    with pytest.raises(ClusterSpecError, match="missing"):
        parse_cluster(path)


@pytest.mark.parametrize("spec, fragment", [
    ("8x2", "NODESxSOCKETSxGPUS_PER_SOCKET"), ("0x2x4", "nodes must be"),
    ("8x2x4:leaf", "needs key=value"), ("8x2x4:colour=red", "unknown option"),
    ("8x2x4:leaf=x", "not an integer"), ("2x1x1:name=a+2x1x1:name=a", "partition names repeat"),
    ("2x1x1:name=9bad", "not a valid"),
])
def test_bad_specs(spec, fragment):
    with pytest.raises(ClusterSpecError, match=fragment):
        parse_cluster(spec)


def test_default_cores_keep_gpus_the_binding_resource():
    # Unchanged where 16 cores per socket already cover the GPU slots.
    assert parse_cluster("8x2x4").nodes[0].cpus == 32
    wide = parse_cluster("1x1x64")
    assert wide.partitions_spec[0].cores_per_socket == 64 and wide.nodes[0].cpus == 64
    shared = parse_cluster("1x2x8:share=4")          # 32 slots per socket
    assert shared.nodes[0].cpus == 64
    assert parse_cluster("1x1x4:cores=4").nodes[0].cpus == 4   # one core per slot is enough


@pytest.mark.parametrize("spec, fragment", [
    ("1x1x64:cores=32", "give cores=64 (per socket)"),
    ("1x2x2:share=4:cores=4", "give cores=8 (per socket)"),
])
def test_explicit_cores_below_gpu_slots_is_an_error(spec, fragment):
    with pytest.raises(ClusterSpecError) as err:
        parse_cluster(spec)
    message = str(err.value)
    assert "CPUs, not GPUs, would bind" in message and fragment in message
    assert "\n" not in message


def test_toml_cores_default_and_check(tmp_path):
    path = tmp_path / "c.toml"
    path.write_text("[[partition]]\nnodes = 1\nsockets = 2\ngpus_per_socket = 32\n")
    assert parse_cluster(path).nodes[0].cpus == 64
    path.write_text("[[partition]]\nnodes = 1\nsockets = 2\ngpus_per_socket = 4\n"
                    "share = 2\ncores_per_socket = 4\n")
    with pytest.raises(ClusterSpecError, match=r"would bind .*cores_per_socket = 8"):
        parse_cluster(path)
