"""The daemon predictor's feature history across a restart (issue 16): the jobs it saw
submitted and end during a daemon life are stored (``Store.feature_history``) and a
restarted predictor replays them after the history CSV, so a job submitted after a
restart is predicted exactly as without the restart; never a row seen after the restart,
a job also in the CSV once, strange rows skipped. The model and history CSV are
``test_daemon_predictions``'s (CSV job ids "0" to "299": the jobs here are numbered from
10,000 unless a test means them to be the CSV's)."""

from __future__ import annotations

import logging
import math
import random
import sqlite3
from dataclasses import replace

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from agent_builders import NODES, PARTS
# ``site``: the trained model and its history CSV, a pytest fixture shared with that module
from test_daemon_predictions import job, site  # noqa: F401

from slurm_marl.daemon.predictions import DaemonPredictor
from slurm_marl.daemon.store import Store
from slurm_marl.domain import ClusterSnapshot, JobState
from slurm_marl.history.features import Submission, name_stem
from slurm_marl.history.records import HistoryJob, read_history, write_history

USERS = [("ann", "resnet-a"), ("bob", "bert_b"), ("cy", "gpt"), ("ann", "gpt"),
         ("bob", "resnet-a"), ("cy", "bert_b")]


def save(p: DaemonPredictor, store: Store, keep_submits_s: float = 2 * 86400.0) -> None:
    """What the agent does at the end of each cycle."""
    made, scored, dropped, bad, history, bad_history = p.unsaved()
    store.predictions.save(made, scored, dropped, p.window, bad, history, bad_history,
                           keep_recent=p.keep_recent, keep_submits_s=keep_submits_s,
                           prune_every=1)
    p.saved()


def schedule(seed: int, now: float, n_cycles: int = 10) -> list[tuple]:
    """Cycles (time, runs ended, jobs Slurm lists): each cycle some listed jobs end (a final
    run, ended within the last 900 s, handed over in a shuffled order, not by end time),
    some end a run and are requeued, some vanish unended (cancelled pending), and 1-4
    jobs are submitted."""
    rng = random.Random(seed)
    alive: dict = {}
    out = []
    jid = 10_000
    for c in range(n_cycles):
        t = now + 1000.0 * c
        ends = []
        listed = list(alive)
        rng.shuffle(listed)
        for k in listed:
            gpus, r = alive[k].num_gpus, rng.random()
            end = t - rng.uniform(1, 900)
            ran = rng.choice([30.0, 500.0, 4000.0, 30000.0]) * rng.uniform(0.5, 2)
            if r < 0.4:
                ends.append((k, gpus, end - ran, end, "COMPLETED"))
                del alive[k]
            elif r < 0.5:
                ends.append((k, gpus, end - ran, end, "REQUEUED"))
            elif r < 0.55:
                del alive[k]
        for _ in range(rng.randint(1, 4)):
            jid += 1
            user, name = rng.choice(USERS)
            alive[jid] = job(jid, user, name, t, gpus=rng.choice([1, 2, 4]))
        out.append((t, ends, tuple(alive.values())))
    return out


def drive(p: DaemonPredictor, cycles, store: Store | None = None, **save_kw) -> dict:
    """Run cycles as the agent does (ended runs, then the snapshot); the predictions made."""
    made = {}
    for t, ends, jobs in cycles:
        for k, gpus, start, end, state in ends:
            p.run_ended(k, gpus, start, end, state, now_s=t)
        before = set(p.predicted)
        p.annotate(ClusterSnapshot(t, NODES, jobs, PARTS))
        made.update({k: v for k, v in p.predicted.items() if k not in before})
        if store is not None:
            save(p, store, **save_kw)
    return made


def restarted(folder, stored: tuple, snap: ClusterSnapshot, history: bool = True
              ) -> DaemonPredictor:
    """A predictor started at ``snap.time_s`` from what a store held (``held``)."""
    p = DaemonPredictor(folder / "model", folder / "history.csv", snap.time_s, gate=None)
    predictions, scored, rows = stored
    p.restore(predictions, scored, snap, rows if history else ())
    return p


def held(store: Store) -> tuple:
    return store.predictions.live(), store.predictions.scored(10), store.predictions.history()


def straight_and_restarted(folder, now, cycles, split, tmp_path, **save_kw):
    """Predictions made from cycle ``split`` on: by a predictor that ran straight through,
    by one restarted (from its store) before cycle ``split``, and by one restarted so but
    without the stored history (what the predictor did before this change)."""
    a = DaemonPredictor(folder / "model", folder / "history.csv", now, gate=None)
    straight = drive(a, cycles)
    path = tmp_path / "s.sqlite"
    store = Store(path)
    first = DaemonPredictor(folder / "model", folder / "history.csv", now, gate=None)
    before = drive(first, cycles[:split], store, **save_kw)
    store.close()
    t, _, jobs = cycles[split]
    snap = ClusterSnapshot(t, NODES, jobs, PARTS)
    store = Store(path)
    stored = held(store)
    after = drive(restarted(folder, stored, snap), cycles[split:], store, **save_kw)
    blind = drive(restarted(folder, stored, snap, history=False), cycles[split:])
    store.close()
    later = {k: v for k, v in straight.items() if k not in before}
    return later, after, blind


def test_predictions_after_a_restart_are_those_without_one(site, tmp_path):
    """The key property, on one schedule where the stored history matters: a predictor
    restarted from its store after 5 of 10 cycles predicts each job of the last 5 exactly
    as the one that ran straight through; restored without the stored history (the CSV
    alone) it does not."""
    folder, now = site
    later, after, blind = straight_and_restarted(folder, now, schedule(3, now), 5, tmp_path)
    assert len(later) >= 8
    assert after == later                                   # the same floats
    assert sum(blind[k] != later[k] for k in later) >= len(later) // 2


@settings(max_examples=15, deadline=None)
@given(st.integers(0, 2**32 - 1), st.integers(1, 9))
def test_any_restart_predicts_as_without_one(site, tmp_path_factory, seed, split):
    """Property: for any schedule and restart cycle, the same predictions after the
    restart; with the store pruned to what the features read (rows submitted over 2 h
    before the newest kept only for the keys whose last 10 ended jobs they are)."""
    folder, now = site
    later, after, _ = straight_and_restarted(folder, now, schedule(seed, now), split,
                                             tmp_path_factory.mktemp("h"),
                                             keep_submits_s=7200.0)
    assert after == later


def row(i, job_id, user, name, gpus, submit, end, gpu_s, seen, start=None,
        state="COMPLETED", sacct_id=None):
    """A stored history row (``Store.HISTORY_COLUMNS``); end and gpu_s None: submitted;
    ``sacct_id`` None: as an older version stored it."""
    return (i, job_id, name, user, f"acct-{user}", "gpu", "normal", name_stem(name), gpus, 1,
            3600.0, submit, start, end, state if end is not None else "SUBMITTED", gpu_s,
            seen, sacct_id)


def insert(store: Store, rows) -> None:
    cols = Store.HISTORY_COLUMNS
    store.db.executemany(f"INSERT INTO feature_history ({','.join(cols)}) VALUES "
                         f"({','.join('?' * len(cols))})", rows)


def probe(p: DaemonPredictor, user: str, name: str, t: float) -> dict:
    return p.state.features(Submission(user=user, account=f"acct-{user}", partition="gpu",
                                       qos="normal", name=name, gpus=1, nodes=1,
                                       time_limit_s=3600.0, submit_s=t))


def test_rows_seen_after_the_restart_are_not_used(site, tmp_path, caplog):
    """No look-ahead: at a restart at T, a row seen, ended or submitted after T teaches
    nothing (here each would make zed's last job 1e9 GPU-s): skipped with a warning and
    deleted at the next save."""
    folder, now = site
    T = now + 10_000
    good = [row(1, 10_001, "zed", "zzz", 1, now, None, None, now),
            row(2, 10_001, "zed", "zzz", 1, now, now + 100, 500.0, now + 200, now)]
    late = [row(3, 10_002, "zed", "zzz", 1, now, T + 1, 1e9, T + 5, now),    # ended after
            row(4, 10_003, "zed", "zzz", 1, now, T - 5, 1e9, T + 1, now),    # seen after
            row(5, 10_004, "zed", "zzz", 1, T + 1, None, None, T + 1),       # submitted
            row(6, 10_004, "zed", "zzz", 1, T + 1, T - 9, 1e9, T - 1)]       # after
    store = Store(tmp_path / "s.sqlite")
    insert(store, good + late)
    p = DaemonPredictor(folder / "model", folder / "history.csv", T, gate=None)
    with caplog.at_level(logging.WARNING):
        p.restore([], [], ClusterSnapshot(T, NODES, (), PARTS), store.predictions.history())
    got = probe(p, "zed", "zzz", T + 10)
    assert (got["user_stem_n"], got["user_stem_last"]) == (1.0, math.log1p(500.0))
    assert got["recent_same_submits"] == 0.0      # zed's 10,004 was not submitted by T
    assert "4 stored rows skipped" in caplog.text and "seen after the restart" in caplog.text
    save(p, store)
    assert [r[0] for r in store.predictions.history()] == [1, 2]


def test_a_job_both_in_the_csv_and_in_the_store_counts_once(site, tmp_path):
    """Job "7" of the CSV (cy's or whoever's) also stored, with another GPU-time: the
    features are those of the CSV alone (sacct's row wins); a job not in the CSV is
    added."""
    folder, now = site
    base = DaemonPredictor(folder / "model", folder / "history.csv", now, gate=None)
    csv7 = next(j for j in read_history(folder / "history.csv") if j.job_id == "7")
    rows = [row(1, 7, csv7.user, csv7.name, csv7.gpus, csv7.submit_s, None, None,
                csv7.submit_s),
            row(2, 7, csv7.user, csv7.name, csv7.gpus, csv7.submit_s, csv7.end_s, 1e9,
                csv7.end_s, csv7.start_s)]
    store = Store(tmp_path / "s.sqlite")
    insert(store, rows)
    p = restarted(folder, held(store), ClusterSnapshot(now, NODES, (), PARTS))
    for user, name in USERS:
        assert probe(p, user, name, now + 1) == probe(base, user, name, now + 1)
    assert p.state._count == base.state._count
    # another job id: counted
    insert(store, [row(3, 10_007, csv7.user, csv7.name, csv7.gpus, now - 50, now - 20,
                       1e9, now - 10, now - 40)])
    p = restarted(folder, held(store), ClusterSnapshot(now, NODES, (), PARTS))
    got = probe(p, csv7.user, csv7.name, now + 1)
    assert got["user_stem_last"] == math.log1p(1e9)
    assert got != probe(base, csv7.user, csv7.name, now + 1)


@pytest.mark.parametrize("job_id, task_ids", [(10_130, [4]), (10_123, [None, 4])],
                         ids=["split-out task", "array's own job"])
def test_an_array_task_both_in_the_csv_and_in_the_store_counts_once(site, tmp_path, job_id,
                                                                    task_ids):
    """Task 4 of array 10123, which the agent saw submitted and end (as job 10130, split
    out of the array when it started, or as job 10123 itself: listed pending for the
    array's unsplit tasks, then running as its last task), and which a later ``history
    import`` puts in the CSV as "10123_4": a predictor restarted with both predicts the
    next job as the one that ran straight through, which learned the task once."""
    folder, now = site
    t = [now + 1000.0 * k for k in range(1, 5)]
    task = replace(job(job_id, "zed", "zzz", t[0], gpus=2), array_job_id=10_123)
    start, end = t[len(task_ids) - 1] - 100, t[len(task_ids)] - 100
    cycles = [(t[k], [], (task.with_(array_task_id=i, state=JobState.PENDING if i is None
                                     else JobState.RUNNING),))
              for k, i in enumerate(task_ids)]
    cycles.append((t[len(task_ids)], [(job_id, 2, start, end, "COMPLETED")], ()))
    later = [(t[3], [], (job(10_001, "zed", "zzz", t[3]),))]
    straight = DaemonPredictor(folder / "model", folder / "history.csv", now, gate=None)
    expected = drive(straight, cycles + later)[10_001]
    store = Store(tmp_path / "s.sqlite")
    drive(DaemonPredictor(folder / "model", folder / "history.csv", now, gate=None),
          cycles, store)
    csv = tmp_path / "reimported.csv"
    write_history(csv, read_history(folder / "history.csv") + [HistoryJob(
        "10123_4", "zzz", "zed", "", "gpu", "", 2, 1, None, task.submit_time_s, start, end,
        "COMPLETED")])
    p = DaemonPredictor(folder / "model", csv, t[3], gate=None)
    p.restore(store.predictions.live(), [], ClusterSnapshot(t[3], NODES, later[0][2], PARTS),
              store.predictions.history())
    assert drive(p, later)[10_001] == expected
    # the task's end and its submission known once (the model may round a double count
    # away in this prediction, not in every one)
    assert p.state._count == straight.state._count
    assert p.state._submits == straight.state._submits


def test_a_job_that_ends_after_a_restart_is_stored_with_its_sacct_id(site, tmp_path):
    """Task 4 of array 10123 (job 10130) predicted before a restart and ended, unseen,
    while the agent was down: its end row carries "10123_4" (from its stored submission
    row), so a later restart matches it to the CSV even once that row is pruned."""
    folder, now = site
    store = Store(tmp_path / "s.sqlite")
    store.predictions.save([(10_130, "gpu", 500.0, now - 60, None, 0.0)], [], [], 10,
                           history=[row(0, 10_130, "zed", "zzz", 2, now - 65, None, None,
                                        now - 60, sacct_id="10123_4")[1:]])
    p = restarted(folder, held(store), ClusterSnapshot(now, NODES, (), PARTS))
    drive(p, [(now, [(10_130, 2, now - 50, now - 10, "COMPLETED")], ())], store)
    assert [r[-1] for r in store.predictions.history()] == ["10123_4", "10123_4"]


def test_strange_rows_are_skipped_with_a_warning_and_deleted(site, tmp_path, caplog):
    folder, now = site
    store = Store(tmp_path / "s.sqlite")
    ok = row(1, 10_001, "zed", "zzz", 1, now - 100, now - 10, 777.0, now - 5, now - 50)
    strange = [
        row(2, 10_002, "zed", "zzz", 1, now - 100, now - 10, float("nan"), now - 5),  # NULL
        row(3, 10_003, "zed", "zzz", 1, now - 100, now - 10, -4.0, now - 5),
        row(4, 10_004, "zed", "zzz", 1, now - 100, now - 10, "lots", now - 5),
        row(5, 10_005, "zed", "zzz", -1, now - 100, now - 10, 4.0, now - 5),
        row(6, 10_006, "zed", "zzz", 1, None, now - 10, 4.0, now - 5),
        row(7, 10_007, "zed", "zzz", 1, now - 100, math.inf, 4.0, now - 5),
        row(8, 10_008, "zed", "zzz", 1, now - 100, None, 4.0, now - 5),
        (9, 10_009, None, "zed", "acct-zed", "gpu", "normal", "", 1, 1, None,
         now - 100, None, now - 10, "COMPLETED", 4.0, now - 5, None),
        row(10, 10_010, "zed", "zzz", 1, now - 100, now - 10, 4.0, now - 5, sacct_id=b"x")]
    insert(store, [ok] + strange)
    p = DaemonPredictor(folder / "model", None, now, gate=None)
    with caplog.at_level(logging.WARNING):
        p.restore([], [], ClusterSnapshot(now, NODES, (), PARTS), store.predictions.history())
    assert "9 stored rows skipped" in caplog.text
    assert "history row of job 10002 (not a number or missing)" in caplog.text
    got = probe(p, "zed", "zzz", now)
    assert (got["user_stem_n"], got["user_stem_last"]) == (1.0, math.log1p(777.0))
    assert got["site_n"] == 1.0
    save(p, store)
    assert [r[0] for r in store.predictions.history()] == [1]


def test_an_older_store_without_the_table_opens(site, tmp_path):
    folder, now = site
    path = tmp_path / "s.sqlite"
    Store(path).close()
    db = sqlite3.connect(path)
    db.execute("DROP TABLE feature_history")
    db.commit()
    db.close()
    store = Store(path)
    assert store.predictions.history() == []
    p = restarted(folder, held(store), ClusterSnapshot(now, NODES, (), PARTS))
    drive(p, [(now, [], (job(10_001, "ann", "gpt", now),))], store)
    assert [r[1] for r in store.predictions.history()] == [10_001]


def test_an_older_store_without_sacct_ids_opens_and_matches_by_job_id(site, tmp_path):
    """A feature_history table as stored before ``sacct_id``: opening the store adds the
    column, its rows read NULL there and are matched to the CSV by job id (job "7" counts
    once); rows written now carry the id."""
    folder, now = site
    path = tmp_path / "s.sqlite"
    Store(path).close()
    db = sqlite3.connect(path)
    db.execute("DROP TABLE feature_history")
    db.execute("CREATE TABLE feature_history (id INTEGER PRIMARY KEY AUTOINCREMENT, "
               "job_id INTEGER, name TEXT, user TEXT, account TEXT, partition TEXT, "
               "qos TEXT, stem TEXT, gpus INTEGER, nodes INTEGER, time_limit_s REAL, "
               "submit_s REAL, start_s REAL, end_s REAL, state TEXT, gpu_time_s REAL, "
               "seen_s REAL)")
    csv7 = next(j for j in read_history(folder / "history.csv") if j.job_id == "7")
    db.execute("INSERT INTO feature_history (job_id, name, user, account, partition, qos, "
               "stem, gpus, nodes, submit_s, end_s, state, gpu_time_s, seen_s) VALUES "
               "(7, ?, ?, '', 'gpu', '', '', 1, 1, ?, ?, 'COMPLETED', 1e9, ?)",
               (csv7.name, csv7.user, csv7.submit_s, csv7.end_s, csv7.end_s))
    db.commit()
    db.close()
    store = Store(path)
    assert [r[-1] for r in store.predictions.history()] == [None]
    base = DaemonPredictor(folder / "model", folder / "history.csv", now, gate=None)
    p = restarted(folder, held(store), ClusterSnapshot(now, NODES, (), PARTS))
    assert p.state._count == base.state._count
    drive(p, [(now, [], (job(10_001, "ann", "gpt", now),))], store)
    assert [r[-1] for r in store.predictions.history()] == [None, "10001"]


def test_the_store_keeps_what_the_features_read(tmp_path):
    """Pruned as rows are added: end rows out of the last ``keep_recent`` of every key
    they belong to go once submitted ``keep_submits_s`` before the newest row; submission
    rows of jobs no longer predicted go then too, those of live jobs stay."""
    store = Store(tmp_path / "s.sqlite")
    store.predictions.save([(50, "gpu", 1.0, 0.0, None, 0.0)], [], [], 10)   # job 50 live
    rows = [row(0, 50, "ann", "gpt", 1, 0.0, None, None, 0.0)[1:],       # live: kept
            row(0, 51, "ann", "gpt", 1, 0.0, None, None, 0.0)[1:]]       # gone: pruned
    # ann's 12 gpt jobs on 1 GPU (two names, one stem), then bob's 3: ann's first 9 are
    # out of every key's last 3, bob's are the last of theirs (and of the site's)
    rows += [row(0, 100 + k, "ann", f"gpt-{k % 2}", 1, float(k), k + 1.0, 1.0, k + 2.0)[1:]
             for k in range(12)]
    rows += [row(0, 200 + k, "bob", "bert", 1, 20.0 + k, 21.0 + k, 1.0, 22.0 + k)[1:]
             for k in range(3)]
    store.predictions.save([], [], [], 10, history=rows, keep_recent=3,
                           keep_submits_s=1000.0, prune_every=1)
    assert len(store.predictions.history()) == len(rows)      # all submitted within 1000 s
    store.predictions.save([], [], [], 10, history=[
        row(0, 300, "cy", "gpt", 2, 5000.0, None, None, 5000.0)[1:]], keep_recent=3,
        keep_submits_s=1000.0, prune_every=1)
    kept = [r[1] for r in store.predictions.history()]
    # ann's last 3 (user + stem, user + GPUs, user, account...), bob's 3, the live job 50
    # and the newest row
    assert kept == [50, 109, 110, 111, 200, 201, 202, 300]
