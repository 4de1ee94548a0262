"""The array form the actors step: observations [copies, agents, ...], actions [copies, agents].

Autoreset follows Gymnasium 1.x's default (NEXT_STEP): after a slot (one agent of one copy)
reports terminated or truncated, its next step is a reset step. That step's action is ignored,
its reward is 0 and its flags are False, and the observation it returns opens a new episode.
So the observation returned with a done flag is the episode's final observation, which is what
a truncated episode bootstraps from. Reset steps are not transitions: the actor masks them out.
"""

from __future__ import annotations

import gymnasium as gym
import numpy as np
from gymnasium.vector import AutoresetMode


class GymAgentsBatch:
    """`copies` x `agents` independent copies of a single-agent Gymnasium env in one vector env.

    Uses the env's own vectorised implementation when it ships one (`vector_entry_point`, e.g.
    CartPole's: thousands of envs per numpy call), else Gymnasium's SyncVectorEnv.
    """

    def __init__(self, env_id: str, agents: int, copies: int, **kwargs):
        self.copies, self.agents = copies, agents
        spec = gym.spec(env_id)
        mode = "vector_entry_point" if spec.vector_entry_point is not None else "sync"
        vector_kwargs = {} if mode == "vector_entry_point" else {"autoreset_mode": AutoresetMode.NEXT_STEP}
        self.vec = gym.make_vec(env_id, num_envs=copies * agents, vectorization_mode=mode,
                                vector_kwargs=vector_kwargs, **kwargs)
        autoreset = self.vec.metadata.get("autoreset_mode", AutoresetMode.NEXT_STEP)
        if autoreset != AutoresetMode.NEXT_STEP:
            raise NotImplementedError(f"{env_id}: vector env autoreset mode {autoreset} is not supported")
        space = self.vec.single_action_space
        if isinstance(space, gym.spaces.Box):
            self._low, self._high = space.low, space.high
            self._dtype = space.dtype
        else:
            self._low = self._high = None
            self._dtype = np.int64

    def reset(self, seed: int | None) -> np.ndarray:
        obs, _ = self.vec.reset(seed=seed)
        return obs.reshape(self.copies, self.agents, -1)  # flat observations (EnvInfo.obs_shape)

    def step(self, actions: np.ndarray):
        """actions [copies, agents, ...] -> obs [copies, agents, flat obs], rewards, terminated, truncated [copies, agents]."""
        a = actions.reshape(self.copies * self.agents, *self.vec.single_action_space.shape)
        if self._low is not None:
            # The policy's Gaussian is unbounded; the env's box is not.
            a = np.clip(a, self._low, self._high)
        obs, rew, term, trunc, _ = self.vec.step(a.astype(self._dtype, copy=False))
        shape = (self.copies, self.agents)
        return (obs.reshape(*shape, -1), rew.reshape(shape).astype(np.float32, copy=False),
                term.reshape(shape), trunc.reshape(shape))

    def close(self):
        self.vec.close()
