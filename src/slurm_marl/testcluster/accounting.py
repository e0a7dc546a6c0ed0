"""Slurm accounting for the local cluster: a private MariaDB and slurmdbd on loopback.

With accounting on, ``sacct`` answers (the history the ordering learns from), and Slurm's
multifactor priority can use fair-share and age. Everything lives under the cluster's
folder: MariaDB's data directory, its socket, slurmdbd.conf (mode 600, as slurmdbd
demands). MariaDB listens on 127.0.0.1 only, on a free port; slurmdbd connects as a user
of its own with a random password, granted the accounting database and nothing else.
Teardown goes by the PID files written here, like the other daemons.
"""

from __future__ import annotations

import os
import secrets
import shutil
import subprocess
from dataclasses import dataclass
from pathlib import Path

APT_PACKAGES = ("slurmdbd", "mariadb-server")
REQUIRED_BINARIES = ("slurmdbd", "mariadbd", "mariadb-install-db", "mariadb", "sacct",
                     "sacctmgr")
DB_NAME = "slurm_acct_db"
DB_USER = "slurmdbd"


@dataclass(frozen=True)
class AccountingPorts:
    """Where the accounting daemons listen (loopback only)."""

    mariadb: int
    slurmdbd: int


def missing_binaries() -> list[str]:
    paths = os.environ.get("PATH", "") + ":/usr/sbin:/sbin"
    return [b for b in REQUIRED_BINARIES if shutil.which(b, path=paths) is None]


def slurm_conf_lines(root: Path, ports: AccountingPorts) -> list[str]:
    """What slurm.conf needs so slurmctld sends jobs to this slurmdbd (GPUs accounted).

    ``AccountingStoragePass`` names the munge socket that authenticates to slurmdbd: without
    it, clients (sacct, sacctmgr) go to the system's default socket, not this cluster's."""
    return ["AccountingStorageType=accounting_storage/slurmdbd",
            "AccountingStorageHost=127.0.0.1",
            f"AccountingStoragePort={ports.slurmdbd}",
            f"AccountingStoragePass={root}/munge/munge.sock",
            "AccountingStorageTRES=gres/gpu",
            "JobAcctGatherType=jobacct_gather/none"]


def render_slurmdbd_conf(root: Path, ports: AccountingPorts, password: str) -> str:
    return "\n".join([
        "# written by slurm-marl's local cluster harness",
        "AuthType=auth/munge",
        f"AuthInfo=socket={root}/munge/munge.sock",
        "DbdHost=localhost",
        "DbdAddr=127.0.0.1",
        f"DbdPort={ports.slurmdbd}",
        "SlurmUser=root",
        "DebugLevel=info",
        f"LogFile={root}/log/slurmdbd.log",
        f"PidFile={root}/run/slurmdbd.pid",
        "StorageType=accounting_storage/mysql",
        "StorageHost=127.0.0.1",
        f"StoragePort={ports.mariadb}",
        f"StorageUser={DB_USER}",
        f"StoragePass={password}",
        f"StorageLoc={DB_NAME}",
    ]) + "\n"


def mariadb_argv(root: Path, port: int) -> list[str]:
    """mariadbd on 127.0.0.1:port with everything under ``root/mysql`` (no system config:
    ``--no-defaults``, so /etc/mysql is never read), its temporary tables too: see
    :func:`install_db`."""
    db = root / "mysql"
    return ["mariadbd", "--no-defaults", f"--datadir={db}/data", f"--socket={db}/mysql.sock",
            f"--tmpdir={db}/tmp",
            f"--port={port}", "--bind-address=127.0.0.1", f"--pid-file={root}/run/mariadb.pid",
            "--user=root", f"--log-error={root}/log/mariadb.log", "--skip-log-bin",
            "--innodb-buffer-pool-size=32M", "--innodb-log-file-size=16M"]


def install_db(root: Path, env: dict[str, str]) -> None:
    """An empty MariaDB data directory (root reaches it through the socket only).

    Temporary tables go to ``root/mysql/tmp``, not /tmp: a MariaDB server that starts deletes
    every ``#sql*`` file in its tmpdir, so a cluster starting beside this one (another pytest
    worker) once removed the bootstrap's tables mid-way (CI on 24.11: "Could not remove
    temporary table '/tmp/#sql-temptable-...'", then "Unknown table
    'mysql.tmp_user_nopasswd'")."""
    db = root / "mysql"
    (db / "tmp").mkdir(parents=True, exist_ok=True)
    proc = subprocess.run(
        ["mariadb-install-db", "--no-defaults", f"--datadir={db}/data", "--user=root",
         "--auth-root-authentication-method=socket", "--skip-test-db", f"--tmpdir={db}/tmp"],
        env=env, capture_output=True, text=True, timeout=120)
    if proc.returncode != 0:
        raise RuntimeError(f"mariadb-install-db failed (rc {proc.returncode}): "
                           f"{(proc.stderr or proc.stdout).strip()[-1500:]}")


def grant_sql(password: str) -> str:
    """SQL making slurmdbd's own user: from 127.0.0.1 only, on the accounting database only."""
    if not password.isalnum():  # tokens from secrets.token_hex; nothing to quote
        raise ValueError("password must be alphanumeric")
    return (f"CREATE USER IF NOT EXISTS '{DB_USER}'@'127.0.0.1' IDENTIFIED BY '{password}';"
            f"GRANT ALL ON {DB_NAME}.* TO '{DB_USER}'@'127.0.0.1';")


def create_db_user(root: Path, env: dict[str, str]) -> str:
    """Make slurmdbd's user with a fresh random password; returns the password."""
    password = secrets.token_hex(16)
    proc = subprocess.run(
        ["mariadb", "--no-defaults", f"--socket={root}/mysql/mysql.sock", "-u", "root",
         "-e", grant_sql(password)], env=env, capture_output=True, text=True, timeout=30)
    if proc.returncode != 0:
        raise RuntimeError(f"creating the slurmdbd database user failed: "
                           f"{(proc.stderr or proc.stdout).strip()[-1500:]}")
    return password


def write_slurmdbd_conf(root: Path, ports: AccountingPorts, password: str) -> Path:
    path = root / "etc" / "slurmdbd.conf"
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    with os.fdopen(fd, "w") as fh:
        fh.write(render_slurmdbd_conf(root, ports, password))
    os.chmod(path, 0o600)  # slurmdbd refuses a config others can read
    return path
