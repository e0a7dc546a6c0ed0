"""The store writes a job record only when it changed since this store saved it, and a
decision's payload is the same whether it is flat or nested."""

import json
from dataclasses import asdict, replace

from slurm_marl.daemon.store import JobRecord, Store, decision_payload
from slurm_marl.domain import (Defer, EndReservation, GroupAlloc, Place, Preempt, Release,
                               Reserve, SetPriority)


class CountingStore(Store):
    def __init__(self, path):
        super().__init__(path)
        self.written_rows = 0
        inner = self.transaction

        store = self

        class Counting:
            def __init__(self, ctx):
                self.ctx = ctx

            def __enter__(self):
                db = self.ctx.__enter__()

                class Db:
                    def executemany(self, sql, rows):
                        rows = list(rows)
                        if sql.startswith("INSERT INTO jobs"):
                            store.written_rows += len(rows)
                        return db.executemany(sql, rows)

                    def __getattr__(self, name):
                        return getattr(db, name)
                return Db()

            def __exit__(self, *exc):
                return self.ctx.__exit__(*exc)

        self.transaction = lambda: Counting(inner())


def test_unchanged_records_are_not_written_again(tmp_path):
    st = CountingStore(tmp_path / "s.sqlite")
    recs = [JobRecord(job_id=i, user="u", num_gpus=1, attained_gpu_s=float(i)) for i in range(5)]
    st.records.save(recs)
    assert st.written_rows == 5
    st.records.save(recs)
    assert st.written_rows == 5                      # nothing changed: nothing written
    recs[2] = replace(recs[2], attained_gpu_s=99.0)
    st.records.save(recs)
    assert st.written_rows == 6
    st.records.set_queues([(3, 1)])                          # changed under the cache
    st.records.save(recs)
    assert st.written_rows == 7
    assert st.records.get([2, 3])[2].attained_gpu_s == 99.0
    assert st.records.get([3])[3].queue is None      # the record said no queue: it wins
    st.prune(keep_days=1.0, now_s=1e9)
    st.records.save(recs)
    assert st.written_rows == 12                     # after a prune all are written again
    # another store object on the same file starts with no cache
    other = CountingStore(tmp_path / "s.sqlite")
    other.records.save(recs)
    assert other.written_rows == 5


def test_payload_of_every_decision_kind_equals_the_full_conversion():
    decisions = [SetPriority(1, "las", "q0", 5, 0), Release(2, "x", "r"), Preempt(3, "p", "r"),
                 Defer(4, "d", "r", 30), EndReservation(5, "e", "r", "resv"),
                 Reserve(6, "b", "r", ("n1",), 10.0, 600.0),
                 Place(7, "c", "r", ("n1", "n2"), (GroupAlloc("n1", 0, 2),), True,
                       (("consolidate", 1.0),))]
    for d in decisions:
        full = asdict(d)
        for key in ("job_id", "plugin", "reason"):
            full.pop(key)
        assert json.dumps(decision_payload(d), default=str) == json.dumps(full, default=str)


def test_job_with_is_dataclasses_replace_without_its_cost():
    import pytest

    from slurm_marl.domain import Job, JobState
    job = Job(7, name="a", gpus_per_node=2, state=JobState.RUNNING, nodes=("n1",))
    changed = job.with_(attained_gpu_s=5.0, name="b")
    assert changed == replace(job, attained_gpu_s=5.0, name="b")
    assert job.name == "a" and job.attained_gpu_s == 0.0          # the original is untouched
    assert hash(changed) == hash(replace(job, attained_gpu_s=5.0, name="b"))
    with pytest.raises(TypeError, match="no field.*colour"):
        job.with_(colour="red")


def test_seen_times_are_written_when_they_move_a_minute(tmp_path):
    st = CountingStore(tmp_path / "s.sqlite")
    rec = JobRecord(job_id=1, last_seen_s=6000.0, last_running_s=6000.0)
    st.records.save([rec])
    st.records.save([replace(rec, last_seen_s=6030.0, last_running_s=6030.0)])
    assert st.written_rows == 1
    # the file lags; this store object (the daemon's) reads the exact times back
    assert Store(tmp_path / "s.sqlite").records.get([1])[1].last_running_s == 6000.0
    assert st.records.get([1])[1].last_running_s == 6030.0
    assert st.records.unfinished()[0].last_seen_s == 6030.0
    st.prune(keep_days=1.0, now_s=1e9)               # clears the row cache, not the times
    assert st.records.get([1])[1].last_running_s == 6030.0
    st.records.save([replace(rec, last_seen_s=6061.0, last_running_s=6061.0)])
    assert st.written_rows == 2 and st.records.get([1])[1].last_seen_s == 6061.0
    st.records.save([replace(rec, last_seen_s=6062.0, preemptions=1)])
    assert st.written_rows == 3                      # any other change is written at once


def test_live_records_are_the_unfinished_and_the_listed_ones(tmp_path):
    st = Store(tmp_path / "s.sqlite")
    st.records.save([JobRecord(1, attained_gpu_s=1.0), JobRecord(2, finished_s=50.0),
                  JobRecord(3, finished_s=60.0), JobRecord(4)])
    live = st.records.live([2, 4, 9])
    assert sorted(live) == [1, 2, 4]   # unfinished 1 and 4, finished 2 still listed
    assert live == {**{k: v for k, v in st.records.get([2, 4]).items()},
                    1: st.records.unfinished()[0]}
