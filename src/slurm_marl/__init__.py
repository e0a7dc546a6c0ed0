"""slurm-marl: a scheduling agent for Slurm GPU clusters."""

__version__ = "0.1.0"
