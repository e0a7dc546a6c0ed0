import pytest

from slurm_marl.sim.models import (assign_model_types, family_profile, measured_comm,
                                   model_mix, sharing_factor)
from slurm_marl.colocation import Neighbourhood
from slurm_marl.sim.perf import PerfParams, contention, job_speed, penalty


def hood(groups=((1, 4, ()),), nodes=((1, 8, ()),), n_groups=1, n_nodes=1, n_leaves=1,
         leaf_models=(), gpu_models=()):
    return Neighbourhood(groups=groups, nodes=nodes, n_groups=n_groups, n_nodes=n_nodes,
                         n_leaves=n_leaves, leaf_models=leaf_models, gpu_models=gpu_models)


def test_alone_runs_at_full_speed_at_every_strength():
    for s in ("none", "low", "medium", "high"):
        assert job_speed("resnet50_bs64", hood(), PerfParams(s)) == 1.0


def test_neighbours_slow_down_more_as_strength_grows():
    crowded = hood(groups=((1, 4, (("a3c", 3),)),), nodes=((1, 8, (("a3c", 4),)),))
    speeds = [job_speed("resnet18_bs16", crowded, PerfParams(s))
              for s in ("none", "low", "medium", "high")]
    assert speeds[0] == 1.0
    assert speeds == sorted(speeds, reverse=True) and speeds[-1] < 0.85


def test_same_group_hurts_more_than_same_node():
    same_group = hood(groups=((1, 4, (("a3c", 1),)),))
    same_node = hood(nodes=((1, 8, (("a3c", 1),)),))
    p = PerfParams("high")
    assert job_speed("resnet18_bs16", same_group, p) < job_speed("resnet18_bs16", same_node, p)


def test_spread_costs_grow_with_distance_and_comm_sensitivity():
    p = PerfParams("high")
    one = job_speed("lm_bs20", hood(), p)
    groups = job_speed("lm_bs20", hood(n_groups=2), p)
    nodes = job_speed("lm_bs20", hood(n_groups=2, n_nodes=2), p)
    leaves = job_speed("lm_bs20", hood(n_groups=2, n_nodes=2, n_leaves=2), p)
    assert one > groups > nodes > leaves
    assert job_speed("resnet50_bs64", hood(n_groups=2, n_nodes=2), p) > nodes
    busy_link = job_speed("lm_bs20", hood(n_groups=2, n_nodes=2, leaf_models=("lm_bs5",)), p)
    assert busy_link < nodes


def test_gpu_sharing_uses_gavels_pairs():
    assert sharing_factor("resnet50_bs64", "resnet50_bs64") == pytest.approx(0.498, abs=0.01)
    assert sharing_factor("mystery", "resnet50_bs64") == 0.68
    shared = hood(gpu_models=(("resnet50_bs64",),))
    assert job_speed("resnet50_bs64", shared, PerfParams("none")) == pytest.approx(
        sharing_factor("resnet50_bs64", "resnet50_bs64"))


def test_contention_weights_by_share_and_pressure():
    assert contention(()) == 0.0
    light = contention(((1, 4, (("cyclegan", 1),)),))
    heavy = contention(((1, 4, (("a3c", 3),)),))
    assert 0 < light < heavy
    assert penalty("x", hood(), PerfParams("none")) == 0.0


def test_model_mix_and_measured_sensitivities():
    mix = model_mix()
    assert len(mix) == 26 and "resnet50_bs64" in mix
    comm = measured_comm()
    assert {"resnet18", "resnet50", "transformer", "lm"} <= set(comm)
    assert comm["lm"] > comm["resnet50"]
    assert family_profile("lm_bs5").comm_source == "gavel-measured"
    assert family_profile("vgg19").comm_source == "assumed"
    assert assign_model_types(5, 0) == assign_model_types(5, 0)
    with pytest.raises(ValueError, match="strength"):
        PerfParams("extreme")
