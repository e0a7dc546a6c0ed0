"""A site's accounting history (``sacct``) and what is learned from it.

``records`` holds the job values and the history CSV, ``sacct`` reads sacct's JSON and
text, ``fetch`` calls sacct a time slice at a time, ``features`` and ``predictor`` predict
a job's GPU-time from what was known at its submission, ``evaluate`` scores predictions.
The simulator uses the predictor (``sim`` imports ``history``, never the other way);
the command line is ``slurm_marl.history_cli``.
"""
