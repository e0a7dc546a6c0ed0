"""Reading only what changed (``changes.py``, ``CliClusterSource(full_read_s=...)``): over
random event sequences a snapshot read by changes holds exactly the records a full read
does, reads far fewer, and falls back to a full read when it must.

The Slurm here is a fake that answers the source's calls the way 24.11 does: JSON records
built from the recorded 24.11 answers (tests/data/slurm/v24.11), text rows holding what
``squeue -O`` shows (no AdminComment) and node states as ``sinfo -o "%T|%N"`` groups them.
The same reads against real Slurm: tests/slurm/test_changed_reads_live.py.
"""

from __future__ import annotations

import copy
import json
import random
import time
from pathlib import Path

import pytest

from fakes import ScriptedRunner
from slurm_marl.slurm_integration import changes as C
from slurm_marl.slurm_integration import source as S
from slurm_marl.slurm_integration.runner import SlurmError, SlurmUnavailable
from slurm_marl.slurm_integration.sink_commands import jobs_written
from slurm_marl.slurm_integration.source import CliClusterSource
from slurm_marl.slurm_integration.text import collapse_hosts

DATA = Path(__file__).resolve().parents[1] / "data" / "slurm" / "v24.11"
SQUEUE = json.loads((DATA / "squeue_all.json").read_text())
NODES = json.loads((DATA / "scontrol_show_node.json").read_text())
META = SQUEUE["meta"]
JOB = next(j for j in SQUEUE["jobs"] if j["job_id"] == 3)       # a running 2-node job
NODE = NODES["nodes"][0]


def local_time(epoch: int) -> str:
    """A time as squeue prints it: local, to the second; N/A for none."""
    return time.strftime("%Y-%m-%dT%H:%M:%S", time.localtime(epoch)) if epoch else "N/A"


def number(v):
    return {"set": True, "infinite": False, "number": v}


class FakeSlurm:
    """Jobs and nodes, answering as Slurm 24.11 does; ``runner`` runs the clients against
    them (``runner.calls`` records every call)."""

    def __init__(self, nodes: int = 6) -> None:
        self.jobs: dict[int, dict] = {}
        self.nodes: dict[str, dict] = {}
        for i in range(1, nodes + 1):
            n = copy.deepcopy(NODE)
            n.update(name=f"n{i}", state=["IDLE"], alloc_cpus=0, alloc_memory=0,
                     gres_used="gpu:s0:0(IDX:N/A),gpu:s1:0(IDX:N/A)", reason="")
            self.nodes[n["name"]] = n
        # a node in no partition: scontrol shows it, sinfo does not list it
        spare = copy.deepcopy(NODE)
        spare.update(name="spare", state=["IDLE"], partitions=[], alloc_cpus=0,
                     gres_used="gpu:s0:0(IDX:N/A),gpu:s1:0(IDX:N/A)")
        self.nodes["spare"] = spare
        self.next_id = 100
        self.runner = ScriptedRunner(self.answer)
        self.fail_next: str | None = None
        # a job purged (MinJobAge) right after the next job listing, before its record is read
        self.purge_after_listing: int | None = None
        # what ``scontrol --version`` prints (None: the call fails)
        self.version: str | None = None

    # ---- the cluster changing -----------------------------------------------------
    def submit(self, rng: random.Random) -> int:
        j = copy.deepcopy(JOB)
        jid = self.next_id
        self.next_id += 1
        j.update(job_id=jid, job_state=["PENDING"], nodes="", gres_detail=[],
                 priority=number(rng.randint(1, 10**6)), state_reason="Priority",
                 start_time=number(1_800_000_000 + rng.randint(0, 99)),
                 end_time=number(0), node_count=number(1), name=f"job {jid}|x",
                 tres_per_node=f"gres/gpu:{rng.choice([1, 2])}", admin_comment="",
                 time_limit=number(60))
        self.jobs[jid] = j
        return jid

    def start(self, jid: int, node: str) -> None:
        j = self.jobs[jid]
        j.update(job_state=["RUNNING"], nodes=node, gres_detail=["gpu:s0:1(IDX:0)"],
                 start_time=number(1_800_000_500), end_time=number(1_800_004_100),
                 state_reason="None")
        n = self.nodes[node]
        n.update(state=["MIXED"], alloc_cpus=n["alloc_cpus"] + 1,
                 gres_used="gpu:s0:1(IDX:0),gpu:s1:0(IDX:N/A)")

    def finish(self, jid: int) -> None:
        j = self.jobs[jid]
        j.update(job_state=["COMPLETED"], end_time=number(1_800_001_000))
        for node in j["nodes"].split(","):
            if node:
                n = self.nodes[node]
                n.update(alloc_cpus=max(0, n["alloc_cpus"] - 1))
                if not any(o["job_state"] == ["RUNNING"] and node in o["nodes"].split(",")
                           for o in self.jobs.values()):
                    n.update(state=["IDLE"], gres_used="gpu:s0:0(IDX:N/A),gpu:s1:0(IDX:N/A)")

    def requeue(self, jid: int) -> None:
        """Back to pending, its node list cleared (only the old record names its node)."""
        self.finish(jid)
        self.jobs[jid].update(job_state=["PENDING"], nodes="", gres_detail=[],
                              restart_cnt=self.jobs[jid]["restart_cnt"] + 1)

    # ---- answers --------------------------------------------------------------------
    def _row(self, j: dict) -> str:
        state = j["job_state"][0]
        fields = [str(j["job_id"]), state, str(j["priority"]["number"]), j["state_reason"],
                  j["nodes"], str(j["start_time"]["number"]), str(j["end_time"]["number"]),
                  "0", j["partition"], str(j["time_limit"]["number"]),
                  local_time(j["eligible_time"]["number"]), "x",
                  j["tres_per_node"], "N/A", "N/A", "N/A", j["required_nodes"],
                  j["excluded_nodes"], j["resv_name"] or "(null)", "1", "1", "1000M",
                  str(j["restart_cnt"]), j["user_name"], "(null)", "(null)", "(null)",
                  j["comment"] or "(null)", j["name"]]
        assert len(fields) == len(C.JOB_FIELDS)
        return "".join(f + C.SEP for f in fields)

    def answer(self, argv: list[str]) -> tuple[int, str, str]:
        if argv == ["scontrol", "--version"]:
            if self.version == "raise":
                raise SlurmUnavailable(argv, -1, "timed out after 30 s")
            return (0, self.version + "\n", "") if self.version is not None else (1, "", "")
        if argv == ["scontrol", "show", "topology"]:
            return 1, "", ""                        # no topology
        if self.fail_next and self.fail_next in " ".join(argv):
            self.fail_next = None
            return 1, "", "slurm_load_jobs error: Socket timed out"
        if argv[:2] == ["squeue", "-h"]:
            listing = "\n".join(self._row(j) for j in self.jobs.values()) + "\n"
            if self.purge_after_listing is not None:
                del self.jobs[self.purge_after_listing]
                self.purge_after_listing = None
            return 0, listing, ""
        if argv[0] == "sinfo" and "-h" in argv:
            by_state: dict[str, list[str]] = {}
            for n in self.nodes.values():
                if not n["partitions"]:
                    continue
                by_state.setdefault(n["state"][0].lower(), []).append(n["name"])
            return 0, "".join(f"{s}{C.SEP}{collapse_hosts(ns)}\n"
                              for s, ns in by_state.items()), ""
        if argv[0] == "sinfo":
            return 0, json.dumps({"sinfo": [], "meta": META}), ""
        if argv[:2] == ["squeue", "--json"]:
            ids = next((a.split("=", 1)[1] for a in argv if a.startswith("--jobs=")), None)
            wanted = None if ids is None else {int(x) for x in ids.split(",")}
            if wanted is not None and len(wanted) == 1 and not wanted & set(self.jobs):
                # 24.11 and 26.05 alike; a list of ids leaves a missing one out instead
                return 1, "", "slurm_load_jobs error: Invalid job id specified"
            return 0, json.dumps({"jobs": [j for j in self.jobs.values()
                                           if wanted is None or j["job_id"] in wanted],
                                  "meta": META}), ""
        if argv[:3] == ["scontrol", "show", "node"]:
            names = set(argv[4].split(",")) if len(argv) > 4 else None
            return 0, json.dumps({"nodes": [n for n in self.nodes.values()
                                            if names is None or n["name"] in names],
                                  "meta": META}), ""
        if argv[:3] == ["scontrol", "show", "partition"]:
            return (0, f"PartitionName=gpu Nodes=n[1-{len(self.nodes) - 1}] State=UP "
                       "Default=YES\n", "")
        raise AssertionError(argv)


class Clock:
    def __init__(self):
        self.t = 0.0

    def __call__(self):
        return self.t


def by_id(snap):
    return ({j.job_id: j for j in snap.jobs}, {n.name: n for n in snap.nodes})


def full_read(slurm):
    return by_id(CliClusterSource(slurm.runner).snapshot())


def test_rows_split_only_the_plain_fields_and_join_continued_lines():
    text = ("7|RUNNING|100|None|n[1-2]|2026-01-01T00:00:00|NONE|0|gpu|60|a|b|c|d|e|f|||"
            "(null)|2|2|1000M|0|u|a|q|f|multi\nline|name|with|bars|\n"
            "8|PENDING|5|Resources||2027-01-01T00:00:00|2027-01-01T01:00:00|rest|\n"
            "garbage\n")
    rows, problems = C.job_rows("junk before\n" + text)
    assert set(rows) == {7, 8}
    assert rows[7].node_names() == ("n1", "n2") and rows[7].priority == 100
    assert rows[7].key[-1].endswith("multi\nline|name|with|bars|")
    # a pending job's start/end are Slurm's estimates: not part of what is compared
    assert rows[8].key == ("PENDING", "", "", "", "rest|\ngarbage")
    assert problems and "junk before" in problems[0]
    moved, _ = C.job_rows(text.replace("2027-01-01T00:00:00", "2027-02-02T00:00:00"))
    assert moved[8].key == rows[8].key
    ran, _ = C.job_rows(text.replace("2026-01-01T00:00:00", "2026-01-01T00:00:01"))
    assert ran[7].key != rows[7].key


def test_node_states_from_grouped_lines():
    states, problems = C.node_states("idle|n[1-3]\nmixed|n4\nbad|n[5\nnoline\n")
    assert states == {"n1": "idle", "n2": "idle", "n3": "idle", "n4": "mixed"}
    assert len(problems) == 2


def test_jobs_written_names_updates_and_requeues():
    assert jobs_written(["scontrol", "update", "jobid=5,6", "StartTime=now"]) == [5, 6]
    assert jobs_written(["scontrol", "requeue", "9"]) == [9]
    assert jobs_written(["scontrol", "create", "reservation", "Nodes=n1"]) == []


@pytest.mark.parametrize("seed", range(12))
def test_a_snapshot_read_by_changes_holds_what_a_full_read_holds(seed, monkeypatch):
    rng = random.Random(seed)
    slurm = FakeSlurm()
    # a third of the runs read changed jobs one per call (the listing is short here)
    if seed % 3 == 0:
        monkeypatch.setattr(S, "LISTED_PER_SINGLE_READ", 1)
    # half the runs know the version before the first read (read by changes from the
    # second snapshot on), half learn it from the first JSON answer
    slurm.version = "slurm-wlm 24.11.5" if seed % 2 else None
    clock = Clock()
    source = CliClusterSource(slurm.runner, full_read_s=300, clock=clock)
    for _ in range(6):
        slurm.submit(rng)
    modes = []
    for step in range(60):
        event = rng.choice(["submit", "start", "finish", "purge", "priority", "reason",
                            "limit", "drain", "estimate", "written", "requeue", "nothing",
                            "time", "finish, purged while read", "hold", "release",
                            "renewed", "renewed and limit"])
        pending = [j for j, r in slurm.jobs.items() if r["job_state"] == ["PENDING"]]
        running = [j for j, r in slurm.jobs.items() if r["job_state"] == ["RUNNING"]]
        done = [j for j, r in slurm.jobs.items() if r["job_state"] == ["COMPLETED"]]
        if event == "submit":
            slurm.submit(rng)
        elif event == "start" and pending:
            slurm.start(rng.choice(pending), rng.choice(sorted(slurm.nodes)))
        elif event == "finish" and running:
            slurm.finish(rng.choice(running))
        elif event == "finish, purged while read" and running:
            jid = rng.choice(running)
            slurm.finish(jid)
            slurm.purge_after_listing = jid
        elif event == "requeue" and running:
            slurm.requeue(rng.choice(running))
        elif event == "purge" and done:
            del slurm.jobs[rng.choice(done)]
        elif event == "priority" and pending:
            slurm.jobs[rng.choice(pending)]["priority"] = number(rng.randint(1, 10**6))
        elif event == "reason" and pending:
            slurm.jobs[rng.choice(pending)]["state_reason"] = rng.choice(
                ["Resources", "Priority", "ReqNodeNotAvail, May be reserved"])
        elif event == "hold" and pending:
            # priority 0 and a held reason: Job.held must follow, as a full read has it
            held = slurm.jobs[rng.choice(pending)]
            held.update(priority=number(0), state_reason="JobHeldUser")
        elif event == "release" and pending:
            released = slurm.jobs[rng.choice(pending)]
            if released["priority"]["number"] == 0:
                released.update(priority=number(rng.randint(1, 10**6)),
                                state_reason="Priority")
        elif event == "limit" and slurm.jobs:
            slurm.jobs[rng.choice(sorted(slurm.jobs))]["time_limit"] = number(rng.randint(1, 99))
        elif event == "drain":
            # (not "spare": a node in no partition is not listed, its state not seen)
            n = slurm.nodes[rng.choice(sorted(set(slurm.nodes) - {"spare"}))]
            n.update(state=["DRAINED"] if n["state"] != ["DRAINED"] else ["IDLE"],
                     reason="maintenance")
        elif event.startswith("renewed") and pending:
            # a lease renewal (``StartTime=now+30``): the sink names no job to read again
            jid = rng.choice(pending)
            slurm.jobs[jid]["eligible_time"] = number(1_800_000_000 + 30 * step)
            if event == "renewed and limit":
                slurm.jobs[jid]["time_limit"] = number(rng.randint(100, 199))
        elif event == "estimate" and pending:
            slurm.jobs[rng.choice(pending)]["start_time"] = number(1_900_000_000 + step)
        elif event == "written" and slurm.jobs:
            # the agent's own write of a field the text does not show, named by the sink
            jid = rng.choice(sorted(slurm.jobs))
            slurm.jobs[jid]["admin_comment"] = f"slurm-marl:{step}"
            source.invalidate([jid])
        elif event == "time":
            clock.t += rng.choice([10.0, 400.0])
        got = by_id(source.snapshot())
        modes.append(source.last_read["mode"])
        assert got == full_read(slurm), (seed, step, event, source.last_read)
    assert modes.count("changes") > modes.count("full")


def thirty_jobs_read_twice(seed: int) -> tuple[FakeSlurm, CliClusterSource, list[int]]:
    """20 nodes, 30 jobs of which the first 10 run, and a source reading changes that has
    read them twice: the first read tells the layout, the second keeps what it read."""
    rng = random.Random(seed)
    slurm = FakeSlurm(nodes=20)
    source = CliClusterSource(slurm.runner, full_read_s=300, clock=Clock())
    jobs = [slurm.submit(rng) for _ in range(30)]
    for i, jid in enumerate(jobs[:10]):
        slurm.start(jid, f"n{i + 1}")
    source.snapshot()
    source.snapshot()
    return slurm, source, jobs


def test_reads_only_what_changed_and_ignores_estimates():
    slurm, source, jobs = thirty_jobs_read_twice(1)
    assert source.last_read["mode"] == "full"
    for jid in jobs[10:]:
        slurm.jobs[jid]["start_time"] = number(1_900_000_000)    # backfill's estimates
        slurm.jobs[jid]["state_reason"] = "Resources"
    slurm.runner.calls.clear()
    snap = source.snapshot()
    assert source.last_read == {"mode": "changes", "listed_jobs": 30, "listed_nodes": 20,
                                "jobs_read": 0, "nodes_read": 0, "jobs_gone": 0,
                                "eligible_moved": 0}
    assert [c[0] for c in slurm.runner.calls if "--json" in c] == []
    assert {j.pending_reason for j in snap.jobs if j.is_pending} == {"Resources"}
    slurm.finish(jobs[0])
    slurm.start(jobs[10], "n20")
    slurm.runner.calls.clear()
    snap = source.snapshot()
    assert source.last_read["jobs_read"] == 2 and source.last_read["nodes_read"] == 2
    json_calls = [c for c in slurm.runner.calls if "--json" in c]
    assert ["squeue", "--json", "--states=all", f"--jobs={jobs[0]},{jobs[10]}"] in json_calls
    assert ["scontrol", "show", "node", "--json", "n1,n20"] in json_calls
    assert by_id(snap) == full_read(slurm)


def test_an_admin_comment_is_seen_when_written_by_the_agent_or_at_the_next_full_read():
    rng = random.Random(2)
    slurm = FakeSlurm()
    clock = Clock()
    source = CliClusterSource(slurm.runner, full_read_s=300, clock=clock)
    jid = slurm.submit(rng)
    source.snapshot()
    source.snapshot()
    slurm.jobs[jid]["admin_comment"] = "by hand"
    stale = {j.job_id: j for j in source.snapshot().jobs}[jid]
    assert stale.admin_comment == ""        # the documented limit: not in squeue's text
    clock.t += 301
    assert {j.job_id: j for j in source.snapshot().jobs}[jid].admin_comment == "by hand"
    assert source.last_read["mode"] == "full"
    slurm.jobs[jid]["admin_comment"] = "by the agent"
    source.invalidate([jid])
    assert {j.job_id: j for j in source.snapshot().jobs}[jid].admin_comment == "by the agent"
    assert source.last_read["mode"] == "changes"


@pytest.mark.parametrize("failing", ["squeue -h", "sinfo -h", "--jobs=", "show node --json n"])
def test_a_failed_read_makes_the_next_snapshot_a_full_one(failing):
    rng = random.Random(3)
    slurm = FakeSlurm()
    source = CliClusterSource(slurm.runner, full_read_s=300, clock=Clock())
    jid = slurm.submit(rng)
    source.snapshot()
    source.snapshot()
    slurm.start(jid, "n1")
    slurm.jobs[jid]["admin_comment"] = "x"
    slurm.fail_next = failing
    with pytest.raises(SlurmError):
        source.snapshot()
    snap = source.snapshot()
    assert source.last_read["mode"] == "full"
    assert by_id(snap) == full_read(slurm)


def test_many_changes_are_read_whole(monkeypatch):
    monkeypatch.setattr(S, "MAX_BY_ID", 3)
    rng = random.Random(4)
    slurm = FakeSlurm()
    source = CliClusterSource(slurm.runner, full_read_s=300, clock=Clock())
    source.snapshot()
    source.snapshot()
    for _ in range(5):
        slurm.submit(rng)
    slurm.runner.calls.clear()
    snap = source.snapshot()
    assert ["squeue", "--json", "--states=all"] in slurm.runner.calls
    assert not any(a.startswith("--jobs=") for c in slurm.runner.calls for a in c)
    assert by_id(snap) == full_read(slurm)


def test_few_changed_jobs_are_read_one_per_call_and_a_purged_one_is_left_out(monkeypatch):
    """One ``--jobs=ID`` call per changed job while they are few against the jobs listed
    (slurmctld then packs only that job); a job purged between the listing and its read
    fails its own call ("Invalid job id specified") and is left out, as a list of ids
    leaves it out; any other failure fails the snapshot."""
    monkeypatch.setattr(S, "LISTED_PER_SINGLE_READ", 10)
    slurm, source, jobs = thirty_jobs_read_twice(5)
    slurm.finish(jobs[0])
    slurm.start(jobs[10], "n20")
    slurm.runner.calls.clear()
    snap = source.snapshot()                     # 2 changed of 30 listed: 2 x 10 <= 30
    job_calls = [c for c in slurm.runner.calls if c[:2] == ["squeue", "--json"]]
    assert job_calls == [["squeue", "--json", "--states=all", f"--jobs={jobs[0]}"],
                         ["squeue", "--json", "--states=all", f"--jobs={jobs[10]}"]]
    assert by_id(snap) == full_read(slurm)
    slurm.finish(jobs[1])
    slurm.finish(jobs[2])
    slurm.purge_after_listing = jobs[1]
    slurm.runner.calls.clear()
    snap = source.snapshot()
    job_calls = [c for c in slurm.runner.calls if c[:2] == ["squeue", "--json"]]
    assert job_calls == [["squeue", "--json", "--states=all", f"--jobs={jobs[1]}"],
                         ["squeue", "--json", "--states=all", f"--jobs={jobs[2]}"]]
    assert source.last_read["mode"] == "changes"
    assert jobs[1] not in by_id(snap)[0]
    assert by_id(snap) == full_read(slurm)
    slurm.finish(jobs[7])
    slurm.fail_next = f"--jobs={jobs[7]}"        # a timeout, not a purged job
    with pytest.raises(SlurmError, match="timed out"):
        source.snapshot()
    assert by_id(source.snapshot()) == full_read(slurm)
    assert source.last_read["mode"] == "full"
    for jid in jobs[3:7]:                        # 4 changed: 4 x 10 > 29, one call
        slurm.finish(jid)
    slurm.runner.calls.clear()
    snap = source.snapshot()
    assert [c for c in slurm.runner.calls if c[:2] == ["squeue", "--json"]] == [
        ["squeue", "--json", "--states=all", "--jobs=" + ",".join(map(str, jobs[3:7]))]]
    assert by_id(snap) == full_read(slurm)


def test_without_full_read_s_every_snapshot_is_a_full_read():
    slurm = FakeSlurm()
    source = CliClusterSource(slurm.runner)
    for _ in range(3):
        source.snapshot()
        assert source.last_read == {"mode": "full"}
    assert not any(c[:2] == ["squeue", "-h"] for c in slurm.runner.calls)


@pytest.mark.parametrize("release", ["22.05", "24.11", "26.05"])
def test_layout_of_version_from_recorded_answers(release):
    from slurm_marl.slurm_integration.parse_layout import KNOWN_PARSERS, layout_of_version
    text = (Path(__file__).parents[1] / "data" / "slurm" / f"v{release}" /
            "scontrol_version.txt").read_text()
    layout = layout_of_version(text)
    assert layout is not None and KNOWN_PARSERS[layout.parser][0] == release
    assert layout.reads_by_id == (release != "22.05")
    assert layout.reads_jobs_by_text == (release == "22.05")
    assert layout_of_version(text.replace("slurm-wlm", "slurm")) == layout


@pytest.mark.parametrize("text", ["slurm 25.05.1", "slurm-wlm", "", "oops 24.11.5",
                                  "slurm 24", "slurm-wlm 24.11.5 extra"])
def test_layout_of_an_unknown_version_is_left_to_the_json(text):
    from slurm_marl.slurm_integration.parse_layout import layout_of_version
    assert layout_of_version(text) is None


@pytest.mark.parametrize("version", [None, "slurm-wlm 24.11.5", "slurm 25.05.0", "raise"])
def test_a_known_version_is_read_by_changes_from_the_second_snapshot(version):
    """With the version known before the first read (24.11: records read by id), the first
    snapshot is the one full read (no sinfo --json), and the second reads changes only;
    otherwise (failed, unknown, or a client that times out) the first JSON answer tells the
    layout and the second snapshot is full."""
    slurm = FakeSlurm()
    slurm.version = version
    rng = random.Random(0)
    for _ in range(4):
        slurm.submit(rng)
    clock = Clock()
    source = CliClusterSource(slurm.runner, full_read_s=300, clock=clock)
    first = source.snapshot()
    first_calls = [c[:2] for c in slurm.runner.calls]
    clock.t += 10
    second = source.snapshot()
    assert by_id(second) == by_id(first) == full_read(slurm)
    known = version == "slurm-wlm 24.11.5"
    assert (["sinfo", "--json"] in first_calls) == (not known)
    assert source.last_read["mode"] == ("changes" if known else "full")


def test_a_moved_eligible_time_alone_is_carried_not_read(monkeypatch):
    """A lease renewal moves a waiting job's eligible time and nothing else: the kept
    record takes the listing's time, no JSON is read; with another field changed, or a
    time not certain in this zone, the job is read."""
    slurm, source, jobs = thirty_jobs_read_twice(3)
    renewed = jobs[10:25]
    for k, jid in enumerate(renewed):
        slurm.jobs[jid]["eligible_time"] = number(1_800_000_000 + k)
    slurm.runner.calls.clear()
    snap = source.snapshot()
    assert [c for c in slurm.runner.calls if "--json" in c] == []
    assert source.last_read["eligible_moved"] == 15 and source.last_read["jobs_read"] == 0
    assert {j.job_id: j.eligible_time_s for j in snap.jobs if j.job_id in renewed} == {
        jid: 1_800_000_000 + k for k, jid in enumerate(renewed)}
    assert by_id(snap) == full_read(slurm)
    # moved with another field: read, as any change
    slurm.jobs[jobs[10]]["eligible_time"] = number(1_800_000_100)
    slurm.jobs[jobs[10]]["time_limit"] = number(7)
    slurm.runner.calls.clear()
    snap = source.snapshot()
    assert source.last_read["jobs_read"] == 1 and source.last_read["eligible_moved"] == 0
    assert by_id(snap) == full_read(slurm)
    # a running job's row never reads its eligible time
    slurm.jobs[jobs[0]]["eligible_time"] = number(1_800_000_200)
    source.snapshot()
    assert source.last_read["jobs_read"] == 1 and source.last_read["eligible_moved"] == 0
    # a wall time that names two instants (the hour a daylight-saving change repeats)
    monkeypatch.setenv("TZ", "Europe/Berlin")
    time.tzset()
    try:
        source.snapshot()     # the listing now in Berlin's time: each time read again
        repeated = int(time.mktime((2026, 10, 25, 2, 30, 0, 0, 0, 0)))
        slurm.jobs[jobs[11]]["eligible_time"] = number(repeated)
        slurm.runner.calls.clear()
        snap = source.snapshot()
        assert source.last_read["jobs_read"] == 1
        assert by_id(snap) == full_read(slurm)
    finally:
        monkeypatch.undo()      # TZ as it was (set or not), then the C library told
        time.tzset()


def test_only_a_start_time_write_alone_moves_the_eligible_time_only():
    from slurm_marl.slurm_integration.sink_commands import moves_eligible_time_only as only
    assert only(["scontrol", "update", "jobid=5,6", "StartTime=now+30"])
    assert only(["scontrol", "update", "jobid=5", "StartTime=now"])
    assert not only(["scontrol", "update", "jobid=5", "ReqNodeList=n1", "StartTime=now"])
    assert not only(["scontrol", "update", "jobid=5", "StartTime=2027-01-01T00:00:00"])
    assert not only(["scontrol", "update", "jobid=5", "Priority=7"])
    assert not only(["scontrol", "requeue", "5", "StartTime=now"])
