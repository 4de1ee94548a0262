"""Which env an id names, what its spaces are, and how to build it in either form."""

from __future__ import annotations

import difflib
import importlib
from dataclasses import dataclass

import gymnasium as gym
import numpy as np

from envs.batched import GymAgentsBatch
from envs.independent import IndependentAgents


class EnvError(ValueError):
    """The env id or its spaces cannot be used; the message is one line naming the fix."""


@dataclass(frozen=True)
class EnvInfo:
    """What the learner and actors need to know about an env before they build anything."""

    env_id: str
    agent_ids: tuple[str, ...]
    obs_shape: tuple[int, ...]
    action_kind: str  # "discrete" or "box"
    action_shape: tuple[int, ...]  # () for discrete
    num_actions: int  # discrete: number of choices; box: flat action size
    reward_threshold: float | None

    @property
    def obs_dim(self) -> int:
        return int(np.prod(self.obs_shape))

    @property
    def action_dtype(self):
        """The torch dtype actions travel in: indices for Discrete, floats for Box."""
        import torch

        return torch.int64 if self.action_kind == "discrete" else torch.float32


def _close_ids(env_id: str) -> str:
    name = env_id.split(":")[-1]
    close = difflib.get_close_matches(name, list(gym.registry), n=3, cutoff=0.6)
    return f" (did you mean {', '.join(repr(c) for c in close)}?)" if close else ""


def resolve(env_id: str) -> str:
    """`module:EnvId` -> import module (which registers EnvId) and return EnvId; plain ids pass through."""
    if ":" not in env_id:
        return env_id
    module, name = env_id.split(":", 1)
    try:
        importlib.import_module(module)
    except ImportError as e:
        raise EnvError(f"env id {env_id!r}: module {module!r} does not import ({e}); install it or fix the module name") from None
    return name


def describe(env_id: str, agents: int) -> EnvInfo:
    """Look the env up and check that a policy can handle its spaces; EnvError if not."""
    name = resolve(env_id)
    try:
        env = gym.make(name)
    except gym.error.DependencyNotInstalled as e:
        raise EnvError(f"env id {env_id!r} needs a package that is not installed: {e}") from None
    except gym.error.Error as e:
        raise EnvError(f"unknown env id {env_id!r}{_close_ids(env_id)}; use a registered Gymnasium id or module:EnvId ({type(e).__name__})") from None
    try:
        obs_space, act_space = env.observation_space, env.action_space
        threshold = env.spec.reward_threshold if env.spec is not None else None
    finally:
        env.close()
    if not isinstance(obs_space, gym.spaces.Box):
        raise EnvError(f"{env_id}: observation space {obs_space} is not supported; the MLP policy takes Box observations")
    if isinstance(act_space, gym.spaces.Discrete):
        if act_space.start != 0:
            raise EnvError(f"{env_id}: Discrete action space with start={act_space.start} is not supported (start must be 0)")
        kind, shape, n = "discrete", (), int(act_space.n)
    elif isinstance(act_space, gym.spaces.Box):
        n = int(np.prod(act_space.shape))
        kind, shape = "box", (n,)  # flat: the batched env reshapes to the env's own shape
    else:
        raise EnvError(f"{env_id}: action space {act_space} is not supported; use an env with Discrete or Box actions")
    return EnvInfo(env_id=env_id, agent_ids=tuple(f"agent_{i}" for i in range(agents)),
                   obs_shape=(int(np.prod(obs_space.shape)),),  # flat: the batched env flattens
                   action_kind=kind, action_shape=shape,
                   num_actions=n, reward_threshold=threshold)


def make_env(env_id: str, agents: int, **kwargs) -> IndependentAgents:
    """The PettingZoo-Parallel form: `agents` independent copies of a single-agent env."""
    return IndependentAgents(resolve(env_id), agents, **kwargs)


def make_batched(env_id: str, agents: int, copies: int, **kwargs) -> GymAgentsBatch:
    """The array form for actors: `copies` env copies of `agents` agents each."""
    return GymAgentsBatch(resolve(env_id), agents, copies, **kwargs)
