"""slurm-marl: a scheduling agent for Slurm GPU clusters."""

from slurm_marl.policy.plugins import register_model_loader, register_plugin

__version__ = "0.1.0"

# The learned agents' place plugin lives above policy (slurm_marl.agent) and joins the
# registry out of tree; its module is imported only when a profile builds it.
register_plugin("place", "learned", "slurm_marl.agent.learned")
# least_interference's ``model_path``: the torch interference model (slurm_marl.models).
register_model_loader("slurm_marl.models.interference:InterferenceModel.load")
