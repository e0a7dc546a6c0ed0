"""Issue 31: the sink reads the GPU requests of all jobs it pins in one ``squeue -j a,b,c``
before its writes and reads the pinned ones back in one after them; it says when its writes
before the lease renewals ended, and the loop's pacer counts a cycle only up to then.
Hand-built inputs, a fake of the Slurm clients that keeps each job's request fields."""

from __future__ import annotations

import time

from fakes import FakeClusterSource, FakeDecisionSink, ScriptedRunner
from slurm_marl.daemon.config import parse_config
from slurm_marl.daemon.service import Agent
from slurm_marl.daemon.store import Store
from slurm_marl.domain import (ClusterSnapshot, Defer, GpuGroup, GroupAlloc, Job, Node,
                               Partition, Place, Release, SetPriority)
from slurm_marl.slurm_integration.marker import Marker, with_marker
from slurm_marl.slurm_integration.ports import WriteStatus
from slurm_marl.slurm_integration.runner import SlurmUnavailable
from slurm_marl.slurm_integration.sink import CliDecisionSink

TYPED = (GpuGroup(0, (0, 1), "s0", 0), GpuGroup(1, (2, 3), "s1", 1))
NODES = tuple(Node(n, partitions=("gpu",), gpu_groups=TYPED) for n in ("n1", "n2"))
READ = "JobID:30|,tres-per-node:200|,tres-per-job:200|"


def job(jid: int) -> Job:
    """Asks for 2 untyped GPUs per node, marked: the agent narrows it to one group."""
    return Job(jid, partition="gpu", gpus_per_node=2,
               admin_comment=with_marker("", Marker("gres:gpu:2", "", "")))


def place(jid: int, group: int = 1) -> Place:
    return Place(jid, nodes=("n1",), allocs=(GroupAlloc("n1", group, 2),), start_now=True)


class Slurm:
    """Each job's two request fields as slurmctld holds them. ``squeue -h -j a,b,c -O``
    prints one row per listed job it knows (measured on 22.05.8: unknown ids of a list are
    left out; ONE unknown id alone fails). Knobs: ``gone`` jobs are unknown; ``omit``,
    ``dup`` and ``bad`` jobs are left out, printed twice, or printed with an unparsable
    field; ``fail`` makes the next squeue calls fail (a timeout) while it holds True;
    ``invalid_list``: a list with an unknown id fails whole, as one unknown id does;
    ``stored``: what a job's TresPerJob reads as after a write (Slurm kept another value).
    Every call advances ``t`` by one (the sink's clock). ``runner`` runs the clients
    against it (and records the calls)."""

    def __init__(self, jobs: list[int]) -> None:
        self.fields = {j: {"TresPerNode": "gres:gpu:2", "TresPerJob": ""} for j in jobs}
        self.runner = ScriptedRunner(self.answer)
        self.gone: set[int] = set()
        self.omit: set[int] = set()
        self.dup: set[int] = set()
        self.bad: set[int] = set()
        self.fail: list[bool] = []
        self.invalid_list = False
        self.stored: dict[int, str] = {}
        self.t = 0.0

    def clock(self) -> float:
        return self.t

    def answer(self, args: list[str]) -> tuple[int, str, str]:
        self.t += 1.0
        if args[0] == "squeue":
            assert args[1:3] == ["-h", "-j"] and args[4:] == ["-O", READ], args
            if self.fail and self.fail.pop(0):
                return 1, "", ("slurm_load_jobs error: Socket timed out on send/recv "
                               "operation")
            ids = [int(x) for x in args[3].split(",")]
            known = [j for j in ids if j in self.fields and j not in self.gone]
            if not known or (self.invalid_list and len(known) < len(ids)):
                return 1, "", "slurm_load_jobs error: Invalid job id specified"
            rows = []
            for j in known:
                f = self.fields[j]
                row = (f"{j:<30}|{f['TresPerNode'] or 'N/A':<200}|"
                       f"{f['TresPerJob'] or 'N/A':<200}|")
                if j in self.bad:
                    row = f"{j}|gres:gpu:s1:x|N/A|"
                if j not in self.omit:
                    rows += [row] * (2 if j in self.dup else 1)
            return 0, "\n".join(rows) + "\n", ""
        assert args[:2] == ["scontrol", "update"], args
        ids = [int(x) for x in args[2].split("=", 1)[1].split(",")]
        if len(ids) == 1 and ids[0] in self.fields:
            for kv in args[3:]:
                key, value = kv.split("=", 1)
                if key in ("TresPerNode", "TresPerJob"):
                    self.fields[ids[0]][key] = value
            if ids[0] in self.stored:
                self.fields[ids[0]]["TresPerJob"] = self.stored[ids[0]]
        return 0, "", ""

    def reads(self) -> list[str]:
        return [c[3] for c in self.runner.calls if c[0] == "squeue"]

    def updates(self) -> list[list[str]]:
        return [c for c in self.runner.calls if c[0] == "scontrol"]


def apply(slurm: Slurm, decisions, jobs: list[int]):
    sink = CliDecisionSink(slurm.runner, retries=0, sleep=lambda s: None, clock=slurm.clock)
    snap = ClusterSnapshot(time_s=0, nodes=NODES, jobs=tuple(job(j) for j in jobs))
    results = sink.apply(decisions, snap)
    return sink, {(r.decision.job_id, type(r.decision).__name__): r for r in results}


def pinned(slurm: Slurm, jid: int) -> bool:
    return slurm.fields[jid] == {"TresPerNode": "", "TresPerJob": "gres:gpu:s1:2"}


def test_k_pins_read_in_one_squeue_before_the_writes_and_one_after():
    ids = [11, 12, 13, 14, 15]
    slurm = Slurm(ids)
    _, res = apply(slurm, [place(j) for j in ids], ids)
    assert [c[0] for c in slurm.runner.calls] == ["squeue"] + ["scontrol"] * 5 + ["squeue"]
    assert slurm.reads() == ["11,12,13,14,15"] * 2
    assert all(pinned(slurm, j) for j in ids)
    assert all(res[(j, "Place")].status is WriteStatus.OK for j in ids)
    # a job never narrowed (its CPUs go with its GPUs: nodes only) is not read at all
    slurm = Slurm([21, 22])
    sink = CliDecisionSink(slurm.runner, retries=0, sleep=lambda s: None)
    snap = ClusterSnapshot(0, NODES, (job(21), job(22).with_(cpus_per_gpu=2)))
    sink.apply([place(21), place(22)], snap)
    assert slurm.reads() == ["21", "21"] and len(slurm.updates()) == 2


def test_more_than_200_pins_are_read_200_a_call():
    ids = list(range(1, 402))
    slurm = Slurm(ids)
    apply(slurm, [place(j) for j in ids], ids)
    reads = slurm.reads()
    assert [len(r.split(",")) for r in reads] == [200, 200, 1] * 2
    assert len(slurm.updates()) == 401 and all(pinned(slurm, j) for j in ids)


def test_a_job_missing_repeated_or_odd_in_the_answer_is_unread_the_others_are_pinned():
    ids = [1, 2, 3, 4]
    slurm = Slurm(ids)
    slurm.omit, slurm.dup, slurm.bad = {2}, {3}, {4}
    _, res = apply(slurm, [place(j) for j in ids], ids)
    assert pinned(slurm, 1)
    for j in (2, 3, 4):
        assert slurm.fields[j] == {"TresPerNode": "gres:gpu:2", "TresPerJob": ""}
        assert res[(j, "Place")].status is WriteStatus.OK
        assert "could not read its GPU request" in res[(j, "Place")].message
        # its nodes are still written, and the job started; no GPU field named
        [upd] = [c for c in slurm.updates() if c[2] == f"jobid={j}"]
        assert "ReqNodeList=n1" in upd and "StartTime=now" in upd
        assert not [a for a in upd if a.startswith("TresPer")]
    assert slurm.reads() == ["1,2,3,4", "1"]   # only the pinned job is read back


def test_a_failed_batch_read_leaves_every_job_of_it_unpinned():
    ids = [1, 2, 3]
    slurm = Slurm(ids)
    slurm.fail = [True]
    _, res = apply(slurm, [place(j) for j in ids], ids)
    assert slurm.reads() == ["1,2,3"]
    assert all(not [a for a in c if a.startswith("TresPer")] for c in slurm.updates())
    assert all("could not read" in res[(j, "Place")].message for j in ids)

    class Raises(Slurm):
        def answer(self, args):
            if args[0] == "squeue":     # the runner's own timeout
                raise SlurmUnavailable(args, -1, "timed out after 20 s")
            return super().answer(args)
    slurm = Raises(ids)
    _, res = apply(slurm, [place(j) for j in ids], ids)
    assert len(slurm.updates()) == 3 and all(res[(j, "Place")].ok for j in ids)
    assert all(not [a for a in c if a.startswith("TresPer")] for c in slurm.updates())


def test_a_gone_job_never_hides_the_others():
    ids = [1, 2, 3]
    slurm = Slurm(ids)
    slurm.gone = {2}        # as measured: a list's unknown id is left out, rc 0
    _, res = apply(slurm, [place(j) for j in ids], ids)
    assert slurm.reads() == ["1,2,3", "1,3"]
    assert pinned(slurm, 1) and pinned(slurm, 3)
    assert "could not read" in res[(2, "Place")].message
    # should a Slurm fail the whole list for one unknown id, its jobs are read one by one
    slurm = Slurm(ids)
    slurm.gone, slurm.invalid_list = {2}, True
    _, res = apply(slurm, [place(j) for j in ids], ids)
    assert slurm.reads()[:4] == ["1,2,3", "1", "2", "3"]
    assert pinned(slurm, 1) and pinned(slurm, 3)
    assert "could not read" in res[(2, "Place")].message
    assert res[(1, "Place")].status is WriteStatus.OK and not res[(1, "Place")].message
    # a timeout is not such a failure: no per-job reads after it
    slurm = Slurm(ids)
    slurm.fail = [True]
    apply(slurm, [place(j) for j in ids], ids)
    assert slurm.reads() == ["1,2,3"]


def test_a_failed_verify_is_that_jobs_failure_only():
    ids = [1, 2, 3]
    slurm = Slurm(ids)
    slurm.stored = {2: "gres:gpu:s0:2"}      # Slurm kept another type for job 2
    decisions = [d for j in ids for d in (SetPriority(j, priority=10 + j), place(j))]
    _, res = apply(slurm, decisions, ids)
    assert slurm.reads() == ["1,2,3", "1,2,3"]
    for kind in ("SetPriority", "Place"):
        bad = res[(2, kind)]
        assert bad.status is WriteStatus.REFUSED
        assert bad.message.startswith("verify failed: TresPerJob reads back as 2 GPU(s) of "
                                      "type 's0'")
        assert res[(1, kind)].status is WriteStatus.OK and res[(3, kind)].ok
    # a job the read-back does not show: "could not read the job back", that job only
    slurm = Slurm(ids)
    slurm.fail = [False]
    decisions = [place(j) for j in ids]
    sink = CliDecisionSink(slurm.runner, retries=0, sleep=lambda s: None)
    snap = ClusterSnapshot(0, NODES, tuple(job(j) for j in ids))
    real_answer = slurm.answer

    def hide_3_after_writes(args):
        if args[0] == "squeue" and slurm.updates():
            slurm.omit = {3}
        return real_answer(args)
    slurm.runner.script = hide_3_after_writes
    res = {r.decision.job_id: r for r in sink.apply(decisions, snap)}
    assert res[3].message == ("verify failed: could not read the job back (the write "
                              "itself was accepted)")
    assert res[1].ok and res[2].ok
    # a failed read-back: every pinned job of it says so
    slurm = Slurm(ids)
    slurm.fail = [False, True]
    _, res = apply(slurm, decisions, ids)
    assert all(res[(j, "Place")].message.startswith("verify failed: could not read")
               for j in ids)


def test_results_keep_the_order_of_the_jobs():
    ids = [5, 3, 9]
    slurm = Slurm(ids)
    sink = CliDecisionSink(slurm.runner, retries=0, sleep=lambda s: None)
    snap = ClusterSnapshot(0, NODES, tuple(job(j) for j in ids))
    decisions = [SetPriority(5, priority=3), place(5), SetPriority(3, priority=2),
                 SetPriority(9, priority=1), place(9)]
    got = [(r.decision.job_id, type(r.decision).__name__) for r in sink.apply(decisions, snap)]
    assert got == [(5, "SetPriority"), (5, "Place"), (3, "SetPriority"), (9, "SetPriority"),
                   (9, "Place")]


def test_read_request_is_the_batch_of_one():
    slurm = Slurm([7])
    sink = CliDecisionSink(slurm.runner)
    assert sink.read_request(7) == {"gpus_per_node": 2, "gpus_per_job": 0, "gpu_type": None}
    slurm.gone = {7}
    assert sink.read_request(7) is None
    assert slurm.reads() == ["7", "7"]


def test_starts_done_is_before_the_lease_renewals_and_after_releases():
    ids = [1, 2, 3, 4]
    slurm = Slurm(ids)
    decisions = [place(1), place(2), Release(3, "queue", "eligible now"),
                 Defer(4, "lease", "waits", seconds=30.0)]
    sink, res = apply(slurm, decisions, ids)
    kinds = [" ".join(c[:3]) for c in slurm.runner.calls]
    assert kinds == ["squeue -h -j", "scontrol update jobid=1", "scontrol update jobid=2",
                     "squeue -h -j", "scontrol update jobid=3", "scontrol update jobid=4"]
    assert slurm.runner.calls[-1][-1] == "StartTime=now+30"
    assert sink.starts_done() == 5.0      # after the release (call 5), before the renewal
    assert all(r.ok for r in res.values())
    # without renewals: the end of apply; before any apply: not known
    slurm = Slurm([1])
    sink, _ = apply(slurm, [place(1)], [1])
    assert sink.starts_done() == slurm.t == 3.0
    assert CliDecisionSink(Slurm([]).runner).starts_done() is None


def test_calls_per_cycle_with_k_pins_and_a_lease_batch():
    """K pins and 250 renewals: K + 2 reads-and-writes for the pins (was 3K: a read, the
    write and a read-back per job) and 2 renewal calls."""
    for k in (1, 10, 50):
        ids = list(range(1, k + 1))
        leased = list(range(1000, 1250))
        slurm = Slurm(ids)
        apply(slurm, [place(j) for j in ids] + [Defer(j, "lease", "", seconds=30.0)
                                                 for j in leased], ids)
        assert len(slurm.runner.calls) == k + 2 + 2


def test_the_cycle_report_says_when_its_starts_ended(tmp_path):
    cfg = parse_config({"agent": {"state_dir": str(tmp_path), "interval_s": 1,
                                  "grace_s": 30}})
    now = 1000.0
    waiting = Job(1, name="j1", partition="gpu", gpus_per_node=1, submit_time_s=now - 5,
                  eligible_time_s=now + 1)
    snap = ClusterSnapshot(now, NODES, (waiting,), (Partition("gpu", ("n1", "n2"), True),))

    class Policy:
        def run_cycle(self, view):
            return [SetPriority(1, "las", "", 2, 0)]

    sink = FakeDecisionSink()
    agent = Agent(cfg, FakeClusterSource(snap), sink, Store(tmp_path / "s.sqlite"), Policy())
    report = agent.cycle()
    assert sink.calls and report.starts_s is None      # the sink does not say
    t0 = time.monotonic()
    sink.done_at = t0 + 0.25
    report = agent.cycle()
    assert len(sink.calls) == 2                        # the lease again
    assert 0.25 - report.duration_s - 0.01 <= report.starts_s <= 0.25
    sink.done_at = 0.0                                 # long before the cycle: 0
    assert agent.cycle().starts_s == 0.0
