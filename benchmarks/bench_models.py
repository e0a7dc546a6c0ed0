"""Inference and training cost of the learned placement models.

Measures, on one core (``torch.set_num_threads(1)``), with untrained weights (cost does not
depend on the weights):

* per-cycle encoding at 2,000 nodes / 16,000 GPUs and 10,000 nodes / 80,000 GPUs: the
  topology featuriser, family counts and the hierarchical GNN of every partition agent;
* per-job placement decision at 2,000 nodes / 16,000 GPUs: candidates, observation (with the
  interference model's what-if predictions) and the actor head, given the cycle's encoding;
  plus one whole ``run_cycle`` with one pending job;
* training: one PPO minibatch update (128 decisions) and one environment step on the
  64-GPU, 2-partition evaluation cluster.

Run: ``python benchmarks/bench_models.py`` (``--quick`` skips the 10,000-node case).

``--encoder-vs REV`` instead measures the hierarchical encoder of this checkout against the
one of ``src/slurm_marl/models/gnn.py`` at git revision ``REV`` (loaded with ``git show``),
with the same weights, side by side: forward (inference) and forward + backward (training)
at 2,000 and 10,000 nodes, and at the PPO minibatch shape (the 64-GPU training cluster,
batch 128), old and new alternating, several rounds; it checks first that both give the
same embeddings.
"""

from __future__ import annotations

import argparse
import random
import statistics
import subprocess
import sys
import time
import types
from dataclasses import replace
from pathlib import Path

import torch

from slurm_marl.domain import Job, JobState
from slurm_marl.agent.checkpoint import LearnedCheckpoint, policy_config
from slurm_marl.models.interference import InterferenceModel, Vocabulary
from slurm_marl.agent.observe import Observer
from slurm_marl.models.policy import PlacementPolicy
from slurm_marl.policy.framework import Policy, build_policy
from slurm_marl.agent.choice import ModelChooser
from slurm_marl.policy.plugins import build_plugin
from slurm_marl.policy.profile import load_profile
from slurm_marl.policy.state import CycleState
from slurm_marl.topology.synthetic import synthetic_snapshot

FAMILIES = ("resnet18", "resnet50", "lm", "transformer", "recommendation", "a3c", "cyclegan")


def timed(fn, repeat: int) -> tuple[float, object]:
    """Median wall time in ms over ``repeat`` runs (after one warm-up), and the last result."""
    out = fn()
    times = []
    for _ in range(repeat):
        t0 = time.perf_counter()
        out = fn()
        times.append((time.perf_counter() - t0) * 1000)
    return statistics.median(times), out


def cluster_snapshot(n_nodes: int, seed: int = 0):
    snap = synthetic_snapshot(n_nodes, busy_fraction=0.5, seed=seed, gpus_per_node=8,
                              sockets=2, nodes_per_leaf=40, leaves_per_spine=25,
                              partitions=2)
    rng = random.Random(seed)
    jobs = tuple(replace(j, model_type=f"{rng.choice(FAMILIES)}_bs32") for j in snap.jobs)
    return replace(snap, jobs=jobs)


def model_parts(agents=("p0", "p1")):
    torch.manual_seed(0)
    interference = InterferenceModel.new(Vocabulary.fit(FAMILIES))
    policy = PlacementPolicy(policy_config(interference, agents, "multi")).eval()
    return LearnedCheckpoint(policy, interference)


def bench_encoding(n_nodes: int, repeat: int) -> dict:
    snap = cluster_snapshot(n_nodes)
    ckpt = model_parts()
    observer = Observer(ckpt.interference, ckpt.config.agents)
    t0 = time.perf_counter()
    observer.cycle(snap)
    build_ms = (time.perf_counter() - t0) * 1000
    top = observer.topology

    def featurise():
        observer._cycle = None
        return observer.cycle(snap)

    feat_ms, cyc = timed(featurise, repeat)
    chooser = ModelChooser(ckpt, observer)

    def encode():
        with torch.no_grad():
            from slurm_marl.models.policy import AgentInput
            return ckpt.policy.encode({name: AgentInput(x=cyc.x[name],
                                                        parent=top.views[name].parent,
                                                        job=None, live=None, mask=None)
                                       for name in top.views})

    gnn_ms, _ = timed(encode, repeat)
    incr_ms = incremental_ms(observer, snap, changed=10, repeat=repeat)
    return {"nodes": n_nodes, "gpus": top.index.sizes["gpu"],
            "groups": top.n_groups, "topology_build_ms": round(build_ms, 1),
            "featurise_full_ms": round(feat_ms, 2),
            "featurise_10_changed_nodes_ms": round(incr_ms, 2),
            "gnn_encode_ms": round(gnn_ms, 2),
            "cycle_encoding_full_ms": round(feat_ms + gnn_ms, 2),
            "cycle_encoding_incremental_ms": round(incr_ms + gnn_ms, 2), "_chooser": chooser,
            "_observer": observer, "_snap": snap, "_ckpt": ckpt}


def incremental_ms(observer: Observer, snap, changed: int, repeat: int) -> float:
    """A cycle where ``changed`` nodes differ from the previous snapshot (a job ended on
    each): only those are re-featurised. The cycle state's co-location index is the
    framework's (built for any interference-aware plugin) and is built before timing."""
    nodes = list(snap.nodes)
    busy = [k for k, n in enumerate(nodes) if n.used_gpu_indices][:changed]
    freed = set()
    for k in busy:
        nodes[k] = replace(nodes[k], used_gpu_indices=frozenset(), alloc_cpus=0,
                           alloc_memory_mib=0)
        freed.add(nodes[k].name)
    jobs = tuple(j for j in snap.jobs if not freed & {name for name, _ in j.gpu_alloc})
    after = replace(snap, nodes=tuple(nodes), jobs=jobs)
    times = []
    for _ in range(repeat):
        observer._cycle = None
        base_state = CycleState(snap, track_colocation=True)
        observer.cycle(snap, base_state)
        state = CycleState(after, track_colocation=True)
        state.colocated  # noqa: B018 - the framework's index, built on first use
        t0 = time.perf_counter()
        cyc = observer.cycle(after, state)
        times.append((time.perf_counter() - t0) * 1000)
        assert cyc.incremental_nodes == len(busy)
    return statistics.median(times)


def bench_decision(enc: dict, repeat: int) -> list[dict]:
    snap, observer, chooser = enc["_snap"], enc["_observer"], enc["_chooser"]
    out = []
    for gpus in (1, 4, 8, 16):
        job = Job(job_id=10_000_000 + gpus, partition="p0", gpus_per_job=gpus, cpus=gpus,
                  model_type="lm_bs20", submit_time_s=0.0, state=JobState.PENDING)
        snap_j = replace(snap, jobs=snap.jobs + (job,))
        state = CycleState(snap_j, track_colocation=True)
        state.dedupe_nodes = False   # the learned plugin scores every group
        observer.cycle(snap_j)
        chooser._embed(state)        # once per cycle, measured above

        def decide():
            obs = observer.observe(job, state)
            return obs, chooser(obs, state)

        ms, (obs, choice) = timed(decide, repeat)
        out.append({"job_gpus": gpus, "decision_ms": round(ms, 2),
                    "valid_groups": len(obs.valid_groups()),
                    "multi_group_candidates": len(set(obs.multi.values())),
                    "defer": choice.defer})
    return out


def bench_run_cycle(enc: dict, repeat: int) -> dict:
    snap, ckpt = enc["_snap"], enc["_ckpt"]
    job = Job(job_id=20_000_000, partition="p1", gpus_per_job=1, cpus=1, model_type="lm",
              submit_time_s=0.0)
    snap_j = replace(snap, jobs=snap.jobs + (job,))
    profile = replace(load_profile("las-consolidate"), place=(("learned", 1.0),))
    plugin = build_plugin("place", "learned", {}, learned_checkpoint=ckpt)
    order = build_plugin("order", profile.order, profile.order_params)
    policy = Policy(profile, order, [(plugin, 1.0)])
    baseline = build_policy(load_profile("las-consolidate"))
    learned_ms, _ = timed(lambda: policy.run_cycle(snap_j), max(3, repeat // 4))
    base_ms, _ = timed(lambda: baseline.run_cycle(snap_j), max(3, repeat // 4))
    return {"run_cycle_learned_ms": round(learned_ms, 1),
            "run_cycle_consolidate_ms": round(base_ms, 1)}


def bench_training(repeat: int) -> dict:
    from slurm_marl.sim.cluster import parse_cluster
    from slurm_marl.sim.traces import TraceJob
    from slurm_marl.train.env import PlacementEnv
    from slurm_marl.train.ppo import PPOConfig, compute_gae, ppo_update, rollout
    cluster = parse_cluster("4x2x4:leaf=2:name=a+4x2x4:leaf=2:name=b")
    rng = random.Random(0)
    jobs, t = [], 0.0
    for i in range(150):
        t += rng.expovariate(1 / 120)
        jobs.append(TraceJob(i, t, rng.lognormvariate(8, 1), rng.choice((1, 1, 1, 2, 4, 8)),
                             f"{rng.choice(FAMILIES)}_bs32", partition="ab"[i % 2]))
    ckpt = model_parts(("a", "b"))
    env = PlacementEnv(cluster, [jobs], ckpt.interference, seed=0)
    cfg = PPOConfig(epochs=1, minibatch=128)
    gen = torch.Generator().manual_seed(0)
    t0 = time.perf_counter()
    transitions, stats = rollout(ckpt.policy, env, 1, 0.1, gen, rng, 0)
    rollout_s = time.perf_counter() - t0
    compute_gae(transitions, cfg.gamma, cfg.gae_lambda)
    opt = torch.optim.Adam(ckpt.policy.parameters(), lr=3e-4)
    ckpt.policy.train()
    batch = transitions[:128]
    update_ms, _ = timed(lambda: ppo_update(ckpt.policy, env, opt, batch, cfg, gen), repeat)
    env.close()
    return {"cluster": cluster.spec, "env_steps_per_episode": len(transitions),
            "env_step_with_action_ms": round(rollout_s / len(transitions) * 1000, 2),
            "ppo_minibatch_update_ms (128 decisions)": round(update_ms, 1)}


def encoder_module_at(rev: str) -> types.ModuleType:
    """``slurm_marl.models.gnn`` as it was at git revision ``rev``."""
    root = Path(__file__).resolve().parent.parent
    source = subprocess.run(["git", "-C", str(root), "show",
                             f"{rev}:src/slurm_marl/models/gnn.py"],
                            capture_output=True, text=True, check=True).stdout
    module = types.ModuleType(f"gnn_at_{rev}")
    exec(compile(source, f"{rev}:src/slurm_marl/models/gnn.py", "exec"), module.__dict__)
    return module


def _encoder_inputs(snap, agents, batch: int = 0):
    """(new encoders of an untrained policy, [(x, parent)] per agent) for ``snap``."""
    ckpt = model_parts(agents)
    observer = Observer(ckpt.interference, ckpt.config.agents)
    cyc = observer.cycle(snap)
    top = observer.topology
    data = []
    for name in top.views:
        x = cyc.x[name]
        if batch:
            x = {lvl: torch.stack([v] * batch) for lvl, v in x.items()}
        data.append((x, top.views[name].parent))
    return [agent.encoder for agent in ckpt.policy.agents], data


def bench_encoder_vs(rev: str, cases, rounds: int, inner: int = 5) -> list[dict]:
    """Old (``rev``) vs new encoder, same weights: per case and mode the median over
    ``rounds`` of the fastest of ``inner`` calls, old and new alternating (the order flips
    every round)."""
    old_module = encoder_module_at(rev)
    rows = []
    for label, snap, agents, batch in cases:
        new, data = _encoder_inputs(snap, agents, batch)
        old = []
        for enc in new:
            o = old_module.HierarchicalEncoder(enc.dims, enc.hidden)
            o.load_state_dict(enc.state_dict())          # strict: same keys and shapes
            old.append(o)
        with torch.no_grad():
            for o, n, (x, parent) in zip(old, new, data):
                a, b = o(x, parent), n(x, parent)
                for lvl in a:
                    assert torch.allclose(a[lvl], b[lvl], atol=1e-6), (label, lvl)

        def forward(encoders):
            with torch.no_grad():
                for enc, (x, parent) in zip(encoders, data):
                    enc(x, parent)

        def forward_backward(encoders):
            loss = 0.0
            for enc, (x, parent) in zip(encoders, data):
                h = enc(x, parent)
                loss = loss + h["gpu_group"].sum() + h["node"].sum()
            loss.backward()

        for mode, fn in (("forward", forward), ("forward+backward", forward_backward)):
            times: dict[str, list[float]] = {"old": [], "new": []}
            for r in range(rounds):
                for which in (("old", "new") if r % 2 == 0 else ("new", "old")):
                    encoders = old if which == "old" else new
                    fn(encoders)                                    # warm-up
                    best = float("inf")
                    for _ in range(inner):
                        t0 = time.perf_counter()
                        fn(encoders)
                        best = min(best, time.perf_counter() - t0)
                    times[which].append(best * 1000)
            o_ms, n_ms = statistics.median(times["old"]), statistics.median(times["new"])
            ratios = [n / o for o, n in zip(times["old"], times["new"])]
            rows.append({"case": label, "mode": mode, "old_ms": round(o_ms, 2),
                         "new_ms": round(n_ms, 2), "new/old": round(n_ms / o_ms, 3),
                         "per_round_new/old": f"{min(ratios):.2f}-{max(ratios):.2f}"})
    return rows


def encoder_cases(quick: bool):
    """(label, snapshot, agents, batch): the two cluster sizes of ``bench_encoding`` with
    one observation (inference), and the PPO minibatch shape: 8 nodes x 8 GPUs in two
    partitions (shaped like ``bench_training``'s cluster), 128 observations."""
    cases = [("2,000 nodes", cluster_snapshot(2000), ("p0", "p1"), 0)]
    if not quick:
        cases.append(("10,000 nodes", cluster_snapshot(10_000), ("p0", "p1"), 0))
    small = synthetic_snapshot(8, busy_fraction=0.5, seed=0, gpus_per_node=8, sockets=2,
                               nodes_per_leaf=2, leaves_per_spine=2, partitions=2)
    cases.append(("64 GPUs x batch 128", small, ("p0", "p1"), 128))
    return cases


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="skip 10,000 nodes")
    parser.add_argument("--repeat", type=int, default=20)
    parser.add_argument("--encoder-vs", metavar="REV",
                        help="only compare the encoder with gnn.py at git revision REV")
    parser.add_argument("--rounds", type=int, default=6,
                        help="--encoder-vs: alternating rounds per case and mode")
    args = parser.parse_args(argv)
    torch.set_num_threads(1)
    print(f"torch {torch.__version__}, threads {torch.get_num_threads()}")
    if args.encoder_vs:
        cases = encoder_cases(args.quick)
        for row in bench_encoder_vs(args.encoder_vs, cases, args.rounds):
            print(row)
        return 0
    enc = bench_encoding(2000, args.repeat)
    print({k: v for k, v in enc.items() if not k.startswith("_")})
    for row in bench_decision(enc, args.repeat):
        print(row)
    print(bench_run_cycle(enc, args.repeat))
    if not args.quick:
        big = bench_encoding(10_000, max(5, args.repeat // 4))
        print({k: v for k, v in big.items() if not k.startswith("_")})
    print(bench_training(max(3, args.repeat // 4)))
    return 0


if __name__ == "__main__":
    sys.exit(main())
