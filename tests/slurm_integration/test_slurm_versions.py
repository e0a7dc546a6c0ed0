"""The reading side of the Slurm layer on real output of Slurm 22.05, 24.11 and 26.05.

The recordings (tests/data/slurm/v<version>/, made by tests/data/slurm/record_versions.py)
are of the same 4-node cluster and the same jobs on each version; ``commands.json`` holds
the job ids by name. A layout the reader does not know must be refused, not read as empty.
"""

import copy
import json
import re
from pathlib import Path

import pytest

from fakes import ScriptedRunner
from slurm_marl.domain import JobState
from slurm_marl.slurm_integration import parse as P
from slurm_marl.slurm_integration.runner import SlurmError, SlurmOutputError
from slurm_marl.slurm_integration.sink import CliDecisionSink
from slurm_marl.slurm_integration.source import CliClusterSource
from slurm_marl.slurm_integration.text import (GpuRequest, expand_host_field, parse_gpu_request,
                                               parse_kv_line)

DATA = Path(__file__).parent.parent / "data" / "slurm"
VERSIONS = ["22.05", "24.11", "26.05"]
LATER = ["24.11", "26.05"]
PARSERS = {"22.05": "openapi/v0.0.38", "24.11": "data_parser/v0.0.42",
           "26.05": "data_parser/v0.0.45"}


def load(version, name):
    return json.loads((DATA / f"v{version}" / name).read_text())


def text(version, name):
    return (DATA / f"v{version}" / name).read_text()


def ids(version):
    return load(version, "commands.json")["job_ids"]


def jobs_by_name(version, name="squeue_all.json"):
    jobs, problems = P.jobs_from_squeue(load(version, name))
    assert problems == []
    found = {}
    for j in jobs:
        found.setdefault(j.name, []).append(j)
    return found


def one(version, name):
    (job,) = jobs_by_name(version)[name]
    return job


def nodes(version):
    if version == "22.05":
        found, problems = P.nodes_from_sinfo(load(version, "sinfo.json"))
    else:
        found, problems = P.nodes_from_scontrol(load(version, "scontrol_show_node.json"))
    assert problems == []
    return {n.name: n for n in found}


# ---- layouts ------------------------------------------------------------------------------


@pytest.mark.parametrize("version", VERSIONS)
def test_each_version_names_a_known_layout(version):
    for name in ("squeue.json", "squeue_all.json", "sinfo.json"):
        layout = P.layout_of(load(version, name), name)
        assert layout.parser == PARSERS[version]
        assert layout.release.startswith(version)
        assert layout.nodes_from_sinfo == (version == "22.05")
        assert layout.squeue_lists_finished == (version == "22.05")
    assert text(version, "scontrol_version.txt").split()[-1].startswith(version)


def test_scontrol_show_node_json_exists_only_from_24_11():
    calls = {c["file"]: c for c in load("22.05", "commands.json")["calls"]}
    assert calls["scontrol_show_node.json"]["rc"] != 0
    assert "--json" in calls["scontrol_show_node.json"]["stderr"]
    for version in LATER:
        assert P.layout_of(load(version, "scontrol_show_node.json"), "x").parser == \
            PARSERS[version]


# ---- jobs -------------------------------------------------------------------------------


@pytest.mark.parametrize("version", VERSIONS)
def test_job_states(version):
    assert one(version, "run_typed").state is JobState.RUNNING
    pend = one(version, "pend_begin")
    assert pend.state is JobState.PENDING and pend.pending_reason == "BeginTime"
    assert pend.start_time_s is None
    assert one(version, "done").state is JobState.COMPLETED
    assert one(version, "cancelled").state is JobState.CANCELLED


@pytest.mark.parametrize("version", VERSIONS)
def test_a_requeued_job_still_cleaning_up_is_completing_as_on_22_05(version):
    raw = [j for j in load(version, "squeue.json")["jobs"] if j["name"] == "requeued"][0]
    assert raw["job_state"] == ("COMPLETING" if version == "22.05"
                                else ["PENDING", "COMPLETING"])
    job = one(version, "requeued")
    assert job.state is JobState.COMPLETING and job.is_running and not job.is_pending
    assert job.restart_count == 1
    assert "JobState=COMPLETING" in text(version, "scontrol_show_job_d_requeued.txt")


def test_job_state_lists_map_to_the_word_22_05_printed():
    assert P.job_state(["PENDING", "COMPLETING"]) == (JobState.COMPLETING, None)
    assert P.job_state(["CANCELLED", "COMPLETING"]) == (JobState.COMPLETING, None)
    assert P.job_state(["PENDING", "REQUEUED"]) == (JobState.REQUEUED, None)
    assert P.job_state(["RUNNING"]) == (JobState.RUNNING, None)
    assert P.job_state(["EXPEDITING", "PENDING"]) == (JobState.PENDING, None)
    assert P.job_state("PENDING") == (JobState.PENDING, None)
    state, problem = P.job_state({"current": ["RUNNING"]})
    assert state is JobState.OTHER and "no Slurm job state" in problem
    state, problem = P.job_state("WEIRD_STATE")
    assert state is JobState.OTHER and problem


@pytest.mark.parametrize("version", LATER)
def test_finished_jobs_need_states_all_from_24_11(version):
    default = load(version, "squeue.json")
    assert not P.layout_of(default, "squeue --json").squeue_lists_finished
    names = {j.name for j in P.jobs_from_squeue(default)[0]}
    assert "done" not in names and "cancelled" not in names
    assert {"done", "cancelled"} <= set(jobs_by_name(version, "squeue_all.json"))
    old = load("22.05", "squeue.json")
    assert P.layout_of(old, "squeue --json").squeue_lists_finished
    assert {"done", "cancelled"} <= {j.name for j in P.jobs_from_squeue(old)[0]}


@pytest.mark.parametrize("version", VERSIONS)
def test_array_tasks_are_left_to_slurm(version):
    tasks = jobs_by_name(version)["arr"]
    assert len(tasks) == 3
    assert {t.array_job_id for t in tasks} == {ids(version)["arr"]}
    assert all(t.left_to_slurm.startswith("job array") for t in tasks)
    # each task's index (sacct's "arr_2"); the task started last keeps the array's own id
    assert sorted(t.array_task_id for t in tasks) == [0, 1, 2]
    assert [t.array_task_id for t in tasks if t.job_id == ids(version)["arr"]] == [2]
    assert one(version, "run_gres").array_job_id == 0
    assert one(version, "run_gres").array_task_id is None
    assert one(version, "run_gres").left_to_slurm == ""


@pytest.mark.parametrize("version", VERSIONS)
def test_required_and_excluded_nodes(version):
    pinned = one(version, "pinned")
    assert pinned.required_nodes == ("n4",) and pinned.excluded_nodes == ()
    assert pinned.pending_reason == "ReqNodeNotAvail"
    excl = one(version, "excl")
    assert excl.excluded_nodes == ("n1", "n2") and excl.required_nodes == ()


@pytest.mark.parametrize("version", VERSIONS)
def test_gpu_request_forms(version):
    prefix = "gres:" if version == "22.05" else "gres/"
    raw = {j["name"]: j for j in load(version, "squeue_all.json")["jobs"]}
    assert raw["run_typed"]["tres_per_node"] == f"{prefix}gpu:s1:2"
    assert raw["run_gpus"]["tres_per_job"] == f"{prefix}gpu:2"
    typed = one(version, "run_typed")
    assert (typed.gpus_per_node, typed.gpu_type, typed.node_count) == (2, "s1", 2)
    per_job = one(version, "run_gpus")
    assert (per_job.gpus_per_job, per_job.gpus_per_node, per_job.num_gpus) == (2, 0, 2)
    big = one(version, "pend_begin")
    assert (big.gpus_per_node, big.node_count, big.num_gpus) == (4, 4, 16)
    assert big.mem_mib == 4000 and big.time_limit_s is None
    # what scontrol reads back after a write: 24.11+ print the TRES form
    back = re.search(r"TresPerNode=(\S+)", text(version, "scontrol_show_job_d.txt")).group(1)
    assert back == f"{prefix}gpu:s1:2"
    assert parse_gpu_request(back) == ((GpuRequest(2, "s1"),), None)


@pytest.mark.parametrize("version", VERSIONS)
def test_gpu_indices_of_running_jobs(version):
    typed = one(version, "run_typed")
    assert typed.nodes == ("n1", "n2")
    assert typed.gpu_alloc == (("n1", (2, 3)), ("n2", (2, 3)))
    # scontrol show job -d agrees with squeue's gres_detail
    m = re.search(r"Nodes=(\S+) CPU_IDs=\S+ Mem=\d+ GRES=gpu:s1:2\(IDX:(\d)-(\d)\)",
                  text(version, "scontrol_show_job_d.txt"))
    assert expand_host_field(m.group(1)) == typed.nodes and m.group(2, 3) == ("2", "3")
    gres = one(version, "run_gres")
    assert len(gres.gpu_alloc) == 1 and gres.gpu_alloc[0][1] == (0, 1)
    gpus = one(version, "run_gpus")
    assert gpus.gpu_alloc[0][1] == (2, 3)
    assert sorted(i for t in jobs_by_name(version)["arr"] for _, x in t.gpu_alloc
                  for i in x) == [0, 0, 1]
    assert one(version, "requeued").gpu_alloc == ()


def test_jobs_read_alike_on_every_version():
    def view(version):
        return sorted((j.job_id, j.name, j.state, j.gpus_per_node, j.gpus_per_job, j.gpu_type,
                       j.node_count, j.cpus, j.mem_mib, j.nodes, j.gpu_alloc,
                       j.required_nodes, j.excluded_nodes, j.pending_reason,
                       j.restart_count, j.array_job_id, j.array_task_id,
                       j.left_to_slurm, j.user, j.partition)
                      for js in jobs_by_name(version).values() for j in js)
    assert view("24.11") == view("22.05")
    assert view("26.05") == view("22.05")


# ---- nodes ------------------------------------------------------------------------------


@pytest.mark.parametrize("version", VERSIONS)
def test_nodes_states_and_gpu_groups(version):
    found = nodes(version)
    assert sorted(found) == ["n1", "n2", "n3", "n4"]
    n4 = found["n4"]
    assert n4.state == "IDLE+DRAIN" and not n4.available and n4.reason == "test"
    assert n4.used_gpu_indices == frozenset()
    assert found["n2"].state == "MIXED+COMPLETING"
    n1 = found["n1"]
    assert n1.state == "MIXED" and n1.available and n1.partitions == ("gpu",)
    assert [(g.name, g.socket, g.gpu_indices, g.core_ids) for g in n1.gpu_groups] == [
        ("s0", 0, (0, 1), (0, 1, 2, 3)), ("s1", 1, (2, 3), (4, 5, 6, 7))]
    assert n1.used_gpu_indices == frozenset({0, 1, 2, 3}) and n1.free_gpus == 0
    assert (n1.cpus, n1.alloc_cpus, n1.real_memory_mib, n1.alloc_memory_mib) == (
        8, 3, 16000, 3000)
    assert n1.features == ()


def test_nodes_read_alike_on_every_version():
    assert nodes("24.11") == nodes("22.05")
    assert nodes("26.05") == nodes("22.05")


def test_node_features_as_list_or_comma_text():
    raw = load("24.11", "scontrol_show_node.json")["nodes"][0]
    node, _ = P.node_from_json({**raw, "active_features": ["nvlink", "a100"]})
    assert node.features == ("nvlink", "a100")
    raw22 = load("22.05", "sinfo.json")["nodes"][0]
    node, _ = P.node_from_json({**raw22, "active_features": "nvlink,a100"})
    assert node.features == ("nvlink", "a100")


@pytest.mark.parametrize("version", LATER)
def test_sinfo_of_later_versions_is_refused_with_a_pointer(version):
    data = load(version, "sinfo.json")
    assert "nodes" not in data
    with pytest.raises(SlurmOutputError, match="scontrol show node --json"):
        P.nodes_from_sinfo(data)


@pytest.mark.parametrize("version", VERSIONS)
def test_text_outputs_read_alike(version):
    parts, problems = P.partitions_from_scontrol(text(version, "scontrol_show_partition.txt"))
    assert problems == [] and len(parts) == 1
    assert parts[0].name == "gpu" and parts[0].default and parts[0].max_time_s is None
    assert parts[0].nodes == ("n1", "n2", "n3", "n4")
    switches, leaf_of, problems = P.switches_from_scontrol(
        text(version, "scontrol_show_topology.txt"))
    assert problems == []
    assert leaf_of == {"n1": "leaf1", "n2": "leaf1", "n3": "leaf2", "n4": "leaf2"}
    assert [s.name for s in switches] == ["leaf1", "leaf2", "spine"]
    lines = [parse_kv_line(ln) for ln in text(version, "scontrol_show_node.txt").splitlines()
             if ln.startswith("NodeName=")]
    assert [kv["Gres"] for kv in lines] == ["gpu:s0:2(S:0),gpu:s1:2(S:1)"] * 4
    assert lines[3]["State"] == "IDLE+DRAIN" and lines[3]["Reason"].startswith("test")


# ---- refusals ---------------------------------------------------------------------------


def with_parser(data, parser):
    data = copy.deepcopy(data)
    plugin = data["meta"]["plugin"]
    plugin["data_parser" if "data_parser" in plugin else "type"] = parser
    return data


@pytest.mark.parametrize("version", VERSIONS)
def test_an_unknown_meta_version_is_refused(version):
    data = with_parser(load(version, "squeue_all.json"), "data_parser/v0.0.99")
    with pytest.raises(SlurmOutputError, match=r"v0\.0\.99.*does not know"):
        P.jobs_from_squeue(data)
    if version == "22.05":
        data = with_parser(load(version, "sinfo.json"), "openapi/v0.0.39")
        with pytest.raises(SlurmOutputError, match=r"v0\.0\.39"):
            P.nodes_from_sinfo(data)
    else:
        data = with_parser(load(version, "scontrol_show_node.json"), "data_parser/v0.0.43")
        with pytest.raises(SlurmOutputError, match=r"v0\.0\.43"):
            P.nodes_from_scontrol(data)


def test_missing_nodes_are_refused():
    for version in LATER:
        data = load(version, "scontrol_show_node.json")
        del data["nodes"]
        with pytest.raises(SlurmOutputError, match="no 'nodes'"):
            P.nodes_from_scontrol(data)
    data = load("22.05", "sinfo.json")
    del data["nodes"]
    with pytest.raises(SlurmOutputError, match="no 'nodes'"):
        P.nodes_from_sinfo(data)


@pytest.mark.parametrize("version", LATER)
def test_node_records_none_of_which_read_are_refused(version):
    data = load(version, "scontrol_show_node.json")
    for raw in data["nodes"]:
        raw["hostname"] = raw.pop("name")
    with pytest.raises(SlurmOutputError, match="4 node records but none readable"):
        P.nodes_from_scontrol(data)


@pytest.mark.parametrize("version", VERSIONS)
def test_jobs_none_of_which_has_a_state_are_refused(version):
    data = load(version, "squeue_all.json")
    for raw in data["jobs"]:
        raw["job_state"] = {"current": raw["job_state"]}
    with pytest.raises(SlurmOutputError, match="none of 12 jobs has a Slurm job state"):
        P.jobs_from_squeue(data)
    data = load(version, "squeue_all.json")
    for raw in data["jobs"]:
        raw["id"] = raw.pop("job_id")
    with pytest.raises(SlurmOutputError, match="12 job records but none readable"):
        P.jobs_from_squeue(data)


@pytest.mark.parametrize("version", VERSIONS)
def test_one_strange_job_or_node_is_only_a_problem(version):
    data = load(version, "squeue_all.json")
    data["jobs"][0]["job_state"] = ["WEIRD"]
    jobs, problems = P.jobs_from_squeue(data)
    assert len(jobs) == 12 and len(problems) == 1 and "WEIRD" in problems[0]
    assert jobs[0].state is JobState.OTHER
    name = "sinfo.json" if version == "22.05" else "scontrol_show_node.json"
    data = load(version, name)
    data["nodes"][0]["state"] = {"odd": 1}
    data["nodes"][1]["gres"] = "gpu:s0:lots"
    found, problems = (P.nodes_from_sinfo if version == "22.05" else P.nodes_from_scontrol)(data)
    assert len(found) == 4 and len(problems) == 2
    assert found[0].state == "UNKNOWN" and not found[0].available


# ---- the source: which calls, per version -------------------------------------------------


class Recorded:
    """Answers Slurm calls from a recording; any other call fails the test. ``runner``
    runs the clients against it: the real streaming parser reads the recording 4096
    characters at a time."""

    FILES = {("squeue", "--json"): "squeue.json",
             ("squeue", "--json", "--states=all"): "squeue_all.json",
             ("sinfo", "--json"): "sinfo.json",
             ("scontrol", "show", "node", "--json"): "scontrol_show_node.json",
             ("scontrol", "show", "partition", "-o"): "scontrol_show_partition.txt",
             ("scontrol", "show", "topology"): "scontrol_show_topology.txt"}

    def __init__(self, version):
        self.version = version
        self.runner = ScriptedRunner(self.answer, chunk=4096)

    def answer(self, args: list[str]) -> tuple[int, str, str]:
        name = self.FILES[tuple(args)]
        if self.version == "22.05" and name == "scontrol_show_node.json":
            return 1, "", "scontrol: unrecognized option '--json'"
        return 0, text(self.version, name), ""


def called(runner: ScriptedRunner) -> list[str]:
    return [" ".join(c) for c in runner.calls]


def test_source_on_22_05_makes_the_same_four_calls_as_always():
    runner = Recorded("22.05").runner
    snap = CliClusterSource(runner).snapshot()
    assert called(runner) == ["scontrol show partition -o", "scontrol show topology",
                            "sinfo --json", "squeue --json"]
    assert len(snap.nodes) == 4 and len(snap.jobs) == 12
    assert snap.node("n3").leaf_switch == "leaf2"


@pytest.mark.parametrize("version", LATER)
def test_source_on_later_versions_reads_nodes_from_scontrol(version):
    runner = Recorded(version).runner
    source = CliClusterSource(runner, static_ttl_s=60)
    first = source.snapshot()
    assert called(runner) == ["scontrol show partition -o", "scontrol show topology",
                            "sinfo --json", "scontrol show node --json",
                            "squeue --json --states=all"]
    assert source.layout.parser == PARSERS[version]
    runner.calls.clear()
    second = source.snapshot()
    assert called(runner) == ["scontrol show node --json", "squeue --json --states=all"]
    assert second.nodes == first.nodes and len(second.jobs) == 12
    assert second.node("n4").state == "IDLE+DRAIN" and second.node("n1").leaf_switch == "leaf1"
    assert second.job(ids(version)["requeued"]).state is JobState.COMPLETING
    assert source.last_problems == []


def test_source_follows_an_upgrade_and_a_downgrade():
    slurm = Recorded("22.05")
    runner = slurm.runner
    source = CliClusterSource(runner, static_ttl_s=60)
    source.snapshot()
    slurm.version, runner.calls = "24.11", []
    source.snapshot()   # sinfo tells the new version at once
    assert called(runner) == ["sinfo --json", "scontrol show node --json",
                            "squeue --json --states=all"]
    slurm.version, runner.calls = "22.05", []
    with pytest.raises(SlurmError):
        source.snapshot()
    assert source.layout is None
    runner.calls = []
    assert len(source.snapshot().nodes) == 4
    assert called(runner) == ["sinfo --json", "squeue --json"]


# ---- the sink's read-back: both request forms ---------------------------------------------


@pytest.mark.parametrize("read_back", ["gres:gpu:s1:2", "gres/gpu:s1:2"])
def test_sink_accepts_both_read_back_forms(read_back):
    sink = CliDecisionSink(ScriptedRunner((0, f"7|{read_back}|N/A|\n", "")))   # squeue -O
    assert sink.read_request(7) == {"gpus_per_node": 2, "gpus_per_job": 0, "gpu_type": "s1"}
    now = sink.read_requests([7])[7]
    assert sink._verify_against(now, {"TresPerNode": "gres:gpu:s1:2"}) == ""
    assert "reads back" in sink._verify_against(now, {"TresPerNode": "gres:gpu:s0:2"})


def test_source_follows_an_answer_that_names_another_version():
    slurm = Recorded("24.11")
    runner = slurm.runner
    source = CliClusterSource(runner, static_ttl_s=60)
    source.snapshot()
    slurm.version, runner.calls = "26.05", []
    assert len(source.snapshot().jobs) == 12
    assert called(runner) == ["scontrol show node --json", "squeue --json --states=all"]
    assert source.layout.parser == PARSERS["26.05"]
    slurm.version = "22.05"    # a squeue of another layout is followed too
    source._check_layout(load("22.05", "squeue.json"), "squeue --json")
    assert source._squeue_args() == ["squeue", "--json"]


# ---- which Slurm the local cluster runs (testcluster.versions, testcluster.spec) ---------

def test_the_version_under_test_comes_from_one_variable(monkeypatch):
    from slurm_marl.testcluster import HarnessError, default_version

    for unset in (None, "", "22.05"):
        if unset is None:
            monkeypatch.delenv("SLURM_MARL_SLURM_VERSION", raising=False)
        else:
            monkeypatch.setenv("SLURM_MARL_SLURM_VERSION", unset)
        assert default_version() is None
    for version in LATER:
        monkeypatch.setenv("SLURM_MARL_SLURM_VERSION", version)
        assert default_version() == version
    monkeypatch.setenv("SLURM_MARL_SLURM_VERSION", "23.02")
    with pytest.raises(HarnessError, match="no chroot recipe"):
        default_version()


def test_a_chroot_cluster_names_its_plugins_and_turns_cgroups_off(tmp_path):
    from slurm_marl.testcluster import ClusterSpec
    from slurm_marl.testcluster.harness import render_configs

    assert ClusterSpec(slurm_version="22.05").slurm_version is None
    spec = ClusterSpec(slurm_version="24.11")
    host = render_configs(ClusterSpec(), tmp_path, 1, [2, 3, 4, 5], "h")
    chroot = render_configs(spec, tmp_path, 1, [2, 3, 4, 5], "h", plugin_dir=Path("/p/slurm"))
    assert "cgroup.conf" not in host and "PluginDir" not in host["slurm.conf"]
    assert chroot["cgroup.conf"] == "CgroupPlugin=disabled\n"
    assert "\nPluginDir=/p/slurm\n" in chroot["slurm.conf"]
    assert chroot["slurm.conf"].replace("PluginDir=/p/slurm\n", "") == host["slurm.conf"]


def test_stand_in_nodes_share_the_first_slurmd_in_one_line_and_never_time_out(tmp_path):
    from slurm_marl.testcluster import ClusterSpec
    from slurm_marl.testcluster.harness import render_configs

    spec = ClusterSpec(nodes=1000, slurmd_nodes=2)
    assert spec.daemon_node_names == ["n1", "n2"]
    assert spec.stand_in_node_names[0] == "n3" and len(spec.stand_in_node_names) == 998
    conf = render_configs(spec, tmp_path, 1, [7001, 7002], "h")["slurm.conf"].splitlines()
    node_lines = [line for line in conf if line.startswith("NodeName=")]
    assert [line.split()[0] for line in node_lines] == ["NodeName=n1", "NodeName=n2",
                                                         "NodeName=n[3-1000]"]
    assert "Port=7001" in node_lines[0] and "Port=7002" in node_lines[1]
    assert "Port=7001" in node_lines[2]     # the first node's slurmd answers for them
    assert all("Gres=gpu:s0:2,gpu:s1:2" in line for line in node_lines)
    assert "SlurmdTimeout=0" in conf
    plain = render_configs(ClusterSpec(nodes=2), tmp_path, 1, [7001, 7002], "h")["slurm.conf"]
    assert "SlurmdTimeout=30" in plain.splitlines() and "NodeName=n[" not in plain
    with pytest.raises(ValueError, match="slurmd_nodes must be between 1 and nodes"):
        ClusterSpec(nodes=4, slurmd_nodes=0)
    with pytest.raises(ValueError, match="slurmd_nodes"):
        ClusterSpec(nodes=4, slurmd_nodes=5)
