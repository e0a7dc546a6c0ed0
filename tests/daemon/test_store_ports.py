"""The state store's ports: each SQLite adapter and its fake in tests/fakes.py pass the same
contract tests, so a test that uses a fake tests what the daemon gets from the store."""

import inspect

import pytest
from fakes import (FakeDecisionLog, FakeGuardSet, FakeJobRecords, FakePredictions,
                   FakeReservations, FakeSpeedSamples, FakeWrittenState, port_methods,
                   signature_shape)

from slurm_marl.daemon.store import JobRecord, Store
from slurm_marl.daemon.store import ports
from slurm_marl.domain import Place, SetPriority

# port -> (the Store attribute of its SQLite adapter, its fake)
PORTS = {ports.JobRecords: ("records", FakeJobRecords),
         ports.WrittenState: ("written", FakeWrittenState),
         ports.Reservations: ("reservations", FakeReservations),
         ports.DecisionLog: ("log", FakeDecisionLog),
         ports.GuardSet: ("guard", FakeGuardSet),
         ports.Predictions: ("predictions", FakePredictions),
         ports.SpeedSamples: ("samples", FakeSpeedSamples)}


@pytest.mark.parametrize("port", PORTS, ids=lambda p: p.__name__)
def test_each_sqlite_adapter_has_its_ports_methods_and_signatures(port, tmp_path):
    adapter = getattr(Store(tmp_path / "s.sqlite"), PORTS[port][0])
    for name, sig in port_methods(port).items():
        assert signature_shape(inspect.signature(getattr(type(adapter), name))) == \
            signature_shape(sig), name


def _port_fixture(port: type):
    """A fixture giving the port's SQLite adapter, then its fake: the same tests run on
    both."""
    attr, fake = PORTS[port]

    @pytest.fixture(params=["sqlite", "fake"], name=attr)
    def impl(request, tmp_path):
        if request.param == "fake":
            return fake()
        return getattr(Store(tmp_path / "s.sqlite"), attr)
    return impl


# one fixture per port, named as the Store's attribute: records, written, reservations,
# log, guard, predictions, samples
for _port, (_attr, _) in PORTS.items():
    globals()[f"{_attr}_fixture"] = _port_fixture(_port)


def test_job_records(records):
    recs = [JobRecord(job_id=3, user="u", name="a", model_type="bert"),
            JobRecord(job_id=1, user="u", name="a", model_type="gpt", finished_s=5.0),
            JobRecord(job_id=2, user="v", name="b")]
    records.save(recs)
    assert records.get() == {r.job_id: r for r in recs}
    assert list(records.get()) == [1, 2, 3]
    assert records.get([2, 9]) == {2: recs[2]}
    assert records.get([3])[3] is not recs[0]            # a copy, as read from a file
    assert [r.job_id for r in records.unfinished()] == [2, 3]
    assert records.signatures() == {("u", "a"): "bert"}   # the newest job's
    records.set_queues([(2, 1), (9, 0)])
    assert records.get([2])[2].queue == 1 and 9 not in records.get()


def test_live_records_are_kept_between_calls(records):
    records.save([JobRecord(job_id=1), JobRecord(job_id=2, finished_s=1.0)])
    live = records.live([2])
    assert sorted(live) == [1, 2]
    live[1].attained_gpu_s = 7.0
    live[5] = JobRecord(job_id=5)                         # a new job the cycle added
    again = records.live([1])
    assert again[1].attained_gpu_s == 7.0 and 5 in again and 2 not in again
    records.set_queues([(1, 3)])
    assert again[1].queue == 3
    records.forget_live()
    assert records.live([])[1].attained_gpu_s == 0.0     # read again: never saved


def test_written_state(written):
    written.mark([(1, "priority", "10"), (1, "hold", "1"), (2, "priority", "5")], 0.0)
    written.mark([(1, "priority", "11")], 1.0)
    assert written.get([1]) == {(1, "priority"): "11", (1, "hold"): "1"}
    written.forget(1, ["hold", "nice"])
    assert written.get([1, 2, 3]) == {(1, "priority"): "11", (2, "priority"): "5"}


def test_reservations(reservations):
    reservations.add("r1", 7, "n[1-2]", 10.0)
    reservations.add("r2", 8, "n3", 11.0)
    reservations.end("r2", 12.0)
    assert reservations.active() == {"r1": {"name": "r1", "job_id": 7, "nodes": "n[1-2]",
                                            "created_s": 10.0, "ended_s": None}}
    reservations.add("r2", 9, "n4", 13.0)                 # re-created: active again
    assert reservations.active()["r2"] == {"name": "r2", "job_id": 9, "nodes": "n4",
                                           "created_s": 11.0, "ended_s": None}


def test_decision_log(log):
    log.record(1, 100.0, [(SetPriority(job_id=4, priority=10, reason="las"), "ok", "")])
    log.record(2, 200.0, [(Place(job_id=4, reason="wait", nodes=("n1",)), "refused", "no"),
                          (SetPriority(job_id=5, priority=3), "ok", "")])
    rows = log.decisions()
    assert [(r["cycle"], r["job_id"], r["kind"]) for r in rows] == [
        (2, 5, "SetPriority"), (2, 4, "Place"), (1, 4, "SetPriority")]
    assert rows[2]["payload"]["priority"] == 10 and rows[2]["reason"] == "las"
    assert rows[1]["status"] == "refused" and rows[1]["message"] == "no"
    assert rows[1]["payload"]["nodes"] == ["n1"]              # as JSON keeps it
    assert [r["cycle"] for r in log.decisions(job_id=4)] == [2, 1]
    assert [r["job_id"] for r in log.decisions(kind="SetPriority", limit=1)] == [5]
    assert [r["job_id"] for r in log.decisions(since_s=150.0)] == [5, 4]
    log.record_outcome(4, 1, user="u", end_s=50.0, state="COMPLETED")
    log.record_outcome(5, 1, user="v", end_s=None)
    log.record_outcome(4, 1, user="u", end_s=60.0, state="FAILED")   # replaced
    out = log.outcomes()
    assert [(r["job_id"], r["end_s"], r["state"]) for r in out] == [
        (5, None, None), (4, 60.0, "FAILED")]
    assert out[1]["nodes"] is None and out[1]["user"] == "u"


def test_guard_set(guard):
    assert guard.get() == {}
    guard.set({3: (10.0, 20.0), 4: (11.0, None)})
    guard.set({3: (10.0, 20.0)})
    assert guard.get() == {3: {"job_id": 3, "protected_s": 10.0, "shadow_start_s": 20.0}}


def test_predictions(predictions):
    predictions.save([(2, "gpu", 100.0, 1.0, 1, 0.0), (1, "gpu", 50.0, 1.0, 2, 0.0)], [],
                     [], 2)
    predictions.save([(2, "gpu", 120.0, 1.0, 1, 10.0)], [], [1], 2)
    assert predictions.live() == [(2, "gpu", 120.0, 1.0, 1, 10.0)]
    pairs = [(j, part, 1.0, 2.0, 0.0, 5.0, 6.0, j) for j, part in
             ((10, "a"), (11, "a"), (12, "b"), (13, "a"))]
    predictions.save([], pairs, [], 2)
    scored = predictions.scored(2)
    assert [r[1] for r in scored] == [11, 12, 13]         # the last 2 of "a", by id
    assert [r[1:] for r in predictions.scored(1)] == [pairs[2], pairs[3]]
    predictions.save([], [], [], 2, dropped_scored=[scored[0][0]])
    assert [r[1] for r in predictions.scored(5)] == [12, 13]
    row = (7, "job", "u", "acct", "gpu", "normal", "job", 1, 1, 3600.0, 0.0, None, None,
           "SUBMITTED", None, 1.0, "7")
    predictions.save([], [], [], 2, history=[row, row])
    first = predictions.history()
    assert [r[1:] for r in first] == [row, row] and first[0][0] < first[1][0]
    predictions.save([], [], [], 2, dropped_history=[first[0][0]])
    assert predictions.history() == first[1:]


def test_speed_samples(samples):
    assert samples.add([]) == 0
    assert samples.add([{"job_id": 3, "run": 1, "speed": 0.5, "time_s": 1.0},
                        {"job_id": "4", "speed": 1.0}]) == 2
    assert samples.all() == [{"job_id": 3, "run": 1, "speed": 0.5, "time_s": 1.0},
                             {"job_id": "4", "speed": 1.0}]
    with pytest.raises(KeyError):
        samples.add([{"speed": 1.0}])


def test_the_fake_log_gives_the_adapters_rows(tmp_path):
    """Whole rows, not only the fields the contract above looks at."""
    made = []
    for log in (Store(tmp_path / "s.sqlite").log, FakeDecisionLog()):
        log.record(1, 100.0, [(SetPriority(job_id=4, priority=10, queue=1, plugin="las"),
                               "ok", ""), (Place(job_id=5, nodes=("n1", "n2")), "failed", "x")])
        log.record_outcome(4, 1, user="u", end_s=50.0)
        made.append((log.decisions(), log.outcomes()))
    assert made[0] == made[1]
