"""A job's candidates judged at once (``JudgesMany``): each place plugin is asked once per
job for all candidates, in the order the per-candidate walk asks (``Policy.score``), and
the answers combine exactly as there: filters in the profile's order, each seeing only the
candidates the ones before it let through; scores only for those left; each candidate's
total the weighted scores summed in the profile's order; the best the first with the
highest total (a later one must beat it by more than 1e-12)."""

from __future__ import annotations

from collections.abc import Sequence

from slurm_marl.domain import Job
from slurm_marl.policy.plugins import PlacePlugin, abilities
from slurm_marl.policy.state import Candidate, CycleState


def judged_at_once(place: Sequence[tuple[PlacePlugin, float]]) -> bool:
    """Whether every plugin deciding a job answers for all its candidates at once."""
    return all(abilities(p).judges_many for p, _ in place)


def score_at_once(place: Sequence[tuple[PlacePlugin, float]], job: Job,
                  cands: list[Candidate], state: CycleState):
    """(best candidate or None, its weighted scores by plugin key, how many were
    feasible): ``Policy.score``'s answer, the plugins asked once each."""
    ok = cands
    for plugin, _ in place:
        if ok and abilities(plugin).filters:
            ok = [c for c, keep in zip(ok, plugin.feasible_many(job, ok, state)) if keep]
    if not ok:
        return None, (), 0
    columns = [[weight * s for s in plugin.score_many(job, ok, state)]
               for plugin, weight in place]
    best_i, best_total = -1, 0.0
    for i in range(len(ok)):
        total = sum(col[i] for col in columns)
        if best_i < 0 or total > best_total + 1e-12:
            best_i, best_total = i, total
    terms = tuple((plugin.key, col[best_i]) for (plugin, _), col in zip(place, columns))
    return ok[best_i], terms, len(ok)
