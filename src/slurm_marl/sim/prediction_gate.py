"""Predictions in the simulator: each job is predicted at its arrival and each finished job
is told to the predictor, learned from (``sim/online_prediction.py``) or fixed
(``sim/predictions.py``). A partition's predictions are used only while its skill gate is
open (``history/skill.py``); a job keeps its prediction either way and carries why it is
withheld, so a gate that opens or closes changes what every job there shows at once.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from slurm_marl.sim.jobs import SimJob

if TYPE_CHECKING:  # LightGBM is imported only where predictions are learned
    from slurm_marl.sim.online_prediction import OnlinePredictor
    from slurm_marl.sim.predictions import FixedPredictor


class GatedPredictions:
    """A predictor and the state of each partition's gate, as the jobs were last told it."""

    def __init__(self, predictor: OnlinePredictor | FixedPredictor) -> None:
        self.predictor = predictor
        self.withheld_in: dict[str, str] = {}       # partition -> why withheld ("": used)
        self.predictions_given = [0, 0]             # arrivals with it used, withheld
        self.gate_flips = 0

    def arrived(self, j: SimJob, now: float) -> None:
        """Give the arriving job ``j`` its prediction, used or withheld as its partition's
        gate stands."""
        j.predicted_gpu_s = self.predictor.arrived(j, now)
        if j.predicted_gpu_s is not None:
            j.prediction_withheld = self._withheld(j.partition)
            self.predictions_given[bool(j.prediction_withheld)] += 1

    def finished(self, j: SimJob, now: float) -> None:
        self.predictor.finished(j, now)

    def _withheld(self, partition: str) -> str:
        """Why ``partition``'s predictions are withheld now ("": used), as of the gate's
        last flip (the reason's numbers are those that closed it)."""
        why = self.withheld_in.get(partition)
        if why is None:
            why = self.withheld_in[partition] = self.predictor.withheld(partition)
        return why

    def flipped(self, partitions: set[str]) -> list[tuple[str, str]]:
        """Jobs finished in ``partitions``: (partition, why withheld now) for each whose
        gate opened or closed; the jobs there with a prediction are to follow it."""
        out = []
        for part in partitions:
            old = self.withheld_in.get(part)
            new = self.predictor.withheld(part)
            if old is not None and bool(old) == bool(new):
                continue
            self.withheld_in[part] = new
            if old is None:
                continue
            self.gate_flips += 1
            out.append((part, new))
        return out
