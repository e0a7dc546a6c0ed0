"""The agent's state store: SQLite in WAL mode under ``state_dir``.

What must outlive a restart lives here: per-job scheduling state (attained GPU service,
last run length, queue, preemptions), what was last written to Slurm (so only changes are
written), the reservations the agent created, every decision with its reason and Slurm's
answer (for `slurm-marl decisions` / `explain`), cycle reports, and per-job outcomes as
records of each run, the speeds jobs were observed to run at with their co-location
(`slurm-marl train interference --from-store`), and the GPU-time predictions of live jobs
with the prediction-skill gate's last scored pairs, and the history rows of the jobs the
predictor saw end, which its features read (a restarted agent keeps all three).

``Store`` (unit.py) is the unit of work; ports.py has one port per concern, and a SQLite
adapter for each sits in the module of its concern.
"""

from slurm_marl.daemon.store.log import decision_payload
from slurm_marl.daemon.store.records import JOB_COLUMNS, SEEN_STEP_S, JobRecord
from slurm_marl.daemon.store.schema import SCHEMA_VERSION, StoreError
from slurm_marl.daemon.store.unit import Store

__all__ = ["JOB_COLUMNS", "SCHEMA_VERSION", "SEEN_STEP_S", "JobRecord", "Store", "StoreError",
           "decision_payload"]
