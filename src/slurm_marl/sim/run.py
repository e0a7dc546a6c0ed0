"""One simulation from the names a user types: trace, window, cluster, profile, strength.

Profiles with the ``least_interference`` place plugin need an interference estimator. Unless
one is given (``estimator=`` or the plugin's ``samples_path``), it is fitted from history:
a pilot run of the same workload with another model-type draw (``seed + 1``) under
``las-consolidate`` (dense co-location, so many pairs are observed), on the same cluster and
interference strength. The estimator only sees the pilot's emitted samples.

The summary adds to ``metrics.summarize``: ``dropped_oversized`` (jobs larger than their
partition, left out with ``drop_oversized=True``) and ``refused_placements`` (same-GPU
placements of fractional jobs that no single GPU could hold).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import TYPE_CHECKING

from slurm_marl.history.skill import GateParams, SkillGate
from slurm_marl.policy.framework import build_policy
from slurm_marl.policy.interference import FittedEstimator, InterferenceEstimator
from slurm_marl.policy.profile import Profile, load_profile
from slurm_marl.sim.cluster import SimCluster, parse_cluster
from slurm_marl.sim.engine import Simulator
from slurm_marl.sim.jobs import SimOutcome
from slurm_marl.sim.metrics import summarize
from slurm_marl.sim.predictions import FixedPredictor, predicted_gpu_s
from slurm_marl.sim.traces import TraceJob, Window, load_trace

if TYPE_CHECKING:      # lightgbm loads only where predictions are learned
    from slurm_marl.sim.online_prediction import PriorHistory

PILOT_PROFILE = "las-consolidate"


@dataclass
class SimRun:
    profile: Profile
    cluster: SimCluster
    interference: str
    seed: int
    outcome: SimOutcome
    summary: dict = field(default_factory=dict)
    estimator_samples: int = 0


# Orders that read a job's predicted GPU-time: without --prediction-error they get one
# learned in the run from the jobs that finished before each submission.
LEARNS_PREDICTIONS = frozenset({"predicted_las"})
# Every prediction, learned or fixed, goes through the prediction-skill gate (None: none).
DEFAULT_GATE = GateParams()


def needs_estimator(profile: Profile) -> bool:
    return any(k == "least_interference" for k, _ in profile.place) \
        and not {"samples_path", "model_path"} & set(
            profile.place_params.get("least_interference", {}))


# The last pilots' estimators (report: las-lif and learned-order fit the same pilot at
# each strength): (the trace's jobs, cluster, interference, seed, restart delay, estimator).
_PILOTS: list[tuple] = []
_PILOTS_KEPT = 4


def fit_estimator_from_pilot(trace: list[TraceJob], cluster: SimCluster, interference: str,
                             seed: int, restart_delay_s: float) -> FittedEstimator:
    """The estimator fitted on the pilot run; one fitted before in this process on the same
    trace (the same job objects: frozen), cluster object, strength, seed and restart delay
    is given again (the run is deterministic; the estimator's memo is a pure cache)."""
    for k, (jobs, cl, inter, sd, rd, est) in enumerate(_PILOTS):
        if cl is cluster and (inter, sd, rd) == (interference, seed, restart_delay_s) \
                and len(jobs) == len(trace) and all(a is b for a, b in zip(jobs, trace)):
            _PILOTS.append(_PILOTS.pop(k))
            return est
    est = _fit_pilot(trace, cluster, interference, seed, restart_delay_s)
    _PILOTS.append((tuple(trace), cluster, interference, seed, restart_delay_s, est))
    del _PILOTS[:-_PILOTS_KEPT]
    return est


def _fit_pilot(trace: list[TraceJob], cluster: SimCluster, interference: str,
               seed: int, restart_delay_s: float) -> FittedEstimator:
    pilot = build_policy(load_profile(PILOT_PROFILE))
    history = [replace(t, model_type=None) for t in trace] \
        if all(t.model_type is None for t in trace) else trace
    sim = Simulator(cluster, history, pilot, interference=interference, seed=seed + 1,
                    restart_delay_s=restart_delay_s, collect_samples=True,
                    drop_oversized=True)
    outcome = sim.run()
    return FittedEstimator.fit(outcome.samples)


def simulate(trace: list[TraceJob] | str | Path, cluster: SimCluster | str,
             profile: Profile | str, *, window: Window | str | None = None,
             interference: str = "none", seed: int = 0, restart_delay_s: float = 30.0,
             cycle_period_s: float = 0.0, collect_samples: bool = False,
             estimator: InterferenceEstimator | None = None, drop_oversized: bool = False,
             skip_bad_rows: bool = False,
             progress: Callable[[int, int], None] | None = None,
             prediction_error: str | None = None, prediction_seed: int = 0,
             trace_source: tuple[str | Path, Window | str | None] | None = None,
             skill_gate: GateParams | None = DEFAULT_GATE,
             prior: PriorHistory | None = None) -> SimRun:
    """Run one simulation; ``trace`` is a loaded trace or a path (read with ``window`` and
    ``skip_bad_rows``). Jobs larger than their partition are an error unless
    ``drop_oversized`` (then counted in the summary's ``dropped_oversized``).
    ``prediction_error``: each job carries a predicted GPU-time of that quality
    (``sim/predictions.py``: ``helios`` or ``oracle``); None: orders that read predictions
    get them learned in the run (``sim/online_prediction.py``), starting from the history
    before the window where the trace has one (``trace_source``: the file and window a
    loaded ``trace`` came from), or from ``prior`` where given (a site's history before
    the period, ``sim/report/``; it replaces the trace's). ``skill_gate``: the
    parameters of the prediction-skill gate both kinds of predictions pass
    (``history/skill.py``); None: ungated."""
    jobs = trace if isinstance(trace, list) else load_trace(trace, window,
                                                           skip_bad_rows=skip_bad_rows)
    sim_cluster = cluster if isinstance(cluster, SimCluster) else parse_cluster(cluster)
    prof = profile if isinstance(profile, Profile) else load_profile(profile)
    context = {}
    n_est = 0
    if needs_estimator(prof):
        if estimator is None:
            estimator = fit_estimator_from_pilot(jobs, sim_cluster, interference, seed,
                                                 restart_delay_s)
            n_est = estimator.n_samples
        context["interference_estimator"] = estimator
    policy = build_policy(prof, **context)
    gate = SkillGate(skill_gate) if skill_gate is not None else None
    predictor = None
    if prediction_error is not None:
        predictor = FixedPredictor(predicted_gpu_s(jobs, prediction_error, prediction_seed),
                                   gate)
    elif prof.order in LEARNS_PREDICTIONS:
        from slurm_marl.sim.online_prediction import OnlinePredictor, PriorHistory, \
            philly_prior
        if prior is None:
            path, win = (trace, window) if not isinstance(trace, list) else \
                (trace_source or (None, None))
            found = philly_prior(path, win) if path is not None else None
            prior = PriorHistory(*found) if found else None
        predictor = OnlinePredictor(seed=seed, prior=prior.jobs if prior else (),
                                    origin_s=prior.origin_s if prior else 0.0, gate=gate,
                                    requests=prior.requests if prior else None)
    sim = Simulator(sim_cluster, jobs, policy, interference=interference, seed=seed,
                    restart_delay_s=restart_delay_s, cycle_period_s=cycle_period_s,
                    collect_samples=collect_samples, drop_oversized=drop_oversized,
                    progress=progress, predictor=predictor)
    outcome = sim.run()
    run = SimRun(profile=prof, cluster=sim_cluster, interference=interference, seed=seed,
                 outcome=outcome, estimator_samples=n_est)
    run.summary = summarize(outcome)
    run.summary["dropped_oversized"] = outcome.dropped
    run.summary["refused_placements"] = outcome.refused_placements
    if prediction_error is not None:
        run.summary["predictions"] = f"{prediction_error} (seed {prediction_seed})"
    elif predictor is not None:
        run.summary["predictions"] = (
            f"learned in the run (LightGBM from finished jobs, {predictor.fits} refits"
            + (f"; {len(prior.jobs)} jobs of history before the window, "
               f"{predictor.prior_jobs} of them ended by its start)" if prior else ")"))
        run.summary["prediction_prior_jobs"] = predictor.prior_jobs
    if gate is not None and predictor is not None:
        # arrivals whose prediction was used / withheld then, and how often a gate flipped
        run.summary["predictions_given"], run.summary["predictions_withheld"] = \
            sim.gates.predictions_given
        run.summary["prediction_gate_flips"] = sim.gates.gate_flips
    return run
