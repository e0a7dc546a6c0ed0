"""A real, throw-away Slurm cluster on this host: munged, slurmctld and one slurmd per node.

Used by the tests, the benchmarks, the replay and the demo. Everything lives under one
folder; daemons listen on free loopback ports; fake GPUs are device files that are symlinks
to /dev/null, typed per socket in gres.conf (``Type=s0``, ``Type=s1``) so GPU groups are
real to Slurm. Teardown goes by PID (from the pid files this harness wrote) and process tree
(``processes``), never by process name, so two clusters, or a production Slurm, on the same
host are left alone. ``ClusterSpec.slurm_version`` runs a newer Slurm from a Debian chroot
instead of the host's (``versions``).
"""

from __future__ import annotations

import json
import logging
import os
import shutil
import socket
import subprocess
import tempfile
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path

from slurm_marl.slurm_integration.text import collapse_hosts
from slurm_marl.testcluster import accounting as acct
from slurm_marl.testcluster import versions
from slurm_marl.testcluster.errors import HarnessError
from slurm_marl.testcluster.spec import ClusterSpec, render_configs
from slurm_marl.testcluster.ports import release as release_ports
from slurm_marl.testcluster.ports import reserve as reserve_ports
from slurm_marl.testcluster.processes import alive, end_processes, kill_strays
from slurm_marl.testcluster.versions import ensure_installed, missing_binaries

log = logging.getLogger(__name__)

STATE_FILE = "cluster.json"
__all__ = ["ClusterSpec", "HarnessError", "LocalCluster", "ensure_installed",
           "missing_binaries", "render_configs"]


# how many times slurmdbd is started before the harness gives up on it
DBD_STARTS = 3


@dataclass
class LocalCluster:
    """One local cluster. ``up()`` starts it, ``down()`` stops it; also a context manager."""

    spec: ClusterSpec = field(default_factory=ClusterSpec)
    root: Path | None = None
    ctld_port: int = 0
    node_ports: list[int] = field(default_factory=list)
    _owns_root: bool = False
    # [mariadb, slurmdbd] ports when the spec asks for accounting
    acct_ports: list[int] = field(default_factory=list)
    # the chroot a newer Slurm runs from (``spec.slurm_version``), held while up
    chroot: Path | None = None

    @property
    def accounting_ports(self) -> acct.AccountingPorts | None:
        return acct.AccountingPorts(*self.acct_ports) if self.acct_ports else None

    @property
    def slurm_conf(self) -> Path:
        assert self.root is not None
        return self.root / "etc" / "slurm.conf"

    @property
    def bin_dir(self) -> Path | None:
        """The chroot's client wrappers (a SlurmRunner's ``bin_dir``); None on the host's."""
        return self.root / "bin" if self.chroot is not None and self.root else None

    @property
    def env(self) -> dict[str, str]:
        """Environment for Slurm client calls: SLURM_CONF always set (else DNS SRV lookups);
        a chroot's client wrappers first on PATH."""
        parts = os.environ.get("PATH", "").split(":")
        if "/usr/sbin" not in parts:
            parts += ["/usr/sbin", "/sbin"]
        if self.bin_dir is not None:
            parts = [str(self.bin_dir)] + [p for p in parts if p != str(self.bin_dir)]
        return dict(os.environ, SLURM_CONF=str(self.slurm_conf), PATH=":".join(parts))

    def _inside(self, argv: list[str]) -> list[str]:
        return versions.inside(self.chroot, argv)

    def __enter__(self) -> "LocalCluster":
        return self.up()

    def __exit__(self, *exc) -> None:
        self.down()

    # ---- bring-up ----------------------------------------------------------------------
    def up(self, timeout_s: float = 60.0) -> "LocalCluster":
        version = self.spec.slurm_version
        if version is None:
            ensure_installed(self.spec.accounting)
        elif self.root is not None:
            versions.check_root(version, self.root)
        if self.root is None:
            self.root = Path(tempfile.mkdtemp(prefix="slurm-marl-cluster-",
                                              dir=versions.new_root_parent(version)))
            self._owns_root = True
        self.root = self.root.resolve()
        for sub in ("etc", "state", "spool", "run", "log", "dev", "munge", "out"):
            (self.root / sub).mkdir(parents=True, exist_ok=True)
        os.chmod(self.root, 0o755)
        extra = 2 if self.spec.accounting else 0
        daemons = len(self.spec.daemon_node_names)
        ports = reserve_ports(1 + daemons + extra, self.root)
        self.ctld_port, self.node_ports = ports[0], ports[1:1 + daemons]
        self.acct_ports = ports[1 + daemons:]
        started = time.monotonic()
        try:
            if version is not None:
                self.chroot = versions.prepare(version, self.root, self.spec.accounting,
                                               self.spec.host_paths)
            self._write_files()
            self._save_state()
            self._start_munge()
            if self.spec.accounting:
                self._start_accounting(timeout_s)
            self._run_daemon(["slurmctld", "-i"], "slurmctld")
            self._wait_for(lambda: self._ping_ctld(), timeout_s, "slurmctld to answer")
            for name in self.spec.daemon_node_names:
                self._run_daemon(["slurmd", "-N", name], f"slurmd-{name}")
            self._resume_stand_ins()
            self._wait_for(self._all_idle, timeout_s, "all nodes to be idle")
        except Exception:
            self.down()
            raise
        log.info("local cluster up in %.1f s under %s", time.monotonic() - started, self.root)
        return self

    def _write_files(self) -> None:
        assert self.root is not None
        confs = render_configs(self.spec, self.root, self.ctld_port, self.node_ports,
                               socket.gethostname(), self.accounting_ports,
                               versions.plugin_dir(self.chroot))
        for name, text in confs.items():
            (self.root / "etc" / name).write_text(text)
        if self.spec.job_submit_lua:
            shutil.copy(self.spec.job_submit_lua, self.root / "etc" / "job_submit.lua")
        for i in range(self.spec.gpus_per_node):
            dev = self.root / "dev" / f"nvidia{i}"
            if not dev.is_symlink():
                dev.symlink_to("/dev/null")
        for name in self.spec.daemon_node_names:
            (self.root / "spool" / name).mkdir(parents=True, exist_ok=True)

    def _resume_stand_ins(self) -> None:
        """Stand-in nodes never register (no slurmd of their own): Slurm keeps them UNKNOWN,
        which no update leaves except DOWN; from DOWN, RESUME makes them idle, and the first
        node's slurmd answers the pings that keep them so."""
        stand_ins = self.spec.stand_in_node_names
        if not stand_ins:
            return
        hosts = collapse_hosts(stand_ins)
        for update in (["state=down", "reason=stand-in node"], ["state=resume"]):
            proc = subprocess.run(["scontrol", "update", f"nodename={hosts}", *update],
                                  env=self.env, capture_output=True, text=True, timeout=60)
            if proc.returncode != 0:
                raise HarnessError(f"could not resume the stand-in nodes: "
                                   f"{(proc.stderr or proc.stdout).strip()[-500:]}")

    def _start_munge(self) -> None:
        assert self.root is not None
        key = self.root / "munge" / "munge.key"
        if not key.exists():
            key.write_bytes(os.urandom(1024))
        os.chmod(key, 0o400)
        os.chmod(self.root / "munge", 0o755)  # clients of any user reach the socket
        cmd = ["munged", "--force", f"--socket={self.root}/munge/munge.sock",
               f"--key-file={key}", f"--pid-file={self.root}/run/munged.pid",
               f"--log-file={self.root}/log/munged.log",
               f"--seed-file={self.root}/munge/munged.seed"]
        self._run_daemon(cmd, "munged")
        self._wait_for(lambda: (self.root / "munge" / "munge.sock").exists(), 10, "munged socket")

    def _start_accounting(self, timeout_s: float) -> None:
        """MariaDB (which stays in the foreground: started in its own session, its output
        in its log) on loopback, slurmdbd's user, slurmdbd.conf, then slurmdbd. MariaDB is
        always the host's: a chroot's slurmdbd (24.11, 26.05) stops on its own MariaDB 11.8
        ("Number of columns in result set exceeds maximum" at its first query). The same
        happens over TLS to the host's MariaDB, which is why it gets no certificate: the
        chroot's MariaDB Connector/C 3.4 asks for TLS first, fails ("SSL is required, but
        the server does not support it") and slurmdbd connects in plain text 5 s later.
        slurmdbd that dies while starting (seen once in CI on 24.11: "Lost connection to
        server during query" at its first table check) is started again, up to
        ``DBD_STARTS`` times, MariaDB too if it is gone; each death is logged."""
        assert self.root is not None and self.accounting_ports is not None
        ports = self.accounting_ports
        try:
            acct.install_db(self.root, self.env)
        except RuntimeError as exc:
            raise HarnessError(str(exc)) from None
        self._start_mariadb(timeout_s)
        try:
            password = acct.create_db_user(self.root, self.env)
        except RuntimeError as exc:
            raise HarnessError(f"{exc}\n{self._log_tail('mariadb')}") from None
        acct.write_slurmdbd_conf(self.root, ports, password)
        for attempt in range(1, DBD_STARTS + 1):
            if attempt > 1 and "mariadb" not in self.pids():
                log.warning("MariaDB is gone (log below); starting it again\n%s",
                            self._log_tail("mariadb"))
                self._start_mariadb(timeout_s)
            fatal_before = self._count_fatal("slurmdbd")
            self._run_daemon(["slurmdbd"], "slurmdbd")
            if self._wait_for_dbd(timeout_s, fatal_before, last=attempt == DBD_STARTS):
                return
            log.warning("slurmdbd died while starting (attempt %d of %d); starting it again"
                        "\n%s", attempt, DBD_STARTS, self._log_tail("slurmdbd"))

    def _start_mariadb(self, timeout_s: float) -> None:
        assert self.root is not None and self.accounting_ports is not None
        (self.root / "run" / "mariadb.pid").unlink(missing_ok=True)
        with open(self.root / "log" / "mariadb.out", "ab") as out:
            subprocess.Popen(acct.mariadb_argv(self.root, self.accounting_ports.mariadb),
                             env=self.env, stdin=subprocess.DEVNULL, stdout=out, stderr=out,
                             start_new_session=True)
        sock = self.root / "mysql" / "mysql.sock"
        self._wait_for(lambda: sock.exists() and (self.root / "run" / "mariadb.pid").exists(),
                       timeout_s, "MariaDB to listen", log_label="mariadb")

    def _log_lines(self, label: str) -> tuple[Path, list[str]]:
        """A daemon's log file and its lines (none while it does not exist)."""
        assert self.root is not None
        path = self.root / "log" / f"{label}.log"
        return path, (path.read_text(errors="replace").splitlines() if path.exists() else [])

    def _count_fatal(self, label: str) -> int:
        return sum(" fatal: " in line for line in self._log_lines(label)[1])

    def _wait_for_dbd(self, timeout_s: float, fatal_before: int, last: bool) -> bool:
        """True once slurmdbd answers; False as soon as its log shows a new ``fatal:`` (it
        stopped), or, on the ``last`` start, a HarnessError then, with both logs' tails (as
        when it does not answer within ``timeout_s``)."""
        died = lambda: self._count_fatal("slurmdbd") > fatal_before  # noqa: E731
        try:
            self._wait_for(lambda: died() or self._dbd_answers(), timeout_s,
                           "slurmdbd to answer", log_label="slurmdbd")
        except HarnessError as exc:
            raise HarnessError(f"{exc}\n{self._log_tail('mariadb')}") from None
        stopped = died()     # read once: the raise and the answer agree
        if stopped and last:
            raise HarnessError(f"slurmdbd stopped while starting, {DBD_STARTS} times\n"
                               f"{self._log_tail('slurmdbd')}\n{self._log_tail('mariadb')}")
        return not stopped

    def _dbd_answers(self) -> bool:
        proc = subprocess.run(["sacctmgr", "-n", "-P", "show", "cluster", "format=cluster"],
                              env=self.env, capture_output=True, text=True, timeout=5)
        return proc.returncode == 0

    def _run_daemon(self, cmd: list[str], label: str) -> None:
        proc = subprocess.run(self._inside(cmd), env=self.env, capture_output=True,
                              text=True, timeout=30)
        if proc.returncode != 0:
            raise HarnessError(f"{label} failed to start (rc {proc.returncode}): "
                               f"{(proc.stderr or proc.stdout).strip()[-1500:]}\n"
                               f"{self._log_tail(label)}")

    def _log_tail(self, label: str, lines: int = 15) -> str:
        path, text = self._log_lines(label)
        return f"--- {path} ---\n" + "\n".join(text[-lines:]) if path.exists() else ""

    def _ping_ctld(self) -> bool:
        proc = subprocess.run(["scontrol", "ping"], env=self.env, capture_output=True,
                              text=True, timeout=10)
        return proc.returncode == 0 and "UP" in proc.stdout

    def _all_idle(self) -> bool:
        """Every node idle (or running jobs), counted by state in the main partition, which
        has them all (``sinfo -N`` costs much CPU per call at 10,000 nodes:
        docs/benchmarks.md, "Against a real slurmctld with 10,000 nodes")."""
        proc = subprocess.run(["sinfo", "-h", "-p", self.spec.partition, "-o", "%D %t"],
                              env=self.env, capture_output=True, text=True, timeout=10)
        if proc.returncode != 0:
            return False
        counts = [line.split() for line in proc.stdout.splitlines() if line.strip()]
        ready = sum(int(n) for n, state in counts if state in ("idle", "mix", "alloc"))
        return ready == sum(int(n) for n, _ in counts) == self.spec.nodes

    def _wait_for(self, check, timeout_s: float, what: str,
                  log_label: str = "slurmctld") -> None:
        deadline = time.monotonic() + timeout_s
        delay = 0.05
        while time.monotonic() < deadline:
            try:
                if check():
                    return
            except (subprocess.SubprocessError, OSError):
                pass
            time.sleep(delay)
            delay = min(0.5, delay * 1.5)
        raise HarnessError(f"timed out after {timeout_s:.0f} s waiting for {what}\n"
                           f"{self._log_tail(log_label)}")

    # ---- state, status, teardown --------------------------------------------------------
    def _save_state(self) -> None:
        assert self.root is not None
        data = {"spec": asdict(self.spec), "root": str(self.root), "ctld_port": self.ctld_port,
                "node_ports": self.node_ports, "owns_root": self._owns_root,
                "acct_ports": self.acct_ports,
                "chroot": str(self.chroot) if self.chroot is not None else None}
        (self.root / STATE_FILE).write_text(json.dumps(data, indent=2))

    @classmethod
    def attach(cls, root: Path) -> "LocalCluster":
        """The cluster whose files are under ``root`` (started by another process)."""
        path = Path(root) / STATE_FILE
        if not path.exists():
            raise HarnessError(f"no local cluster under {root} ({STATE_FILE} missing)")
        data = json.loads(path.read_text())
        spec_data = data["spec"]
        spec_data["extra_partitions"] = tuple(
            (n, tuple(i)) for n, i in spec_data.get("extra_partitions", ()))
        return cls(spec=ClusterSpec(**spec_data), root=Path(data["root"]),
                   ctld_port=data["ctld_port"], node_ports=data["node_ports"],
                   _owns_root=data.get("owns_root", False),
                   acct_ports=data.get("acct_ports", []),
                   chroot=Path(data["chroot"]) if data.get("chroot") else None)

    def pids(self) -> dict[str, int]:
        """Daemons of this cluster that are alive now, from the pid files it wrote."""
        assert self.root is not None
        found = {}
        for pid_file in sorted((self.root / "run").glob("*.pid")):
            try:
                pid = int(pid_file.read_text().split()[0])
            except (ValueError, IndexError, OSError):
                continue
            if alive(pid):
                found[pid_file.stem] = pid
        return found

    def status(self) -> dict:
        pids = self.pids()
        nodes = {}
        if "slurmctld" in pids:
            proc = subprocess.run(["sinfo", "-h", "-N", "-o", "%N %t"], env=self.env,
                                  capture_output=True, text=True, timeout=10)
            if proc.returncode == 0:
                nodes = dict(line.split() for line in proc.stdout.splitlines() if line.strip())
        return {"root": str(self.root), "slurm_conf": str(self.slurm_conf),
                "ctld_port": self.ctld_port, "daemons": pids, "nodes": nodes}

    def _cancel_all_jobs(self, wait_s: float = 5.0) -> None:
        try:
            subprocess.run(["scancel", "--full", "--quiet", "--user", "root"], env=self.env,
                           capture_output=True, timeout=10)
            subprocess.run(["scancel", "--full", "--quiet", "--state", "PENDING"],
                           env=self.env, capture_output=True, timeout=10)
            deadline = time.monotonic() + wait_s
            while time.monotonic() < deadline:
                proc = subprocess.run(["squeue", "-h", "-t", "R,CG,PD,S", "-o", "%i"],
                                      env=self.env, capture_output=True, text=True, timeout=10)
                if proc.returncode != 0 or not proc.stdout.strip():
                    return
                time.sleep(0.1)
        except (subprocess.SubprocessError, OSError):
            pass

    def stop_daemon(self, label: str, timeout_s: float = 15.0) -> None:
        """Stop one daemon (``slurmctld``, ``slurmd-n1``, ``munged``) by its pid file."""
        pid = self.pids().get(label)
        if pid is not None:
            end_processes([pid], timeout_s)

    def start_slurmctld(self, timeout_s: float = 30.0) -> None:
        """(Re)start the controller, keeping its saved state (jobs survive)."""
        self._run_daemon(["slurmctld"], "slurmctld")
        self._wait_for(self._ping_ctld, timeout_s, "slurmctld to answer")

    def down(self, remove: bool | None = None) -> None:
        """Stop slurmd first, then slurmctld, slurmdbd, MariaDB, munged (stopping the
        controller first makes slurmd linger 10 s+). Removes the folder if this object
        created it; releases the chroot (its bind mounts go with its last cluster)."""
        if self.root is None or not self.root.exists():
            if self.root is not None:
                release_ports(self.root)
                if self.chroot is not None:
                    versions.release(self.chroot, self.root)
            return
        pids = self.pids()
        if "slurmctld" in pids:
            self._cancel_all_jobs()
        for group in ([p for k, p in pids.items() if k.startswith("slurmd")],
                      [p for k, p in pids.items() if k == "slurmctld"],
                      [p for k, p in pids.items() if k == "slurmdbd"],
                      [p for k, p in pids.items() if k == "mariadb"],
                      [p for k, p in pids.items() if k == "munged"]):
            end_processes(group, timeout_s=15.0)
        # Job steps left behind: slurmstepd and job scripts working under this folder.
        kill_strays(self.root)
        try:
            release_ports(self.root)
            if self.chroot is not None:
                versions.release(self.chroot, self.root)
        finally:
            if remove if remove is not None else self._owns_root:
                shutil.rmtree(self.root, ignore_errors=True)

