"""What people read stays whole when it is not a terminal, and `slurm-marl --version`.

rich assumes 80 columns when stdout is a pipe or a file and squeezes wider tables into them,
cutting their headers ("comple…"); `slurm_marl.console.output_console` gives such output
the full width instead.
"""

import importlib.metadata
import io
import os
import subprocess
import sys
import tomllib
from pathlib import Path

from typer.testing import CliRunner

import slurm_marl
from slurm_marl.cli import app
from slurm_marl.console import PIPED_WIDTH, output_console

ROOT = Path(__file__).resolve().parents[2]
TRACE = ROOT / "tests" / "data" / "traces" / "tiresias_head20.csv"
DETAILS = ["profile", "strength", "avg JCT", "median", "p95", "queue delay", "longest wait",
           "util", "preempt"]


def _env() -> dict[str, str]:
    env = {k: v for k, v in os.environ.items()
           if k not in ("COLUMNS", "FORCE_TERMINAL", "TTY_COMPATIBLE", "TTY_INTERACTIVE")}
    env["OMP_NUM_THREADS"] = "1"
    return env


def test_compare_piped_to_a_file_keeps_whole_headers(tmp_path):
    # `compare`'s details table is about 100 columns wide: more than rich's 80 for a pipe.
    out = tmp_path / "compare.txt"
    with out.open("w") as stdout:
        proc = subprocess.run([sys.executable, "-m", "slurm_marl.cli", "compare", "--trace",
                               str(TRACE), "--cluster", "2x1x4", "--out", str(tmp_path / "cmp")],
                              stdout=stdout, stderr=subprocess.PIPE, text=True, env=_env(),
                              cwd=tmp_path, timeout=300)
    assert proc.returncode == 0, proc.stderr
    text = out.read_text()
    assert "…" not in text, text
    header = next(line for line in text.splitlines() if "strength" in line)
    assert [cell.strip() for cell in header.strip("┃ ").split("┃")] == DETAILS, text
    assert "las-consolidate" in text and "fifo-consolidate" in text


def test_output_console_width(monkeypatch):
    # another test of the same worker may have left COLUMNS set (it then wins, as it should)
    monkeypatch.delenv("COLUMNS", raising=False)
    piped = output_console(file=io.StringIO())
    assert piped.width == PIPED_WIDTH


def test_output_console_keeps_an_explicit_width(monkeypatch):
    monkeypatch.setenv("COLUMNS", "60")
    assert output_console(file=io.StringIO()).width == 60
    monkeypatch.delenv("COLUMNS")
    assert output_console(file=io.StringIO(), width=70).width == 70


def test_version_is_the_installed_distribution_s():
    result = CliRunner().invoke(app, ["--version"])
    assert result.exit_code == 0, result.output
    pyproject = tomllib.loads((ROOT / "pyproject.toml").read_text())
    wanted = pyproject["project"]["version"]
    assert result.output == f"slurm-marl {wanted}\n"
    assert importlib.metadata.version("slurm-marl") == wanted == slurm_marl.__version__


def test_version_without_package_metadata_says_so(monkeypatch):
    def missing(name):
        raise importlib.metadata.PackageNotFoundError(name)

    monkeypatch.setattr(importlib.metadata, "version", missing)
    result = CliRunner().invoke(app, ["--version"])
    assert result.exit_code == 0, result.output
    assert result.output.startswith(f"slurm-marl {slurm_marl.__version__} (not installed")
