"""The GPU-time predictor: features known at submission only, rolling training on the past
only, safe save/load, and the scores it is reported with."""

from __future__ import annotations

import math
import random
from dataclasses import replace
from types import SimpleNamespace

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from history_builders import history
from slurm_marl.history.evaluate import scores
from slurm_marl.history.features import FeatureState, Submission, history_median, name_stem
from slurm_marl.history.predictor import GpuTimeModel, ModelError, replay, rolling
from slurm_marl.history.records import HistoryJob
from slurm_marl.sim.online_prediction import OnlinePredictor


def features_at_submit(jobs: list[HistoryJob]) -> dict[str, dict]:
    out: dict[str, dict] = {}
    replay(jobs, lambda j, row, now: out.__setitem__(j.job_id, row))
    return out


def rewrite_outcomes_after(jobs: list[HistoryJob], t: float, seed: int) -> list[HistoryJob]:
    """Every job not ended by ``t`` gets another run time (still ending after ``t``)."""
    rng = random.Random(seed)
    out = []
    for j in jobs:
        if j.end_s is not None and j.end_s > t:
            start = max(j.start_s, t - 1.0)
            out.append(replace(j, start_s=start, end_s=t + 1.0 + rng.uniform(0, 1e5)))
        else:
            out.append(j)
    return out


def same(a: dict, b: dict) -> bool:
    return all((isinstance(a[k], float) and math.isnan(a[k]) and math.isnan(b[k]))
               or a[k] == b[k] for k in a)


@settings(max_examples=25, deadline=None)
@given(seed=st.integers(0, 10_000), pick=st.integers(0, 119))
def test_features_never_see_the_job_itself_or_later_outcomes(seed, pick):
    jobs = history(seed)
    target = sorted(jobs, key=lambda j: j.submit_s)[pick]
    before = features_at_submit(jobs)[target.job_id]
    changed = rewrite_outcomes_after(jobs, target.submit_s, seed + 1)
    assert changed != jobs or all(j.end_s <= target.submit_s for j in jobs)
    assert same(before, features_at_submit(changed)[target.job_id])


def test_features_do_see_outcomes_known_before_submission():
    """The other side: an outcome known before the submission does move the features
    (else the look-ahead test above could pass with features that read nothing)."""
    jobs = history(3)
    target = sorted(jobs, key=lambda j: j.submit_s)[100]
    row = features_at_submit(jobs)[target.job_id]
    earlier = [j for j in jobs if j.end_s <= target.submit_s and j.user == target.user]
    assert earlier and row["user_n"] > 0
    longer = [replace(j, end_s=j.start_s + (j.end_s - j.start_s) * 50)
              if j in earlier and j.start_s + (j.end_s - j.start_s) * 50 <= target.submit_s
              else j for j in jobs]
    shorter = [replace(j, end_s=j.start_s + 1.0) if j in earlier else j for j in jobs]
    assert not same(features_at_submit(shorter)[target.job_id], row) or \
        not same(features_at_submit(longer)[target.job_id], row)


def test_rolling_predictions_are_made_from_the_past_only():
    jobs = history(7, n=300)
    ordered = sorted(jobs, key=lambda j: j.submit_s)
    start = ordered[150].submit_s
    kwargs = dict(refit_every_s=4 * 3600.0, min_train=40, rounds=20)
    preds = {p.job.job_id: p for p in rolling(jobs, start, **kwargs)}
    assert len(preds) == 150 and all(not math.isnan(p.model_log) for p in preds.values())
    for k in (150, 200, 299):
        target = ordered[k]
        changed = rewrite_outcomes_after(jobs, target.submit_s, k)
        again = {p.job.job_id: p for p in rolling(changed, start, **kwargs)}
        assert again[target.job_id].model_log == preds[target.job_id].model_log
        assert again[target.job_id].baseline_log == preds[target.job_id].baseline_log


def test_model_learns_and_round_trips_through_text_files(tmp_path):
    jobs = history(11, n=400)
    rows, labels = [], []
    replay(jobs, lambda j, row, now: (rows.append(row), labels.append(math.log1p(j.gpu_time_s))))
    model = GpuTimeModel.fit(rows[:300], labels[:300], rounds=50)
    got = model.predict_log(rows[300:])
    truth = np.array(labels[300:])
    base = model.baseline(rows[300:])
    # user and name explain the times: the model ranks better than a constant
    assert scores(got, truth)["spearman"] > 0.5
    assert np.isfinite(base).all()
    model.save(tmp_path / "m")
    assert sorted(p.name for p in (tmp_path / "m").iterdir()) == \
        ["gpu_time_model.json", "gpu_time_model.txt"]
    loaded = GpuTimeModel.load(tmp_path / "m")
    np.testing.assert_array_equal(loaded.predict_log(rows[300:]), got)


def test_load_refuses_other_or_broken_models(tmp_path):
    with pytest.raises(ModelError, match="gpu_time_model.json: unreadable"):
        GpuTimeModel.load(tmp_path)
    jobs = history(2, n=100)
    rows, labels = [], []
    replay(jobs, lambda j, row, now: (rows.append(row), labels.append(math.log1p(j.gpu_time_s))))
    GpuTimeModel.fit(rows, labels, rounds=5).save(tmp_path / "m")
    meta = tmp_path / "m" / "gpu_time_model.json"
    meta.write_text(meta.read_text().replace('"format": 1', '"format": 99'))
    with pytest.raises(ModelError, match="another format"):
        GpuTimeModel.load(tmp_path / "m")
    meta.write_text(meta.read_text().replace('"format": 99', '"format": 1'))
    (tmp_path / "m" / "gpu_time_model.txt").write_text("not a model")
    with pytest.raises(ModelError, match="gpu_time_model.txt: unreadable"):
        GpuTimeModel.load(tmp_path / "m")


def test_history_median_prefers_the_most_specific_history():
    s = FeatureState()
    sub = Submission(user="ann", account="a", partition="p", qos="", name="bert-1",
                     gpus=2, nodes=1, time_limit_s=None, submit_s=0.0)
    assert math.isnan(history_median(s.features(sub)))
    s.ended(replace(sub, user="bob"), 100.0)                # same account + GPUs only
    assert history_median(s.features(sub)) == pytest.approx(math.log1p(100))
    s.ended(replace(sub, name="gpt"), 5000.0)               # same user, other name
    assert history_median(s.features(sub)) == pytest.approx(math.log1p(5000))
    s.ended(sub, 40.0)                                      # same user and name stem
    assert history_median(s.features(sub)) == pytest.approx(math.log1p(40))


def test_name_stem():
    assert [name_stem(n) for n in ("resnet50-lr0.1", "train_bert_3", "42", "")] == \
        ["resnet", "train", "", ""]


def test_scores_on_hand_built_values():
    truth = np.log1p(np.array([100.0, 1000.0, 10000.0, 100000.0]))
    exact = scores(truth, truth)
    assert exact == {"n": 4, "spearman": 1.0, "within_2x": 1.0, "median_abs_log_error": 0.0}
    off = scores(np.log1p(np.array([300.0, 1500.0, 6000.0, 10.0])), truth)
    assert off["within_2x"] == 0.5 and off["spearman"] == pytest.approx(-0.2)


def test_online_predictor_learns_only_from_finished_jobs():
    p = OnlinePredictor(refit_every_s=1e9)
    job = lambda k, user, d: SimpleNamespace(job_id=k, user=user, partition="", num_gpus=1,
                                             duration_s=d)
    assert p.arrived(job(1, "vc1", 100.0), 0.0) is None        # no history: no prediction
    assert p.arrived(job(2, "vc1", 900.0), 10.0) is None       # job 1 has not finished
    p.finished(job(1, "vc1", 100.0), 100.0)
    assert p.arrived(job(3, "vc1", 5.0), 110.0) == pytest.approx(100.0)
    assert p.arrived(job(4, "vc2", 5.0), 120.0) == pytest.approx(100.0)  # site history


def test_online_predictor_knows_prior_history_that_ended_before_the_start():
    mk = lambda k, submit, ran: HistoryJob(
        job_id=str(k), name="", user="vc1", account="vc1", partition="", qos="", gpus=1,
        nodes=1, time_limit_s=None, submit_s=submit, start_s=submit, end_s=submit + ran,
        state="COMPLETED")
    # ended before the origin (1000): 50 GPU-s; still running at the origin: 5000 GPU-s
    prior = [mk(1, 0.0, 50.0), mk(2, 900.0, 5000.0)]
    p = OnlinePredictor(prior=prior, origin_s=1000.0)
    sim_job = SimpleNamespace(job_id=7, user="vc1", partition="", num_gpus=1, duration_s=1.0)
    assert p.arrived(sim_job, 0.0) == pytest.approx(50.0)
    assert p.rows and len(p.rows) == 1          # only job 1 can train a model


def test_philly_prior_is_the_window_s_virtual_cluster_before_it(tmp_path):
    from slurm_marl.sim.online_prediction import philly_prior
    from slurm_marl.sim.traces import load_trace
    path = tmp_path / "philly.csv"
    path.write_text("timestamp,duration,num_gpus,gpu_time,cluster\n"
                    "2017-10-01 00:00:10,100,1,100,a\n"
                    "2017-10-01 00:00:00,200,1,200,a\n"
                    "2017-10-01 00:00:05,300,1,300,b\n"
                    "2017-10-01 00:00:20,400,2,800,a\n"
                    "2017-10-01 00:00:30,500,1,500,a\n")
    prior, origin = philly_prior(path, "vc=a,rows=2:4")
    window = load_trace(path, "vc=a,rows=2:4")
    assert [j.gpu_time_s for j in prior] == [200.0, 100.0]      # vc a, before the window
    assert window[0].duration_s == 400 and window[0].submit_time_s == 0
    assert origin == prior[-1].submit_s + 10
    assert philly_prior(path, None) is None                     # no virtual cluster named


def test_train_takes_only_jobs_ended_by_its_cutoff_and_needs_enough():
    from slurm_marl.history.predictor import MIN_TRAIN, train

    jobs = history(3, n=120)
    ends = sorted(j.end_s for j in jobs)
    model, n = train(jobs)
    assert n == len(jobs) and model.predict_gpu_s([]).shape == (0,)
    cutoff = ends[59]
    assert train(jobs, cutoff)[1] == sum(1 for e in ends if e <= cutoff) == 60
    with pytest.raises(ModelError, match=f"only {MIN_TRAIN - 1} ended jobs"):
        train(jobs, ends[MIN_TRAIN - 2])


@pytest.mark.parametrize("user, name", [("ana", "resnet50-lr0.1"), ("", "bert"), ("ana", "7")])
def test_each_feature_key_is_made_of_the_fields_key_fields_names(user, name):
    """``key_values`` (spelled out for speed) and ``KEY_FIELDS`` (what the store prunes its
    history by) name the same keys made of the same fields."""
    from slurm_marl.history.features import KEY_FIELDS, key_values

    s = Submission(user=user, account="vision", partition="gpu", qos="normal", name=name,
                   gpus=4, nodes=1, time_limit_s=3600.0, submit_s=0.0)
    fields = {"user": s.user, "stem": name_stem(s.name), "gpus": s.gpus, "account": s.account}
    values = key_values(s)
    assert list(values) == list(KEY_FIELDS)
    for key, made_of in KEY_FIELDS.items():
        if values[key] is not None:
            assert values[key] == tuple(fields[f] for f in made_of), key
        else:   # a user key without a user, a stem key without a stem
            assert any(not fields[f] for f in made_of if f in ("user", "stem")), key
