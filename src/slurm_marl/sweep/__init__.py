"""Evaluation sweeps: windows x interference strengths x seeds x profiles over one trace and
cluster (``spec``), run in local processes or as one Slurm array job through submitit
(``run``, whose ``map_calls`` runs any module-level function that way: the site report's
simulations too), gathered into one table and plot (``report``); ``cli`` is `slurm-marl
sweep`.

Only the CLI assembly imports this package; it imports sim, policy and shared_data.
"""

from slurm_marl.sweep.run import MAP_BACKENDS, RUN_FIELDS, BackendError, CallError, Mapper, \
    SweepError, backend_mapper, comparable, map_calls, run_cell, run_sweep
from slurm_marl.sweep.spec import Sweep, SweepCell, SweepSpecError, cross_product, load_sweep

__all__ = ["MAP_BACKENDS", "RUN_FIELDS", "BackendError", "CallError", "Mapper", "Sweep",
           "SweepCell", "SweepError", "SweepSpecError", "backend_mapper", "comparable",
           "cross_product", "load_sweep", "map_calls", "run_cell", "run_sweep"]
