"""Which backend an env id names, and the four calls everything else makes through it.

A backend (envs.protocol.Backend) is one kind of env id: it says what the env's agents look like
(`describe` -> EnvInfo), builds one copy in PettingZoo's Parallel form (`make_env`) and `copies` copies
in the grouped array form the actors step (`make_batch`). BACKENDS is tried in order: the first whose
prefix starts the id and that claims it takes it; Gymnasium's (prefix "") is the fallback. A new
kind of env is one module with its backend class, plus its line in BACKENDS.
"""

from __future__ import annotations

from typing import Any

from envs.gymnasium_backend import REGISTER_ON_IMPORT, Gymnasium, resolve
from envs.info import EnvError, EnvInfo
from envs.pettingzoo_backend import (PETTINGZOO_PREFIX, PettingZooParallel, PettingZooTurnBased, pettingzoo_factory,
                                     pettingzoo_module)
from envs.protocol import AgentBatch, Backend, check_split
from envs.vmas_backend import Vmas

BACKENDS: tuple[Backend, ...] = (PettingZooParallel(), PettingZooTurnBased(), Vmas(), Gymnasium())

__all__ = ["BACKENDS", "PETTINGZOO_PREFIX", "REGISTER_ON_IMPORT", "EnvError", "EnvInfo", "backend", "check_groups", "decides_agents", "describe",
           "make_agent_batch", "make_env", "on_device", "pettingzoo_factory", "pettingzoo_module", "resolve"]


def backend(env_id: str) -> Backend:
    """The backend that takes `env_id` (EnvError from a backend that knows the prefix but not the rest)."""
    return next(b for b in BACKENDS if env_id.startswith(b.prefix) and b.claims(env_id))


def decides_agents(env_id: str) -> bool:
    """The env decides its own agents (--agents may only repeat their count), rather than being --agents copies."""
    return backend(env_id).own_agents


def describe(env_id: str, agents: int | None = None, env_kwargs: dict[str, Any] | None = None,
             obs_keys: tuple[str, ...] = (), wrappers: tuple[str, ...] = ()) -> EnvInfo:
    """Look the env up and check that a policy can handle its agents' spaces; EnvError if not.

    `agents`: for a Gymnasium id, the number of independent copies (None: 1); for an env that decides
    its own agents (PettingZoo), `agents` (None: take the env's count) must match it.
    """
    return backend(env_id).describe(env_id, agents, dict(env_kwargs or {}), tuple(obs_keys), tuple(wrappers))


def make_env(env_id: str, agents: int | None = None, **kwargs):
    """One copy in the PettingZoo-Parallel form (dicts keyed by agent): for a Gymnasium id, `agents`
    independent copies of the single-agent env (envs.independent); a PettingZoo id, the env itself."""
    return backend(env_id).make_env(env_id, agents, **kwargs)


def check_groups(info: EnvInfo, groups: list[list[int]]) -> None:
    """Groups must split the agents (indices into agent_ids) and each must share one AgentSpec."""
    check_split(groups, info.agent_ids)
    for g in groups:
        if any(info.specs[i] != info.specs[g[0]] for i in g):
            raise ValueError(f"group {[info.agent_ids[i] for i in g]} mixes agents with different spaces")


def on_device(env_id: str) -> bool:
    """The env steps on a torch device as a batch of tensors (VMAS), so that an actor with a GPU runs
    it there beside its policy (marl.devices.actor_device)."""
    return backend(env_id).on_device


def make_agent_batch(info: EnvInfo, copies: int, groups: list[list[int]], device="cpu") -> AgentBatch:
    """The grouped array form the actors step: `copies` env copies, arrays per group of agents, on
    `device` (a torch device's name or object; CPU for every backend that is not `on_device`)."""
    check_groups(info, groups)
    b = backend(info.env_id)
    if b.on_device:
        return b.make_batch(info, copies, groups, device)
    if str(device) != "cpu":
        raise ValueError(f"{info.env_id} steps NumPy arrays on the CPU, not on {device}")
    return b.make_batch(info, copies, groups)
