"""Tiny deterministic PettingZoo Parallel envs for tests: `pettingzoo:tests.pz_envs` works as an env id.

Three agents, "a", "b", "c". Agent "b" terminates after step 2, "c" terminates after step 4, "a"
truncates after step 5: the episode is 5 steps long, agents leave it one by one.

Everything an agent sees encodes where it is, so tests can check the packing:
observation = [episode id, t, 10 * agent index + last action value, 1, 1, ...]; reward = 100 *
(agent index + 1) + t + last action value, where the action value is the discrete action, or the
sum of the (clipped) box action. The episode id is the reset seed, or the previous id + 1000
when reset without one.
"""

from __future__ import annotations

import gymnasium as gym
import numpy as np
from pettingzoo import ParallelEnv

LEAVE = {"a": (5, "truncated"), "b": (2, "terminated"), "c": (4, "terminated")}


class LeavingAgents(ParallelEnv):
    metadata = {"name": "leaving_agents_v0", "is_parallelizable": True, "render_modes": []}

    def __init__(self, hetero: bool = False, with_state: bool = True, bad_space: str | None = None,
                 render_mode: str | None = None):
        self.possible_agents = ["a", "b", "c"]
        self.agents: list[str] = []
        self.render_mode = render_mode
        self.with_state = with_state
        box = gym.spaces.Box(-np.inf, np.inf, (3,), np.float32)
        self._obs_spaces = {a: box for a in self.possible_agents}
        self._act_spaces = {a: gym.spaces.Discrete(3) for a in self.possible_agents}
        if hetero:  # "b" sees a 2x2 grid and acts with a bounded 2-D box
            self._obs_spaces["b"] = gym.spaces.Box(-np.inf, np.inf, (2, 2), np.float32)
            self._act_spaces["b"] = gym.spaces.Box(-1.0, 1.0, (2,), np.float32)
        if bad_space == "obs":
            self._obs_spaces["c"] = gym.spaces.Discrete(4)
        elif bad_space == "action":
            self._act_spaces["c"] = gym.spaces.MultiDiscrete([2, 2])
        self.episode, self.t = -1000, 0
        self._last = {a: 0.0 for a in self.possible_agents}

    def observation_space(self, agent):
        return self._obs_spaces[agent]

    def action_space(self, agent):
        return self._act_spaces[agent]

    def _obs(self, agent):
        space = self._obs_spaces[agent]
        o = np.ones(space.shape, np.float32).reshape(-1)
        o[:3] = (self.episode, self.t, 10 * self.possible_agents.index(agent) + self._last[agent])
        return o.reshape(space.shape)

    def reset(self, seed=None, options=None):
        self.episode = seed if seed is not None else self.episode + 1000
        self.t = 0
        self.agents = list(self.possible_agents)
        self._last = {a: 0.0 for a in self.possible_agents}
        return {a: self._obs(a) for a in self.agents}, {a: {} for a in self.agents}

    def step(self, actions):
        assert set(actions) == set(self.agents), f"actions for {sorted(actions)}, live agents {sorted(self.agents)}"
        self.t += 1
        rewards, terms, truncs = {}, {}, {}
        for a in self.agents:
            act = actions[a]
            if isinstance(self._act_spaces[a], gym.spaces.Box):
                act = np.asarray(act)
                assert act.shape == self._act_spaces[a].shape and self._act_spaces[a].contains(act), act
                self._last[a] = float(np.sum(act))
            else:
                assert isinstance(act, (int, np.integer)) and 0 <= act < self._act_spaces[a].n, act
                self._last[a] = float(act)
            rewards[a] = 100.0 * (self.possible_agents.index(a) + 1) + self.t + self._last[a]
            at, how = LEAVE[a]
            terms[a] = self.t >= at and how == "terminated"
            truncs[a] = self.t >= at and how == "truncated"
        obs = {a: self._obs(a) for a in self.agents}
        infos = {a: {} for a in self.agents}
        self.agents = [a for a in self.agents if not (terms[a] or truncs[a])]
        return obs, rewards, terms, truncs, infos

    def state(self):
        if not self.with_state:
            raise NotImplementedError("no state()")
        return np.array([self.episode, self.t, len(self.agents)], np.float32)

    def close(self):
        pass


def parallel_env(**kwargs) -> LeavingAgents:
    return LeavingAgents(**kwargs)
