"""Hierarchical encoder, masked softmax and the per-partition actor-critic agents."""

import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from slurm_marl.models.gnn import HierarchicalEncoder, mean_by_parent
from slurm_marl.models.policy import (AgentInput, PlacementPolicy, PolicyConfig,
                                      masked_entropy, masked_log_softmax, masked_softmax)
from slurm_marl.agent.features import Featuriser, feature_dims
from slurm_marl.topology.graph import build_topology_graph

from models_helpers import snapshot_with


def tensors_of(cluster, **kw):
    snap = snapshot_with(cluster, **kw)
    return Featuriser(build_topology_graph(snapshot=snap)).featurise(snap)


def test_mean_by_parent_matches_a_loop_and_keeps_batch_dims():
    h = torch.arange(24, dtype=torch.float32).reshape(2, 4, 3)
    parent = torch.tensor([0, 0, 2, 2])
    out = mean_by_parent(h, parent, 3)
    assert out.shape == (2, 3, 3)
    assert torch.equal(out[:, 0], h[:, :2].mean(1))
    assert torch.equal(out[:, 1], torch.zeros(2, 3))  # no children
    assert torch.equal(out[:, 2], h[:, 2:].mean(1))


def test_encoder_shapes_on_a_tiny_cluster(two_partitions):
    t = tensors_of(two_partitions)
    enc = HierarchicalEncoder(feature_dims(), hidden=16)
    out = enc(t.x, t.parent)
    sizes = {lvl: x.shape[0] for lvl, x in t.x.items()}
    assert sizes == {"gpu": 16, "gpu_group": 8, "node": 4, "leaf": 2, "spine": 1}
    for level, h in out.items():
        assert h.shape == (sizes[level], 16)
        assert torch.isfinite(h).all()
    batched = enc({k: torch.stack([v, v, v]) for k, v in t.x.items()}, t.parent)
    assert batched["gpu_group"].shape == (3, 8, 16)
    assert torch.allclose(batched["gpu_group"][1], out["gpu_group"], atol=1e-6)


def test_top_down_pass_gives_groups_their_context(two_partitions):
    """A job on node a02 changes the embeddings of a01's groups (same leaf) through the
    leaf and back down, and leaves leaf2's groups alone except through the spine."""
    torch.manual_seed(0)
    enc = HierarchicalEncoder(feature_dims(), hidden=16)
    idle = tensors_of(two_partitions)
    busy = tensors_of(two_partitions, running=[(1, "lm", (("a02", (0, 1, 2, 3)),))])
    a01 = [i for i, n in enumerate(idle.names["gpu_group"]) if n.startswith("a01/")]
    before, after = enc(idle.x, idle.parent), enc(busy.x, busy.parent)
    assert not torch.allclose(before["gpu_group"][a01], after["gpu_group"][a01])
    # without the top-down pass a01's groups would only see their own GPUs: unchanged
    assert torch.allclose(idle.x["gpu"][:4], busy.x["gpu"][:4])


@settings(max_examples=200, deadline=None)
@given(st.integers(1, 6), st.integers(1, 9), st.data())
def test_masked_softmax_never_nan(rows, cols, data):
    logits = torch.tensor(data.draw(st.lists(
        st.lists(st.floats(-1e30, 1e30, allow_nan=False), min_size=cols, max_size=cols),
        min_size=rows, max_size=rows)))
    mask = torch.tensor(data.draw(st.lists(st.lists(st.booleans(), min_size=cols,
                                                    max_size=cols),
                                           min_size=rows, max_size=rows)))
    p = masked_softmax(logits, mask)
    assert not torch.isnan(p).any()
    assert torch.all(p[~mask] == 0)
    sums = p.sum(-1)
    for r in range(rows):
        assert abs(float(sums[r]) - (1.0 if mask[r].any() else 0.0)) < 1e-5
    assert torch.isfinite(masked_entropy(logits, mask)).all()
    logp = masked_log_softmax(logits, mask)
    assert not torch.isnan(logp).any()


def test_all_masked_rows_give_zeros_and_gradients_stay_finite():
    logits = torch.randn(3, 5, requires_grad=True)
    mask = torch.tensor([[False] * 5, [True, False, False, False, True], [True] * 5])
    p = masked_softmax(logits, mask)
    assert torch.equal(p[0], torch.zeros(5))
    (p.sum() + masked_entropy(logits, mask).sum()).backward()
    assert torch.isfinite(logits.grad).all()


def _config(agents, vocab=4):
    dims = dict(feature_dims())
    dims["gpu_group"] += vocab
    return PolicyConfig(level_dims=dims, job_dim=9 + vocab, live_dim=15, agents=agents,
                        hidden=16)


def _inputs(t, rows_by_level, batch=2, vocab=4):
    g = len(rows_by_level["gpu_group"])
    x = {}
    for level, rows in rows_by_level.items():
        feats = t.x[level][rows]
        if level == "gpu_group":
            feats = torch.cat([feats, torch.zeros(len(rows), vocab)], 1)
        x[level] = torch.stack([feats] * batch)
    mask = torch.zeros(batch, g + 1, dtype=torch.bool)
    mask[:, -1] = True
    mask[0, 0] = True
    return x, AgentInput(x=x, parent=None, job=torch.randn(batch, 9 + vocab),
                         live=torch.randn(batch, g, 15), mask=mask)


def test_agents_score_every_group_plus_defer_and_exchange_summaries(two_partitions):
    from slurm_marl.agent.views import agent_view
    snap = snapshot_with(two_partitions)
    feat = Featuriser(build_topology_graph(snapshot=snap))
    t = feat.featurise(snap)
    torch.manual_seed(0)
    policy = PlacementPolicy(_config(("a", "b")))
    inputs = {}
    for name, node_rows in (("a", [0, 1]), ("b", [2, 3])):
        view = agent_view(name, torch.tensor(node_rows).numpy(), feat.index)
        x, inp = _inputs(t, view.rows)
        inp.parent = view.parent
        inputs[name] = inp
    out = policy(inputs)
    for name in ("a", "b"):
        logits, value = out[name]
        assert logits.shape == (2, 4 + 1) and value.shape == (2,)
    # agent a's decision depends on what agent b's partition looks like (the exchange)
    changed = dict(inputs)
    bx = {k: v.clone() for k, v in inputs["b"].x.items()}
    bx["gpu"][:] = 0.0
    changed["b"] = AgentInput(x=bx, parent=inputs["b"].parent, job=inputs["b"].job,
                              live=inputs["b"].live, mask=inputs["b"].mask)
    assert not torch.allclose(policy(changed)["a"][0], out["a"][0])


def test_single_agent_has_no_partner_message():
    policy = PlacementPolicy(_config(("cluster",)))
    s = {"cluster": torch.ones(2, 16)}
    assert torch.equal(policy.others_summary(s, "cluster"), torch.zeros(2, 16))


def test_config_roundtrip():
    cfg = _config(("a", "b"))
    assert PolicyConfig.from_dict(cfg.to_dict()) == cfg


def test_actor_from_cached_group_terms_equals_the_concatenated_actor():
    """``heads(..., terms=group_terms(groups))`` (inference: the group part of the actor's
    first layer once per snapshot) computes the logits of the concatenated actor to float
    rounding; the defer logit and the value do not change at all."""
    torch.manual_seed(3)
    policy = PlacementPolicy(_config(("a", "b"))).eval()
    net = policy.agents[0]
    g = 50
    groups, own, others = torch.randn(g, 16), torch.randn(16), torch.randn(16)
    mask = torch.rand(g + 1) < 0.6
    inp = AgentInput(x=None, parent=None, job=torch.randn(9 + 4), live=torch.randn(g, 15),
                     mask=mask)
    with torch.no_grad():
        want_logits, want_value = net.heads(groups, own, others, inp)
        got_logits, got_value = net.heads(groups, own, others, inp, net.group_terms(groups))
        assert torch.allclose(got_logits, want_logits, atol=1e-5, rtol=0)
        assert not torch.equal(net.group_terms(groups), torch.zeros(g, 32))
        assert torch.equal(got_logits[-1], want_logits[-1]) and torch.equal(got_value,
                                                                            want_value)
        # batched, and through ``act`` with rows picked
        batch = AgentInput(x=None, parent=None, job=torch.randn(3, 9 + 4),
                           live=torch.randn(3, g, 15), mask=torch.rand(3, g + 1) < 0.6)
        encoded = ({"a": torch.randn(5, g, 16)}, {"a": torch.randn(5, 16),
                                                   "b": torch.randn(5, 16)})
        rows = torch.tensor([4, 0, 2])
        want = policy.act("a", encoded, batch, rows=rows)
        got = policy.act("a", encoded, batch, rows=rows,
                         terms=net.group_terms(encoded[0]["a"]))
        assert torch.allclose(got.logits, want.logits, atol=1e-5, rtol=0)


def test_best_offer_of_one_observation_equals_the_masked_batch_form():
    from slurm_marl.models.policy import best_offer
    torch.manual_seed(4)
    live = torch.randn(6, 15)
    live[:, 3] = -2e4                        # below the masked form's fill value
    for valid in ([1, 0, 1, 1, 0, 0], [1] * 6, [0] * 6, [0, 0, 0, 0, 0, 1]):
        mask = torch.tensor(valid + [1], dtype=torch.bool)
        want = best_offer(live.unsqueeze(0), mask.unsqueeze(0))[0]   # batched: torch.where
        assert torch.equal(best_offer(live, mask), want), valid
