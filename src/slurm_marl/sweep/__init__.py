"""Evaluation sweeps: windows x interference strengths x seeds x profiles over one trace and
cluster (``spec``), run in local processes or as one Slurm array job through submitit
(``run``), gathered into one table and plot (``report``); ``cli`` is `slurm-marl sweep`.

Only the CLI assembly imports this package; it imports sim, policy and shared_data.
"""

from slurm_marl.sweep.run import RUN_FIELDS, SweepError, comparable, run_cell, run_sweep
from slurm_marl.sweep.spec import Sweep, SweepCell, SweepSpecError, cross_product, load_sweep

__all__ = ["RUN_FIELDS", "Sweep", "SweepCell", "SweepError", "SweepSpecError", "comparable",
           "cross_product", "load_sweep", "run_cell", "run_sweep"]
