"""The SchedMD testsuite runner's pure parts: JUnit outcomes, the per-test comparison, the
unpacking of testsuite/python and its error when a source has none."""

from __future__ import annotations

import io
import tarfile
from pathlib import Path

import pytest

from slurm_marl.testcluster.schedmd_outcomes import Outcome, counts, differences, read_junit
from slurm_marl.testcluster.schedmd_source import SchedmdError, _unpack_testsuite

JUNIT = """<?xml version="1.0" encoding="utf-8"?>
<testsuites><testsuite name="pytest" tests="4">
<testcase classname="tests.commands.sbatch.test_--usage" name="test_usage" time="0.02"/>
<testcase classname="tests.commands.srun.test_--version" name="test_version" time="0.05">
  <failure message="AssertionError: assert None is not None&#10;more">trace</failure></testcase>
<testcase classname="tests.features.gres.test_mps_options" name="test_a" time="0">
  <skipped type="pytest.skip" message="This test requires the GresTypes parameter to include mps">
  </skipped></testcase>
<testcase classname="tests.commands.x" name="test_teardown" time="0.1">
  <error message="failed on teardown">t</error></testcase>
</testsuite></testsuites>
"""


def test_read_junit_outcomes(tmp_path):
    path = tmp_path / "junit.xml"
    path.write_text(JUNIT)
    got = read_junit(path)
    assert got["tests.commands.sbatch.test_--usage::test_usage"] == Outcome("passed")
    assert got["tests.commands.srun.test_--version::test_version"] == Outcome(
        "failed", "AssertionError: assert None is not None")
    assert got["tests.features.gres.test_mps_options::test_a"].outcome == "skipped"
    assert "mps" in got["tests.features.gres.test_mps_options::test_a"].message
    assert got["tests.commands.x::test_teardown"].outcome == "error"
    assert counts(got) == {"passed": 1, "failed": 1, "error": 1, "skipped": 1}


def test_differences_by_outcome_not_message():
    a = {"t1": Outcome("passed"), "t2": Outcome("skipped", "job 12"), "t3": Outcome("passed")}
    b = {"t1": Outcome("passed"), "t2": Outcome("skipped", "job 40"), "t3": Outcome("failed"),
         "t4": Outcome("passed")}
    diffs = differences(a, b)
    assert [d["test"] for d in diffs] == ["t3", "t4"]
    assert diffs[1]["slurm"] is None and diffs[1]["agent"]["outcome"] == "passed"
    assert differences(a, dict(a)) == []


def _tarball(path: Path, names: list[str]) -> Path:
    with tarfile.open(path, "w:gz") as tar:
        for name in names:
            data = b"x = 1\n"
            info = tarfile.TarInfo(name)
            info.size = len(data)
            tar.addfile(info, io.BytesIO(data))
    return path


def test_unpack_only_testsuite_python(tmp_path):
    orig = _tarball(tmp_path / "slurm-wlm_22.05.8.orig.tar.gz",
                    ["slurm-slurm-22-05-8-1/testsuite/python/lib/atf.py",
                     "slurm-slurm-22-05-8-1/testsuite/python/conftest.py",
                     "slurm-slurm-22-05-8-1/src/slurmctld/slurmctld.c"])
    base = tmp_path / "cache"
    assert _unpack_testsuite(orig, base) == "slurm-slurm-22-05-8-1"
    assert (base / "testsuite/python/lib/atf.py").exists()
    assert not (base / "src").exists()


def test_unpack_says_when_source_has_no_testsuite(tmp_path):
    orig = _tarball(tmp_path / "x.orig.tar.gz", ["slurm-x/src/slurmctld/slurmctld.c"])
    with pytest.raises(SchedmdError, match="has no testsuite/python"):
        _unpack_testsuite(orig, tmp_path / "cache")
