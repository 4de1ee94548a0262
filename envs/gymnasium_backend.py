"""The fallback backend: any Gymnasium id (or `module:EnvId`), a single-agent env made
multi-agent as `agents` independent copies (agent ids `agent_0` ..), stepped as one vector env
(envs.batched.GymAgentsBatch)."""

from __future__ import annotations

import difflib
import importlib
import warnings
from typing import Any

import gymnasium as gym

from envs.batched import GymAgentsBatch, make_vector
from envs.independent import IndependentAgents
from envs.info import EnvError, EnvInfo, one_line, renders, spec_of
from envs.wrappers import WrapperError

# Packages whose ids exist only once they are imported (they register on import), by id prefix.
REGISTER_ON_IMPORT = {"ALE/": ("ale_py", "atari"), "MiniGrid-": ("minigrid", "minigrid"), "BabyAI-": ("minigrid", "minigrid")}


def _register(name: str) -> None:
    for prefix, (package, extra) in REGISTER_ON_IMPORT.items():
        if name.startswith(prefix) and name not in gym.registry:
            try:
                gym.register_envs(importlib.import_module(package))
            except ImportError:
                raise EnvError(f"env id {name!r} needs the {package} package: pip install -e '.[{extra}]'") from None


def _close_ids(env_id: str) -> str:
    name = env_id.split(":")[-1]
    close = difflib.get_close_matches(name, list(gym.registry), n=3, cutoff=0.6)
    return f" (did you mean {', '.join(repr(c) for c in close)}?)" if close else ""


def _newest_version(name: str) -> str | None:
    """The registered id of the newest version of `name`'s env ("Taxi-v3" -> "Taxi-v4")."""
    base = name.rpartition("-v")[0]
    versions = [int(v) for k in gym.registry for b, _, v in [k.rpartition("-v")] if b == base and v.isdigit()]
    return f"{base}-v{max(versions)}" if versions else None


def resolve(env_id: str) -> str:
    """`module:EnvId` -> import module (which registers EnvId) and return EnvId; plain ids pass
    through, after importing the package that registers them (ALE/..., MiniGrid-...)."""
    if ":" not in env_id:
        _register(env_id)
        return env_id
    module, name = env_id.split(":", 1)
    try:
        importlib.import_module(module)
    except ImportError as e:
        raise EnvError(f"env id {env_id!r}: module {module!r} does not import ({e}); install it or fix the module name") from None
    return name


def _vector(env_id: str, name: str, env_kwargs: dict[str, Any], wrappers: tuple[str, ...]) -> gym.vector.VectorEnv:
    """One copy as the vector env the actors step, every way it can fail as one EnvError line."""
    try:
        # Gymnasium warns in colour before it raises for a deprecated version: our line says it once.
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            vec = make_vector(name, 1, env_kwargs, wrappers)
        for w in caught:
            warnings.warn_explicit(w.message, w.category, w.filename, w.lineno)
        return vec
    except gym.error.DeprecatedEnv:
        newest = _newest_version(name)
        raise EnvError(f"env id {env_id!r} is deprecated in Gymnasium {gym.__version__}"
                       + (f"; use {newest!r}" if newest else "; use a registered version")) from None
    except WrapperError as e:
        raise EnvError(str(e)) from None
    except gym.error.DependencyNotInstalled as e:
        raise EnvError(f"env id {env_id!r} needs a package that is not installed: {one_line(e)}") from None
    except gym.error.Error as e:
        raise EnvError(f"unknown env id {env_id!r}{_close_ids(env_id)}; use a registered Gymnasium id, module:EnvId "
                       f"or pettingzoo:<module>.<env> ({type(e).__name__})") from None
    except TypeError as e:
        fix = "fix --env-kwargs or --wrappers" if wrappers else "fix --env-kwargs"
        raise EnvError(f"env id {env_id!r} with env kwargs {env_kwargs!r}{' and --wrappers' if wrappers else ''} "
                       f"failed to build ({one_line(e)}); {fix}") from None


class Gymnasium:
    """Any Gymnasium id x `agents` independent copies (None: 1)."""

    prefix = ""
    own_agents = False  # --agents copies
    on_device = False  # NumPy arrays

    def claims(self, env_id: str) -> bool:
        return True

    def describe(self, env_id: str, agents: int | None, env_kwargs: dict[str, Any], obs_keys: tuple[str, ...],
                 wrappers: tuple[str, ...]) -> EnvInfo:
        """The spaces are read from the very object the actors step (a vector env of one copy, wrappers
        applied), never from a separate `gym.make`: ale_py's vector env, for one, returns other frames
        than its `gym.make` env."""
        agents = 1 if agents is None else agents
        name = resolve(env_id)
        vec = _vector(env_id, name, env_kwargs, wrappers)
        try:
            obs_space, act_space = vec.single_observation_space, vec.single_action_space
            _, infos = vec.reset(seed=0)
            spec_entry = gym.spec(name)
        finally:
            vec.close()
        spec = spec_of(env_id, obs_space, act_space, obs_keys, infos)
        return EnvInfo(env_id=env_id, agent_ids=tuple(f"agent_{i}" for i in range(agents)), specs=(spec,) * agents,
                       reward_threshold=spec_entry.reward_threshold, state_dim=agents * spec.stored_width + agents,
                       has_state=False, env_kwargs=tuple(sorted(env_kwargs.items())), wrappers=wrappers,
                       dropped=spec.dropped, renders=renders(vec.metadata))

    def make_env(self, env_id: str, agents: int | None, **kwargs) -> IndependentAgents:
        return IndependentAgents(resolve(env_id), 1 if agents is None else agents, **kwargs)

    def make_batch(self, info: EnvInfo, copies: int, groups: list[list[int]]) -> GymAgentsBatch:
        return GymAgentsBatch(resolve(info.env_id), len(info.agent_ids), copies, info.specs[0], groups, info.kwargs,
                              info.wrappers)
