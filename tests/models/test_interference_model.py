"""The interference (reward) model: encoding, learning, files, the estimator protocol."""

import json
import math
import random

import pytest
import torch

from slurm_marl.colocation import LEVELS
from slurm_marl.domain import Job
from slurm_marl.models.interference import (InterferenceModel, ModelFileError, Vocabulary,
                                            encode_samples)
from slurm_marl.policy.interference import InterferenceEstimator
from slurm_marl.policy.plugins import build_plugin
from slurm_marl.train.interference import (mae, mean_speed_baseline, split_by_job,
                                           train_interference)

torch.set_num_threads(1)

# A made-up world for the tests (not the simulator's): "heavy" neighbours in the same group
# slow a "light" job down, spreading over nodes costs 30%.
FAMILIES = ("light", "heavy", "calm")


def synthetic_samples(n: int, seed: int = 0) -> list[dict]:
    rng = random.Random(seed)
    out = []
    for i in range(n):
        me = rng.choice(FAMILIES)
        group = [rng.choice(FAMILIES) for _ in range(rng.randint(0, 3))]
        node = [rng.choice(FAMILIES) for _ in range(rng.randint(0, 2))]
        nodes = rng.choice((1, 1, 2))
        pen = sum(0.25 if (me == "light" and m == "heavy") else 0.03 for m in group)
        pen += 0.02 * len(node) + (0.3 if nodes > 1 else 0.0)
        speed = math.exp(rng.gauss(0, 0.01)) / (1 + pen)
        out.append({"job_id": i // 3, "model_type": f"{me}_bs32", "num_gpus": nodes,
                    "groups": nodes, "nodes": nodes, "leaves": 1,
                    "colocated": {"gpu": [], "group": group, "node": node, "leaf": []},
                    "speed": round(speed, 5), "duration_s": 100.0})
    return out


def test_vocabulary_maps_unknown_families_to_row_zero():
    vocab = Vocabulary.fit(["light_bs32", "heavy_bs64", None])
    assert vocab.families == ("unknown", "heavy", "light")
    assert vocab.index("heavy_bs16") == 1 and vocab.index("never_seen") == 0
    assert vocab.index(None) == 0


def test_encode_counts_neighbours_per_level_and_shape():
    vocab = Vocabulary.fit(FAMILIES)
    enc = encode_samples([{"model_type": "light", "num_gpus": 4, "groups": 2, "nodes": 2,
                           "leaves": 2, "speed": 0.5,
                           "colocated": {"group": ["heavy", "heavy"], "leaf": ["calm"]}}],
                         vocab)
    assert enc.counts.shape == (1, len(LEVELS), len(vocab))
    assert enc.counts[0, LEVELS.index("group"), vocab.index("heavy")] == 2
    assert enc.counts[0, LEVELS.index("leaf"), vocab.index("calm")] == 1
    assert enc.shape[0].tolist() == [2.0, 0.0, 1.0, 1.0]  # log2 4, spans nodes and leaves


def test_split_keeps_every_job_on_one_side():
    samples = synthetic_samples(300)
    train, val = split_by_job(samples, 0.2, seed=1)
    train_jobs = {samples[i]["job_id"] for i in train}
    val_jobs = {samples[i]["job_id"] for i in val}
    assert train_jobs and val_jobs and not train_jobs & val_jobs
    assert len(train) + len(val) == 300


def test_baseline_is_mean_per_model_type():
    pred = mean_speed_baseline(["a", "a", "b"], torch.tensor([1.0, 0.5, 0.2]).numpy(),
                               ["a", "b", "c"])
    assert pred.tolist() == pytest.approx([0.75, 0.2, 1.7 / 3])


def test_model_learns_what_the_baseline_cannot():
    result = train_interference(synthetic_samples(900), epochs=30, seed=0, min_steps=0)
    m = result.metrics
    assert m["val_mae"] < 0.6 * m["baseline_val_mae"], m
    model = result.model
    light = Job(job_id=1, model_type="light_bs32", gpus_per_job=1)
    alone = model.predict_speed(light, {})
    crowded = model.predict_speed(light, {"group": ("heavy_bs8", "heavy_bs8")})
    pair = Job(job_id=2, model_type="light_bs32", gpus_per_job=2)
    spread = model.predict_speed(pair, {"span": ("multi_node",)})
    assert crowded < alone - 0.2 and spread < alone - 0.1
    assert all(0.0 < s <= 1.0 for s in (alone, crowded, spread))


def test_predictions_are_in_unit_interval_even_untrained():
    model = InterferenceModel.new(Vocabulary.fit(FAMILIES), seed=3)
    enc = encode_samples(synthetic_samples(50), model.vocab)
    speed = model.predict_tensors(enc.job, enc.counts * 50, enc.shape)
    assert torch.all(speed > 0) and torch.all(speed <= 1)


def test_save_load_roundtrip_and_estimator_protocol(tmp_path):
    model = train_interference(synthetic_samples(200), epochs=3, seed=0, min_steps=0).model
    pt, meta = model.save(tmp_path)
    assert json.loads(meta.read_text())["vocab"] == list(model.vocab.families)
    loaded = InterferenceModel.load(tmp_path)
    job = Job(job_id=1, model_type="heavy", gpus_per_job=2)
    coloc = {"group": ("light",), "node": ("calm", "calm"), "span": ("multi_group",)}
    assert loaded.predict_speed(job, coloc) == pytest.approx(model.predict_speed(job, coloc))
    assert isinstance(loaded, InterferenceEstimator)
    lif = build_plugin("place", "least_interference", {}, interference_estimator=loaded)
    assert lif.estimator is loaded


def test_loading_refuses_pickled_code_and_bad_files(tmp_path):
    model = InterferenceModel.new(Vocabulary.fit(FAMILIES))
    model.save(tmp_path)
    torch.save({"evil": Vocabulary(("unknown",))}, tmp_path / "interference.pt")
    with pytest.raises(ModelFileError, match="interference.pt"):
        InterferenceModel.load(tmp_path)
    (tmp_path / "interference.json").write_text("{not json")
    with pytest.raises(ModelFileError, match=r"interference.json:1: invalid JSON"):
        InterferenceModel.load(tmp_path)
    with pytest.raises(ModelFileError, match="does not exist"):
        InterferenceModel.load(tmp_path / "nothing")


def test_weights_that_do_not_match_the_metadata(tmp_path):
    InterferenceModel.new(Vocabulary.fit(FAMILIES)).save(tmp_path)
    meta = json.loads((tmp_path / "interference.json").read_text())
    meta["vocab"].append("extra")
    (tmp_path / "interference.json").write_text(json.dumps(meta))
    with pytest.raises(ModelFileError, match="do not match"):
        InterferenceModel.load(tmp_path)


def test_mae():
    assert mae([1.0, 0.5], [0.5, 0.5]) == pytest.approx(0.25)


def test_a_query_asked_in_any_order_or_form_gets_the_speed_of_a_fresh_model():
    """predict_speed's memo of queries as asked must give what the canonical query gives:
    levels in another order, lists for tuples, a model type the vocabulary does not know."""
    model = InterferenceModel.new(Vocabulary.fit([f"{f}_bs32" for f in FAMILIES]), seed=3)
    rng = random.Random(4)
    for _ in range(200):
        job = Job(job_id=1, model_type=rng.choice(FAMILIES + ("other", None)),
                  gpus_per_job=rng.choice((1, 2, 4)))
        coloc = {"group": tuple(sorted(rng.choices(FAMILIES, k=rng.randint(0, 2)))),
                 "node": tuple(sorted(rng.choices(FAMILIES, k=rng.randint(0, 2)))),
                 "span": rng.choice(((), ("multi_group",), ("multi_node",)))}
        fresh = InterferenceModel(model.net, model.vocab, 8, 64).predict_speed(job, coloc)
        reordered = dict(reversed(list(coloc.items())))
        as_lists = {k: list(v) for k, v in coloc.items()}
        for query in (coloc, reordered, as_lists, coloc):
            assert model.predict_speed(job, query) == fresh
