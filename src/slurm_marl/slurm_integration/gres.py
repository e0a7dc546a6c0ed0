"""GPU requests as the Slurm layer reads and writes them (``gres:gpu:s1:2``, ``gres/gpu:4``).

The parsing lives in ``slurm_marl.slurm_text`` (one reader of GRES strings for the Slurm
layer and the topology parsers); these names stay here for the sink and the marker.
"""

from slurm_marl.slurm_text import (GpuRequest, format_gpu_request, parse_gpu_request,
                                   single_type, total_gpus)

__all__ = ["GpuRequest", "format_gpu_request", "parse_gpu_request", "single_type",
           "total_gpus"]
