"""The GPU re-pin is one update that moves a job's request across fields: pure rules, and a
property over every sequence of placements, Slurm refusals, failed read-backs and agent
deaths (the sink driven against a model of one job's request fields in slurmctld)."""

from __future__ import annotations

from hypothesis import given, settings
from fakes import ScriptedRunner
from hypothesis import strategies as st

from slurm_marl.domain import (ClusterSnapshot, GpuGroup, GroupAlloc, Job, Node, Place,
                               SetPriority)
from slurm_marl.slurm_integration.text import gres as G
from slurm_marl.slurm_integration.marker import Marker, with_marker
from slurm_marl.slurm_integration.sink import CliDecisionSink
from slurm_marl.slurm_integration.sink_plan import plan_gpu_pin

TYPED = (GpuGroup(0, (0, 1), "s0", 0), GpuGroup(1, (2, 3), "s1", 1))
SNAP = ClusterSnapshot(time_s=0, nodes=(Node("n1", gpu_groups=TYPED),
                                        Node("n2", gpu_groups=TYPED)))


def marked(job: Job, tpn: str = "", tpj: str = "") -> Job:
    return job.with_(admin_comment=with_marker("", Marker(tpn, tpj, "")))


def place(job: Job, node: str, group: int, gpus: int, start_now: bool = True) -> Place:
    return Place(job.job_id, nodes=(node,), allocs=(GroupAlloc(node, group, gpus),),
                 start_now=start_now)


def test_untyped_request_moves_to_the_other_field_typed_in_one_update():
    job = marked(Job(1, gpus_per_node=2), tpn="gres:gpu:2")
    assert plan_gpu_pin(job, place(job, "n1", 1, 2), SNAP) == (
        {"TresPerNode": "", "TresPerJob": "gres:gpu:s1:2", "NumNodes": "1-1"}, "")
    gpus = marked(Job(2, gpus_per_job=2), tpj="gres:gpu:2")
    assert plan_gpu_pin(gpus, place(gpus, "n2", 0, 2), SNAP) == (
        {"TresPerJob": "", "TresPerNode": "gres:gpu:s0:2", "NumNodes": "1-1"}, "")


def test_a_pinned_job_is_re_pinned_across_fields_again_or_not_at_all():
    pinned = marked(Job(3, gpus_per_job=2, gpu_type="s1"), tpn="gres:gpu:2")
    assert plan_gpu_pin(pinned, place(pinned, "n1", 0, 2), SNAP) == (
        {"TresPerJob": "", "TresPerNode": "gres:gpu:s0:2", "NumNodes": "1-1"}, "")
    assert plan_gpu_pin(pinned, place(pinned, "n2", 1, 2), SNAP) == ({}, "")


def test_requests_left_as_they_are_say_why():
    typed = marked(Job(4, gpus_per_node=1, gpu_type="s1"), tpn="gres:gpu:s1:1")
    fields, why = plan_gpu_pin(typed, place(typed, "n1", 0, 1), SNAP)
    assert fields == {} and "explicit GPU type gpu:s1" in why
    unmarked_typed = Job(5, gpus_per_node=1, gpu_type="s0")
    assert "explicit" in plan_gpu_pin(unmarked_typed, place(unmarked_typed, "n1", 1, 1),
                                      SNAP)[1]
    multi = marked(Job(6, gpus_per_node=2, node_count=2), tpn="gres:gpu:2")
    p = Place(6, nodes=("n1", "n2"), allocs=(GroupAlloc("n1", 0, 2), GroupAlloc("n2", 0, 2)))
    assert plan_gpu_pin(multi, p, SNAP)[0] == {} and "multi-node" in plan_gpu_pin(
        multi, p, SNAP)[1]
    changed = marked(Job(7, gpus_per_node=1), tpn="gres:gpu:2")  # user updated it since
    assert plan_gpu_pin(changed, place(changed, "n1", 1, 1), SNAP)[0] == {}
    spans = marked(Job(8, gpus_per_node=3), tpn="gres:gpu:3")
    p = Place(8, nodes=("n1",), allocs=(GroupAlloc("n1", 0, 2), GroupAlloc("n1", 1, 1)))
    assert plan_gpu_pin(spans, p, SNAP)[0] == {}


class SlurmJobModel:
    """One pending job's request fields in slurmctld, with what 22.05.8 was measured to do
    to them: an update is applied whole or refused whole; a typed value written into the
    field that already holds a different type ADDS (refused here: the test fails on it);
    typed over untyped (or back) in one field is refused. Answers ``squeue -O`` and
    ``scontrol update`` (``ScriptedRunner(model.answer)`` runs the clients against it)."""

    def __init__(self, job: Job, refuse: list[bool], read_fails: list[bool]) -> None:
        self.fields = {"TresPerNode": G.format_gpu_request({job.gpu_type: job.gpus_per_node})
                       if job.gpus_per_node else "",
                       "TresPerJob": G.format_gpu_request({job.gpu_type: job.gpus_per_job})
                       if job.gpus_per_job else ""}
        self.job = job
        self.refuse, self.read_fails = refuse, read_fails
        self.writes = 0
        self.violations: list[str] = []

    def answer(self, args: list[str]) -> tuple[int, str, str]:
        if args[0] == "squeue":
            if self.read_fails and self.read_fails.pop(0):
                return 1, "", "slurm_load_jobs error: timeout"
            pn, pj = (self.fields[k] or "N/A" for k in ("TresPerNode", "TresPerJob"))
            return 0, f"{self.job.job_id}|{pn}|{pj}|\n", ""
        self.writes += 1
        updates = dict(a.split("=", 1) for a in args[3:])
        if self.refuse and self.refuse.pop(0):
            return 1, "", "Requested operation is presently disabled for job 1"
        new = dict(self.fields)
        for key in ("TresPerNode", "TresPerJob"):
            if key not in updates:
                continue
            old_t, _ = G.parse_gpu_request(self.fields[key])
            new_t, _ = G.parse_gpu_request(updates[key])
            old_typed = {r.gpu_type is not None for r in old_t}
            new_typed = {r.gpu_type is not None for r in new_t}
            if old_t and new_t and old_typed != new_typed:
                return 1, "", ("Invalid GRES specification (with and without type "
                               "identification) for job 1")
            if old_t and new_t and {r.gpu_type for r in old_t} != {r.gpu_type for r in new_t}:
                self.violations.append(f"{key}: {self.fields[key]!r} -> {updates[key]!r} "
                                       "would ADD GPUs on 22.05")
            if new_t and updates.get("NumNodes") != "1-1":
                self.violations.append(f"{key}={updates[key]!r} without NumNodes=1-1: "
                                       "Slurm may spread the GPUs over nodes")
            new[key] = updates[key]
        self.fields = new
        return 0, "", ""

    def request(self) -> tuple[int, set]:
        reqs = []
        for v in self.fields.values():
            reqs += G.parse_gpu_request(v)[0]
        return G.total_gpus(tuple(reqs)), {r.gpu_type for r in reqs if r.count}


def _other(key: str) -> str:
    return "TresPerJob" if key == "TresPerNode" else "TresPerNode"


@settings(max_examples=300, deadline=None)
@given(gpus=st.integers(1, 2), per_job=st.booleans(), user_type=st.sampled_from([None, "s1"]),
       moves=st.lists(st.tuples(st.sampled_from(["n1", "n2"]), st.integers(0, 1),
                                st.booleans()), min_size=1, max_size=8),
       refuse=st.lists(st.booleans(), max_size=12), reads=st.lists(st.booleans(), max_size=12),
       die_after=st.integers(0, 12))
def test_no_sequence_of_outcomes_leaves_a_job_without_its_gpus(gpus, per_job, user_type, moves,
                                                               refuse, reads, die_after):
    request = G.format_gpu_request({user_type: gpus})
    job = Job(1, gpus_per_node=0 if per_job else gpus, gpus_per_job=gpus if per_job else 0,
              gpu_type=user_type, partition="gpu",
              admin_comment=with_marker("", Marker("" if per_job else request,
                                                   request if per_job else "", "")))
    slurm = SlurmJobModel(job, list(refuse), list(reads))
    sink = CliDecisionSink(ScriptedRunner(slurm.answer), retries=0, sleep=lambda s: None)
    for node, group, start in moves:
        if slurm.writes >= die_after:
            break  # the agent was killed right after its last write
        # What the next cycle's snapshot shows: its read may fail too (then a stale view).
        fresh = sink.read_request(1)
        current = job.with_(**fresh) if fresh is not None else job
        snap = ClusterSnapshot(time_s=0, nodes=SNAP.nodes, jobs=(current,))
        sink.apply([SetPriority(1, 5), place(current, node, group, gpus, start)], snap)
        total, types = slurm.request()
        assert total == gpus, slurm.fields
        if user_type is not None:
            assert types == {user_type}, slurm.fields
        else:
            assert len(types) <= 1 and types <= {None, "s0", "s1"}, slurm.fields
    assert slurm.violations == []


def test_a_stale_snapshot_never_plans_a_gpu_write_over_another_type():
    """The snapshot still shows the untyped original, but slurmctld already holds an
    earlier pin (TresPerJob s0): a write planned from the snapshot would put s1 into the
    field that holds s0, which 22.05 ADDS (the job ran with 3 GPUs)."""
    job = marked(Job(1, gpus_per_node=2, partition="gpu"), tpn="gres:gpu:2")
    slurm = SlurmJobModel(job, [], [])
    slurm.fields = {"TresPerNode": "", "TresPerJob": "gres:gpu:s0:2"}
    sink = CliDecisionSink(ScriptedRunner(slurm.answer), retries=0, sleep=lambda s: None)
    snap = ClusterSnapshot(time_s=0, nodes=SNAP.nodes, jobs=(job,))
    [res] = sink.apply([place(job, "n1", 1, 2)], snap)
    assert res.ok and slurm.violations == []
    assert slurm.fields == {"TresPerNode": "gres:gpu:s1:2", "TresPerJob": ""}
    assert slurm.writes == 1
    # and when the fresh read fails, no GPU field is written at all
    slurm = SlurmJobModel(job, [], [True])
    slurm.fields = {"TresPerNode": "", "TresPerJob": "gres:gpu:s0:2"}
    sink = CliDecisionSink(ScriptedRunner(slurm.answer), retries=0, sleep=lambda s: None)
    [res] = sink.apply([place(job, "n1", 1, 2)], snap)
    assert slurm.fields["TresPerJob"] == "gres:gpu:s0:2" and "left to Slurm" in res.message


def test_read_back_ignores_what_a_job_name_could_inject():
    # squeue -O prints only the asked fields, one line per job
    runner = ScriptedRunner((0, "7|gres/gpu:s1:2|N/A|\n", ""))
    assert CliDecisionSink(runner).read_request(7) == {
        "gpus_per_node": 2, "gpus_per_job": 0, "gpu_type": "s1"}
    odd = ScriptedRunner((0, "7|gres:gpu:2|N/A|\n8|x|y|\n7|a|b|\n", ""))
    assert CliDecisionSink(odd).read_request(7) is None


def test_repair_restores_an_emptied_request_in_one_update_and_leaves_gpu_0_alone():
    runner = ScriptedRunner()
    sink = CliDecisionSink(runner, retries=0, sleep=lambda s: None)
    emptied = Job(1, partition="gpu", admin_comment=with_marker("", Marker("gres:gpu:2", "",
                                                                           "")))
    zero = Job(2, partition="gpu", admin_comment=with_marker("", Marker("gres:gpu:0", "", "")))
    unmarked = Job(3, partition="gpu")
    snap = ClusterSnapshot(time_s=0, jobs=(emptied, zero, unmarked))
    assert sink.repair_half_done(snap) == [1]
    assert runner.calls == [["scontrol", "update", "jobid=1", "TresPerNode=gres:gpu:2"]]
    assert sink.repair_half_done(ClusterSnapshot(time_s=0, jobs=(zero,))) == []
