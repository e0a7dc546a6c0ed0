"""A site's own history on its own cluster: how well the simulator reproduces what its Slurm
did (calibration), and what each profile would have done instead (what-if). The logic of
``slurm-marl report`` (the command is ``slurm_marl/report_cli.py``).

The history (``HistoryJob``, from sacct) becomes a trace (``history_trace``): each job that
ran is submitted when it was and runs for as long as it ran. Jobs of partitions the
simulated cluster does not have are left out and counted, as are jobs larger than their
partition as modelled (``drop_oversized``).

**Calibration** runs ``fifo-backfill`` (the stand-in for Slurm alone) without simulated
interference (the recorded run times already hold whatever slowed the jobs) and compares
each job's simulated start with the start sacct recorded. A job's wait is start - submit
(its first start). A simulated start is *within tolerance* when it is at most
max(``TOLERANCE_SHARE`` x the recorded JCT, ``TOLERANCE_FLOOR_S``) from the recorded one.

**What-if** runs every profile at every interference strength on the same trace and
compares each job's JCT with its JCT under ``fifo-backfill`` at the same strength
(``perjob.per_job_comparison``), over all jobs and per partition.

A profile that orders by predicted GPU-time (``learned-order``) learns its predictor in the
run (``sim/online_prediction.py``) from the jobs that finish in it and, from the start, from
the site's history before the period (``prior_history``): only jobs that ran and *ended*
before the period's start (``--from``), so no learned component sees the period's outcomes;
a job submitted before the period and still running at its start is in neither. Each
simulated job is described to the predictor by its own request (account, name, QOS, nodes,
time limit), as the prior's jobs are.

For the plots of the HTML report (``report_html``), which draws only from these dicts
(so the HTML and the JSON cannot disagree), calibration keeps the percentiles 0..100 of
the recorded and simulated waits and of the start errors, and the GPUs busy over time
(recorded and simulated, the same jobs); each what-if entry keeps the percentiles of its
per-job JCT ratios against the baseline. ``waits_by`` gives the mean wait per user or
account, recorded and in each run.

``calibration``, ``what_if`` and ``waits_by`` return JSON-ready dicts; docs/operations.md
("Before switching it on") lists their keys.

The package: ``site`` (the history as a trace, what the simulator leaves out), ``runs``
(the simulations, as tasks that may run elsewhere), ``calibration`` and ``what_if`` (the
report's sections).
"""


from slurm_marl.sim.report.calibration import (BUSY_BINS, TOLERANCE_FLOOR_S, TOLERANCE_SHARE,
                                               WORST_STARTS, calibration, gpus_busy,
                                               percentiles, wait_ratio)
from slurm_marl.sim.report.runs import (RECOMMENDED, Mapper, Runs, SimTask, recommended_run,
                                        report_tasks, run_all, run_task)
from slurm_marl.sim.report.site import (BASELINE, CALIBRATION_STRENGTH, DEFAULT_PROFILES,
                                        DEFAULT_STRENGTHS, SIMULATOR_NOT_MODELLED, ReportError,
                                        SiteTrace, cluster_doc, in_period, prior_history,
                                        site_trace)
from slurm_marl.sim.report.what_if import TOP_GROUPS, job_times, waits_by, what_if

__all__ = ["BASELINE", "BUSY_BINS", "CALIBRATION_STRENGTH", "DEFAULT_PROFILES",
           "DEFAULT_STRENGTHS", "RECOMMENDED", "SIMULATOR_NOT_MODELLED", "TOLERANCE_FLOOR_S",
           "TOLERANCE_SHARE", "TOP_GROUPS", "WORST_STARTS", "Mapper", "ReportError", "Runs",
           "SimTask", "SiteTrace", "calibration", "cluster_doc", "gpus_busy", "in_period",
           "job_times", "percentiles", "prior_history", "recommended_run", "report_tasks",
           "run_all", "run_task", "site_trace", "wait_ratio", "waits_by", "what_if"]
