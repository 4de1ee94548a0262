"""rl-baselines3-zoo's tuned PPO on CartPole-v1, timed to a 100-episode mean of 475, for
bench/time_to_solve.py --against-sb3. Run it with the python of a venv that has
`stable-baselines3==2.9.2` (never marl's):

    python3 -m venv ~/sb3 && ~/sb3/bin/pip install torch==2.13.0 stable-baselines3==2.9.2 gymnasium
    ~/sb3/bin/python bench/peers/sb3_ppo_cartpole.py --seed 1

It imports nothing of marl. Settings: the zoo's hyperparams/ppo.yml entry for CartPole-v1 (8 envs,
n_steps 32, batch 256, 20 epochs, gamma 0.98, GAE lambda 0.8, no entropy bonus, learning rate and
clip range decaying linearly from 1e-3 and 0.2 over its 1e5 steps). The clock starts when learn()
does (imports, env and model construction not counted, in SB3's favour) and stops at the rollout
whose end brings the last 100 finished episodes' mean to 475. Prints one JSON line.
"""

from __future__ import annotations

import argparse
import json
import time

import numpy as np
import torch
from stable_baselines3 import PPO
from stable_baselines3.common.callbacks import BaseCallback
from stable_baselines3.common.env_util import make_vec_env


class StopAtTarget(BaseCallback):
    """Stops learn() once the last 100 episodes' mean return reaches the target; notes when and where."""

    def __init__(self, target: float):
        super().__init__()
        self.target, self.start, self.solved_at = target, 0.0, None

    def _on_training_start(self) -> None:
        self.start = time.perf_counter()

    def _on_step(self) -> bool:
        return self.solved_at is None  # False ends learn() (at the first step after the solving rollout)

    def _on_rollout_end(self) -> None:
        buf = self.model.ep_info_buffer  # the last 100 finished episodes, as SB3's own rollout/ep_rew_mean
        if self.solved_at is None and len(buf) == buf.maxlen and np.mean([e["r"] for e in buf]) >= self.target:
            self.solved_at = (time.perf_counter() - self.start, self.num_timesteps)


def linear(start: float):
    return lambda progress_remaining: progress_remaining * start


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--seed", type=int, default=1)
    p.add_argument("--steps", type=int, default=100_000, help="the zoo's budget (the schedules decay over it)")
    p.add_argument("--target", type=float, default=475.0)
    args = p.parse_args()
    torch.set_num_threads(1)  # as marl's processes: one thread each on a shared 2-core machine
    env = make_vec_env("CartPole-v1", n_envs=8, seed=args.seed)
    model = PPO("MlpPolicy", env, n_steps=32, batch_size=256, gae_lambda=0.8, gamma=0.98, n_epochs=20, ent_coef=0.0,
                learning_rate=linear(1e-3), clip_range=linear(0.2), seed=args.seed, device="cpu", verbose=0)
    stop = StopAtTarget(args.target)
    start = time.perf_counter()
    model.learn(total_timesteps=args.steps, callback=stop)
    wall = time.perf_counter() - start
    seconds, steps = stop.solved_at or (None, None)
    print(json.dumps({"program": "sb3", "seed": args.seed, "solved": stop.solved_at is not None,
                      "seconds_to_solve": seconds, "steps_to_solve": steps, "learn_wall": wall}))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
