"""A real, throw-away local Slurm cluster for tests, benchmarks, the replay and the demo.

Development and test infrastructure, kept out of the production Slurm layer
(``slurm_integration``): it writes slurm.conf, starts munged / slurmctld / slurmd on
loopback and may run apt-get. ``harness`` holds the cluster, ``spec`` its shape and
configuration files, ``versions`` which Slurm it runs (the host's 22.05, or 24.11 / 26.05
from a Debian chroot built by ``chroot``), ``processes`` ends its processes (psutil, by PID
and process tree).
"""

from slurm_marl.testcluster.harness import ClusterSpec, HarnessError, LocalCluster
from slurm_marl.testcluster.versions import VERSION_ENV, default_version

__all__ = ["ClusterSpec", "HarnessError", "LocalCluster", "VERSION_ENV", "default_version"]
