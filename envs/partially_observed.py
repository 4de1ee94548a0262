"""CartPole with its velocities hidden: `envs:CartPoleNoVel-v1`, a task only memory solves.

The observation's cart velocity and pole angular velocity (indices 1 and 3) are set to zero, as
rl-baselines3-zoo's `CartPoleNoVel-v1` does; positions and angles still come every step, so a
policy that remembers the last few can difference them into the velocities, and one that cannot
must act on the angle alone. Everything else is CartPole-v1: the dynamics, the 500-step limit,
the 475 reward threshold. Single-agent ids, like CartPole-v1 itself, are played by N agents.
Both forms are registered: `CartPoleNoVelEnv`, and the vectorised `CartPoleNoVelVectorEnv`
(CartPole's own, so that thousands of copies step in one numpy call).
"""

from __future__ import annotations

import gymnasium as gym
import numpy as np
from gymnasium.envs.classic_control.cartpole import CartPoleEnv, CartPoleVectorEnv

ENV_ID = "CartPoleNoVel-v1"
HIDDEN = [1, 3]  # cart velocity, pole angular velocity


def _hide(obs: np.ndarray) -> np.ndarray:
    obs = np.array(obs, dtype=np.float32)
    obs[..., HIDDEN] = 0.0
    return obs


class _HideVelocities:
    """Zeroes the velocities of whatever CartPole (single or vector) it is mixed into."""

    def reset(self, *, seed=None, options=None):
        obs, info = super().reset(seed=seed, options=options)
        return _hide(obs), info

    def step(self, action):
        obs, reward, terminated, truncated, info = super().step(action)
        return _hide(obs), reward, terminated, truncated, info


class CartPoleNoVelEnv(_HideVelocities, CartPoleEnv):
    pass


class CartPoleNoVelVectorEnv(_HideVelocities, CartPoleVectorEnv):
    pass


# gymnasium warns when an id is registered twice (a reload, or a second import path).
if ENV_ID not in gym.registry:
    gym.register(id=ENV_ID, entry_point=f"{__name__}:CartPoleNoVelEnv",
                 vector_entry_point=f"{__name__}:CartPoleNoVelVectorEnv", max_episode_steps=500, reward_threshold=475.0)
