"""slurmctld's EAGAIN ("Resource temporarily unavailable", seen on 24.11+ for job updates
under load, the update not applied): the sink retries the write, and a write still refused
is that write's failure only, not a controller found down that skips the rest of the batch."""

from __future__ import annotations

import pytest

from fakes import ScriptedRunner
from slurm_marl.domain import SetPriority
from slurm_marl.slurm_integration.ports import WriteStatus
from slurm_marl.slurm_integration.runner import SlurmUnavailable
from slurm_marl.slurm_integration.sink import CliDecisionSink

BUSY = "Resource temporarily unavailable for job 1"
DOWN = "slurm_update error: Unable to contact slurm controller (connect failure)"


class Answers:
    """Answers each call for job N with the next of ``answers[N]`` (then success)."""

    def __init__(self, answers: dict[int, list[str]]) -> None:
        self.answers = answers

    def answer(self, args: list[str]) -> tuple[int, str, str]:
        job = int(next(a for a in args if a.startswith("jobid=")).split("=")[1])
        queue = self.answers.get(job) or []
        err = queue.pop(0) if queue else ""
        return (1 if err else 0), "", err


def scripted(answers: dict[int, list[str]]) -> ScriptedRunner:
    return ScriptedRunner(Answers(answers).answer)


def _apply(runner: ScriptedRunner, retries: int = 2):
    sink = CliDecisionSink(runner, retries=retries, sleep=lambda s: None)
    return sink.apply([SetPriority(1, priority=100), SetPriority(2, priority=50)])


def test_a_busy_answer_is_retried_and_the_write_lands():
    runner = scripted({1: [BUSY, BUSY]})
    results = _apply(runner)
    assert [r.status for r in results] == [WriteStatus.OK, WriteStatus.OK]
    assert sum(1 for a in runner.calls if "jobid=1" in a) == 3


def test_busy_to_the_end_refuses_that_write_only():
    runner = scripted({1: [BUSY] * 5})
    results = _apply(runner)
    assert [r.status for r in results] == [WriteStatus.REFUSED, WriteStatus.OK]
    assert BUSY in results[0].message
    assert any("jobid=2" in a for a in runner.calls)  # the batch went on


def test_a_controller_found_down_still_stops_the_batch():
    runner = scripted({1: [DOWN] * 5})
    results = _apply(runner)
    assert [r.status for r in results] == [WriteStatus.UNAVAILABLE, WriteStatus.UNAVAILABLE]
    assert not any("jobid=2" in a for a in runner.calls)


def test_a_busy_read_is_a_skipped_cycle_not_a_misread():
    runner = ScriptedRunner((1, "", BUSY))
    with pytest.raises(SlurmUnavailable):
        runner.run_checked(["squeue", "--json", "jobid=1"])


def test_every_write_tried_names_its_job_to_on_write():
    """The source reads written jobs again (their AdminComment is not in its text
    listing): each write names its job, refused or not, and a batch stopped by a
    controller found down names none it did not try."""
    named: list[int] = []
    sink = CliDecisionSink(scripted({1: [BUSY] * 5}), retries=2, sleep=lambda s: None,
                           on_write=named.extend)
    sink.apply([SetPriority(1, priority=100), SetPriority(2, priority=50)])
    assert named == [1, 2]
    named.clear()
    sink = CliDecisionSink(scripted({1: [DOWN] * 5}), retries=0, sleep=lambda s: None,
                           on_write=named.extend)
    sink.apply([SetPriority(1, priority=100), SetPriority(2, priority=50)])
    assert named == [1]


def test_an_admin_comment_written_is_named_to_on_admin_comment():
    """On 22.05 the source trusts a changed job's AdminComment read as text only if it is
    the one it knew or the agent's own write: each AdminComment write is named, with its
    value; other writes name none."""
    written: list[tuple[int, str]] = []
    sink = CliDecisionSink(scripted({}), retries=0, sleep=lambda s: None,
                           on_admin_comment=lambda j, v: written.append((j, v)))
    sink._update_job(5, {"ReqNodeList": "n1", "AdminComment": "slurm-marl:v1;tpn=x=y",
                         "StartTime": "now"}, [])
    sink.apply([SetPriority(1, priority=100)])
    assert written == [(5, "slurm-marl:v1;tpn=x=y")]
