"""Attained service across runs, requeues and restarts, on hand-built snapshots."""

from slurm_marl.daemon.accounting import account, colocation
from slurm_marl.daemon.store import Store
from slurm_marl.domain import ClusterSnapshot, GpuGroup, Job, JobState, Node

NODES = tuple(Node(name=n, partitions=("gpu",), leaf_switch="leaf1",
                   gpu_groups=(GpuGroup(0, (0, 1), "s0", 0), GpuGroup(1, (2, 3), "s1", 1)))
              for n in ("n1", "n2"))


def snap(t, *jobs):
    return ClusterSnapshot(time_s=t, nodes=NODES, jobs=jobs)


def running(jid, start, alloc=(("n1", (0, 1)),), restarts=0, name="j"):
    return Job(jid, name=name, state=JobState.RUNNING, gpus_per_node=2, start_time_s=start,
               nodes=tuple(n for n, _ in alloc), gpu_alloc=alloc, restart_count=restarts,
               submit_time_s=0)


def pending(jid, restarts=0):
    return Job(jid, state=JobState.PENDING, gpus_per_node=2, restart_count=restarts,
               submit_time_s=0)


def test_attained_service_survives_requeue_and_counts_all_runs():
    records = {}
    r = account(snap(100, running(1, 50)), records)
    assert r.snapshot.job(1).attained_gpu_s == 2 * 50
    r = account(snap(110, running(1, 50)), records)
    assert r.snapshot.job(1).attained_gpu_s == 2 * 60
    # requeued: back to pending; the run is closed at the last time it was seen running
    r = account(snap(120, pending(1, restarts=1)), records)
    j = r.snapshot.job(1)
    assert j.attained_gpu_s == 2 * 60 and j.last_run_s == 60 and j.preemptions == 1
    assert j.queue_since_s == 120 and [run.state for run in r.finished_runs] == ["REQUEUED"]
    r = account(snap(200, running(1, 190, restarts=1)), records)
    assert r.snapshot.job(1).attained_gpu_s == 2 * 60 + 2 * 10


def test_requeue_and_restart_between_two_cycles_is_seen():
    records = {}
    account(snap(100, running(1, 50)), records)
    r = account(snap(300, running(1, 250, restarts=1)), records)
    j = r.snapshot.job(1)
    assert j.preemptions == 1 and j.attained_gpu_s == 2 * 50 + 2 * 50


def test_finished_and_vanished_jobs_close_their_runs():
    records = {}
    account(snap(100, running(1, 50), running(2, 60, alloc=(("n2", (2, 3)),))), records)
    done = Job(1, state=JobState.COMPLETED, gpus_per_node=2, end_time_s=105)
    r = account(snap(110, done), records)  # job 2 left squeue unseen
    by_id = {run.job_id: run for run in r.finished_runs}
    assert by_id[1].end_s == 105 and by_id[1].state == "COMPLETED"
    assert by_id[2].end_s == 100 and by_id[2].state == "GONE"
    assert records[1].attained_gpu_s == 2 * 55 and records[2].finished_s == 100


def test_colocation_names_neighbours_at_the_sample_levels():
    a = running(1, 0, alloc=(("n1", (0,)),), name="a")
    b = running(2, 0, alloc=(("n1", (1,)),), name="b")
    c = running(3, 0, alloc=(("n1", (2,)),), name="c")
    d = running(4, 0, alloc=(("n2", (0,)),), name="d")
    e = running(5, 0, alloc=(("n1", (3,)), ("n2", (2,))), name="e")
    colo = colocation(snap(1, a, b, c, d, e))
    assert colo[1] == {"gpu": [], "group": ["b"], "node": ["c", "e"], "leaf": []}
    assert colo[5] == {"gpu": [], "group": ["c"], "node": ["a", "b", "d"], "leaf": []}
    # a run's record keeps every neighbour it had, level by level
    records, seen = {}, {}
    account(snap(1, a, b), records, seen)
    account(snap(2, a, c), records, seen)
    r = account(snap(3, pending(1, restarts=1)), records, seen)
    run = next(run for run in r.finished_runs if run.job_id == 1)
    assert run.colocated == {"gpu": [], "group": ["b"], "node": ["c"], "leaf": []}


def test_records_round_trip_through_the_store(tmp_path):
    store = Store(tmp_path / "s.sqlite")
    records = {}
    r = account(snap(100, running(1, 50)), records)
    store.records.save(r.records.values())
    again = store.records.get([1])
    assert again[1].run_start_s == 50 and again[1].num_gpus == 2
    r = account(snap(130, pending(1, restarts=1)), again)
    store.records.save(r.records.values())
    assert store.records.get([1])[1].attained_gpu_s == 2 * 50
    assert [rec.job_id for rec in store.records.unfinished()] == [1]


def test_colocation_is_given_again_only_while_its_inputs_are_the_same():
    a = running(1, 50, name="a")
    b = running(2, 50, alloc=(("n1", (2,)),), name="b")
    first = colocation(snap(100, a, b))
    assert first[1]["node"] == ["b"] and first[2]["node"] == ["a"]
    assert colocation(snap(160, a, b, pending(3))) is first       # only the clock moved
    moved = running(2, 50, alloc=(("n2", (2,)),), name="b")
    again = colocation(snap(170, a, moved))
    assert again is not first and again[1]["node"] == [] and again[2]["node"] == []
    renamed = running(2, 50, alloc=(("n2", (2,)),), name="c")
    assert colocation(snap(180, running(1, 50, alloc=(("n2", (0,)),), name="a"),
                           renamed))[1]["group"] == []
