import pytest

from policy_builders import kinds, node, pending, running, snapshot
from slurm_marl.colocation import span_tags
from slurm_marl.domain import Job
from slurm_marl.policy.framework import build_policy, run_cycle
from slurm_marl.policy.interference import FittedEstimator
from slurm_marl.policy.place.binpack import alignment, binpack_node_score, fullness_after
from slurm_marl.policy.place.consolidate import consolidate_score
from slurm_marl.policy.place.spread import spread_score
from slurm_marl.policy.place.tiresias_skew import fragment_fill_score
from slurm_marl.policy.profile import load_profile, profile_from_mapping


def profile(place, order="fifo", backfill=True, reserve=False, preemption=False, **extra):
    return profile_from_mapping({"name": "t", "backfill": backfill,
                                 "backfill_reserve": reserve, "preemption": preemption,
                                 "order": {"plugin": order}, "place": place, **extra})


def placed(decisions):
    return {p.job_id: p for p in kinds(decisions, "Place") if p.start_now}


# -- pure score functions ---------------------------------------------------------------------

def test_consolidate_score_prefers_fewer_nodes_groups_leaves_and_fuller_spots():
    best = consolidate_score(1, 1, 1, 1, 1, 0, 4, 0, 8)
    assert best == pytest.approx(1.0)
    assert consolidate_score(2, 1, 2, 1, 1, 0, 4, 0, 8) < best
    assert consolidate_score(1, 1, 2, 1, 1, 0, 4, 0, 8) < best
    assert consolidate_score(2, 2, 2, 2, 2, 0, 8, 0, 16) < consolidate_score(
        2, 2, 2, 2, 1, 0, 8, 0, 16)
    assert consolidate_score(1, 1, 1, 1, 1, 3, 4, 7, 8) < consolidate_score(
        1, 1, 1, 1, 1, 0, 4, 4, 8)


def test_spread_and_fill_scores():
    assert spread_score(4, 4, 8, 8) == 1.0
    assert spread_score(1, 4, 1, 8) < spread_score(3, 4, 5, 8)
    assert fragment_fill_score(0, 8) == 1.0 and fragment_fill_score(8, 8) == 0.0


def test_binpack_alignment_and_fullness():
    assert alignment((1, 1, 0), (1, 1, 0)) == pytest.approx(1.0)
    assert alignment((1, 0, 0), (0, 1, 0)) == 0.0
    assert fullness_after((0.5, 0.5, 0.5), (0.5, 0.5, 0.5)) == 1.0
    # A node whose free shape matches and which fills up wins.
    assert binpack_node_score((0.25, 0.25, 0.1), (0.25, 0.25, 0.1)) > binpack_node_score(
        (0.25, 0.25, 0.1), (1.0, 0.3, 1.0))


# -- plugins on snapshots ----------------------------------------------------------------------

def test_consolidate_best_fit_group_and_one_leaf():
    prof = profile({"consolidate": 1.0})
    nodes = [node("n1", used=(0, 1, 2)), node("n2", used=(0,)), node("n3")]
    d = placed(run_cycle(snapshot(nodes, [pending(1, 1)]), prof))
    # the group with 1 free GPU is the fullest spot
    assert d[1].nodes == ("n1",) and d[1].allocs[0].group == 0
    d = placed(run_cycle(snapshot(nodes, [pending(2, 4)]), prof))
    assert d[2].nodes == ("n1",) and d[2].allocs[0].group == 1   # a whole free group
    nodes = [node("a1", used=range(4), leaf="L1"), node("b1", leaf="L2"),
             node("b2", used=(0,), leaf="L2"), node("a2", used=range(5), leaf="L1")]
    d = placed(run_cycle(snapshot(nodes, [pending(3, 12)]), prof))
    assert set(d[3].nodes) == {"b1", "b2"}                       # one leaf, two nodes
    assert d[3].scores[0][0] == "consolidate"


def test_spread_picks_the_emptiest_node():
    prof = profile({"spread": 1.0})
    nodes = [node("n1", used=(0, 1)), node("n2", used=(0,)), node("n3", used=(0, 4))]
    d = placed(run_cycle(snapshot(nodes, [pending(1, 1)]), prof))
    assert d[1].nodes == ("n2",) and d[1].allocs[0].group == 1


def test_binpack_prefers_the_node_that_fills_up():
    prof = profile({"binpack": 1.0})
    nodes = [node("n1", used=range(6), alloc_cpus=24), node("n2")]
    d = placed(run_cycle(snapshot(nodes, [pending(1, 2, cpus=8)]), prof))
    assert d[1].nodes == ("n1",)


class StubEstimator:
    """Jobs hate sharing a GPU group with 'noisy' jobs."""

    def predict_speed(self, job, colocated_by_level):
        return 0.5 if "noisy" in colocated_by_level.get("group", ()) else 1.0


def test_least_interference_avoids_noisy_neighbours():
    prof = profile({"least_interference": 1.0, "consolidate": 0.1})
    nodes = [node("n1"), node("n2")]
    noisy = running(8, {"n1": (0,)}, model_type="noisy")
    quiet = running(9, {"n2": (4,)}, model_type="quiet")
    policy = build_policy(prof, interference_estimator=StubEstimator())
    d = placed(policy.run_cycle(snapshot(nodes, [noisy, quiet, pending(1, 1)])))
    # consolidate alone would fill n1/group 0 next to the noisy job
    assert (d[1].nodes, d[1].allocs[0].group) != (("n1",), 0)
    assert dict(d[1].scores)["least_interference"] == 1.0


def test_least_interference_sees_jobs_placed_earlier_in_the_cycle():
    prof = profile({"least_interference": 1.0, "consolidate": 0.1})
    policy = build_policy(prof, interference_estimator=StubEstimator())
    nodes = [node("n1", groups=(2,)), node("n2", groups=(2,))]
    jobs = [pending(1, 1, submit=0, model_type="noisy"), pending(2, 1, submit=1)]
    d = placed(policy.run_cycle(snapshot(nodes, jobs)))
    assert d[1].nodes != d[2].nodes


def test_fitted_estimator_recovers_a_pair_slowdown():
    samples = []
    for _ in range(20):
        samples.append({"model_type": "a_bs1", "speed": 1.0, "groups": 1, "nodes": 1,
                        "leaves": 1, "colocated": {"group": [], "node": []}})
        samples.append({"model_type": "a_bs1", "speed": 0.6, "groups": 1, "nodes": 1,
                        "leaves": 1, "colocated": {"group": ["b_bs2"], "node": []}})
        samples.append({"model_type": "a_bs1", "speed": 0.9, "groups": 1, "nodes": 1,
                        "leaves": 1, "colocated": {"group": [], "node": ["b_bs2"]}})
        samples.append({"model_type": "a_bs1", "speed": 0.7, "groups": 2, "nodes": 2,
                        "leaves": 2, "colocated": {}})
    est = FittedEstimator.fit(samples, ridge=1e-3)
    job = Job(job_id=1, model_type="a_bs7")
    assert est.predict_speed(job, {"group": ("b_bs9",)}) == pytest.approx(0.6, rel=0.02)
    assert est.predict_speed(job, {"node": ("b",)}) == pytest.approx(0.9, rel=0.02)
    assert est.predict_speed(job, {"span": span_tags(2, 2, 2)}) == pytest.approx(0.7, rel=0.05)
    assert est.predict_speed(job, {}) == pytest.approx(1.0)
    # an unseen family falls back to the pooled model
    assert est.predict_speed(Job(job_id=2, model_type="zzz"), {"group": ("b",)}) < 0.8


def test_skew_sensitive_model_waits_for_a_consolidated_placement():
    prof = profile({"tiresias_skew": 1.0})
    nodes = [node("n1", used=range(4)), node("n2", used=range(4))]   # 4 + 4 free
    vgg = pending(1, 8, model_type="vgg19")
    resnet = pending(2, 8, model_type="resnet50", submit=1)
    d = placed(run_cycle(snapshot(nodes, [vgg]), prof))
    assert 1 not in d                                # would need 2 nodes: waits
    d = placed(run_cycle(snapshot(nodes, [resnet]), prof))
    assert set(d[2].nodes) == {"n1", "n2"}           # may spread


# -- framework actions ---------------------------------------------------------------------------

def test_strict_order_stops_at_the_first_blocked_job():
    prof = load_profile("fifo-consolidate")
    nodes = [node("n1", used=(0, 1, 2, 3))]
    jobs = [pending(1, 8, submit=0), pending(2, 1, submit=1)]
    decisions = run_cycle(snapshot(nodes, jobs), prof)
    assert not kinds(decisions, "Place")
    assert len(kinds(decisions, "SetPriority")) == 2


def test_fit_first_backfill_lets_later_jobs_through():
    prof = profile({"consolidate": 1.0}, backfill=True, reserve=False)
    nodes = [node("n1", used=(0, 1, 2, 3))]
    d = placed(run_cycle(snapshot(nodes, [pending(1, 8), pending(2, 1, submit=1)]), prof))
    assert set(d) == {2}


def test_reserving_backfill_holds_the_blocked_jobs_gpus():
    prof = load_profile("fifo-backfill")
    nodes = [node("n1", used=(0, 1, 2)), node("n2", used=range(8))]
    jobs = [pending(1, 8, submit=0), pending(2, 4, submit=1), pending(3, 1, submit=2)]
    decisions = run_cycle(snapshot(nodes, jobs), prof)
    plans = [p for p in kinds(decisions, "Place") if not p.start_now]
    assert [p.job_id for p in plans] == [1] and plans[0].nodes == ("n1",)
    assert plans[0].gpus == 8 and plans[0].reason
    assert not placed(decisions)                    # n1's 5 free GPUs are held for job 1
    # with a third node free, job 1 starts there and the others fill n1
    nodes.append(node("n3", leaf="leaf2"))
    d = placed(run_cycle(snapshot(nodes, jobs), prof))
    assert d[1].nodes == ("n3",) and d[2].nodes == d[3].nodes == ("n1",)


def test_backfill_reservation_leaves_other_gpus_usable():
    prof = load_profile("fifo-backfill")
    nodes = [node("n1", used=(0, 1, 2, 3, 4)), node("n2", used=(0, 1, 2, 3, 4, 5, 6))]
    jobs = [pending(1, 8, submit=0), pending(2, 1, submit=1)]
    decisions = run_cycle(snapshot(nodes, jobs), prof)
    plan = [p for p in kinds(decisions, "Place") if not p.start_now][0]
    assert plan.nodes == ("n1",)            # 3 GPUs already free there vs 1 on n2
    d = placed(decisions)
    assert d[2].nodes == ("n2",)


def test_partition_availability_required_and_excluded_nodes():
    prof = profile({"consolidate": 1.0})
    nodes = [node("n1", partitions=("other",)), node("n2", state="DRAIN"),
             node("n3", used=(0, 1, 2)), node("n4", used=(0, 1))]
    d = placed(run_cycle(snapshot(nodes, [pending(1, 1)]), prof))
    assert d[1].nodes == ("n3",)
    d = placed(run_cycle(snapshot(nodes, [pending(1, 1, excluded_nodes=("n3",))]), prof))
    assert d[1].nodes == ("n4",)
    d = placed(run_cycle(snapshot(nodes, [pending(1, 1, required_nodes=("n1",))]), prof))
    assert d == {}
    d = placed(run_cycle(snapshot(nodes, [pending(1, 1, partition="other")]), prof))
    assert d[1].nodes == ("n1",)


def test_fixed_shape_jobs_get_their_gpus_per_node():
    prof = profile({"consolidate": 1.0})
    nodes = [node("n1", used=(0, 1, 2, 3, 4)), node("n2"), node("n3", used=(0,))]
    job = Job(job_id=1, partition="gpu", gpus_per_node=4, node_count=2)
    d = placed(run_cycle(snapshot(nodes, [job]), prof))
    per_node = {}
    for a in d[1].allocs:
        per_node[a.node] = per_node.get(a.node, 0) + a.gpus
    assert sorted(per_node.values()) == [4, 4] and "n1" not in per_node


def test_every_decision_explains_itself():
    prof = load_profile("las-consolidate")
    nodes = [node("n1", used=(0,)), node("n2")]
    jobs = [pending(i, g, submit=i) for i, g in enumerate([1, 4, 8, 2, 16], start=1)]
    decisions = run_cycle(snapshot(nodes, jobs), prof)
    assert all(d.plugin and d.reason for d in decisions)
    prios = kinds(decisions, "SetPriority")
    assert len(prios) == len(jobs)
    assert sorted(p.priority for p in prios) == list(range(1, len(jobs) + 1))
    for p in kinds(decisions, "Place"):
        assert p.scores and p.gpus == next(j.num_gpus for j in jobs if j.job_id == p.job_id)


class SpreadHating:
    """Multi-node placements run at 0.5; alone-on-a-node 1.0."""

    def predict_speed(self, job, colocated_by_level):
        return 0.5 if "multi_node" in colocated_by_level.get("span", ()) else 1.0


def test_least_interference_defers_a_job_below_its_ideal_speed():
    nodes = [node("n1", used=range(4)), node("n2", used=range(4))]   # 4 + 4 free
    job = pending(1, 8, model_type="lm_bs20")
    waits = profile({"least_interference": 1.0},
                    place_params={"least_interference": {"defer_below": 0.8}})
    policy = build_policy(waits, interference_estimator=SpreadHating())
    assert placed(policy.run_cycle(snapshot(nodes, [job]))) == {}
    takes = build_policy(profile({"least_interference": 1.0}),
                         interference_estimator=SpreadHating())
    assert set(placed(takes.run_cycle(snapshot(nodes, [job])))[1].nodes) == {"n1", "n2"}
    # a 16-GPU job is multi-node at best: its ideal is 0.5, so it is not deferred
    big = pending(2, 16)
    free = [node("n1"), node("n2")]
    assert 2 in placed(policy.run_cycle(snapshot(free, [big])))


def test_least_interference_predicts_a_jobs_ideal_speed_once_for_all_its_candidates():
    asked = []

    class Counting(SpreadHating):
        def predict_speed(self, job, colocated_by_level):
            if set(colocated_by_level) == {"span"}:      # an ideal placement's question
                asked.append(job.job_id)
            return super().predict_speed(job, colocated_by_level)

    nodes = [node(f"n{k}", used=range(k)) for k in range(4)]     # 4 classes of nodes
    jobs = [pending(1, 1, model_type="lm_bs20"), pending(2, 2, model_type="lm_bs20", submit=1)]
    waits = profile({"least_interference": 1.0},
                    place_params={"least_interference": {"defer_below": 0.8}})
    policy = build_policy(waits, interference_estimator=Counting())
    assert set(placed(policy.run_cycle(snapshot(nodes, jobs)))) == {1, 2}
    assert asked == [1, 2]
    asked.clear()
    policy.run_cycle(snapshot(nodes, jobs))          # a new cycle asks again
    assert asked == [1, 2]


def test_least_interference_can_weigh_the_harm_to_neighbours():
    class Asymmetric:
        def predict_speed(self, job, colocated_by_level):
            # "fragile" jobs suffer next to anyone; everyone else is fine
            if job.model_type == "fragile" and colocated_by_level.get("group"):
                return 0.5
            return 1.0

    nodes = [node("n1", groups=(2,)), node("n2", groups=(2,))]
    fragile = running(8, {"n1": (0,)}, model_type="fragile")
    other = running(9, {"n2": (2,)}, model_type="sturdy")
    jobs = [fragile, other, pending(1, 1, model_type="sturdy")]
    kind = profile({"least_interference": 1.0},
                   place_params={"least_interference": {"include_neighbours": True}})
    d = placed(build_policy(kind, interference_estimator=Asymmetric()).run_cycle(
        snapshot(nodes, jobs)))
    assert d[1].nodes == ("n2",)


def test_filtering_plugins_disable_the_failed_size_shortcut():
    # Two jobs alike but for size: with a filter the larger may fit where the smaller
    # may not (tiresias_skew: 8 GPUs must be on one node, 12 may use two).
    prof = profile({"tiresias_skew": 1.0})
    nodes = [node("n1", used=(0, 1)), node("n2", used=(0, 1))]       # 6 + 6 free
    jobs = [pending(1, 8, model_type="vgg19"), pending(2, 12, model_type="vgg19", submit=1)]
    d = placed(run_cycle(snapshot(nodes, jobs), prof))
    assert set(d) == {2}


def test_preemption_takes_the_node_needing_fewest_victim_gpus_among_alike_nodes():
    """nA and nB look alike once their running jobs are gone (8 free GPUs each), but nA
    needs vX's 4 GPUs and vM's, nB only vM's (its other 4 are free). Found by hypothesis: the
    search kept one node per class of the what-if capacity, nA, and preempted both."""
    from slurm_marl.domain import JobState
    prof = profile({"consolidate": 1.0}, preemption=True)
    nodes = [node("nA"), node("nB")]
    v_m = running(10, {"nA": (4, 5, 6, 7), "nB": (4, 5, 6, 7)}, submit=10.0)
    v_x = running(11, {"nA": (0, 1, 2, 3)}, submit=20.0)      # ranked lowest: added first
    job = Job(job_id=1, partition="gpu", state=JobState.PENDING, gpus_per_node=8,
              node_count=1, submit_time_s=0.0, queue_since_s=0.0)
    decisions = run_cycle(snapshot(nodes, [v_m, v_x, job]), prof)
    assert [d.job_id for d in kinds(decisions, "Preempt")] == [10]
    assert placed(decisions)[1].nodes == ("nB",)
