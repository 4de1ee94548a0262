"""Algorithms through the seam: time to 475 on CartPole x 8, a policy-lag stress, and rank 0's batch work.

    python bench/algorithms.py                 # all three, 5 seeds and 3 seeds
    python bench/algorithms.py --smoke         # tiny, for CI

1. Time to 475 for sync PPO, pipelined PPO (the default), async PPO, async APPO and async IMPALA,
   seeds 1..N (train.py as a user runs it; IMPALA with a learning rate and rollouts of its own, one pass per batch).
2. Policy lag: async with 6 actors and a slowed learner (16 epochs), so that rollouts are made by
   weights several versions old (`--async-ahead` 1, the default, then 4 rollouts waiting per actor);
   mean return of the last 100 episodes at a fixed budget, PPO vs APPO.
3. Rank 0's work per iteration on the same 2 rollouts of the default config: before (GAE, flattening
   and normalisation of every sample on rank 0, as the coordinator did before this seam) and after
   (rank 0 packs the slots and computes targets for its own share: all of them with 1 learner rank,
   half with 2).
"""

from __future__ import annotations

import argparse
import dataclasses
import statistics
import sys
import tempfile
import time
from pathlib import Path

from common import run_train  # bench/common.py, which also puts the repository on sys.path


def train(args: list[str], logdir: str, name: str) -> dict:
    from tests.conftest import read_scalars

    run = run_train(args, Path(logdir) / name)
    r = run.result
    lag = max(v for _, v in read_scalars(r.run_dir)["perf/policy_lag"])
    return {"wall": run.wall, "solved": r.solved, "steps": r.global_step if r.solved else None,
            "mean": float("nan") if r.mean_return is None else r.mean_return, "lag": lag}


VARIANTS = {
    "sync PPO": ["--algo", "ppo", "--mode", "sync"],
    "pipelined PPO": ["--algo", "ppo", "--mode", "pipelined"],
    "async PPO": ["--algo", "ppo", "--mode", "async"],
    "async APPO": ["--algo", "appo", "--mode", "async"],
    "async IMPALA": ["--algo", "impala", "--mode", "async", "--learning-rate", "1e-3", "--num-steps", "16",
                     "--num-minibatches", "1"],
}


def time_to_solve(seeds: int, budget: int, logdir: str, variants: dict[str, list[str]]) -> None:
    print(f"1. CartPole x 8 to 475 (budget {budget:,} agent-steps), seeds 1-{seeds}")
    for name, extra in variants.items():
        runs = [train(["--agents", "8", "--seed", str(s), "--total-steps", str(budget), *extra], logdir,
                      f"{name.replace(' ', '_')}_{s}") for s in range(1, seeds + 1)]
        solved = [r for r in runs if r["solved"]]
        walls = [r["wall"] for r in solved]
        steps = [r["steps"] for r in solved]
        text = (f"wall median {statistics.median(walls):.1f}s, agent-steps median {statistics.median(steps):,.0f}"
                if solved else f"mean return at the budget: median {statistics.median(r['mean'] for r in runs):.1f}")
        print(f"   {name:13s} solved {len(solved)}/{seeds} | {text} | policy lag max {max(r['lag'] for r in runs):.1f}",
              flush=True)


def lag_stress(seeds: int, budget: int, logdir: str, aheads: tuple[int, ...], actors: int = 6, epochs: int = 16) -> None:
    print(f"2. policy lag: async, {actors} actors, {epochs} epochs per batch, {budget:,} agent-steps, seeds 1-{seeds}")
    for ahead in aheads:
        means = {}
        for algo in ("ppo", "appo"):
            runs = [train(["--agents", "8", "--seed", str(s), "--mode", "async", "--actors", str(actors),
                           "--update-epochs", str(epochs), "--async-ahead", str(ahead), "--algo", algo, "--total-steps", str(budget),
                           "--target-return", "1000"], logdir, f"lag_{ahead}_{algo}_{s}") for s in range(1, seeds + 1)]
            means[algo] = statistics.median(r["mean"] for r in runs)
            print(f"   --async-ahead {ahead} {algo.upper():5s} mean return of the last 100: median {means[algo]:.1f} "
                  f"({', '.join(format(r['mean'], '.1f') for r in runs)}) | policy lag max {max(r['lag'] for r in runs):.1f}",
                  flush=True)
        print(f"   --async-ahead {ahead}: ratio APPO / PPO mean return: {means['appo'] / means['ppo']:.2f}")


def batch_path(repeats: int) -> None:
    import torch

    from envs import describe
    from marl.actor import RolloutWorker
    from marl.algorithms import PPO, gae
    from marl.collectives import pack, slot_bounds, slot_ranges, slots_per_rank
    from marl.config import Config
    from marl.specs import cat, tree_map
    from marl.trajectory import flatten_valid

    torch.set_num_threads(1)
    cfg = dataclasses.replace(Config(), agents=8, mode="sync")  # the sync path the seam moved (no `after` rows)
    info = describe(cfg.env, 8)
    workers = [RolloutWorker(cfg, info, i) for i in range(cfg.actors)]
    weights = workers[0].policy.state_dict()
    rollouts = [w.collect(0, weights).trajectories for w in workers]

    def before() -> None:  # the coordinator's build_batch before the seam: every sample on rank 0
        parts = []
        for r in rollouts:
            tr = r["shared"]
            adv, ret = gae(tr["rewards"], tr["values"], tr["next_value"], tr["terminated"], tr["truncated"],
                           tr["bootstrap_value"], cfg.gamma, cfg.gae_lambda)
            parts.append(flatten_valid(tr, adv, ret))
        batch = cat(parts)
        a = batch["advantages"]
        batch["advantages"] = (a - a.mean()) / (a.std() + 1e-8)

    def after(ranks: int) -> None:  # rank 0 now: pack every slot, then the targets of its own share
        bounds = slot_bounds([r["shared"]["valid"].shape[1] for r in rollouts])
        per_rank = slots_per_rank(bounds, ranks)
        packed = pack([r["shared"] for r in rollouts], per_rank * ranks)
        own = tree_map(lambda v: v[:, :per_rank] if v.dim() >= 3 else v[:per_rank], packed)
        adv, ret = PPO(cfg).targets(own)
        cat([flatten_valid(tree_map(lambda v: v[:, a:b], own), adv[:, a:b], ret[:, a:b])
             for a, b in slot_ranges(bounds, 0, per_rank)])

    def best(fn) -> float:
        times = []
        for _ in range(repeats):
            t = time.perf_counter()
            fn()
            times.append(time.perf_counter() - t)
        return min(times) * 1e3

    old, one, two = best(before), best(lambda: after(1)), best(lambda: after(2))
    samples = sum(int(r["shared"]["valid"].sum()) for r in rollouts)
    print(f"3. rank 0's batch work per iteration, default config ({samples:,} samples), best of {repeats}")
    print(f"   before (all targets on rank 0)   {old:6.2f} ms")
    print(f"   after, 1 learner rank             {one:6.2f} ms   ratio after / before: {one / old:.2f}")
    print(f"   after, 2 learner ranks (rank 0)   {two:6.2f} ms   ratio after / before: {two / old:.2f}")


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--seeds", type=int, default=5)
    p.add_argument("--lag-seeds", type=int, default=3)
    p.add_argument("--smoke", action="store_true", help="tiny budgets, one seed, one variant of each "
                   "part, the stress with 2 actors and 2 epochs: that every part runs")
    p.add_argument("--parts", default="solve,lag,batch", help="which of the three parts to run")
    args = p.parse_args()
    budget, lag_budget, repeats = (3_000, 3_000, 3) if args.smoke else (500_000, 300_000, 50)
    seeds, lag_seeds = (1, 1) if args.smoke else (args.seeds, args.lag_seeds)
    parts = args.parts.split(",")
    with tempfile.TemporaryDirectory() as logdir:
        # The smoke runs one variant of each part (the one with the most flags of its own), and the stress with 2
        # actors and 2 epochs (each actor a process to start: the flags are the same, only the load is lighter):
        # that the code runs.
        if "solve" in parts:
            time_to_solve(seeds, budget, logdir, {k: v for k, v in VARIANTS.items() if k == "async IMPALA" or not args.smoke})
        if "lag" in parts:
            if args.smoke:
                lag_stress(lag_seeds, lag_budget, logdir, (4,), actors=2, epochs=2)
            else:
                lag_stress(lag_seeds, lag_budget, logdir, (1, 4))
    if "batch" in parts:
        batch_path(repeats)
    return 0


if __name__ == "__main__":
    sys.exit(main())
