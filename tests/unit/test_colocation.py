"""The co-location vocabulary: levels, span tags, model families, what a job shares (from the
simulator's incremental index or a snapshot), and the one sample reader."""

import json

import pytest

from slurm_marl.colocation import (CONSOLIDATION_SENSITIVE, LEVELS, SAMPLE_CSV_COLUMNS,
                                   ColocationIndex, SampleError, model_family, read_samples,
                                   sample_colocated, snapshot_neighbourhoods, span_tags)
from slurm_marl.domain import ClusterSnapshot, GpuGroup, Job, JobState, Node
from slurm_marl.sim.metrics import write_samples


def test_levels_span_tags_and_model_families():
    assert LEVELS == ("gpu", "group", "node", "leaf")
    assert span_tags(1, 1, 1) == ()
    assert span_tags(2, 1, 1) == ("multi_group",)
    assert span_tags(2, 2, 2) == ("multi_node", "cross_leaf")
    assert span_tags(3, 2, 1) == ("multi_group", "multi_node")
    assert model_family("ResNet-18 (batch size 16)") == "resnet18"
    assert model_family("vgg19_bs32") == "vgg19" and model_family(None) == "unknown"
    assert {"vgg19", "alexnet"} <= set(CONSOLIDATION_SENSITIVE)


def test_index_follows_jobs_coming_and_going():
    # two nodes of two 2-GPU groups under leaf L, a third node under no leaf switch
    index = ColocationIndex([(2, 2), (2, 2), (2, 2)], ["L", "L", None])
    index.add(1, "a", [(0, 0, 1)])
    index.add(2, "b", [(0, 0, 1)])
    index.add(3, "c", [(0, 1, 2)])
    index.add(4, "d", [(0, 1, 0), (1, 0, 2)])   # multi-node: shares leaf links
    index.add(5, "e", [(1, 1, 1), (2, 0, 1)])
    hood = index.neighbourhood(1)
    assert hood.groups == ((1, 2, (("b", 1),)),)
    assert hood.nodes == ((1, 4, (("c", 2), ("d", 0))),)
    assert (hood.n_groups, hood.n_nodes, hood.n_leaves, hood.leaf_models) == (1, 1, 1, ())
    multi = index.neighbourhood(5)
    assert (multi.n_nodes, multi.n_leaves, multi.leaf_models) == (2, 1, ("d",))
    assert index.jobs_near([2], ["L"]) == {4, 5}
    index.remove(2)
    assert index.neighbourhood(1).groups == ((1, 2, ()),)
    assert sample_colocated(index.neighbourhood(1)) == {
        "gpu": [], "group": [], "node": ["c", "d"], "leaf": []}


def test_a_job_on_a_shared_gpu_is_listed_there_not_again_in_its_group():
    index = ColocationIndex([(4,)], ["L"])
    index.add(1, "a", [(0, 0, 1)], [(0, 0)])
    index.add(2, "b", [(0, 0, 1)], [(0, 0)])
    index.add(3, None, [(0, 0, 1)], [(0, 1)])
    hood = index.neighbourhood(1)
    assert hood.gpu_models == (("b",),)
    assert sample_colocated(hood) == {"gpu": ["b"], "group": ["unknown"], "node": [],
                                      "leaf": []}


def test_snapshot_neighbourhoods_read_groups_from_gpu_indices():
    nodes = tuple(Node(name=n, partitions=("gpu",), leaf_switch=leaf,
                       gpu_groups=(GpuGroup(0, (0, 1)), GpuGroup(1, (2, 3))))
                  for n, leaf in (("n1", "L1"), ("n2", "L2"), ("n3", None)))

    def job(jid, alloc, state=JobState.RUNNING):
        return Job(jid, state=state, gpu_alloc=alloc, model_type=f"m{jid}")

    snap = ClusterSnapshot(time_s=0, nodes=nodes, jobs=(
        job(1, (("n1", (0, 2)),)), job(2, (("n1", (1,)),)),
        job(3, (("n1", (3,)), ("n2", (0,)))), job(4, (("n2", (1,)), ("n1", (3,)))),
        job(5, (("n1", (3,)),), state=JobState.SUSPENDED),
        job(6, (("n3", (0,)), ("n2", (3,))))))
    hoods = snapshot_neighbourhoods(snap, lambda j: j.model_type)
    assert set(hoods) == {1, 2, 3, 4, 6}                  # running jobs only
    model, h1 = hoods[1]
    assert model == "m1" and h1.groups == ((1, 2, (("m2", 1),)), (1, 2, (("m3", 1), ("m4", 1))))
    assert h1.nodes == ((2, 4, ()),) and (h1.n_groups, h1.n_nodes) == (2, 1)
    _, h3 = hoods[3]
    assert (h3.n_nodes, h3.n_leaves, h3.leaf_models) == (2, 2, ("m4", "m6"))
    _, h6 = hoods[6]                                      # n3 is under no leaf switch
    assert (h6.n_nodes, h6.n_leaves, h6.leaf_models) == (2, 1, ("m3", "m4"))


def sim_sample(job_id, **kw):
    return {"time_s": 120.0, "job_id": job_id, "model_type": "lm_bs20", "num_gpus": 2,
            "groups": 2, "nodes": 2, "leaves": 2, "cross_leaf": True,
            "colocated": {"gpu": [], "group": ["a3c_bs4"], "node": [], "leaf": ["x", "y"]},
            "duration_s": 60.0, "speed": 0.75, "strength": "high", **kw}


def test_jsonl_and_csv_samples_read_alike(tmp_path):
    samples = [sim_sample(1), sim_sample(2, model_type=None, leaves=1, cross_leaf=False)]
    for name in ("s.jsonl", "s.csv"):
        write_samples(tmp_path / name, samples)
        assert read_samples(tmp_path / name) == samples
    header = (tmp_path / "s.csv").read_text().splitlines()[0]
    assert tuple(header.split(",")) == SAMPLE_CSV_COLUMNS


def test_bad_samples_name_file_and_line(tmp_path):
    path = tmp_path / "s.jsonl"
    good = json.dumps(sim_sample(1))
    path.write_text(good + "\n\n" + '{"speed": 0.5, "num_gpus": 0}\n')
    with pytest.raises(SampleError, match=r"s.jsonl:3: num_gpus=0"):
        read_samples(path)
    path.write_text(good + "\n{oops\n")
    with pytest.raises(SampleError, match=r"s.jsonl:2: invalid JSON"):
        read_samples(path)
    path.write_text(good + '\n{"speed": -1}\n')
    with pytest.raises(SampleError, match=r"s.jsonl:2: speed=-1"):
        read_samples(path)
    path.write_text(good + "\n")
    assert read_samples(path) == [json.loads(good)]
    with pytest.raises(SampleError, match="does not exist"):
        read_samples(tmp_path / "missing.jsonl")
    csv_path = tmp_path / "s.csv"
    csv_path.write_text("model_type,speed\nlm,0.5\n")
    with pytest.raises(SampleError, match=r"s.csv:2: bad sample row"):
        read_samples(csv_path)
