"""Memory results: recurrent cores on a task only memory solves, and what they cost.

Parts:
- novel: `envs:CartPoleNoVel-v1` (CartPole with the velocities hidden), `--core gru`, `lstm` and
  `none`, seeds 1..N, the settings of tests/test_train_recurrent.py, each run until the mean return
  of the last 100 episodes reaches 475 or the budget runs out. Prints the step each run solved at,
  or its final return.
- speed: agent-steps per second of one actor's collection and of one learner rank's update, with
  a GRU and an LSTM core against the same run with `--core none`, measured in this process one
  after another (1 thread each), as ratios to `none`. On the CartPoleNoVel settings and on the
  coop_nav MAPPO config (configs/coop_nav.toml).

    python bench/recurrent.py                       # both parts, 5 seeds
    python bench/recurrent.py --parts speed
    python bench/recurrent.py --smoke               # CI: a tiny budget, 1 seed, short timings of short rollouts
"""

from __future__ import annotations

import argparse
import sys
import tempfile
import time
from pathlib import Path

from common import ROOT, run_train  # bench/common.py, which also puts the repository on sys.path

NOVEL = ["--env", "envs:CartPoleNoVel-v1", "--agents", "8", "--seq-len", "16", "--learning-rate", "1e-3", "--norm-obs",
         "--norm-reward"]
CORES = ("gru", "lstm", "none")


def novel(seeds: int, budget: int | None, logdir: str) -> None:
    results: dict[str, list[str]] = {core: [] for core in CORES}
    for core in CORES:
        for seed in range(1, seeds + 1):
            args = [*NOVEL, "--core", core, "--seed", str(seed), *(["--total-steps", str(budget)] if budget else [])]
            r = run_train(args, Path(logdir) / f"novel-{core}-{seed}").result
            mean = "?" if r.mean_return is None else f"{r.mean_return:.1f}"
            results[core].append(f"solved at {r.global_step:,}" if r.solved else f"not solved ({mean})")
            print(f"novel --core {core} seed {seed}: {results[core][-1]}", flush=True)
    for core, r in results.items():
        print(f"novel --core {core}: solved {sum(x.startswith('solved') for x in r)}/{len(r)} | " + " | ".join(r), flush=True)


def speed(repeats: int, smoke: bool = False) -> None:
    import dataclasses
    import os

    import torch
    import torch.distributed as dist

    from envs import describe
    from marl.actor import RolloutWorker
    from marl.config import Config, load_toml
    from marl.learner import Learner

    torch.set_num_threads(1)
    os.environ.setdefault("GLOO_SOCKET_IFNAME", "lo")
    dist.init_process_group("gloo", init_method=f"file://{tempfile.mktemp()}", rank=0, world_size=1)
    cases = {
        "CartPoleNoVel x 8, seq-len 16": dict(env="envs:CartPoleNoVel-v1", agents=8, seq_len=16, learning_rate=1e-3),
        "coop_nav MAPPO config": dict(load_toml(str(ROOT / "configs/coop_nav.toml")), agents=3),
    }
    for case, overrides in list(cases.items())[:1 if smoke else None]:
        rates = {}
        for core in CORES:
            cfg = dataclasses.replace(Config(**overrides), core=core)
            if smoke:  # one sequence of --seq-len per env slot: the recurrent cores' update is the slow part
                cfg = dataclasses.replace(cfg, num_steps=cfg.seq_len)
            info = describe(cfg.env, cfg.agents, cfg.env_kwargs)
            worker = RolloutWorker(cfg, info, 0)
            learner = Learner(cfg, info, dist.group.WORLD, torch.device("cpu"))
            weights = learner.full_state_dict()
            rollout = worker.collect(0, weights)  # warm-up
            learner.update(rollout.trajectories, 0, [(0, cfg.envs_per_actor)])
            collect = train = 0.0
            steps = 0
            for _ in range(repeats):
                t = time.perf_counter()
                rollout = worker.collect(0, None)
                collect += time.perf_counter() - t
                t = time.perf_counter()
                learner.update(rollout.trajectories, 0, [(0, cfg.envs_per_actor)])
                train += time.perf_counter() - t
                steps += rollout.steps
            rates[core] = (steps / collect, steps / train)
            worker.env.close()
        base = rates["none"]
        for core, (c, t) in rates.items():
            print(f"speed {case} --core {core}: collect {c:,.0f} agent-steps/s ({c / base[0]:.2f}x none) | "
                  f"train {t:,.0f} agent-steps/s ({t / base[1]:.2f}x none)", flush=True)
    dist.destroy_process_group()


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--parts", default="novel,speed", help="comma-separated, from novel, speed")
    p.add_argument("--seeds", type=int, default=5)
    p.add_argument("--budget", type=int, default=None, help="agent-steps per run (default: train.py's)")
    p.add_argument("--repeats", type=int, default=5, help="rollouts and updates timed per core")
    p.add_argument("--smoke", action="store_true", help="one seed and a tiny budget; speed: the first "
                   "case, one repeat, rollouts one --seq-len long: that it runs, not its numbers")
    args = p.parse_args()
    if args.smoke:
        args.seeds, args.budget, args.repeats = 1, 5_000, 1
    parts = args.parts.split(",")
    with tempfile.TemporaryDirectory() as logdir:
        if "novel" in parts:
            novel(args.seeds, args.budget, logdir)
        if "speed" in parts:
            speed(args.repeats, args.smoke)
    return 0


if __name__ == "__main__":
    sys.exit(main())
