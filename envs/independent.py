"""N independent copies of a single-agent Gymnasium env, as one PettingZoo Parallel env.

This is what RLlib's `make_multi_agent` does: agent `agent_i` acts in its own copy, gets its own
reward, and leaves `agents` when its copy terminates or truncates; the episode ends when every
agent has left. The actors' hot path does not go through this dict API (see `envs.batched`),
but it is the reference semantics, and what users' code and PettingZoo's tests see.
"""

from __future__ import annotations

import gymnasium as gym
import numpy as np

from envs.protocol import AgentCounts


class IndependentAgents(AgentCounts):
    """PettingZoo Parallel API over N copies of `gym.make(env_id)`."""

    def __init__(self, env_id: str, agents: int, **kwargs):
        self.env_id = env_id
        self.possible_agents = [f"agent_{i}" for i in range(agents)]
        self.agents: list[str] = []
        self._envs = {a: gym.make(env_id, **kwargs) for a in self.possible_agents}
        self.metadata = {"name": f"independent_{env_id}", "is_parallelizable": True,
                         "render_modes": self._envs[self.possible_agents[0]].metadata.get("render_modes", [])}
        self.render_mode = kwargs.get("render_mode")

    def observation_space(self, agent: str) -> gym.Space:
        return self._envs[agent].observation_space  # the same object every call, as PettingZoo requires

    def action_space(self, agent: str) -> gym.Space:
        return self._envs[agent].action_space

    def reset(self, seed: int | None = None, options: dict | None = None):
        self.agents = list(self.possible_agents)
        self._last_obs = {}
        infos = {}
        for i, a in enumerate(self.agents):
            # Distinct seeds per copy, or eight agents would live the same episode.
            obs, info = self._envs[a].reset(seed=None if seed is None else seed + i, options=options)
            self._last_obs[a], infos[a] = obs, info
        return dict(self._last_obs), infos

    def step(self, actions: dict):
        obs, rewards, terms, truncs, infos = {}, {}, {}, {}, {}
        for a in self.agents:
            o, r, term, trunc, info = self._envs[a].step(actions[a])
            obs[a], rewards[a], terms[a], truncs[a], infos[a] = o, float(r), bool(term), bool(trunc), info
            self._last_obs[a] = o
        self.agents = [a for a in self.agents if not (terms[a] or truncs[a])]
        return obs, rewards, terms, truncs, infos

    def state(self) -> np.ndarray:
        """Global state for a centralized critic: every agent's last observation, in a fixed order."""
        return np.concatenate([gym.spaces.flatten(self._envs[a].observation_space, self._last_obs[a]).astype(np.float32)
                               for a in self.possible_agents])

    def render(self):
        """The first agent's copy (render_mode="rgb_array"): N side-by-side copies would be a strip, not a picture."""
        return self._envs[self.possible_agents[0]].render() if self.render_mode else None

    def close(self):
        for env in self._envs.values():
            env.close()
