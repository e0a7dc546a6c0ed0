"""Record what Slurm 22.05, 24.11 and 26.05 print, for the version tests of the Slurm layer.

Run as root on a Debian 12 host (needs Debian's mirror the first time, to build the chroots):

    .venv/bin/python tests/data/slurm/record_versions.py            # all three versions
    .venv/bin/python tests/data/slurm/record_versions.py 24.11      # one of them
    .venv/bin/python tests/data/slurm/record_versions.py --out /tmp/rec 24.11  # elsewhere

22.05 runs the host's own Slurm; 24.11 and 26.05 run in Debian chroots
(``slurm_marl.testcluster.chroot``: built and cached on first use). Each version gets a
4-node cluster (the harness's configuration: 2 sockets x 2 GPUs typed s0/s1 per node, two
leaf switches) in a fresh folder under /tmp on free loopback ports, a handful of jobs, and its
outputs saved into ``tests/data/slurm/v<version>/``:

    squeue.json, squeue_all.json (--states=all), sinfo.json, scontrol_show_node.json,
    scontrol_show_node.txt (-o), scontrol_show_partition.txt, scontrol_show_topology.txt,
    scontrol_show_job_d.txt (the 2-node job), scontrol_show_job_d_requeued.txt,
    scontrol_version.txt, and commands.json (argv, rc, stderr of each call, job ids by name)

Jobs (names as in the outputs): ``done`` (completed), ``cancelled``, ``run_typed``
(-N 2 --gres=gpu:s1:2), ``run_gres`` (--gres=gpu:2), ``run_gpus`` (--gpus=2), ``arr``
(--array=0-2 --gres=gpu:1), ``requeued`` (running, then ``scontrol requeue``: caught while
COMPLETING), ``pend_begin`` (-N 4 --gres=gpu:4 --begin=now+3600), ``pinned`` (-w n4, which is
drained: ``scontrol update nodename=n4 state=drain reason=test``), ``excl`` (--exclude=n1,n2).

Teardown goes by the PIDs in the cluster's pid files, then the chroot's bind mounts are
unmounted (``chroot.release``: unless another cluster still holds them) and the folder
removed; nothing is killed by name.
"""

from __future__ import annotations

import json
import logging
import os
import shutil
import socket
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from slurm_marl.testcluster import chroot as C
from slurm_marl.testcluster.harness import ClusterSpec, HarnessError, render_configs
from slurm_marl.testcluster.ports import kernel_ports
from slurm_marl.testcluster.processes import alive, end_processes, kill_strays

log = logging.getLogger("record_versions")
HERE = Path(__file__).resolve().parent
VERSIONS = ("22.05", "24.11", "26.05")
PATH = "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"


class Cluster:
    """One throw-away cluster of one Slurm version; host binaries for 22.05."""

    def __init__(self, version: str) -> None:
        self.version = version
        self.chroot = None if version == "22.05" else C.ensure_chroot(version)
        self.root = Path(tempfile.mkdtemp(prefix=f"slurm-marl-rec-{version}-", dir="/tmp"))
        self.spec = ClusterSpec()
        self.env = dict(os.environ, SLURM_CONF=str(self.root / "etc/slurm.conf"), PATH=PATH)
        self.calls: list[dict] = []

    # ---- commands -------------------------------------------------------------------
    def client(self, *argv: str, check: bool = True) -> subprocess.CompletedProcess:
        """A Slurm client: the host's for 22.05, else the chroot's through the wrapper
        ``chroot.write_client_wrappers`` wrote (its loader, ``chroot.client_argv``)."""
        cmd = list(argv) if self.chroot is None else [str(self.root / "bin" / argv[0]),
                                                       *argv[1:]]
        proc = subprocess.run(cmd, env=self.env, capture_output=True, text=True, timeout=60)
        if check and proc.returncode != 0:
            raise HarnessError(f"{' '.join(argv)}: rc {proc.returncode}: {proc.stderr[-800:]}")
        return proc

    def daemon(self, *argv: str) -> None:
        cmd = list(argv) if self.chroot is None else C.daemon_argv(self.chroot, list(argv))
        proc = subprocess.run(cmd, env=self.env, capture_output=True, text=True, timeout=60)
        if proc.returncode != 0:
            raise HarnessError(f"{argv[0]} did not start: {proc.stderr[-800:]}\n"
                               f"{self.log_tail(argv[0])}")

    def log_tail(self, name: str) -> str:
        path = self.root / "log" / f"{name}.log"
        return path.read_text(errors="replace")[-1500:] if path.exists() else ""

    def wait(self, check, what: str, timeout_s: float = 60) -> None:
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            if check():
                return
            time.sleep(0.2)
        raise HarnessError(f"timed out waiting for {what}\n{self.log_tail('slurmctld')}")

    # ---- up / down ------------------------------------------------------------------
    def write_files(self) -> None:
        for sub in ("etc", "state", "spool", "run", "log", "dev", "munge", "out"):
            (self.root / sub).mkdir(parents=True, exist_ok=True)
        os.chmod(self.root, 0o755)
        ports = kernel_ports(1 + self.spec.nodes)
        confs = render_configs(self.spec, self.root, ports[0], ports[1:], socket.gethostname())
        if self.chroot is not None:
            # Plugins by their host path (clients run from the host); inside the chroot it
            # resolves through ROOT/ROOT -> /.  Slurm >= 23.11 needs cgroups off here.
            confs["slurm.conf"] += f"PluginDir={C.plugin_dir(self.chroot)}\n"
            confs["cgroup.conf"] = "CgroupPlugin=disabled\n"
        for name, text in confs.items():
            (self.root / "etc" / name).write_text(text)
        for i in range(self.spec.gpus_per_node):
            (self.root / "dev" / f"nvidia{i}").symlink_to("/dev/null")
        for name in self.spec.node_names:
            (self.root / "spool" / name).mkdir()
        key = self.root / "munge" / "munge.key"
        key.write_bytes(os.urandom(1024))
        os.chmod(key, 0o400)

    def up(self) -> None:
        self.write_files()
        if self.chroot is not None:
            C.hold(self.chroot, self.root)
            C.write_client_wrappers(self.chroot, self.root / "bin")
        r = self.root
        self.daemon("munged", "--force", f"--socket={r}/munge/munge.sock",
                    f"--key-file={r}/munge/munge.key", f"--pid-file={r}/run/munged.pid",
                    f"--log-file={r}/log/munged.log", f"--seed-file={r}/munge/munged.seed")
        self.wait(lambda: (r / "munge/munge.sock").exists(), "munged")
        self.daemon("slurmctld", "-i")
        self.wait(lambda: "UP" in self.client("scontrol", "ping", check=False).stdout,
                  "slurmctld")
        for name in self.spec.node_names:
            self.daemon("slurmd", "-N", name)
        self.wait(self.all_idle, "4 idle nodes")
        log.info("Slurm %s cluster up under %s", self.version, r)

    def all_idle(self) -> bool:
        out = self.client("sinfo", "-h", "-N", "-o", "%N %t", check=False).stdout.split()
        return out.count("idle") == self.spec.nodes

    def down(self) -> None:
        pids: dict[str, int] = {}
        for pid_file in (self.root / "run").glob("*.pid"):
            try:
                pids[pid_file.stem] = int(pid_file.read_text().split()[0])
            except (ValueError, IndexError, OSError):
                continue
        for group in ([p for k, p in pids.items() if k.startswith("slurmd")],
                      [p for k, p in pids.items() if k == "slurmctld"],
                      [p for k, p in pids.items() if k == "munged"]):
            end_processes([p for p in group if alive(p)], timeout_s=15.0)
        kill_strays(self.root)
        if self.chroot is not None:
            C.release(self.chroot, self.root)  # unmounts the binds unless another holds them
        shutil.rmtree(self.root, ignore_errors=True)

    # ---- jobs -----------------------------------------------------------------------
    def sbatch(self, name: str, *opts: str) -> int:
        out = self.client("sbatch", "--parsable", f"--job-name={name}",
                          f"--chdir={self.root}/out", f"--output={self.root}/out/%j.out",
                          *opts).stdout
        return int(out.strip().split(";")[0])

    def states(self) -> dict[str, str]:
        out = self.client("squeue", "-h", "--states=all", "-o", "%i %T").stdout
        return dict(line.split() for line in out.splitlines() if line.strip())


def save(cluster: Cluster, out: Path, file: str, *argv: str) -> str:
    """Run a client and save its stdout as ``file`` (whatever the exit status)."""
    started = time.monotonic()
    proc = cluster.client(*argv, check=False)
    (out / file).write_text(proc.stdout)
    cluster.calls.append({"file": file, "argv": list(argv), "rc": proc.returncode,
                          "stderr": proc.stderr.strip()[-500:],
                          "seconds": round(time.monotonic() - started, 3)})
    return proc.stdout


def submit_and_record(c: Cluster, out: Path) -> None:
    ids: dict[str, int] = {}
    sleep = "--wrap=sleep 600"
    ids["done"] = c.sbatch("done", "--gres=gpu:1", "--wrap=true")
    c.wait(lambda: c.states().get(str(ids["done"])) == "COMPLETED", "job done to complete")
    c.client("scontrol", "update", "nodename=n4", "state=drain", "reason=test")
    ids["cancelled"] = c.sbatch("cancelled", "--gres=gpu:1", "--begin=now+3600", sleep)
    c.client("scancel", str(ids["cancelled"]))
    ids["run_typed"] = c.sbatch("run_typed", "-N", "2", "--gres=gpu:s1:2", sleep)
    ids["run_gres"] = c.sbatch("run_gres", "--gres=gpu:2", sleep)
    ids["run_gpus"] = c.sbatch("run_gpus", "--gpus=2", sleep)
    ids["arr"] = c.sbatch("arr", "--array=0-2", "--gres=gpu:1", sleep)
    ids["requeued"] = c.sbatch("requeued", "--requeue", "--gres=gpu:1", sleep)
    ids["pend_begin"] = c.sbatch("pend_begin", "-N", "4", "--gres=gpu:4", "--begin=now+3600",
                                 sleep)
    ids["pinned"] = c.sbatch("pinned", "-w", "n4", "--gres=gpu:1", sleep)
    ids["excl"] = c.sbatch("excl", "--exclude=n1,n2", "--gres=gpu:4", sleep)
    c.wait(lambda: c.states().get(str(ids["requeued"])) == "RUNNING", "job requeued to run")
    time.sleep(1.0)
    c.client("scontrol", "requeue", str(ids["requeued"]))
    # Caught while COMPLETING (a few seconds): these three first.
    save(c, out, "squeue.json", "squeue", "--json")
    save(c, out, "squeue_all.json", "squeue", "--json", "--states=all")
    save(c, out, "scontrol_show_job_d_requeued.txt", "scontrol", "show", "job", "-d",
         str(ids["requeued"]))
    save(c, out, "sinfo.json", "sinfo", "--json")
    save(c, out, "scontrol_show_node.json", "scontrol", "show", "node", "--json")
    save(c, out, "scontrol_show_node.txt", "scontrol", "show", "node", "-o")
    save(c, out, "scontrol_show_partition.txt", "scontrol", "show", "partition", "-o")
    save(c, out, "scontrol_show_topology.txt", "scontrol", "show", "topology")
    save(c, out, "scontrol_show_job_d.txt", "scontrol", "show", "job", "-d",
         str(ids["run_typed"]))
    save(c, out, "scontrol_version.txt", "scontrol", "--version")
    states = c.states()
    log.info("Slurm %s states after recording: %s", c.version, states)
    (out / "commands.json").write_text(json.dumps(
        {"version": c.version, "job_ids": ids, "states_after": states, "calls": c.calls},
        indent=1) + "\n")


def record(version: str, into: Path) -> None:
    out = into / f"v{version}"
    out.mkdir(parents=True, exist_ok=True)
    cluster = Cluster(version)
    try:
        cluster.up()
        submit_and_record(cluster, out)
    finally:
        cluster.down()
    log.info("Slurm %s recorded into %s", version, out)


def main(argv: list[str]) -> int:
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(name)s %(message)s")
    into = HERE
    if argv[:1] == ["--out"]:
        into, argv = Path(argv[1]), argv[2:]
    for version in argv or VERSIONS:
        record(version, into)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
