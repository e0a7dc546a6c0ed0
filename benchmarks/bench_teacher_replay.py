"""A heuristic's own decisions, replayed through the learned plugin's mechanics.

The training environment labels every decision with what its teacher profile (default
``las-lif``) would do; playing exactly those labels as the agent's actions shows what the
learned plugin's rules (what-if answers, defer bounds, standing deferrals) cost a policy
that decides like the teacher. If this replay is far from the teacher's own JCT, no amount
of imitation can reach the teacher. docs/benchmarks.md (learned placement, 2.1).

    .venv/bin/python benchmarks/bench_teacher_replay.py --reward-model /tmp/lr/im \\
        --window vc=0e4a51,rows=0:800 [--max-defer-s 0] [--interference high]
"""

from __future__ import annotations

import argparse
import json
import time

import torch


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--reward-model", required=True)
    ap.add_argument("--trace", default=None, help="default: the bundled Philly trace")
    ap.add_argument("--window", required=True)
    ap.add_argument("--cluster", default="4x2x4:leaf=2:name=a+4x2x4:leaf=2:name=b")
    ap.add_argument("--interference", default="high")
    ap.add_argument("--teacher", default="las-lif")
    ap.add_argument("--max-defer-s", type=float, default=0.0)
    ap.add_argument("--seed", type=int, default=0)
    args = ap.parse_args()
    torch.set_num_threads(1)

    from slurm_marl.models.interference import InterferenceModel
    from slurm_marl.policy.profile import load_profile
    from slurm_marl.sim.run import simulate
    from slurm_marl.train.cli import load_cluster_and_jobs
    from slurm_marl.train.env import PlacementEnv
    from slurm_marl.train.acting import run_episodes
    from slurm_marl.shared_data import data_file

    args.trace = args.trace or str(data_file("traces/philly.csv"))
    model = InterferenceModel.load(args.reward_model)
    cluster, (jobs,) = load_cluster_and_jobs(args.trace, [args.window], args.cluster)
    env = PlacementEnv(cluster, [jobs], model, strength=args.interference,
                       teacher=args.teacher, max_defer_s=args.max_defer_s)

    def teacher(infos: dict) -> int:
        active = next(a for a, i in infos.items() if i["active"])
        return infos[active]["teacher_action"]

    t0 = time.perf_counter()
    replay = run_episodes(env, teacher, [0], seed=args.seed)
    replay_s = time.perf_counter() - t0
    env.close()
    t0 = time.perf_counter()
    own = simulate(jobs, cluster, load_profile(args.teacher), interference=args.interference,
                   seed=args.seed, drop_oversized=True).summary
    own_s = time.perf_counter() - t0
    print(json.dumps({
        "window": args.window, "interference": args.interference, "teacher": args.teacher,
        "max_defer_s": args.max_defer_s,
        "teacher_avg_jct_s": own["avg_jct_s"],
        "replay_avg_jct_s": round(replay["avg_jct_s"], 1),
        "replay_vs_teacher": round(replay["avg_jct_s"] / own["avg_jct_s"] - 1, 4),
        "replay_decisions": replay["decisions"], "replay_defer_rate":
            round(replay["defer_rate"], 4),
        "wall_s": {"replay": round(replay_s, 1), "teacher": round(own_s, 1)}}, indent=2))


if __name__ == "__main__":
    main()
