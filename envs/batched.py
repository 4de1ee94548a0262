"""The grouped array form the actors step, for a single-agent Gymnasium id x N agents x M copies.

Every batch (this one and `envs.pettingzoo_batch.PettingZooBatch`) speaks the same protocol.
Agents are split into groups (indices in agent order; one group per policy; a group's agents
share one AgentSpec), and every array comes as a list with one entry per group:

    reset(seed) -> obs                                 obs[g]: (copies, n_g, obs_dim_g) float32
    step(actions) -> obs, rewards, terminated, truncated, active
                                                       actions[g]: (copies, n_g, *action_shape_g)
                                                       rewards[g]: (copies, n_g) float32, flags: bool
    state() -> (copies, state_dim) float32             the central critic's input for the current obs
    active                                             the latest `active` list (after reset: all True
                                                       for the agents present)
    close()

`active[g][c, j]` says whether the NEXT step of that slot is a real transition of a live agent:
False when the slot is padding (an agent that left its episode) or its next step is an autoreset.

Autoreset follows Gymnasium 1.x's default (NEXT_STEP): after a slot (one agent of one copy)
reports terminated or truncated, its next step is a reset step. That step's action is ignored,
its reward is 0 and its flags are False, and the observation it returns opens a new episode.
So the observation returned with a done flag is the episode's final observation, which is what
a truncated episode bootstraps from. Reset steps are not transitions: the actor masks them out
(here active = not (terminated or truncated)).
"""

from __future__ import annotations

import gymnasium as gym
import numpy as np
from gymnasium.vector import AutoresetMode


def _index(group: list[int]):
    """A basic slice when the group is a contiguous run of agents (views, no copies), else the index list."""
    if list(group) == list(range(group[0], group[0] + len(group))):
        return slice(group[0], group[0] + len(group))
    return np.asarray(group)


class GymAgentsBatch:
    """`copies` x `agents` independent copies of a single-agent Gymnasium env in one vector env.

    Uses the env's own vectorised implementation when it ships one (`vector_entry_point`, e.g.
    CartPole's: thousands of envs per numpy call), else Gymnasium's SyncVectorEnv. The vector env's
    arrays are [copies * agents] copy-major; a group's arrays are views of them when the group is a
    contiguous run of agents (one group of all agents: plain reshapes, no copies).

    state() is every agent's current observation in agent order followed by an alive mask of ones:
    every slot always holds a real observation (the final one of an episode included, which is
    what a truncation bootstraps from), so nothing is ever padding here.
    """

    def __init__(self, env_id: str, agents: int, copies: int, groups: list[list[int]] | None = None,
                 env_kwargs: dict | None = None):
        self.copies, self.agents = copies, agents
        self.groups = [list(g) for g in groups] if groups is not None else [list(range(agents))]
        self._whole = len(self.groups) == 1 and self.groups[0] == list(range(agents))
        self._idx = [_index(g) for g in self.groups]
        spec = gym.spec(env_id)
        mode = "vector_entry_point" if spec.vector_entry_point is not None else "sync"
        vector_kwargs = {} if mode == "vector_entry_point" else {"autoreset_mode": AutoresetMode.NEXT_STEP}
        self.vec = gym.make_vec(env_id, num_envs=copies * agents, vectorization_mode=mode,
                                vector_kwargs=vector_kwargs, **(env_kwargs or {}))
        autoreset = self.vec.metadata.get("autoreset_mode", AutoresetMode.NEXT_STEP)
        if autoreset != AutoresetMode.NEXT_STEP:
            raise NotImplementedError(f"{env_id}: vector env autoreset mode {autoreset} is not supported")
        space = self.vec.single_action_space
        self._act_shape = space.shape
        if isinstance(space, gym.spaces.Box):
            self._low, self._high = space.low, space.high
            self._dtype = space.dtype
        else:
            self._low = self._high = None
            self._dtype = np.int64
        flat_action = (int(np.prod(space.shape)),) if isinstance(space, gym.spaces.Box) else ()
        self._actions = None if self._whole else np.empty((copies, agents, *flat_action), dtype=self._dtype)
        self._obs: np.ndarray | None = None  # (copies, agents, obs_dim): the current observations
        self.active: list[np.ndarray] = []

    def _split(self, x: np.ndarray) -> list[np.ndarray]:
        if self._whole:
            return [x]
        return [x[:, i] for i in self._idx]

    def reset(self, seed: int | None) -> list[np.ndarray]:
        obs, _ = self.vec.reset(seed=seed)
        self._obs = obs.reshape(self.copies, self.agents, -1).astype(np.float32, copy=False)  # flat observations (AgentSpec.obs_shape)
        self.active = self._split(np.ones((self.copies, self.agents), dtype=bool))
        return self._split(self._obs)

    def step(self, actions: list[np.ndarray]):
        """actions per group -> obs, rewards, terminated, truncated, active per group (see the module doc)."""
        if self._whole:
            a = actions[0]
        else:
            a = self._actions
            for i, x in zip(self._idx, actions):
                a[:, i] = x
        a = a.reshape(self.copies * self.agents, *self._act_shape)
        if self._low is not None:
            # The policy's Gaussian is unbounded; the env's box is not.
            a = np.clip(a, self._low, self._high)
        obs, rew, term, trunc, _ = self.vec.step(a.astype(self._dtype, copy=False))
        shape = (self.copies, self.agents)
        self._obs = obs.reshape(*shape, -1).astype(np.float32, copy=False)
        term, trunc = term.reshape(shape), trunc.reshape(shape)
        active = ~(term | trunc)
        self.active = self._split(active)
        return (self._split(self._obs), self._split(rew.reshape(shape).astype(np.float32, copy=False)),
                self._split(term), self._split(trunc), self.active)

    @property
    def state_dim(self) -> int:
        return self.agents * int(np.prod(self.vec.single_observation_space.shape)) + self.agents

    def state(self) -> np.ndarray:
        """(copies, agents * obs_dim + agents): the current observations in agent order, then the alive mask (ones)."""
        flat = self._obs.reshape(self.copies, -1)
        return np.concatenate([flat, np.ones((self.copies, self.agents), dtype=np.float32)], axis=1)

    def close(self):
        self.vec.close()
