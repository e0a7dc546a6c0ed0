"""The PyG encoder computes the function of the hand-made scatter code it replaced, with the
same parameters: the shipped checkpoint loads unchanged and gives the same embeddings (and
gradients) as a plain-torch reference of the old code, on real featurised topologies."""

import pytest
import torch

from slurm_marl.agent.checkpoint import LearnedCheckpoint, shipped_checkpoint
from slurm_marl.models.gnn import LEVELS, HierarchicalEncoder, mean_by_parent, squash
from slurm_marl.agent.observe import Observer
from slurm_marl.models.policy import PlacementPolicy
from slurm_marl.sim.cluster import parse_cluster

from models_helpers import snapshot_with


def reference_mean(h, parent, n_parent):
    """The old ``mean_by_parent``: ``index_add_`` over the parent index / child counts."""
    shape = list(h.shape)
    shape[-2] = n_parent
    out = h.new_zeros(shape).index_add_(h.dim() - 2, parent, h)
    counts = torch.bincount(parent, minlength=n_parent).clamp_min(1).to(h.dtype)
    return out / counts.unsqueeze(-1)


def reference_forward(enc: HierarchicalEncoder, x, parent):
    """The hand-made encoder's forward before PyG, on ``enc``'s own modules."""
    h, below = {}, None
    for i, level in enumerate(LEVELS):
        feats = squash(x[level])
        if i > 0:
            pooled = reference_mean(below, parent[LEVELS[i - 1]], feats.shape[-2])
            feats = torch.cat([feats, pooled], dim=-1)
        h[level] = torch.relu(enc.up[level](feats))
        below = h[level]
    for level, upper in (("leaf", "spine"), ("node", "leaf"), ("gpu_group", "node")):
        context = h[upper].index_select(h[upper].dim() - 2, parent[level])
        h[level] = h[level] + enc.down[level](torch.cat([h[level], context], dim=-1))
    return h


@pytest.fixture(scope="module")
def demo():
    return LearnedCheckpoint.load(shipped_checkpoint())


def observed(ckpt, spec, running):
    """(x, parent) of the checkpoint's one agent ("gpu") on cluster ``spec``."""
    snap = snapshot_with(parse_cluster(spec), running=running)
    observer = Observer(ckpt.interference, ckpt.config.agents)
    cyc = observer.cycle(snap)
    return cyc.x["gpu"], observer.topology.views["gpu"].parent


BUSY_DEMO = [(1, "lm_bs32", (("gpu01", (0, 1, 2)),)),
             (2, "resnet50_bs32", (("gpu02", (0,)), ("gpu03", (0, 1)))),
             (3, "a3c", (("gpu02", (1,)),))]
BUSY_BIG = [(1, "lm_bs32", (("gpu01", tuple(range(8))), ("gpu09", tuple(range(8))))),
            (2, "resnet18_bs32", (("gpu05", (0, 1, 4)),)),
            (3, "transformer", (("gpu17", (2,)), ("gpu18", (6,)))),
            (4, "cyclegan", (("gpu24", (7,)),))]
CASES = [("4x2x2:name=gpu", BUSY_DEMO),            # the checkpoint's own cluster
         ("24x2x4:leaf=8:name=gpu", BUSY_BIG)]      # 3 leaves, 192 GPUs


def test_demo_checkpoint_parameters_are_the_encoders(demo):
    """Same state_dict keys and shapes: the shipped weights load strictly into a fresh
    policy, and the PyG encoder adds no parameter or buffer."""
    from slurm_marl.models.interference import load_state_dict, model_paths
    pt, _ = model_paths(shipped_checkpoint(), "policy")
    saved = {k[len("policy."):]: v for k, v in load_state_dict(pt).items()
             if k.startswith("policy.")}
    fresh = PlacementPolicy(demo.config).state_dict()
    assert {k: tuple(v.shape) for k, v in fresh.items()} == \
        {k: tuple(v.shape) for k, v in saved.items()}
    enc = demo.policy.agents[0].encoder
    assert all(k.startswith(("up.", "down.")) for k in enc.state_dict())
    for k, v in enc.state_dict().items():
        assert torch.equal(v, saved[f"agents.0.encoder.{k}"])


@pytest.mark.parametrize("spec,running", CASES)
def test_pyg_encoder_equals_the_hand_made_one_on_the_demo_checkpoint(demo, spec, running):
    enc = demo.policy.agents[0].encoder
    x, parent = observed(demo, spec, running)
    idle, _ = observed(demo, spec, ())
    with torch.no_grad():
        new, ref = enc(x, parent), reference_forward(enc, x, parent)
        for level in LEVELS:
            assert new[level].shape == (x[level].shape[0], enc.hidden)
            assert torch.allclose(new[level], ref[level], atol=1e-6, rtol=1e-5), level
        # a batch (busy, idle, busy) takes the batched path: same rows as one at a time
        batch = {lvl: torch.stack([x[lvl], idle[lvl], x[lvl]]) for lvl in LEVELS}
        new_b, ref_b = enc(batch, parent), reference_forward(enc, batch, parent)
        for level in LEVELS:
            assert torch.allclose(new_b[level], ref_b[level], atol=1e-6, rtol=1e-5), level
            assert torch.allclose(new_b[level][0], new[level], atol=1e-6, rtol=1e-5), level
    assert not torch.allclose(new_b["gpu_group"][1], new_b["gpu_group"][0])


def test_gradients_equal_the_hand_made_ones(demo):
    """Training backpropagates through the encoder: same parameter gradients."""
    enc = demo.policy.agents[0].encoder
    spec, running = CASES[1]
    x, parent = observed(demo, spec, running)
    batch = {lvl: torch.stack([x[lvl], 0.5 * x[lvl]]) for lvl in LEVELS}
    grads = []
    for forward in (enc, lambda xx, pp: reference_forward(enc, xx, pp)):
        enc.zero_grad()
        h = forward(batch, parent)
        (h["gpu_group"].square().sum() + h["node"].mean(-2).sum()).backward()
        grads.append({k: p.grad.clone() for k, p in enc.named_parameters()})
    enc.zero_grad()
    for k in grads[0]:
        assert torch.allclose(grads[0][k], grads[1][k], atol=1e-5, rtol=1e-4), k


def test_mean_by_parent_two_and_four_dims():
    h = torch.randn(3, 2, 5, 4)
    parent = torch.tensor([1, 1, 0, 3, 1])
    out = mean_by_parent(h, parent, 4)
    assert out.shape == (3, 2, 4, 4)
    assert torch.allclose(out, reference_mean(h, parent, 4), atol=1e-6)
    assert torch.equal(out[..., 2, :], torch.zeros(3, 2, 4))   # no children
    flat = mean_by_parent(h[1, 0], parent, 4)
    assert flat.shape == (4, 4)
    assert torch.allclose(flat, out[1, 0], atol=1e-6)
