"""Model types of simulated jobs and their (ground-truth) sensitivities.

Philly has no model names, so each job gets one of the 26 single-GPU job types Gavel
measured on V100 (``interference/gavel_pairwise_colocation.csv``: 7 families x batch sizes),
uniformly with a fixed seed, as Gavel's own trace generator samples job types. The Tiresias
trace names its models (VGG, ResNet, Inception, ...).

Per family, three numbers drive the performance model (``perf.py``). They are assumptions,
documented in docs/simulator.md, and only the simulator reads them; policies learn from the
samples the simulator emits.

* ``comm`` - sensitivity to communication over slower links (GPU groups, nodes, leaves).
  For families Gavel measured both consolidated and spread over servers
  (``v100_unconsolidated`` in ``gavel_simulation_throughputs.json``), it is
  1 - median(spread / consolidated throughput) over batch sizes and scale factors, capped to
  [0.05, 0.9]; other families get a value from their tensor profile (VGG/AlexNet: a few huge
  tensors, Tiresias' models.py; ResNet/Inception: many small ones).
* ``host`` - sensitivity to host contention (PCIe root, QPI, CPU, host memory bandwidth):
  high for input-pipeline-bound small models (ResNet-18, AlexNet) and CPU-bound RL (A3C).
* ``pressure`` - how much host contention the job itself creates for its neighbours.
"""

from __future__ import annotations

import csv
import json
import random
import re
import statistics
from dataclasses import dataclass
from functools import lru_cache

from slurm_marl.colocation import model_family
from slurm_marl.shared_data import DataNotFound, data_file


@dataclass(frozen=True)
class FamilyProfile:
    family: str
    comm: float
    host: float
    pressure: float
    comm_source: str


# comm values here are used when Gavel has no spread measurement for the family.
_ASSUMED = {
    # family: (comm, host, pressure)
    "resnet18": (0.55, 0.8, 0.8),
    "resnet50": (0.15, 0.5, 0.5),
    "transformer": (0.45, 0.3, 0.4),
    "lm": (0.75, 0.2, 0.3),
    "recommendation": (0.6, 0.7, 0.7),
    "a3c": (0.3, 0.9, 0.9),
    "cyclegan": (0.3, 0.3, 0.3),
    "vgg11": (0.7, 0.6, 0.6),
    "vgg16": (0.7, 0.6, 0.6),
    "vgg19": (0.7, 0.6, 0.6),
    "alexnet": (0.7, 0.9, 0.8),
    "resnet101": (0.2, 0.45, 0.45),
    "resnet152": (0.2, 0.4, 0.4),
    "inception3": (0.2, 0.45, 0.45),
    "inception4": (0.2, 0.4, 0.4),
    "googlenet": (0.2, 0.5, 0.5),
}
_DEFAULT = (0.3, 0.5, 0.5)

_GAVEL_NAME = re.compile(r"^\('(?P<model>[^']+)', (?P<sf>\d+)\)$")


def gavel_type_id(gavel_name: str) -> str:
    """``"ResNet-18 (batch size 16)"`` -> ``"resnet18_bs16"``; ``"A3C"`` -> ``"a3c"``."""
    m = re.match(r"^(?P<base>.*?) \(batch size (?P<bs>\d+)\)$", gavel_name)
    if m:
        return f"{model_family(m['base'])}_bs{m['bs']}"
    return model_family(gavel_name)


@lru_cache(maxsize=1)
def gavel_pairs() -> tuple[tuple[str, ...], dict[tuple[str, str], float]]:
    """(job type ids, {(a, b): a's throughput sharing one V100 with b / alone}), 1-GPU jobs."""
    path = data_file("interference/gavel_pairwise_colocation.csv")
    pairs: dict[tuple[str, str], float] = {}
    types: set[str] = set()
    with open(path, newline="", encoding="utf-8") as fh:
        reader = csv.DictReader(fh)
        for row in reader:
            if row["gpu"] != "v100" or row["sf_a"] != "1" or row["sf_b"] != "1":
                continue
            try:
                a, b = gavel_type_id(row["job_a"]), gavel_type_id(row["job_b"])
                pairs[(a, b)] = float(row["norm_a"])
                pairs[(b, a)] = float(row["norm_b"])
            except (KeyError, ValueError):
                raise ValueError(f"{path}:{reader.line_num}: malformed row") from None
            types.update((a, b))
    return tuple(sorted(types)), pairs


@lru_cache(maxsize=1)
def measured_comm() -> dict[str, float]:
    """Per family: 1 - median(spread / consolidated throughput) from Gavel's V100 data."""
    try:
        path = data_file("interference/gavel_simulation_throughputs.json")
    except DataNotFound:
        return {}
    data = json.loads(path.read_text(encoding="utf-8"))
    cons, spread = data.get("v100", {}), data.get("v100_unconsolidated", {})
    ratios: dict[str, list[float]] = {}
    for key, entry in cons.items():
        m = _GAVEL_NAME.match(key)
        if not m or int(m["sf"]) < 2 or key not in spread:
            continue
        alone, apart = entry.get("null"), spread[key].get("null")
        if not alone or apart is None:
            continue
        fam = model_family(m["model"])
        ratios.setdefault(fam, []).append(min(1.0, apart / alone))
    return {f: min(0.9, max(0.05, 1 - statistics.median(v))) for f, v in ratios.items()}


def family_profile(model_type: str | None) -> FamilyProfile:
    return _family_profile(model_family(model_type))


@lru_cache(maxsize=512)
def _family_profile(family: str) -> FamilyProfile:
    comm, host, pressure = _ASSUMED.get(family, _DEFAULT)
    measured = measured_comm().get(family)
    if measured is not None:
        return FamilyProfile(family, round(measured, 3), host, pressure, "gavel-measured")
    return FamilyProfile(family, comm, host, pressure, "assumed")


def model_mix() -> tuple[str, ...]:
    """The job types Philly jobs are drawn from (Gavel's 26 single-GPU V100 types)."""
    return gavel_pairs()[0]


def assign_model_types(n_jobs: int, seed: int) -> list[str]:
    """``n_jobs`` model types drawn uniformly from the mix with a fixed seed."""
    mix = model_mix()
    rng = random.Random(seed)
    return [mix[rng.randrange(len(mix))] for _ in range(n_jobs)]


def sharing_factor(model_a: str | None, model_b: str | None) -> float:
    """Speed of ``a`` sharing one GPU with ``b`` (Gavel's measurement, V100). Pairs Gavel
    found infeasible (out of memory: 0) count as 0.25; unmeasured pairs as the median 0.68."""
    _, pairs = gavel_pairs()
    value = pairs.get((model_a or "", model_b or ""))
    if value is None:
        return 0.68
    return value if value > 0 else 0.25
