"""Which GPU request a placement turns into (pure part of the write-back protocol)."""

from slurm_marl.domain import ClusterSnapshot, GpuGroup, GroupAlloc, Job, Node, Place
from slurm_marl.slurm_integration.sink import desired_gpu_request

TYPED = (GpuGroup(0, (0, 1), "s0", 0), GpuGroup(1, (2, 3), "s1", 1))
SNAP = ClusterSnapshot(time_s=0, nodes=(Node("n1", gpu_groups=TYPED),
                                        Node("n2", gpu_groups=TYPED),
                                        Node("u1", gpu_groups=(GpuGroup(0, (0, 1, 2, 3)),))))


def req(job, *allocs):
    return desired_gpu_request(Place(job.job_id, nodes=tuple({a.node: 0 for a in allocs}),
                                     allocs=allocs), SNAP, job)


def test_one_group_per_node_becomes_a_typed_request():
    job = Job(1, gpus_per_node=2)
    assert req(job, GroupAlloc("n1", 1, 2)) == ("gres:gpu:s1:2", "TresPerNode", "")
    two = Job(2, gpus_per_node=2, node_count=2)
    assert req(two, GroupAlloc("n1", 0, 2), GroupAlloc("n2", 0, 2))[0] == "gres:gpu:s0:2"


def test_cases_left_to_slurm():
    job = Job(1, gpus_per_node=4)
    assert req(job, GroupAlloc("n1", 0, 2), GroupAlloc("n1", 1, 2))[0] is None  # spans
    two = Job(2, gpus_per_node=2, node_count=2)
    why = req(two, GroupAlloc("n1", 0, 2), GroupAlloc("n2", 1, 2))
    assert why[0] is None and "per node" in why[2]
    assert "no GRES type" in req(Job(3, gpus_per_node=1), GroupAlloc("u1", 0, 1))[2]
    assert "unknown" in req(Job(4, gpus_per_node=1), GroupAlloc("n1", 5, 1))[2]


def test_gpus_option_uses_tres_per_job_on_one_node_only():
    job = Job(1, gpus_per_job=2)
    assert req(job, GroupAlloc("n2", 1, 2)) == ("gres:gpu:s1:2", "TresPerJob", "")
    multi = Job(2, gpus_per_job=2, node_count=2)
    assert req(multi, GroupAlloc("n1", 0, 1), GroupAlloc("n2", 0, 1))[0] is None


class ScriptedRunner:
    """Answers scontrol calls in order from a script of (returncode, stderr)."""

    def __init__(self, answers):
        self.answers = list(answers)
        self.calls = []

    def run(self, args):
        from slurm_marl.slurm_integration.runner import CommandResult
        self.calls.append(args)
        code, err = self.answers.pop(0) if self.answers else (0, "")
        return CommandResult(list(args), code, "", err)


def test_a_refused_restore_puts_the_typed_request_back_never_leaving_no_gpus():
    """Slurm 22.05, after a requeued job was re-pinned: clearing its request works, the
    untyped original is refused; the job must get its typed request back, not stay
    GPU-less (it would start without GPUs once its held start time came)."""
    from slurm_marl.slurm_integration.marker import Marker, with_marker
    from slurm_marl.slurm_integration.sink import CliDecisionSink
    job = Job(8, gpus_per_node=1, gpu_type="s0",
              admin_comment=with_marker("", Marker(tres_per_node="gres:gpu:1")))
    runner = ScriptedRunner([(0, ""), (1, "Invalid GRES specification (with and without "
                                          "type identification) for job 8"), (0, "")])
    sink = CliDecisionSink(runner, retries=0, sleep=lambda s: None)
    assert sink.restore_request(job) is False
    assert [c[3:] for c in runner.calls] == [
        ["StartTime=now+600", "TresPerNode="],
        ["StartTime=now", "TresPerNode=gres:gpu:1"],
        ["TresPerNode=gres:gpu:s0:1", "StartTime=now"]]
    # a restore that works needs no third write
    ok = ScriptedRunner([(0, ""), (0, "")])
    assert CliDecisionSink(ok, retries=0, sleep=lambda s: None).restore_request(
        Job(9, gpus_per_node=1, gpu_type="s1",
            admin_comment=with_marker("", Marker(tres_per_node="gres:gpu:1")))) is True
    assert len(ok.calls) == 2
