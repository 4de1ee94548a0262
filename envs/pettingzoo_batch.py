"""M copies of a PettingZoo Parallel env, packed into the grouped arrays the actors step.

Same protocol as `envs.batched.GymAgentsBatch` (see its module doc): lists with one array per
group of agents, `reset(seed) -> obs`, `step(actions) -> obs, rewards, terminated, truncated,
active`, `state()`, `active`, `close()`. The semantics of the packing:

- Fixed agent order = `possible_agents`; a group's arrays hold its agents in the group's order.
- An agent absent from the copy's episode (it left: terminated or truncated at an earlier step,
  or has not joined) is padding: zero observation, zero reward, False flags, active False. Its
  action is not passed to the env.
- The observation returned together with an agent's done flag is its final observation (a
  truncation bootstraps from it); from the next step on, the agent is padding.
- `active[g][c, j]`: that slot's NEXT step is a real transition, i.e. the agent is in the copy's
  `env.agents` after this step (or reset).
- NEXT_STEP autoreset, as Gymnasium's vector envs: when a copy's `env.agents` becomes empty, the
  NEXT step() call resets that copy instead of stepping it. That call ignores the copy's actions,
  returns the reset observations with reward 0 and False flags, and active True for the agents
  present after the reset.
- Seeding: reset(seed=s) resets copy c with seed s + c (None: unseeded); autoresets pass seed=None.
- Actions: Discrete -> int; Box -> clipped to the agent's bounds and reshaped to its space's shape.
- state() (copies, state_dim) float32, for the current observations: env.state() per copy when
  the env has it; else every agent's current (padded) observation in fixed agent order, followed
  by an alive mask: 1.0 for an agent whose current observation row is real (it was in the episode
  at the step or reset that produced it, its final observation included), 0.0 for padding. So an
  agent that just left still counts as alive in the state its truncation bootstraps from, and
  counts as absent from the step after.
"""

from __future__ import annotations

from typing import Any, Callable

import gymnasium as gym
import numpy as np

from envs.protocol import check_split


class PettingZooBatch:
    """`copies` copies of `env_fn(**env_kwargs)` (a PettingZoo Parallel env), stepped one after another."""

    def __init__(self, env_fn: Callable[..., Any], copies: int, groups: list[list[int]],
                 env_kwargs: dict | None = None, has_state: bool | None = None):
        self.copies = copies
        self.envs = [env_fn(**(env_kwargs or {})) for _ in range(copies)]
        env = self.envs[0]
        self.agent_ids: list[str] = list(env.possible_agents)
        n = len(self.agent_ids)
        self.groups = [list(g) for g in groups]
        check_split(self.groups, self.agent_ids)
        # agent id -> (index in agent order, group, position in group)
        self._slot: dict[str, tuple[int, int, int]] = {}
        for g, members in enumerate(self.groups):
            for k, j in enumerate(members):
                self._slot[self.agent_ids[j]] = (j, g, k)
        self._obs_dim = [int(np.prod(env.observation_space(a).shape)) for a in self.agent_ids]
        self._act: list[tuple[str, tuple[int, ...], Any, Any, Any]] = []  # kind, shape, low, high, dtype
        for a in self.agent_ids:
            space = env.action_space(a)
            if isinstance(space, gym.spaces.Box):
                self._act.append(("box", space.shape, space.low, space.high, space.dtype))
            elif isinstance(space, gym.spaces.Discrete):
                self._act.append(("discrete", (), None, None, None))
            else:
                raise ValueError(f"agent {a!r}: action space {space} is not supported (Discrete or Box)")
        for members in self.groups:
            dims = {self._obs_dim[j] for j in members}
            kinds = {(self._act[j][0], int(np.prod(self._act[j][1]))) for j in members}
            if len(dims) > 1 or len(kinds) > 1:
                raise ValueError(f"group {[self.agent_ids[j] for j in members]} mixes agents with different spaces")
        self._gdim = [self._obs_dim[g[0]] for g in self.groups]
        self.has_state = has_state
        self._needs_reset = np.zeros(copies, dtype=bool)
        self._obs: list[np.ndarray] = []
        self._real = np.zeros((copies, n), dtype=bool)  # the current observation row is real, not padding
        self.active: list[np.ndarray] = []

    def _arrays(self):
        C = self.copies
        obs = [np.zeros((C, len(g), d), dtype=np.float32) for g, d in zip(self.groups, self._gdim)]
        flags = [[np.zeros((C, len(g)), dtype=bool) for g in self.groups] for _ in range(3)]
        return obs, flags

    def _fill_obs(self, c: int, obs_dict: dict, obs: list[np.ndarray], real: np.ndarray) -> None:
        for a, o in obs_dict.items():
            j, g, k = self._slot[a]
            obs[g][c, k] = np.asarray(o).reshape(-1)
            real[c, j] = True

    def _mark_active(self, c: int, env, active: list[np.ndarray]) -> None:
        for a in env.agents:
            _, g, k = self._slot[a]
            active[g][c, k] = True

    def reset(self, seed: int | None) -> list[np.ndarray]:
        obs, (active, _, _) = self._arrays()
        real = np.zeros_like(self._real)
        for c, env in enumerate(self.envs):
            o, _ = env.reset(seed=None if seed is None else seed + c)
            self._fill_obs(c, o, obs, real)
            self._mark_active(c, env, active)
            self._needs_reset[c] = not env.agents
        if self.has_state is None:
            try:
                self.envs[0].state()
                self.has_state = True
            except (NotImplementedError, AttributeError):
                self.has_state = False
        self._obs, self._real, self.active = obs, real, active
        return obs

    def _env_actions(self, actions: list[np.ndarray]) -> list:
        """Per agent (agent order): its actions for every copy, in the form the env takes."""
        out: list = [None] * len(self.agent_ids)
        for members, x in zip(self.groups, actions):
            x = np.asarray(x)
            for k, j in enumerate(members):
                kind, shape, low, high, dtype = self._act[j]
                if kind == "discrete":
                    out[j] = x[:, k].reshape(self.copies).tolist()
                else:
                    a = x[:, k].reshape(self.copies, *shape)
                    out[j] = np.clip(a, low, high).astype(dtype, copy=False)
        return out

    def step(self, actions: list[np.ndarray]):
        """actions per group -> obs, rewards, terminated, truncated, active per group (see the module doc)."""
        per_agent = self._env_actions(actions)
        obs, (active, term, trunc) = self._arrays()
        rew = [np.zeros((self.copies, len(g)), dtype=np.float32) for g in self.groups]
        real = np.zeros_like(self._real)
        for c, env in enumerate(self.envs):
            if self._needs_reset[c]:
                o, _ = env.reset(seed=None)
                self._fill_obs(c, o, obs, real)
            else:
                acting = list(env.agents)
                o, r, te, tr, _ = env.step({a: per_agent[self._slot[a][0]][c] for a in acting})
                self._fill_obs(c, o, obs, real)
                for a in acting:
                    _, g, k = self._slot[a]
                    rew[g][c, k] = r.get(a, 0.0)
                    term[g][c, k] = te.get(a, False)
                    trunc[g][c, k] = tr.get(a, False)
            self._mark_active(c, env, active)
            self._needs_reset[c] = not env.agents
        self._obs, self._real, self.active = obs, real, active
        return obs, rew, term, trunc, active

    @property
    def state_dim(self) -> int:
        if self.has_state:
            return int(np.asarray(self.envs[0].state()).size)
        return sum(self._obs_dim) + len(self.agent_ids)

    def state(self) -> np.ndarray:
        """(copies, state_dim) float32 for the current observations (see the module doc)."""
        if self.has_state:
            return np.stack([np.asarray(env.state(), dtype=np.float32).reshape(-1) for env in self.envs])
        parts = [self._obs[g][:, k] for _, g, k in (self._slot[a] for a in self.agent_ids)]
        parts.append(self._real.astype(np.float32))
        return np.concatenate(parts, axis=1)

    def close(self):
        for env in self.envs:
            env.close()
