"""Predictions of a job's total GPU-time for the simulator, standing in for a site's
predictor: the truth, or the truth perturbed to a stated error distribution.

``helios``: the truth perturbed by the error distribution ``prediction_error.HELIOS_POINTS``
(the one the Helios artifact uses to emulate its estimator on Philly): each job draws a
magnitude from it and over- or under-predicts with equal odds. Seeded, per job id, so a job
gets the same prediction in every run and profile. This is an assumption, like the
interference strengths: the real error of a site's predictor is measured separately.

``helios*A`` (``A`` in (0, 1]): the same draws with every error's log scaled by ``A`` (0.5:
a predictor whose errors are the square roots of Helios'), to measure how JCT depends on
prediction quality between the truth and Helios' estimator.

``oracle``: the truth (what the clairvoyant ``srtf`` order reads).

``FixedPredictor`` hands them out at each job's arrival and records them with the
prediction-skill gate (``history/skill.py``), as a site's predictor would be gated.
"""

from __future__ import annotations

import random
from collections.abc import Iterable, Mapping

from slurm_marl.history.skill import SkillGate
from slurm_marl.prediction_error import HELIOS_POINTS, error_factor
from slurm_marl.sim.traces import TraceJob

KINDS = ("helios", "oracle")


def predicted_gpu_s(trace: Iterable[TraceJob], kind: str, seed: int = 0
                    ) -> Mapping[int, float]:
    """job id -> predicted total GPU-time (seconds x GPUs) for ``kind`` in ``KINDS`` (or
    ``helios*A``)."""
    base, _, scale_text = kind.partition("*")
    scale = 1.0
    if scale_text:
        try:
            scale = float(scale_text)
        except ValueError:
            scale = -1.0
        if base != "helios" or not 0.0 < scale <= 1.0:
            raise ValueError(f"unknown prediction error {kind!r}: 'helios*A' takes A in (0, 1]")
    elif kind not in KINDS:
        raise ValueError(f"unknown prediction error {kind!r}; one of {', '.join(KINDS)} or "
                         f"helios*A")
    out = {}
    for t in trace:
        truth = max(0.0, t.duration_s) * max(1, t.num_gpus)
        if kind == "oracle":
            out[t.job_id] = truth
            continue
        rng = random.Random(f"{seed}:{t.job_id}")
        factor = error_factor(rng.random(), HELIOS_POINTS) ** scale
        out[t.job_id] = truth * factor if rng.random() < 0.5 else truth / factor
    return out


class FixedPredictor:
    """Predictions fixed in advance (``predicted_gpu_s``), given at arrival and recorded
    with ``gate`` (None: ungated); the same calls as
    ``sim.online_prediction.OnlinePredictor``."""

    def __init__(self, predictions: Mapping[int, float], gate: SkillGate | None = None) -> None:
        self.predictions = predictions
        self.gate = gate

    def arrived(self, job, now: float) -> float | None:
        predicted = self.predictions.get(job.job_id)
        if self.gate is not None:
            self.gate.record(job.job_id, job.partition, predicted)
        return predicted

    def finished(self, job, now: float) -> None:
        if self.gate is not None:
            self.gate.finished(job.job_id, max(0.0, job.duration_s) * max(1, job.num_gpus))

    def withheld(self, partition: str) -> str:
        return self.gate.withheld(partition) if self.gate is not None else ""
