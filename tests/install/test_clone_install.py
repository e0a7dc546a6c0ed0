"""A clone is the whole project: its data, its install files and its commands travel with it.

The tests clone the committed HEAD of the checkout they run in (only committed files travel,
as for a user) into an empty temporary folder with no ``shared`` folder beside it, with
``$SLURM_MARL_DATA`` unset, and run the project from there:

* from the clone's sources (``PYTHONPATH=<clone>/src``, the working directory in the clone);
* from a wheel built from the clone and installed into a fresh virtual environment, run from
  a folder outside any repository.

No dependency is downloaded. The fresh environments see the test environment's packages
(torch, numpy, typer, ...) through a ``.pth`` file holding one line, that environment's
site-packages path: a plain path line adds the folder to ``sys.path`` without running the
folder's own ``.pth`` files, so the test environment's editable install (its path or hook
to this checkout's ``src``) is not active there. Each test asserts which ``slurm_marl`` ran.
"""

from __future__ import annotations

import json
import os
import re
import shlex
import subprocess
import sys
import sysconfig
import tomllib
import zipfile
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
TIMEOUT_S = 300
# Tiresias' simulator on its 60-job trace, 2 nodes x 4 GPUs, dlas: average JCT 715.3 s
# (src/slurm_marl/data/public/README.md); tests/sim/test_sim_fidelity.py holds it to 5%.
TIRESIAS_60_DLAS_2X4 = 715.3


def _run(cmd, *, cwd: Path, env: dict[str, str], check: bool = True):
    proc = subprocess.run([str(c) for c in cmd], cwd=cwd, env=env, capture_output=True,
                          text=True, timeout=TIMEOUT_S)
    if check:
        assert proc.returncode == 0, (f"{shlex.join(map(str, cmd))} (in {cwd}) exited "
                                      f"{proc.returncode}\n{proc.stdout}\n{proc.stderr}")
    return proc


def _clean_env() -> dict[str, str]:
    env = {k: v for k, v in os.environ.items()
           if k not in ("SLURM_MARL_DATA", "PYTHONPATH", "PYTHONHOME", "VIRTUAL_ENV",
                        "COLUMNS")}
    env.update(PYTHONNOUSERSITE="1", OMP_NUM_THREADS="1", MKL_NUM_THREADS="1",
               PIP_DISABLE_PIP_VERSION_CHECK="1")
    return env


def _fresh_venv(where: Path) -> Path:
    """A new virtual environment whose only extra path is the test environment's
    site-packages (see the module docstring); its python."""
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(where)], check=True,
                   timeout=TIMEOUT_S)
    python = where / "bin" / "python"
    site = subprocess.run([str(python), "-c",
                           "import sysconfig; print(sysconfig.get_paths()['purelib'])"],
                          capture_output=True, text=True, check=True).stdout.strip()
    (Path(site) / "slurm_marl_test_deps.pth").write_text(sysconfig.get_paths()["purelib"] + "\n")
    return python


def _fenced_blocks(markdown: str, section: str) -> list[str]:
    """The fenced code blocks of one ``## `` section."""
    start = markdown.index(f"\n## {section}")
    end = markdown.find("\n## ", start + 1)
    body = markdown[start:end if end >= 0 else None]
    return re.findall(r"```bash\n(.*?)```", body, flags=re.S)


@pytest.fixture(scope="module")
def clone(tmp_path_factory) -> Path:
    """``git clone`` of this checkout's committed HEAD into an empty folder."""
    if not (ROOT / ".git").exists():
        pytest.fail(f"{ROOT} is not a git checkout: these tests clone it")
    home = tmp_path_factory.mktemp("clone-home")
    target = home / "slurm-marl"
    subprocess.run(["git", "clone", "--quiet", str(ROOT), str(target)], check=True,
                   timeout=TIMEOUT_S)
    # Where the old lookup searched (beside the repository, above the working directory).
    for place in (home, home.parent):
        assert not (place / "shared").exists(), f"{place / 'shared'} exists: not a clean spot"
    return target


def test_a_clone_runs_on_its_own_data(clone, tmp_path):
    python = _fresh_venv(tmp_path / "venv")
    env = _clean_env() | {"PYTHONPATH": str(clone / "src")}
    probe = ("import json, slurm_marl, slurm_marl.shared_data as data\n"
             "from slurm_marl.demo import demo_inputs\n"
             "trace, past, jobs, mix = demo_inputs()\n"
             "print(json.dumps({'module': slurm_marl.__file__, 'data': str(data.data_dir()),"
             " 'trace': str(trace), 'history_jobs': len(jobs), 'model_types': len(mix)}))")
    found = json.loads(_run([python, "-c", probe], cwd=clone, env=env).stdout)
    for key in ("module", "data", "trace"):
        assert Path(found[key]).resolve().is_relative_to(clone.resolve()), found
    assert found["history_jobs"] == 80 and found["model_types"] > 10, found   # the demo's

    sim = _run([python, "-m", "slurm_marl.cli", "simulate", "--trace",
                "src/slurm_marl/data/public/traces/tiresias_60_job.csv", "--cluster", "2x1x4",
                "--profile", "las-consolidate", "--json"], cwd=clone, env=env)
    result = json.loads(sim.stdout)
    assert result["jobs"] == result["finished"] == 60, result
    assert result["avg_jct_s"] == pytest.approx(TIRESIAS_60_DLAS_2X4, rel=0.05), result


def test_the_wheel_carries_everything_and_runs_outside_the_repository(clone, tmp_path):
    wheels = tmp_path / "wheels"
    _run([sys.executable, "-m", "pip", "wheel", "--quiet", "--no-deps", "--no-build-isolation",
          "--no-index", "-w", wheels, clone], cwd=tmp_path, env=_clean_env())
    (wheel,) = wheels.glob("slurm_marl-*.whl")
    members = set(zipfile.ZipFile(wheel).namelist())

    # Every file of the package in the clone is in the wheel: data, profiles, templates.
    tracked = _run(["git", "ls-files", "src/slurm_marl"], cwd=clone, env=_clean_env()).stdout
    package_files = {name.removeprefix("src/") for name in tracked.split()}
    assert package_files - members == set()
    for needed in ("slurm_marl/slurm_integration/job_submit.lua.in",
                   "slurm_marl/policy/profiles/las-consolidate.toml",
                   "slurm_marl/data/systemd/config.example.toml",
                   "slurm_marl/data/systemd/slurm-marl.service",
                   "slurm_marl/data/learned_demo.pt", "slurm_marl/data/learned_demo.json",
                   "slurm_marl/data/public/README.md",
                   "slurm_marl/data/public/traces/philly.csv",
                   "slurm_marl/data/public/traces/tiresias_60_job.csv",
                   "slurm_marl/data/public/traces/LICENSE.philly-CC-BY-4.0.txt",
                   "slurm_marl/data/public/interference/gavel_pairwise_colocation.csv",
                   "slurm_marl/data/public/reference/tiresias_windows.md"):
        assert needed in members, needed
    assert len([m for m in members if m.startswith("slurm_marl/policy/profiles/")]) >= 10

    venv = tmp_path / "venv"
    python = _fresh_venv(venv)
    _run([sys.executable, "-m", "pip", "--python", python, "install", "--quiet", "--no-deps",
          "--no-index", wheel], cwd=tmp_path, env=_clean_env())
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    env = _clean_env() | {"PATH": f"{venv / 'bin'}{os.pathsep}{os.environ.get('PATH', '')}"}
    cli = venv / "bin" / "slurm-marl"

    version = tomllib.loads((clone / "pyproject.toml").read_text())["project"]["version"]
    assert _run([cli, "--version"], cwd=elsewhere, env=env).stdout == f"slurm-marl {version}\n"
    assert "job_submit.lua" in _run([cli, "install-plugin", "--help"], cwd=elsewhere,
                                    env=env).stdout
    probe = ("import json, slurm_marl\n"
             "from slurm_marl.shared_data import data_file\n"
             "from slurm_marl.agent.checkpoint import shipped_checkpoint\n"
             "from slurm_marl.demo import demo_inputs\n"
             "trace, past, jobs, mix = demo_inputs()\n"
             "print(json.dumps({'module': slurm_marl.__file__,"
             " 'tiresias': str(data_file('traces/tiresias_60_job.csv')),"
             " 'philly': str(trace), 'checkpoint': str(shipped_checkpoint())}))")
    found = json.loads(_run([python, "-c", probe], cwd=elsewhere, env=env).stdout)
    for key, path in found.items():
        assert Path(path).resolve().is_relative_to(venv.resolve()), (key, path)
        assert Path(path).is_file(), (key, path)

    sim = _run([cli, "simulate", "--trace", found["tiresias"], "--cluster", "2x1x4",
                "--profile", "las-consolidate", "--json"], cwd=elsewhere, env=env)
    result = json.loads(sim.stdout)
    assert result["jobs"] == result["finished"] == 60, result
    assert result["avg_jct_s"] == pytest.approx(TIRESIAS_60_DLAS_2X4, rel=0.05), result

    # The gate renders from the installed template and the shipped example config.
    systemd_dir = Path(found["module"]).parent / "data" / "systemd"
    gate = _run([cli, "install-plugin", "--config", systemd_dir / "config.example.toml",
                 "--print", "--slurm-version", "22.05.8", "--agent-uid", "999"],
                cwd=elsewhere, env=env).stdout
    assert "function slurm_job_submit" in gate

    # docs/operations.md's command for finding the unit and config in an installed package.
    (block,) = [b for b in _fenced_blocks((clone / "docs" / "operations.md").read_text(),
                                          "2. Install") if "slurm_marl.__file__" in b]
    argv = shlex.split(block.strip())
    assert argv[0] == ".venv/bin/python"
    shown = Path(_run([python, *argv[1:]], cwd=elsewhere, env=env).stdout.strip())
    assert shown == systemd_dir
    assert {p.name for p in shown.iterdir()} >= {"config.example.toml", "slurm-marl.service"}


def test_operations_install_steps_match_the_repository():
    """docs/operations.md installs with `pip install .` from a clone and copies the example
    config and the unit from paths that exist (and that the wheel test finds packaged)."""
    text = (ROOT / "docs" / "operations.md").read_text()
    install = "\n".join(_fenced_blocks(text, "2. Install"))
    assert re.search(r"git clone .+ /opt/slurm-marl && cd /opt/slurm-marl", install)
    assert ".venv/bin/pip install .\n" in install
    steps = install + "\n".join(_fenced_blocks(text, "5. Start in shadow mode first"))
    steps = steps.replace("\\\n", " ")
    copied = []
    for line in steps.splitlines():
        words = shlex.split(line)
        if words[:1] == ["install"] and "-d" not in words:
            # install [-m MODE] [-g GROUP] [-o OWNER] SOURCE DEST
            args = [w for i, w in enumerate(words[1:], 1)
                    if not w.startswith("-") and not words[i - 1] in ("-m", "-g", "-o")]
            copied.append(args[0])
    assert sorted(copied) == ["src/slurm_marl/data/systemd/config.example.toml",
                              "src/slurm_marl/data/systemd/slurm-marl.service"]
    for source in copied:
        assert (ROOT / source).is_file(), source
