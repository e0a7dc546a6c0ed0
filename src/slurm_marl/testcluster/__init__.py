"""A real, throw-away local Slurm cluster for tests, benchmarks, the replay and the demo.

Development and test infrastructure, kept out of the production Slurm layer
(``slurm_integration``): it writes slurm.conf, starts munged / slurmctld / slurmd on
loopback and may run apt-get. ``harness`` holds the cluster, ``processes`` ends its
processes (psutil, by PID and process tree).
"""

from slurm_marl.testcluster.harness import ClusterSpec, HarnessError, LocalCluster

__all__ = ["ClusterSpec", "HarnessError", "LocalCluster"]
