"""Admin commands: a bad profile or store is one line on stderr and exit 2 (no traceback),
and the read-only commands never create or write the store."""

import os
import sqlite3
import subprocess
import sys

import pytest
from typer.testing import CliRunner

from slurm_marl.cli import app
from slurm_marl.daemon.store import Store

READ_COMMANDS = [["status"], ["decisions"], ["explain", "7"], ["queues"]]


@pytest.fixture
def runner():
    return CliRunner()


@pytest.fixture
def in_process_run(monkeypatch):
    """`slurm-marl run` in this process: keep its logging setup and umask out of pytest's."""
    monkeypatch.setattr("slurm_marl.daemon.loop.setup_logging", lambda level: None)
    umask = os.umask(0o022)
    os.umask(umask)
    yield
    os.umask(umask)


def one_line_error(result, *needles):
    assert result.exit_code == 2, (result.exit_code, result.output, result.exception)
    err = result.stderr.strip()
    assert "\n" not in err and err.startswith("error: "), err
    assert "Traceback" not in result.output
    for needle in needles:
        assert needle in err, err


def write_config(tmp_path, profile="las-consolidate"):
    """A config whose slurm.conf exists (its StateSaveLocation holds the cluster lock)."""
    conf = tmp_path / "slurm.conf"
    conf.write_text(f"ClusterName=t\nStateSaveLocation={tmp_path / 'slurmstate'}\n")
    (tmp_path / "slurmstate").mkdir(exist_ok=True)
    cfg = tmp_path / "config.toml"
    cfg.write_text(f'[slurm]\nslurm_conf = "{conf}"\n'
                   f'[agent]\nstate_dir = "{tmp_path / "state"}"\nprofile = "{profile}"\n'
                   "[metrics]\nenabled = false\n")
    return cfg


def garbage_store(path):
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_bytes(b"\x13\x37 not a database " * 400)
    return path


def non_integer_version_store(path):
    path.parent.mkdir(parents=True, exist_ok=True)
    db = sqlite3.connect(path)
    db.execute("CREATE TABLE meta (key TEXT PRIMARY KEY, value TEXT NOT NULL)")
    db.execute("INSERT INTO meta VALUES ('schema_version', 'one')")
    db.commit()
    db.close()
    return path


PROFILES = {
    "toml-syntax": ("[order\n", "invalid TOML"),
    "unknown-plugin": ('[order]\nplugin = "nope"\n', "plugin 'nope' is unknown"),
    "bad-weight": ('[order]\nplugin = "tiresias_las"\n[place]\nconsolidate = -1\n',
                   "weight of 'consolidate'"),
    "bad-model-weights": ('[order]\nplugin = "tiresias_las"\n[place]\nleast_interference = 1\n'
                          '[place_params.least_interference]\nmodel_path = "{dir}/model.pt"\n',
                          "cannot load weights"),
    "not-utf8": ("# \udcff\n", "not UTF-8"),
}


@pytest.mark.parametrize("case", sorted(PROFILES))
def test_run_with_a_bad_profile_is_one_line_exit_2(tmp_path, runner, in_process_run, case):
    text, needle = PROFILES[case]
    profile = tmp_path / "profile.toml"
    profile.write_bytes(text.format(dir=tmp_path).encode("utf-8", "surrogateescape"))
    (tmp_path / "model.pt").write_bytes(b"\x00 garbage, not torch weights")
    (tmp_path / "model.json").write_text("{}")
    result = runner.invoke(app, ["run", "--config", str(write_config(tmp_path, profile)),
                                 "--cycles", "1"])
    one_line_error(result, needle, str(profile))


@pytest.mark.parametrize("make_store,needle", [
    (garbage_store, "not a database"),
    (non_integer_version_store, "schema version 'one'"),
])
def test_run_with_an_unreadable_store_is_one_line_exit_2(tmp_path, runner, in_process_run,
                                                         make_store, needle):
    cfg = write_config(tmp_path)
    make_store(tmp_path / "state" / "state.sqlite")
    result = runner.invoke(app, ["run", "--config", str(cfg), "--cycles", "1"])
    one_line_error(result, needle)


@pytest.mark.parametrize("command", READ_COMMANDS, ids=lambda c: c[0])
@pytest.mark.parametrize("make_store,needle", [
    (garbage_store, "not a database"),
    (non_integer_version_store, "schema version 'one'"),
])
def test_read_commands_with_an_unreadable_store_are_one_line_exit_2(
        tmp_path, runner, command, make_store, needle):
    store = make_store(tmp_path / "state.sqlite")
    result = runner.invoke(app, [*command, "--store", str(store)])
    one_line_error(result, needle, str(store))
    # ... and through the config's state_dir
    make_store(tmp_path / "state" / "state.sqlite")
    result = runner.invoke(app, [*command, "--config", str(write_config(tmp_path))])
    one_line_error(result, needle)


@pytest.mark.parametrize("command", READ_COMMANDS, ids=lambda c: c[0])
def test_read_commands_leave_a_missing_store_missing(tmp_path, runner, command):
    missing = tmp_path / "nowhere" / "state.sqlite"
    result = runner.invoke(app, [*command, "--store", str(missing)])
    one_line_error(result, "no state store", str(missing))
    assert not missing.exists() and not missing.parent.exists()


def older_store(path):
    """A store as an older slurm-marl left it: schema version 1, a table short. Opening it
    for writing adds the table (a migration); the read commands must not."""
    st = Store(path)
    st.record_cycle(1, 1000.0, 0.2, 3, 2, 4, 1, 0)
    st.db.execute("DROP TABLE speed_samples")
    st.close()
    return path


@pytest.mark.parametrize("command", READ_COMMANDS, ids=lambda c: c[0])
@pytest.mark.parametrize("daemon_running", [False, True], ids=["stopped", "running"])
def test_read_commands_never_write_the_store(tmp_path, runner, command, daemon_running):
    path = older_store(tmp_path / "state.sqlite")
    daemon = Store(path) if daemon_running else None  # the agent holding it (WAL) or not
    try:
        before = {p.name: (p.read_bytes(), p.stat().st_mtime_ns)
                  for p in tmp_path.iterdir()}
        result = runner.invoke(app, [*command, "--store", str(path)])
        after = {p.name: (p.read_bytes(), p.stat().st_mtime_ns)
                 for p in tmp_path.iterdir()}
    finally:
        if daemon is not None:
            daemon.close()
    assert "Traceback" not in result.output and result.exit_code in (0, 1), result.output
    assert after == before  # no byte, no mtime, no -wal/-shm file changed or added
    if command == ["status"]:
        assert result.exit_code == 0 and "last cycle 1" in result.stdout


def test_read_only_store_reads_what_a_running_daemon_wrote(tmp_path):
    daemon = Store(tmp_path / "state.sqlite")
    daemon.record_cycle(1, 1000.0, 0.2, 3, 2, 4, 1, 0)  # still in the -wal file
    try:
        reader = Store.open_readonly(tmp_path / "state.sqlite")
        assert [c["cycle"] for c in reader.log.cycles()] == [1]
        with pytest.raises(sqlite3.OperationalError, match="readonly"):
            reader.record_cycle(2, 1001.0, 0.2, 0, 0, 0, 0, 0)
        reader.close()
    finally:
        daemon.close()


def test_real_entry_point_prints_one_line_for_a_bad_profile(tmp_path):
    profile = tmp_path / "profile.toml"
    profile.write_text("[order\n")
    proc = subprocess.run([sys.executable, "-m", "slurm_marl.cli", "run", "--config",
                           str(write_config(tmp_path, profile)), "--cycles", "1"],
                          capture_output=True, text=True, timeout=300)
    assert proc.returncode == 2, proc.stderr
    assert proc.stderr.strip().splitlines() == [
        proc.stderr.strip()] and "invalid TOML" in proc.stderr
    assert not (tmp_path / "state").exists()


def test_install_plugin_never_forces_enforce_binding(runner, tmp_path):
    cfg = tmp_path / "agent.toml"
    cfg.write_text(f'[slurm]\nslurm_conf = "{tmp_path / "slurm.conf"}"\n'
                   '[agent]\nmanaged_partitions = ["gpu"]\n')
    for version, flag in (("24.11.5", "false"), ("22.05.8", "false")):
        res = runner.invoke(app, ["install-plugin", "--config", str(cfg), "--print",
                                  "--slurm-version", version])
        assert res.exit_code == 0 and f"ENFORCE_BINDING = {flag}" in res.stdout
    # without --slurm-version scontrol is asked, which needs the site's slurm.conf
    # (tests/slurm/test_check_slurm_live.py asks a live cluster's)
    one_line_error(runner.invoke(app, ["install-plugin", "--config", str(cfg), "--print"]),
                   "does not exist", "--slurm-version")
    one_line_error(runner.invoke(app, ["install-plugin", "--config", str(cfg), "--print",
                                       "--slurm-version", "new"]), "cannot tell")
