import socket

from slurm_marl.daemon.store import Store, StoreError
from slurm_marl.daemon.systemd import Notifier
from slurm_marl.domain import GroupAlloc, Place, SetPriority
from slurm_marl.slurm_integration.plugin import PluginError, render_job_submit_lua

import pytest


def test_decisions_written_and_reservations(tmp_path):
    st = Store(tmp_path / "s.sqlite")
    p = Place(7, "consolidate", "best fit", nodes=("n1",), allocs=(GroupAlloc("n1", 1, 2),),
              scores=(("consolidate", 0.9),))
    st.log.record(1, 10.0, [(p, "ok", ""), (SetPriority(7, "las", "q0", 5, 0),
                                                  "refused", "held")])
    rows = st.log.decisions(job_id=7)
    assert [r["kind"] for r in rows] == ["SetPriority", "Place"]
    assert rows[1]["payload"]["allocs"] == [{"node": "n1", "group": 1, "gpus": 2}]
    assert st.log.decisions(kind="Place")[0]["status"] == "ok"
    st.written.mark([(7, "place", "x")], 10.0)
    st.written.mark([(7, "place", "y")], 11.0)
    assert st.written.get([7]) == {(7, "place"): "y"}
    st.reservations.add("slurm-marl-7", 7, "n1,n2", 10.0)
    assert list(st.reservations.active()) == ["slurm-marl-7"]
    st.reservations.end("slurm-marl-7", 12.0)
    assert st.reservations.active() == {}
    assert st.next_cycle() == 1
    st.record_cycle(1, 10.0, 0.1, 1, 0, 2, 1, 1)
    assert st.next_cycle() == 2


def test_schema_version_mismatch_is_refused(tmp_path):
    st = Store(tmp_path / "s.sqlite")
    st.set_meta("schema_version", "999")
    st.close()
    with pytest.raises(StoreError, match="schema version 999"):
        Store(tmp_path / "s.sqlite")
    with pytest.raises(StoreError, match="no state store"):
        Store.open_readonly(tmp_path / "none.sqlite")


def test_notifier_sends_datagrams(tmp_path, monkeypatch):
    path = tmp_path / "n.sock"
    sock = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)
    sock.bind(str(path))
    sock.settimeout(2)
    monkeypatch.setenv("WATCHDOG_USEC", "5000000")
    n = Notifier(str(path))
    assert n.enabled and n.watchdog_s == 5.0
    assert n.ready("ok") and n.watchdog()
    assert sock.recv(100) == b"READY=1\nSTATUS=ok" and sock.recv(100) == b"WATCHDOG=1"
    assert not Notifier("").notify("READY=1")
    assert not Notifier(str(tmp_path / "nobody")).ready()


def test_job_submit_lua_rendering():
    text = render_job_submit_lua(["gpu", "a100"], 30, [1234], slurm_version="22.05.8")
    assert '["gpu"] = true, ["a100"] = true' in text
    assert "GRACE_S = 30" in text and "[0] = true, [1234] = true" in text
    assert "ENFORCE_BINDING = false" in text
    assert "@" not in text.split("--]]", 1)[1]
    assert "ENFORCE_BINDING = false" in render_job_submit_lua(["gpu"], 30, [],
                                                              slurm_version="24.11.5")
    for bad in ([], ["gpu; os.exit()"]):
        with pytest.raises(PluginError):
            render_job_submit_lua(bad, 30, [], slurm_version="22.05")
    with pytest.raises(PluginError):
        render_job_submit_lua(["gpu"], 0, [], slurm_version="22.05")


def test_enforce_binding_is_never_forced():
    """Forced, 22.05 refused at sbatch what Slurm alone accepts, and 24.11+ gave every job
    its GPUs' whole socket (measured): the gate forces it on no version."""
    from slurm_marl.slurm_integration.plugin import enforce_binding_for

    for later in ("slurm 22.05.8", "22.05", "slurm-wlm 24.11.5", "26.05.5", "23.02.7",
                  "slurm 25.11.0"):
        assert not enforce_binding_for(later)
    with pytest.raises(PluginError, match="cannot tell"):
        enforce_binding_for("unknown")


def test_opening_the_store_while_another_process_creates_it_waits(tmp_path):
    """Switching a new (rollback-journal) database to WAL needs a lock SQLite does not wait
    for: a reader opening the store while the daemon was creating it failed at once with
    "database is locked". The store now retries that switch."""
    import sqlite3
    import threading
    path = tmp_path / "state.sqlite"
    other = sqlite3.connect(str(path), isolation_level=None, check_same_thread=False)
    other.execute("CREATE TABLE early(x)")
    other.execute("BEGIN IMMEDIATE")                 # what a creating daemon holds
    other.execute("INSERT INTO early VALUES (1)")
    with pytest.raises(sqlite3.OperationalError, match="locked"):
        sqlite3.connect(str(path), timeout=5).execute("PRAGMA journal_mode=WAL")
    timer = threading.Timer(0.3, lambda: other.execute("COMMIT"))
    timer.start()
    store = Store(path)
    timer.join()
    assert store.db.execute("PRAGMA journal_mode").fetchone()[0] == "wal"
    store.close()
    other.close()


def test_a_column_added_by_another_process_meanwhile_is_no_error(tmp_path):
    """Two processes opening an older store at once both saw a column missing; the second
    ALTER failed with "duplicate column name" (CI, 24.11: the daemon and a test's reader
    opening a new store together). The column being there is all that matters."""
    st = Store(tmp_path / "s.sqlite")
    real = st.db

    class Stale:   # PRAGMA as it read a moment before the other process added the column
        def execute(self, sql, *args):
            rows = real.execute(sql, *args)
            if sql.startswith("PRAGMA table_info(cycles)"):
                return [r for r in rows if r["name"] != "protected"]
            return rows

    st.db = Stale()
    try:
        st._add_columns()
    finally:
        st.db = real
    st.record_cycle(1, 0.0, 0.1, 0, 0, 0, 0, 0, None, protected=3)
    assert st.log.cycles(1)[0]["protected"] == 3
