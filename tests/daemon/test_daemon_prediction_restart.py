"""The daemon's GPU-time predictions across a restart (issue 16): live jobs keep the
prediction they were given, and the prediction-skill gate is rebuilt from the pairs it had
scored, so its verdict is the one it had (the gain measures too: their arrival order is
kept); out of sample (no pair known only after the restart, none scored with a prediction
made after it was scored); an older store opens, and strange stored rows are skipped with a
warning. The model and history are ``test_daemon_predictions``'s."""

from __future__ import annotations

import logging
import math
import sqlite3

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from agent_builders import NODES, PARTS
# ``site``: the trained model and its history CSV, a pytest fixture shared with that module
from test_daemon_feature_history_restart import drive
from test_daemon_predictions import job, site  # noqa: F401

from fakes import FakeClusterSource, FakeDecisionSink
from slurm_marl.daemon.config import parse_config
from slurm_marl.daemon.predictions import DaemonPredictor
from slurm_marl.daemon.service import Agent
from slurm_marl.daemon.store import Store
from slurm_marl.domain import ClusterSnapshot, Job, JobState
from slurm_marl.history.skill import GateParams, SkillGate
from slurm_marl.policy.framework import build_policy
from slurm_marl.policy.profile import load_profile


PARAMS = GateParams(window=6, min_scored=3, threshold=0.7)
USERS = [("ann", "resnet-a"), ("bob", "bert_b"), ("cy", "gpt"), ("ann", "gpt"),
         ("bob", "resnet-a"), ("cy", "bert_b")]


def save(p: DaemonPredictor, store: Store) -> None:
    """What the agent does at the end of each cycle."""
    made, scored, dropped, bad, ended, bad_ended = p.unsaved()
    store.predictions.save(made, scored, dropped, p.window, bad, ended, bad_ended,
                           keep_recent=p.keep_recent)
    p.saved()


@pytest.mark.parametrize("truth, gate_open", [
    (lambda pred: 3 * pred + 7, True),                 # in the predicted order
    (lambda pred: 1e9 / (1 + pred), False),            # in the reverse order
])
def test_the_gate_s_verdict_after_a_restart_is_the_one_before(site, tmp_path, truth,
                                                              gate_open):
    folder, now = site
    store = Store(tmp_path / "s.sqlite")
    p = DaemonPredictor(folder / "model", folder / "history.csv", now, gate=PARAMS)
    jid, t, alive = 0, now, []
    for c in range(4):
        t = now + 1000 * c
        jobs = []
        for user, name in USERS[: 3 + c]:
            jid += 1
            jobs.append(job(jid, user, name, t))
        p.annotate(ClusterSnapshot(t, NODES, tuple(alive + jobs), PARTS))
        save(p, store)
        for j in jobs[:-1]:        # the last of each cycle waits on
            gpu_s = truth(p.predicted[j.job_id])
            # one run of gpu_s seconds on 1 GPU, ended by the cycle that sees it end
            p.run_ended(j.job_id, 1, t + 800 - gpu_s, t + 800, "COMPLETED", now_s=t + 900)
        alive.append(jobs[-1])
        save(p, store)
    before = p.gate.skill("gpu")
    assert before[1] == PARAMS.window == 6      # 14 finished: the window is full
    assert (p.gate.withheld("gpu") == "") is gate_open
    assert len(store.predictions.scored(100)) == PARAMS.window     # the table is bounded
    waiting = {k: v for k, v in p.predicted.items()}
    assert len(waiting) == 4
    store.close()

    # the restart: a new store object and predictor, a later snapshot with the waiting jobs
    store = Store(tmp_path / "s.sqlite")
    after = DaemonPredictor(folder / "model", folder / "history.csv", t + 2000, gate=PARAMS)
    snap = ClusterSnapshot(t + 2000, NODES, tuple(alive), PARTS)
    after.restore(store.predictions.live(), store.predictions.scored(after.window), snap)
    value, n = after.gate.skill("gpu")
    assert n == before[1] and value == pytest.approx(before[0], abs=1e-12)
    assert after.gate.withheld("gpu") == p.gate.withheld("gpu")
    assert (after.gate.withheld("gpu") == "") is gate_open
    # and it goes on as the gate before it would: the waiting jobs are pending in both
    assert after.gate._recorded == p.gate._recorded
    shown = {j.job_id: j for j in after.annotate(snap).jobs}
    for k, v in waiting.items():
        assert shown[k].predicted_gpu_s == (v if gate_open else None)


def gain_schedule(now: float, n_cycles: int = 8) -> list[tuple]:
    """Cycles (time, runs ended, jobs Slurm lists), as ``drive`` takes them: each cycle 4
    jobs are submitted, in partitions gpu and cpu by turns; job k ends 1-3 cycles later
    (not in arrival order) after 60 to 6,060 GPU-s of its own, whatever was predicted."""
    listed: dict[int, Job] = {}
    ends: dict[int, list[int]] = {}
    out = []
    for c in range(n_cycles):
        t = now + 1000.0 * c
        ended = []
        for k in ends.pop(c, []):
            gpu_s = 60.0 * (1 + k * 37 % 101)
            ended.append((k, 1, t - 100 - gpu_s, t - 100, "COMPLETED"))
            del listed[k]
        for n in range(4):
            k = 20_000 + 4 * c + n
            user, name = USERS[k % len(USERS)]
            listed[k] = job(k, user, name, t).with_(partition=("gpu", "cpu")[n % 2])
            ends.setdefault(c + 1 + k % 3, []).append(k)
        out.append((t, ended, tuple(listed.values())))
    return out


@pytest.mark.parametrize("measure", ["gain", "log-gain"])
def test_a_gain_gate_restarted_goes_on_as_one_that_ran_straight_through(site, tmp_path,
                                                                        measure):
    """The gain measures rank the scored jobs of a partition by arrival: a gate restarted
    from its store (after 4 of 8 cycles) gives, cycle after cycle, each partition the
    skill and verdict of the gate that ran straight through; so it has the same pairs, and
    their arrival numbers and the waiting jobs' are kept, and the pairs go in in the order
    scored (the oldest leave the window first)."""
    folder, now = site
    params = GateParams(window=6, min_scored=3, threshold=0.3, measure=measure)
    cycles = gain_schedule(now)

    def predictor(at: float) -> DaemonPredictor:
        return DaemonPredictor(folder / "model", folder / "history.csv", at, gate=params)

    def skills(p: DaemonPredictor) -> dict:
        return {part: (p.gate.skill(part), p.gate.withheld(part)) for part in ("gpu", "cpu")}

    straight, first = predictor(now), predictor(now)
    store = Store(tmp_path / "s.sqlite")
    drive(first, cycles[:4], store)
    t, _, jobs = cycles[4]
    after = predictor(t)
    after.restore(store.predictions.live(), store.predictions.scored(after.window),
                  ClusterSnapshot(t, NODES, jobs, PARTS), store.predictions.history())
    drive(straight, cycles[:4])
    seen = []
    for cycle in cycles[4:]:
        drive(straight, [cycle])
        drive(after, [cycle], store)
        assert skills(after) == skills(straight)
        seen.append(skills(straight))
    # the gates scored a full window in each partition, and their verdicts changed
    assert [n for (_, n), _ in seen[-1].values()] == [params.window] * 2
    assert len({why == "" for cycle in seen for _, why in cycle.values()}) == 2


def test_a_live_job_keeps_its_prediction_across_a_restart(site, tmp_path):
    """Through the agent: job 1, predicted before the restart, keeps that prediction
    although the restarted predictor (no history now) would predict it differently; it is
    pending in the gate again and is scored, after the restart, with that prediction."""
    folder, now = site
    cfg = parse_config({"agent": {"state_dir": str(tmp_path), "interval_s": 1,
                                  "grace_s": 30, "shadow": True}})
    policy = build_policy(load_profile("predicted-las"))
    waiting = job(1, "cy", "gpt", now)
    first = DaemonPredictor(folder / "model", folder / "history.csv", now, gate=PARAMS)
    agent = Agent(cfg, FakeClusterSource(ClusterSnapshot(now, NODES, (waiting,), PARTS)),
                  FakeDecisionSink(), Store(tmp_path / "s.sqlite"), policy, predictor=first)
    assert agent.cycle().error is None
    before = first.predicted[1]
    agent.store.close()

    later = now + 3600
    fresh = DaemonPredictor(folder / "model", None, later, gate=None)
    fresh.annotate(ClusterSnapshot(later, NODES, (waiting,), PARTS))
    assert fresh.predicted[1] != pytest.approx(before, rel=0.01)   # would differ now

    second = DaemonPredictor(folder / "model", None, later, gate=PARAMS)
    source = FakeClusterSource(ClusterSnapshot(later, NODES, (
        waiting, job(2, "ann", "resnet-a", later)), PARTS))
    agent = Agent(cfg, source, FakeDecisionSink(), Store(tmp_path / "s.sqlite"), policy,
                  predictor=second)
    assert agent.cycle().error is None
    assert second.predicted[1] == before                       # exactly the stored one
    assert second.gate._recorded[1] == ("gpu", before, 0)      # pending, its arrival kept
    assert second.gate._recorded[2][2] == 1                    # a new job arrives after it
    # job 1 runs and ends: scored with the prediction made before the restart
    running = waiting.with_(state=JobState.RUNNING, start_time_s=later + 10, nodes=("n1",))
    source.snap = ClusterSnapshot(later + 20, NODES, (running,), PARTS)
    assert agent.cycle().error is None
    done = running.with_(state=JobState.COMPLETED, end_time_s=later + 110)
    source.snap = ClusterSnapshot(later + 120, NODES, (done,), PARTS)
    assert agent.cycle().error is None
    (row,) = agent.store.predictions.scored(10)
    assert row[1:] == (1, "gpu", before, 100.0, now, later + 110, later + 120, 0)
    assert second.gate.skill("gpu") == (None, 1)
    assert agent.store.predictions.live() == []      # job 1 scored, job 2 gone: nothing kept


def scored_row(i, made, finished, scored, pred, truth, part="gpu"):
    return (i, 100 + i, part, pred, truth, made, finished, scored, i)


def test_restore_scores_only_pairs_known_before_the_restart(site, tmp_path, caplog):
    """At a restart at T, the gate scores exactly the stored pairs with made_s <= scored_s
    <= T and finished_s <= T, in their order. Here the others would close the gate (their
    truths reverse their predictions): they are skipped with a warning, and deleted."""
    folder, now = site
    T = now + 10_000
    good = [scored_row(i, now, now + i, now + i + 1, pred=10.0 * i, truth=100.0 * i)
            for i in range(1, 5)]
    bad = [scored_row(5, now, T + 5, T + 6, pred=1.0, truth=1e9),     # finished later
           scored_row(6, now, T - 5, T + 1, pred=2.0, truth=1e8),     # seen after T
           scored_row(7, T - 1, T - 9, T - 8, pred=3.0, truth=1e7)]   # predicted after
    store = Store(tmp_path / "s.sqlite")
    store.predictions.save([], [r[1:] for r in sorted(good + bad)], [], PARAMS.window)
    assert len(store.predictions.scored(PARAMS.window)) == 6     # window 6 of 7 rows
    store.predictions.save([], [], [], 100)
    rows = store.predictions.scored(100)
    p = DaemonPredictor(folder / "model", None, T, gate=GateParams(window=10, min_scored=3,
                                                                   threshold=0.7))
    with caplog.at_level(logging.WARNING):
        p.restore([], rows, ClusterSnapshot(T, NODES, (), PARTS))
    twin = SkillGate(p.gate.params)
    for r in rows:
        if r[0] in {g[0] for g in good}:
            twin.score("gpu", r[3], r[4], r[8])
    assert p.gate.skill("gpu") == twin.skill("gpu") == (1.0, 3)    # row 1 fell off at 6
    assert p.gate.withheld("gpu") == ""
    assert "3 stored rows skipped" in caplog.text
    assert "finished after the restart" in caplog.text
    assert "predicted after it was scored" in caplog.text
    save(p, store)
    assert [r[0] for r in store.predictions.scored(100)] == [2, 3, 4]


@settings(max_examples=60, deadline=None)
@given(st.lists(st.tuples(st.integers(0, 20), st.integers(0, 20), st.integers(0, 20),
                          st.floats(0, 1e6), st.floats(0, 1e6), st.sampled_from("ab")),
                max_size=30),
       st.integers(0, 20))
def test_a_restored_gate_reads_only_what_was_known_at_the_restart(site, rows,
                                                                  restart):
    """Property: for any stored pairs, the restored gate equals a gate fed, in order,
    only the pairs made no later than scored, and finished and scored no later than the
    restart."""
    folder, _ = site
    params = GateParams(window=5, min_scored=1, threshold=0.5)
    p = DaemonPredictor(folder / "model", None, float(restart), gate=params)
    stored = [(i, i, part, pred, truth, float(made), float(fin), float(seen), i)
              for i, (made, fin, seen, pred, truth, part) in enumerate(rows)]
    p.restore([], stored, ClusterSnapshot(float(restart), (), (), ()))
    twin = SkillGate(params)
    for i, _, part, pred, truth, made, fin, seen, arrival in stored:
        if made <= seen <= restart and fin <= restart:
            twin.score(part, pred, truth, arrival)
    for part in "ab":
        assert p.gate.skill(part) == twin.skill(part)


def test_an_older_store_opens_and_strange_rows_are_skipped(site, tmp_path, caplog):
    folder, now = site
    path = tmp_path / "s.sqlite"
    Store(path).close()
    db = sqlite3.connect(path)        # a store of a version without the new tables
    db.execute("DROP TABLE predictions")
    db.execute("DROP TABLE scored_predictions")
    db.commit()
    db.close()
    store = Store(path)
    assert store.predictions.live() == [] and store.predictions.scored(10) == []
    # strange rows, as a bad disk or a hand edit might leave them, and one good row each
    store.db.executemany("INSERT INTO predictions VALUES (?, ?, ?, ?, ?, ?)", [
        (1, "gpu", float("nan"), now, 0, 0.0),        # NaN: stored as NULL
        (2, "gpu", -5.0, now, 1, 0.0),
        (3, "gpu", "many", now, 2, 0.0),
        (4, "gpu", 100.0, now, 3, -1.0),
        (5, "gpu", 250.0, now, 4, 30.0)])
    store.db.executemany("INSERT INTO scored_predictions (job_id, partition, "
                         "predicted_gpu_s, true_gpu_s, made_s, finished_s, scored_s, "
                         "arrival) VALUES (?, ?, ?, ?, ?, ?, ?, ?)", [
                             (9, "gpu", 1.0, math.inf, now, now, now, 5),
                             (10, "gpu", 1.0, -2.0, now, now, now, 6),
                             (11, None, 1.0, 2.0, now, now, now, 7),
                             (12, "gpu", 1.0, 2.0, now, now, now, -1),
                             (13, "gpu", 3.0, 4.0, now, now, now, 8)])
    cfg = parse_config({"agent": {"state_dir": str(tmp_path), "interval_s": 1,
                                  "grace_s": 30, "shadow": True}})
    p = DaemonPredictor(folder / "model", None, now + 10, gate=PARAMS)
    agent = Agent(cfg, FakeClusterSource(ClusterSnapshot(now + 10, NODES, tuple(
        job(k, "ann", "gpt", now) for k in range(1, 6)), PARTS)), FakeDecisionSink(), store,
        build_policy(load_profile("predicted-las")), predictor=p)
    with caplog.at_level(logging.WARNING):
        assert agent.cycle().error is None
    assert "8 stored rows skipped" in caplog.text
    assert p.predicted[5] == 250.0 and p._gpu_s[5] == 30.0
    assert p.gate.skill("gpu") == (None, 1)
    # jobs 1-4 were predicted afresh (finite, not negative), and stored so
    stored = {r[0]: r[2] for r in store.predictions.live()}
    assert stored[5] == 250.0
    assert all(math.isfinite(stored[k]) and stored[k] >= 0 for k in range(1, 5))
    assert [r[1] for r in store.predictions.scored(10)] == [13]
