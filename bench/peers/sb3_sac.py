"""Stable-Baselines3's SAC on one Gymnasium task, for bench/off_policy.py's side by side. Run it with
the python of a venv that has `stable-baselines3==2.9.2` and `gymnasium[mujoco]` (never marl's):

    python3 -m venv ~/sb3 && ~/sb3/bin/pip install torch==2.13.0 stable-baselines3==2.9.2 'gymnasium[mujoco]'
    ~/sb3/bin/python bench/peers/sb3_sac.py --env HalfCheetah-v5 --steps 300000 --seed 1

It imports nothing of marl. Settings: SB3's defaults, which are rl-baselines3-zoo's for the MuJoCo
tasks (256-256 ReLU networks, lr 3e-4, batch 256, buffer 1e6, tau 0.005, gamma 0.99, a gradient step
per env step, the entropy tuned to -dim(A)), with `learning_starts` as given. Prints one JSON line:
the training episodes' returns at the end, the deterministic evaluation of the final policy, the
wall time of learn() and the steps and updates per second.
"""

from __future__ import annotations

import argparse
import json
import time

import gymnasium as gym
import numpy as np
import torch
from stable_baselines3 import SAC
from stable_baselines3.common.monitor import Monitor


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--env", default="HalfCheetah-v5")
    p.add_argument("--steps", type=int, default=300_000)
    p.add_argument("--seed", type=int, default=1)
    p.add_argument("--learning-starts", type=int, default=10_000)
    p.add_argument("--learning-rate", type=float, default=3e-4)
    p.add_argument("--eval-episodes", type=int, default=10)
    args = p.parse_args()
    torch.set_num_threads(1)  # as marl's learner: one thread per process on a shared machine
    env = Monitor(gym.make(args.env))
    model = SAC("MlpPolicy", env, learning_starts=args.learning_starts, learning_rate=args.learning_rate,
                seed=args.seed, device="cpu", verbose=0)
    start = time.perf_counter()
    model.learn(total_timesteps=args.steps)
    wall = time.perf_counter() - start
    returns = env.get_episode_rewards()
    test = gym.make(args.env)
    greedy = []
    for i in range(args.eval_episodes):
        obs, _ = test.reset(seed=10_000 + i)
        done, total = False, 0.0
        while not done:
            action, _ = model.predict(obs, deterministic=True)
            obs, r, term, trunc, _ = test.step(action)
            total += float(r)
            done = term or trunc
        greedy.append(total)
    updates = max(args.steps - args.learning_starts, 0)
    print(json.dumps({"program": "sb3", "env": args.env, "seed": args.seed, "steps": args.steps, "wall": wall,
                      "episodes": len(returns), "last10": float(np.mean(returns[-10:])) if returns else None,
                      "greedy": float(np.mean(greedy)), "steps_per_s": args.steps / wall, "updates_per_s": updates / wall}))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
