"""Which env an id names, what its agents' spaces are, and how to build it in either form.

Two kinds of ids:
- a Gymnasium id (or `module:EnvId`): a single-agent env, made multi-agent as `agents`
  independent copies (agent ids `agent_0` ..);
- `pettingzoo:<module>.<env>` (e.g. `pettingzoo:mpe2.simple_spread_v3`, or a first-party
  `pettingzoo:envs.coop_nav`): a module exposing PettingZoo's `parallel_env(**kwargs)`, or only
  `env(**kwargs)` returning an AEC env (`pettingzoo:pettingzoo.classic.tictactoe_v3`: played turn
  by turn, envs.aec); the env decides its own agents (`possible_agents`), which may have different spaces.
"""

from __future__ import annotations

import difflib
import importlib
import warnings
from dataclasses import dataclass
from typing import Any

import gymnasium as gym
import numpy as np

from envs.batched import GymAgentsBatch, make_vector
from envs.independent import IndependentAgents
from envs.pettingzoo_batch import PettingZooBatch
from envs.protocol import check_split
from envs.spaces import MASK_KEY, AgentSpec, SpaceError, agent_spec
from envs.wrappers import WrapperError

PETTINGZOO_PREFIX = "pettingzoo:"
_INSTALL_HINT = "PettingZoo envs need pettingzoo and mpe2: pip install -e '.[pettingzoo]'"


class EnvError(ValueError):
    """The env id or its spaces cannot be used; the message is one line naming the fix."""


@dataclass(frozen=True)
class EnvInfo:
    """What the learner and actors need to know about an env before they build anything."""

    env_id: str
    agent_ids: tuple[str, ...]
    specs: tuple[AgentSpec, ...]  # one per agent, in agent_ids order
    reward_threshold: float | None
    state_dim: int  # size of the central critic's input (EnvInfo.has_state: env.state(); else obs of all agents + alive mask)
    has_state: bool  # the env has a working state()
    env_kwargs: tuple[tuple[str, Any], ...] = ()  # the kwargs the env is built with, sorted by name
    wrappers: tuple[str, ...] = ()  # Gymnasium wrappers around each copy (envs.wrappers)
    dropped: tuple[str, ...] = ()  # observation keys no network reads (said once in the log)
    turn_based: bool = False  # a PettingZoo AEC game: one agent moves per step (envs.aec)

    @property
    def kwargs(self) -> dict[str, Any]:
        return dict(self.env_kwargs)

    @property
    def is_pettingzoo(self) -> bool:
        return self.env_id.startswith(PETTINGZOO_PREFIX)

    @property
    def homogeneous(self) -> bool:
        return all(s == self.specs[0] for s in self.specs)

    @property
    def spec(self) -> AgentSpec:
        """The one spec every agent shares; ValueError when the agents differ."""
        if not self.homogeneous:
            detail = ", ".join(f"{a}: {s}" for a, s in zip(self.agent_ids, self.specs))
            raise ValueError(f"agents have different spaces ({detail}); use per-agent specs (EnvInfo.specs)")
        return self.specs[0]


def _one_line(x: object) -> str:
    return " ".join(str(x).split())


def _agent_spec(where: str, obs_space: gym.Space, act_space: gym.Space, obs_keys: tuple[str, ...],
                info: dict | None) -> AgentSpec:
    try:
        return agent_spec(where, obs_space, act_space, obs_keys, info_mask=info is not None and MASK_KEY in info)
    except SpaceError as e:
        raise EnvError(str(e)) from None


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


def pettingzoo_module(env_id: str):
    """`pettingzoo:<module>.<env>` -> the imported module, which has `parallel_env`; EnvError if not."""
    name = env_id[len(PETTINGZOO_PREFIX):]
    if not name or name.startswith(".") or name.endswith("."):
        raise EnvError(f"env id {env_id!r}: expected pettingzoo:<module>.<env>, e.g. pettingzoo:mpe2.simple_spread_v3")
    try:
        module = importlib.import_module(name)
    except ImportError as e:
        missing = getattr(e, "name", None) or ""
        root = missing.split(".")[0]
        extra = "" if root in ("", "pettingzoo", "mpe2") else f", and the package that provides {root!r}"
        raise EnvError(f"env id {env_id!r}: cannot import {name!r} ({_one_line(e)}); {_INSTALL_HINT}{extra}") from None
    if not callable(getattr(module, "parallel_env", None)) and not callable(getattr(module, "env", None)):
        raise EnvError(f"env id {env_id!r}: module {name!r} has neither parallel_env() nor env(); a PettingZoo env "
                       "module exposes parallel_env(**kwargs) (Parallel API) or env(**kwargs) (AEC API)")
    return module


def pettingzoo_factory(env_id: str):
    """`**kwargs -> env` in the Parallel form the batches step: the module's `parallel_env`, or, for a
    module with only `env()`, that env wrapped turn by turn (envs.aec.TurnBased) when the object it
    returns is an AEC env (PettingZoo's classic games: they refuse aec_to_parallel)."""
    module = pettingzoo_module(env_id)
    if callable(getattr(module, "parallel_env", None)):
        return module.parallel_env

    def turn_based(**kwargs):
        from envs.aec import TurnBased, is_aec

        env = module.env(**kwargs)
        if not is_aec(env):
            raise EnvError(f"env id {env_id!r}: env() returned a {type(env).__name__}, not a PettingZoo AEC env")
        return TurnBased(env)

    return turn_based


def _make_pettingzoo(env_id: str, env_kwargs: dict[str, Any]):
    make = pettingzoo_factory(env_id)
    kind = "parallel_env" if getattr(make, "__name__", "") == "parallel_env" else "env"
    try:
        return make(**env_kwargs)
    except EnvError:
        raise
    except TypeError as e:
        raise EnvError(f"env id {env_id!r}: {kind}() does not take env kwargs {env_kwargs!r} ({_one_line(e)}); "
                       "fix --env-kwargs") from None
    except Exception as e:  # an env that rejects a kwarg's value: still bad input, not a crash
        raise EnvError(f"env id {env_id!r}: {kind}(**{env_kwargs!r}) failed ({type(e).__name__}: {_one_line(e)}); "
                       "fix --env-kwargs") from None


def _has_state(env) -> tuple[bool, int]:
    """(the env has a working state(), its size); call after reset."""
    state = getattr(env, "state", None)
    if not callable(state):
        return False, 0
    try:
        s = state()
    except (NotImplementedError, AttributeError):  # PettingZoo's default state(), or a wrapper without one
        return False, 0
    return True, int(np.asarray(s).size)


def _check_count(env_id: str, ids: tuple[str, ...], agents: int | None) -> None:
    """A PettingZoo env decides its agents; an --agents that disagrees is bad input."""
    if agents is not None and agents != len(ids):
        raise EnvError(f"env id {env_id!r} has {len(ids)} agents ({', '.join(ids)}), not {agents}: pass --agents {len(ids)}, "
                       f"or set the env's own agent-count kwarg via --env-kwargs (e.g. '{{\"N\": {agents}}}' for simple_spread)")


def _describe_pettingzoo(env_id: str, agents: int | None, env_kwargs: dict[str, Any], obs_keys: tuple[str, ...]) -> EnvInfo:
    env = _make_pettingzoo(env_id, env_kwargs)
    try:
        ids = tuple(env.possible_agents)
        _check_count(env_id, ids, agents)
        _, infos = env.reset(seed=0)
        specs = tuple(_agent_spec(f"{env_id} agent {a!r}", env.observation_space(a), env.action_space(a), obs_keys,
                                  infos.get(a)) for a in ids)
        has_state, size = _has_state(env)
    finally:
        env.close()
    state_dim = size if has_state else sum(s.stored_width for s in specs) + len(ids)
    return EnvInfo(env_id=env_id, agent_ids=ids, specs=specs, reward_threshold=None, state_dim=state_dim,
                   has_state=has_state, env_kwargs=tuple(sorted(env_kwargs.items())),
                   dropped=tuple(sorted({k for s in specs for k in s.dropped})),
                   turn_based=bool(getattr(env, "metadata", {}).get("turn_based")))


def describe(env_id: str, agents: int | None = None, env_kwargs: dict[str, Any] | None = None,
             obs_keys: tuple[str, ...] = (), wrappers: tuple[str, ...] = ()) -> EnvInfo:
    """Look the env up and check that a policy can handle its agents' spaces; EnvError if not.

    `agents`: for a Gymnasium id, the number of independent copies (None: 1); for a PettingZoo id
    the env decides, and `agents` (None: take the env's count) must match it. The spaces are read
    from the very object the actors step (a vector env of one copy, wrappers applied), never from a
    separate `gym.make`: ale_py's vector env, for one, returns other frames than its `gym.make` env.
    """
    env_kwargs = dict(env_kwargs or {})
    if env_id.startswith(PETTINGZOO_PREFIX):
        if wrappers:
            raise EnvError(f"--wrappers wraps Gymnasium envs; {env_id} is a PettingZoo env (wrap it in its module)")
        return _describe_pettingzoo(env_id, agents, env_kwargs, tuple(obs_keys))
    agents = 1 if agents is None else agents
    name = resolve(env_id)
    try:
        # Gymnasium warns in colour before it raises for a deprecated version: our line says it once.
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            vec = make_vector(name, 1, env_kwargs, tuple(wrappers))
        for w in caught:
            warnings.warn_explicit(w.message, w.category, w.filename, w.lineno)
    except gym.error.DeprecatedEnv:
        newest = _newest_version(name)
        raise EnvError(f"env id {env_id!r} is deprecated in Gymnasium {gym.__version__}"
                       + (f"; use {newest!r}" if newest else "; use a registered version")) from None
    except WrapperError as e:
        raise EnvError(str(e)) from None
    except gym.error.DependencyNotInstalled as e:
        raise EnvError(f"env id {env_id!r} needs a package that is not installed: {_one_line(e)}") from None
    except gym.error.Error as e:
        raise EnvError(f"unknown env id {env_id!r}{_close_ids(env_id)}; use a registered Gymnasium id, module:EnvId "
                       f"or pettingzoo:<module>.<env> ({type(e).__name__})") from None
    except TypeError as e:
        fix = "fix --env-kwargs or --wrappers" if wrappers else "fix --env-kwargs"
        raise EnvError(f"env id {env_id!r} with env kwargs {env_kwargs!r}{' and --wrappers' if wrappers else ''} "
                       f"failed to build ({_one_line(e)}); {fix}") from None
    try:
        obs_space, act_space = vec.single_observation_space, vec.single_action_space
        _, infos = vec.reset(seed=0)
        threshold = gym.spec(name).reward_threshold
    finally:
        vec.close()
    spec = _agent_spec(env_id, obs_space, act_space, tuple(obs_keys), infos)
    return EnvInfo(env_id=env_id, agent_ids=tuple(f"agent_{i}" for i in range(agents)), specs=(spec,) * agents,
                   reward_threshold=threshold, state_dim=agents * spec.stored_width + agents, has_state=False,
                   env_kwargs=tuple(sorted(env_kwargs.items())), wrappers=tuple(wrappers), dropped=spec.dropped)


def make_env(env_id: str, agents: int | None = None, **kwargs):
    """The PettingZoo-Parallel form (dicts keyed by agent).

    Gymnasium ids: `agents` independent copies of the single-agent env (IndependentAgents).
    `pettingzoo:` ids: the env itself, `parallel_env(**kwargs)`; `agents`, if given, must match.
    """
    if env_id.startswith(PETTINGZOO_PREFIX):
        env = _make_pettingzoo(env_id, kwargs)
        try:
            _check_count(env_id, tuple(env.possible_agents), agents)
        except EnvError:
            env.close()
            raise
        return env
    return IndependentAgents(resolve(env_id), 1 if agents is None else agents, **kwargs)


def check_groups(info: EnvInfo, groups: list[list[int]]) -> None:
    """Groups must split the agents (indices into agent_ids) and each must share one AgentSpec."""
    check_split(groups, info.agent_ids)
    for g in groups:
        if any(info.specs[i] != info.specs[g[0]] for i in g):
            raise ValueError(f"group {[info.agent_ids[i] for i in g]} mixes agents with different spaces")


def make_agent_batch(info: EnvInfo, copies: int, groups: list[list[int]]) -> GymAgentsBatch | PettingZooBatch:
    """The grouped array form the actors step: `copies` env copies, arrays per group of agents."""
    check_groups(info, groups)
    if info.is_pettingzoo:
        return PettingZooBatch(pettingzoo_factory(info.env_id), copies, groups, info.specs, info.kwargs,
                               has_state=info.has_state)
    return GymAgentsBatch(resolve(info.env_id), len(info.agent_ids), copies, info.specs[0], groups, info.kwargs,
                          info.wrappers)
