"""M copies of a PettingZoo Parallel env, packed into the grouped arrays the actors step.

Same protocol as `envs.batched.GymAgentsBatch` (see its module doc): lists with one array per
group of agents, `reset(seed) -> obs`, `step(actions) -> obs, rewards, terminated, truncated,
active`, `state()`, `active`, `render()`, `rendered_episode_over`, `close()`. The semantics of the packing:

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
- Observations are packed leaf by leaf (`envs.spaces`); action masks come from the observation's
  `action_mask` or `info["action_mask"]`, all True for every inactive slot (padding, a final
  observation, a turn-based game's waiting agents).
- Rewards and flags are taken for every agent the env's step reports on: for a Parallel env the
  agents that acted, for a turn-based game (`envs.aec.TurnBased`) the waiting agents too.
- Actions: in the env's own form (`envs.spaces.env_action`): Discrete -> int, Box -> clipped to the
  agent's bounds and reshaped to its space's shape.
- state() (copies, state_dim) float32, for the current observations: env.state() per copy when
  the env has it; else every agent's current (padded) observation in fixed agent order, followed
  by an alive mask: 1.0 for an agent whose current observation row is real (it was in the episode
  at the step or reset that produced it, its final observation included), 0.0 for padding. So an
  agent that just left still counts as alive in the state its truncation bootstraps from, and
  counts as absent from the step after.
"""

from __future__ import annotations

from typing import Any, Callable

import numpy as np

from envs.protocol import check_split
from envs.spaces import AgentSpec, env_action, leaf_array, mask_array, zeros


def probe_state(env) -> int | None:
    """The size of the env's state() after reset, or None when it has none that works. A probe of an
    optional feature: whatever the env (or a PettingZoo wrapper over an env whose `state` is not a
    method: rps_v2's is a dict) raises here means "no state", never a crash."""
    try:
        return int(np.asarray(env.state()).size)
    except Exception:  # noqa: BLE001 - NotImplementedError, AttributeError, TypeError, ... each env its own way
        return None


class PettingZooBatch:
    """`copies` copies of `env_fn(**env_kwargs)` (a PettingZoo Parallel env), stepped one after another.
    `specs` are the agents' AgentSpecs in `possible_agents` order; a group's agents share one
    (`envs.registry.check_groups`)."""

    def __init__(self, env_fn: Callable[..., Any], copies: int, groups: list[list[int]], specs: tuple[AgentSpec, ...],
                 env_kwargs: dict | None = None, has_state: bool | None = None):
        self.copies = copies
        self.envs = [env_fn(**(env_kwargs or {})) for _ in range(copies)]
        env = self.envs[0]
        self.agent_ids: list[str] = list(env.possible_agents)
        n = len(self.agent_ids)
        self.groups = [list(g) for g in groups]
        check_split(self.groups, self.agent_ids)
        self.specs = specs
        self._gspec = [specs[g[0]] for g in self.groups]
        # agent id -> (index in agent order, group, position in group)
        self._slot: dict[str, tuple[int, int, int]] = {}
        for g, members in enumerate(self.groups):
            for k, j in enumerate(members):
                self._slot[self.agent_ids[j]] = (j, g, k)
        self.has_state = has_state
        self._needs_reset = np.zeros(copies, dtype=bool)
        self._obs: list[dict[str, np.ndarray]] = []
        self._real = np.zeros((copies, n), dtype=bool)  # the current observation row is real, not padding
        self.active: list[np.ndarray] = []
        self.masks: list[np.ndarray | None] = []

    def _arrays(self):
        C = self.copies
        obs = [{leaf.name: zeros(leaf, (C, len(g))) for leaf in s.obs} for g, s in zip(self.groups, self._gspec)]
        masks = [np.ones((C, len(g), s.action.mask_size), dtype=bool) if s.mask else None
                 for g, s in zip(self.groups, self._gspec)]
        flags = [[np.zeros((C, len(g)), dtype=bool) for g in self.groups] for _ in range(3)]
        return obs, masks, flags

    def _fill_obs(self, c: int, obs_dict: dict, infos: dict, obs: list, masks: list, real: np.ndarray) -> None:
        for a, o in obs_dict.items():
            j, g, k = self._slot[a]
            spec = self._gspec[g]
            for leaf in spec.obs:
                obs[g][leaf.name][c, k] = leaf_array(leaf, o, ())
            if spec.mask:
                masks[g][c, k] = mask_array(spec, o, infos.get(a), ())
            real[c, j] = True

    def _mark_active(self, c: int, env, active: list[np.ndarray]) -> None:
        for a in env.agents:
            _, g, k = self._slot[a]
            active[g][c, k] = True

    def reset(self, seed: int | None) -> list[dict[str, np.ndarray]]:
        obs, masks, (active, _, _) = self._arrays()
        real = np.zeros_like(self._real)
        for c, env in enumerate(self.envs):
            o, infos = env.reset(seed=None if seed is None else seed + c)
            self._fill_obs(c, o, infos, obs, masks, real)
            self._mark_active(c, env, active)
            self._needs_reset[c] = not env.agents
        if self.has_state is None:
            self.has_state = probe_state(self.envs[0]) is not None
        self._obs, self._real, self.active, self.masks = obs, real, active, masks
        return obs

    def _env_actions(self, actions: list[np.ndarray]) -> list:
        """Per agent (agent order): its actions for every copy, in the form the env takes."""
        out: list = [None] * len(self.agent_ids)
        for members, x, spec in zip(self.groups, actions, self._gspec):
            x = np.asarray(x)
            for k, j in enumerate(members):
                a = env_action(spec.action, x[:, k], (self.copies,))
                # A scalar choice goes to the env as a Python int, as PettingZoo's own envs check it.
                out[j] = a.tolist() if spec.action.env_shape == () and a.dtype.kind in "iu" else a
        return out

    def step(self, actions: list[np.ndarray]):
        """actions per group -> obs, rewards, terminated, truncated, active per group (see the module doc)."""
        per_agent = self._env_actions(actions)
        obs, masks, (active, term, trunc) = self._arrays()
        rew = [np.zeros((self.copies, len(g)), dtype=np.float32) for g in self.groups]
        real = np.zeros_like(self._real)
        for c, env in enumerate(self.envs):
            if self._needs_reset[c]:
                o, infos = env.reset(seed=None)
                self._fill_obs(c, o, infos, obs, masks, real)
            else:
                o, r, te, tr, infos = env.step({a: per_agent[self._slot[a][0]][c] for a in env.agents})
                self._fill_obs(c, o, infos, obs, masks, real)
                # Every agent the env reports on, not only those that acted: in a turn-based game
                # (envs.aec) the waiting agents get rewards and, when it ends, their done flags.
                for a, x in r.items():
                    _, g, k = self._slot[a]
                    rew[g][c, k] = x
                for flags, reported in ((term, te), (trunc, tr)):
                    for a, x in reported.items():
                        _, g, k = self._slot[a]
                        flags[g][c, k] = x
            self._mark_active(c, env, active)
            self._needs_reset[c] = not env.agents
        for m, a in zip(masks, active):
            if m is not None:
                m[~a] = True  # an inactive slot's action is never used; a final position may have no legal move
        self._obs, self._real, self.active, self.masks = obs, real, active, masks
        return obs, rew, term, trunc, active

    def render(self) -> np.ndarray:
        return np.asarray(self.envs[0].render())

    @property
    def rendered_episode_over(self) -> bool:
        return bool(self._needs_reset[0])

    def _flat_obs(self, j: int) -> np.ndarray:
        """Agent j's current (padded) observation, every leaf flattened: (copies, width)."""
        _, g, k = self._slot[self.agent_ids[j]]
        return np.concatenate([v[:, k].reshape(self.copies, -1).astype(np.float32, copy=False)
                               for v in self._obs[g].values()], axis=1)

    @property
    def state_dim(self) -> int:
        if self.has_state:
            return int(np.asarray(self.envs[0].state()).size)
        return sum(s.stored_width for s in self.specs) + len(self.agent_ids)

    def state(self) -> np.ndarray:
        """(copies, state_dim) float32 for the current observations (see the module doc)."""
        if self.has_state:
            return np.stack([np.asarray(env.state(), dtype=np.float32).reshape(-1) for env in self.envs])
        parts = [self._flat_obs(j) for j in range(len(self.agent_ids))]
        parts.append(self._real.astype(np.float32))
        return np.concatenate(parts, axis=1)

    def close(self):
        for env in self.envs:
            env.close()
