"""A job's signature (its model type) without asking the user for anything.

The interference-aware and skew-aware policies read ``Job.model_type``. Real jobs do not
declare it, so the agent infers it, in this order:
1. the job name names a known model family (``resnet50-imagenet``, ``train_vgg19.sh``);
2. history: the same user submitted a job of the same name before and it got a type then;
3. otherwise ``None``: the policies treat the job as neutral (no known interference).
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping
from functools import lru_cache

from slurm_marl.domain import Job

# Families whose names appear in public traces and benchmarks (Tiresias, Gavel, MLPerf).
KNOWN_FAMILIES = ("resnet18", "resnet50", "resnet101", "resnet152", "vgg11", "vgg16", "vgg19",
                  "alexnet", "inception3", "inception4", "googlenet", "densenet", "mobilenet",
                  "bert", "gpt", "transformer", "lstm", "lm", "recommendation", "ncf",
                  "cyclegan", "a3c", "deepspeech", "yolo", "unet")
_TOKEN = re.compile(r"[^a-z0-9]+")
# Longest first so "resnet152" wins over "resnet1..." style prefixes and "lm" needs a token.
_BY_LENGTH = sorted(KNOWN_FAMILIES, key=len, reverse=True)


@lru_cache(maxsize=65536)   # the same names come back every cycle
def family_from_name(name: str) -> str | None:
    """A known family named in a job name, matched on word boundaries after removing
    punctuation inside tokens (``ResNet-50`` -> ``resnet50``)."""
    low = name.lower()
    tokens = [t for t in _TOKEN.split(low) if t]
    joined = {re.sub(r"[^a-z0-9]", "", part) for part in re.split(r"[\s_/.]+", low) if part}
    for fam in _BY_LENGTH:
        if fam in tokens or fam in joined:
            return fam
        if len(fam) > 3 and any(t.startswith(fam) for t in joined):
            return fam
    return None


def infer_signatures(jobs: Iterable[Job], history: Mapping[tuple[str, str], str]
                     ) -> dict[int, str]:
    """job id -> inferred model type, for jobs that have none yet."""
    out = {}
    for job in jobs:
        if job.model_type:
            continue
        fam = family_from_name(job.name) or history.get((job.user, job.name))
        if fam:
            out[job.job_id] = fam
    return out
