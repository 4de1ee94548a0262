"""`vmas:<scenario>`: VMAS (Bettini et al. 2022), a PyTorch simulator that steps all its copies as
one batch of tensors (`pip install -e '.[vmas]'`).

One `VmasBatch` is one VMAS env of `copies` copies: a step is one `env.step` over every copy, with
the actions of every agent slot as one tensor per agent, no loop over copies. It speaks the grouped
array protocol of `envs.batched` (see its module doc) with these specifics:

- Agents are the scenario's (`--env-kwargs '{"n_agents": 4}'` where it takes that kwarg); every
  agent of a copy ends its episode together (VMAS's done is per copy).
- Episodes end when the scenario says so (terminated) or after `max_steps` steps (truncated; default
  `MAX_STEPS`, BenchMARL's horizon for navigation, balance, sampling and transport).
- NEXT_STEP autoreset: the step after a copy's episode ended resets that copy (`reset_at`): its
  actions are ignored, its rewards are 0 and its flags False, and it returns the new episode's first
  observation. VMAS steps every copy at once, so a resetting copy is stepped too and then reset; only
  its reset is seen. Copies that end together reset in one batched call (`reset_copies`).
- A torch batch (`Vmas.on_device`): it steps on the device it is made for (an actor's GPU where it has
  one, the CPU here) and speaks the protocol in tensors on it. Observations are packed per policy with one
  stack over its agents (one copy, as every backend's packing); each agent's actions go to VMAS as one
  tensor of all copies. `continuous_actions` (default True) chooses Box or Discrete actions, as VMAS's
  `make_env` does.
- Seeding: reset(seed=s) seeds VMAS's generators, which VMAS keeps apart from torch's, NumPy's and
  Python's global ones (one set per process, shared by its VMAS envs).
- state(): VMAS has no global state: every agent's observation in agent order, then an alive mask
  (all 1.0: no agent leaves a VMAS episode early), the fallback of `envs.pettingzoo_batch`.
"""

from __future__ import annotations

from typing import Any

import gymnasium as gym
import numpy as np
import torch

from envs.info import EnvError, EnvInfo, one_line, spec_of
from envs.protocol import check_split
from envs.spaces import AgentSpec, leaf_tensor

VMAS_PREFIX = "vmas:"
MAX_STEPS = 100
_INSTALL_HINT = "VMAS envs need vmas: pip install -e '.[vmas]'"


def _vmas():
    try:
        import vmas
    except ImportError as e:
        raise EnvError(f"{_INSTALL_HINT} ({one_line(e)})") from None
    return vmas


def gymnasium_space(space) -> gym.Space:
    """VMAS's spaces are the old `gym` package's; marl reads Gymnasium's."""
    kind = type(space).__name__
    if kind == "Box":
        return gym.spaces.Box(np.asarray(space.low), np.asarray(space.high), space.shape, space.dtype)
    if kind == "Discrete":
        return gym.spaces.Discrete(int(space.n))
    if kind == "MultiDiscrete":
        return gym.spaces.MultiDiscrete(np.asarray(space.nvec))
    if kind == "Dict":
        return gym.spaces.Dict({k: gymnasium_space(v) for k, v in space.spaces.items()})
    raise EnvError(f"VMAS space {space} has no Gymnasium counterpart marl reads")


def make_vmas(env_id: str, copies: int, env_kwargs: dict[str, Any], seed: int | None = None, device="cpu"):
    """The VMAS env of `copies` copies on `device`, every way it can fail as one EnvError line."""
    vmas = _vmas()
    scenario = env_id[len(VMAS_PREFIX):]
    if scenario not in vmas.scenarios:
        raise EnvError(f"env id {env_id!r}: VMAS has no scenario {scenario!r}; it has {', '.join(vmas.scenarios)}")
    # VMAS renders rgb_array frames whatever it is built with; a scenario would take render_mode for its own kwarg.
    kwargs = {"max_steps": MAX_STEPS, **{k: v for k, v in env_kwargs.items() if k != "render_mode"}}
    try:
        return vmas.make_env(scenario, num_envs=copies, device=device, seed=seed, terminated_truncated=True,
                             dict_spaces=False, **kwargs)
    except Exception as e:  # noqa: BLE001 - a scenario rejects a kwarg its own way
        raise EnvError(f"env id {env_id!r}: vmas.make_env(**{env_kwargs!r}) failed ({type(e).__name__}: {one_line(e)}); "
                       f"fix --env-kwargs") from None


def reset_copies(env, which):
    """Reset the copies `which` ([copies] bool) of a VMAS env -> every copy's observations. Where all
    of them end together (a common horizon), one batched reset; else each copy's own `reset_at`, with
    the observations read once after (`reset_at` would compute every copy's each time)."""
    if bool(which.all()):
        return env.reset()
    for c in which.nonzero().flatten().tolist():
        env.reset_at(c, return_observations=False)
    return env.get_from_scenario(get_observations=True, get_rewards=False, get_infos=False, get_dones=False)[0]


class Vmas:
    """`vmas:<scenario>`: the scenario's agents, every copy one slot of one batched VMAS env."""

    prefix = VMAS_PREFIX
    own_agents = True
    on_device = True  # VMAS steps its copies as tensors on a torch device

    def claims(self, env_id: str) -> bool:
        return True

    def describe(self, env_id: str, agents: int | None, env_kwargs: dict[str, Any], obs_keys: tuple[str, ...],
                 wrappers: tuple[str, ...]) -> EnvInfo:
        if wrappers:
            raise EnvError(f"--wrappers wraps Gymnasium envs; {env_id} is a VMAS env")
        env = make_vmas(env_id, 1, env_kwargs)
        ids = tuple(a.name for a in env.agents)
        if agents is not None and agents != len(ids):
            raise EnvError(f"env id {env_id!r} has {len(ids)} agents, not {agents}: pass --agents {len(ids)}, or set "
                           f"the scenario's agent count via --env-kwargs (e.g. '{{\"n_agents\": {agents}}}')")
        specs = tuple(spec_of(f"{env_id} agent {a!r}", gymnasium_space(o), gymnasium_space(s), obs_keys, None)
                      for a, o, s in zip(ids, env.observation_space, env.action_space))
        return EnvInfo(env_id=env_id, agent_ids=ids, specs=specs, reward_threshold=None,
                       state_dim=sum(s.stored_width for s in specs) + len(ids), has_state=False,
                       env_kwargs=tuple(sorted(env_kwargs.items())), own_agents=True, renders=True,
                       dropped=tuple(sorted({k for s in specs for k in s.dropped})))

    def make_env(self, env_id: str, agents: int | None, **kwargs):
        raise EnvError(f"{env_id} is a batched VMAS env: step it with envs.make_agent_batch (one env of N copies)")

    def make_batch(self, info: EnvInfo, copies: int, groups: list[list[int]], device="cpu") -> VmasBatch:
        return VmasBatch(info, copies, groups, device)


class VmasBatch:
    """`copies` copies of a VMAS scenario as one VMAS env on `device`, in the grouped form of
    `envs.batched`, every array a torch tensor on that device."""

    def __init__(self, info: EnvInfo, copies: int, groups: list[list[int]], device="cpu"):
        self.copies, self.info = copies, info
        self.device = torch.device(device)
        self.env = make_vmas(info.env_id, copies, info.kwargs, device=self.device)
        self.groups = [list(g) for g in groups]
        check_split(self.groups, info.agent_ids)
        self.specs: tuple[AgentSpec, ...] = info.specs
        self.masks = [None] * len(self.groups)
        self.state_dim = info.state_dim
        self._resetting = torch.zeros(copies, dtype=torch.bool, device=self.device)  # the copy's next step is a reset
        self._flat: list[torch.Tensor] = []  # each agent's current observation, its leaves flat (state())
        self.rendered_episode_over = False

    def _pack(self, obs: list) -> list[dict[str, torch.Tensor]]:
        """VMAS's per-agent observations (a tensor [copies, ...], or a dict of them) -> per group
        {leaf: (copies, n_g, ...)}; each agent's leaves, flat, are kept for state()."""
        leaves = [{leaf.name: leaf_tensor(leaf, o, self.copies) for leaf in spec.obs} for o, spec in zip(obs, self.specs)]
        self._flat = [torch.cat([x.reshape(self.copies, -1).float() for x in a.values()], dim=1) for a in leaves]
        return [{leaf.name: torch.stack([leaves[j][leaf.name] for j in g], dim=1) for leaf in self.specs[g[0]].obs}
                for g in self.groups]

    def _per_group(self, x: torch.Tensor) -> list[torch.Tensor]:
        """(copies, agents) -> per group (copies, n_g)."""
        return [x[:, g] for g in self.groups]

    def reset(self, seed: int | None) -> list[dict[str, torch.Tensor]]:
        obs = self.env.reset(seed=seed)
        self._resetting[:] = False
        self.rendered_episode_over = False
        self.active = [torch.ones((self.copies, len(g)), dtype=torch.bool, device=self.device) for g in self.groups]
        return self._pack(obs)

    def step(self, actions: list[torch.Tensor]):
        n = len(self.info.agent_ids)
        per_agent: list = [None] * n
        for g, a in zip(self.groups, actions):
            for k, j in enumerate(g):
                action = self.specs[j].action
                per_agent[j] = action.space.to_env_tensor(action, a[:, k])
        obs, rewards, terminated, truncated, _ = self.env.step(per_agent)
        resetting = self._resetting.clone()
        if bool(resetting.any()):
            obs = reset_copies(self.env, resetting)
        keep = ~resetting
        rew = torch.where(keep.unsqueeze(1), torch.stack([r.float() for r in rewards], dim=1), 0.0)
        term, trunc = terminated & keep, truncated & keep & ~terminated
        self._resetting = term | trunc
        self.rendered_episode_over = bool(self._resetting[0])
        flags = [f.unsqueeze(1).expand(self.copies, n) for f in (term, trunc)]
        self.active = self._per_group((~self._resetting).unsqueeze(1).expand(self.copies, n))
        return (self._pack(obs), self._per_group(rew), *[self._per_group(f) for f in flags], self.active)

    def state(self) -> torch.Tensor:
        """(copies, state_dim) float32: every agent's current observation in agent order, then the alive mask."""
        return torch.cat([*self._flat, torch.ones((self.copies, len(self._flat)), device=self.device)], dim=1)

    def render(self) -> np.ndarray:
        return self.env.render(mode="rgb_array", env_index=0, visualize_when_rgb=False)

    def close(self) -> None:
        viewer = getattr(self.env, "viewer", None)
        if viewer is not None:
            viewer.close()
