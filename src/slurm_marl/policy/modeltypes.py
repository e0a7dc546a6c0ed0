"""Model-type names as policies see them: a family name without batch size or punctuation.

Traces name models differently (Tiresias: ``vgg19``; Gavel: ``ResNet-18 (batch size 16)``;
the simulator: ``resnet18_bs16``). Policies compare families: ``resnet18``, ``vgg19``, ``lm``.
"""

from __future__ import annotations

import re
from functools import lru_cache

_BATCH = re.compile(r"(_bs\d+|\s*\(.*\)\s*)$")
_PUNCT = re.compile(r"[^a-z0-9]")


@lru_cache(maxsize=4096)
def model_family(model_type: str | None) -> str:
    """``"ResNet-18 (batch size 16)"`` -> ``"resnet18"``; ``None`` -> ``"unknown"``."""
    if not model_type:
        return "unknown"
    base = _BATCH.sub("", model_type.strip())
    family = _PUNCT.sub("", base.lower())
    return family or "unknown"


# Tiresias (NSDI'19, section on profiling): models with a few large, skewed tensors are
# sensitive to consolidation. Its simulator's models.py lists tensor sizes: the largest
# tensor of VGG11/16/19 is 392 MB (>60% of the model), of AlexNet 144 MB (61%), while the
# ResNets and Inceptions have no tensor above ~9 MB. We add the embedding-dominated Gavel
# families (LM, Recommendation), whose single embedding/softmax tensors dominate likewise.
CONSOLIDATION_SENSITIVE = ("vgg11", "vgg16", "vgg19", "alexnet", "lm", "recommendation")
