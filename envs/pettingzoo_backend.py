"""PettingZoo backends, ids `pettingzoo:<module>.<env>` (e.g. `pettingzoo:mpe2.simple_spread_v3`, or a
first-party `pettingzoo:envs.coop_nav`): the env decides its own agents (`possible_agents`), which
may have different spaces.

- PettingZooParallel: a module exposing `parallel_env(**kwargs)`, stepped as envs.pettingzoo_batch;
- PettingZooTurnBased: a module with only `env(**kwargs)` returning an AEC env
  (`pettingzoo:pettingzoo.classic.tictactoe_v3`), played turn by turn (envs.aec.TurnBased) in the
  same batches; PettingZoo's classic games refuse aec_to_parallel.
"""

from __future__ import annotations

import importlib
from typing import Any, Callable

from envs.info import EnvError, EnvInfo, one_line, renders, spec_of
from envs.pettingzoo_batch import PettingZooBatch, probe_state

PETTINGZOO_PREFIX = "pettingzoo:"
_INSTALL_HINT = "PettingZoo envs need pettingzoo and mpe2: pip install -e '.[pettingzoo]'"


def pettingzoo_module(env_id: str):
    """`pettingzoo:<module>.<env>` -> the imported module, which has `parallel_env` or `env`; EnvError if not."""
    name = env_id[len(PETTINGZOO_PREFIX):]
    if not name or name.startswith(".") or name.endswith("."):
        raise EnvError(f"env id {env_id!r}: expected pettingzoo:<module>.<env>, e.g. pettingzoo:mpe2.simple_spread_v3")
    try:
        module = importlib.import_module(name)
    except ImportError as e:
        missing = getattr(e, "name", None) or ""
        root = missing.split(".")[0]
        extra = "" if root in ("", "pettingzoo", "mpe2") else f", and the package that provides {root!r}"
        raise EnvError(f"env id {env_id!r}: cannot import {name!r} ({one_line(e)}); {_INSTALL_HINT}{extra}") from None
    if not callable(getattr(module, "parallel_env", None)) and not callable(getattr(module, "env", None)):
        raise EnvError(f"env id {env_id!r}: module {name!r} has neither parallel_env() nor env(); a PettingZoo env "
                       "module exposes parallel_env(**kwargs) (Parallel API) or env(**kwargs) (AEC API)")
    return module


def _is_parallel(env_id: str) -> bool:
    return callable(getattr(pettingzoo_module(env_id), "parallel_env", None))


def _check_count(env_id: str, ids: tuple[str, ...], agents: int | None) -> None:
    """A PettingZoo env decides its agents; an --agents that disagrees is bad input."""
    if agents is not None and agents != len(ids):
        raise EnvError(f"env id {env_id!r} has {len(ids)} agents ({', '.join(ids)}), not {agents}: pass --agents {len(ids)}, "
                       f"or set the env's own agent-count kwarg via --env-kwargs (e.g. '{{\"N\": {agents}}}' for simple_spread)")


class PettingZooParallel:
    """`pettingzoo:<module>.<env>` where the module has `parallel_env(**kwargs)`."""

    prefix = PETTINGZOO_PREFIX
    own_agents = True  # possible_agents
    on_device = False  # NumPy arrays
    maker = "parallel_env"

    def claims(self, env_id: str) -> bool:
        return _is_parallel(env_id)

    def factory(self, env_id: str) -> Callable[..., Any]:
        """`**kwargs -> env` in the Parallel form the batches step."""
        return pettingzoo_module(env_id).parallel_env

    def _make(self, env_id: str, env_kwargs: dict[str, Any]):
        try:
            return self.factory(env_id)(**env_kwargs)
        except EnvError:
            raise
        except TypeError as e:
            raise EnvError(f"env id {env_id!r}: {self.maker}() does not take env kwargs {env_kwargs!r} ({one_line(e)}); "
                           "fix --env-kwargs") from None
        except Exception as e:  # an env that rejects a kwarg's value: still bad input, not a crash
            raise EnvError(f"env id {env_id!r}: {self.maker}(**{env_kwargs!r}) failed ({type(e).__name__}: "
                           f"{one_line(e)}); fix --env-kwargs") from None

    def describe(self, env_id: str, agents: int | None, env_kwargs: dict[str, Any], obs_keys: tuple[str, ...],
                 wrappers: tuple[str, ...]) -> EnvInfo:
        if wrappers:
            raise EnvError(f"--wrappers wraps Gymnasium envs; {env_id} is a PettingZoo env (wrap it in its module)")
        env = self._make(env_id, env_kwargs)
        try:
            ids = tuple(env.possible_agents)
            _check_count(env_id, ids, agents)
            _, infos = env.reset(seed=0)
            specs = tuple(spec_of(f"{env_id} agent {a!r}", env.observation_space(a), env.action_space(a), obs_keys,
                                  infos.get(a)) for a in ids)
            size = probe_state(env)
            metadata = getattr(env, "metadata", {})
        finally:
            env.close()
        return EnvInfo(env_id=env_id, agent_ids=ids, specs=specs, reward_threshold=None,
                       state_dim=size if size is not None else sum(s.stored_width for s in specs) + len(ids),
                       has_state=size is not None, env_kwargs=tuple(sorted(env_kwargs.items())),
                       dropped=tuple(sorted({k for s in specs for k in s.dropped})),
                       turn_based=bool(metadata.get("turn_based")), own_agents=self.own_agents, renders=renders(metadata))

    def make_env(self, env_id: str, agents: int | None, **kwargs):
        """The env itself; `agents`, if given, must match its own."""
        env = self._make(env_id, kwargs)
        try:
            _check_count(env_id, tuple(env.possible_agents), agents)
        except EnvError:
            env.close()
            raise
        return env

    def make_batch(self, info: EnvInfo, copies: int, groups: list[list[int]]) -> PettingZooBatch:
        return PettingZooBatch(self.factory(info.env_id), copies, groups, info.specs, info.kwargs,
                               has_state=info.has_state)


class PettingZooTurnBased(PettingZooParallel):
    """`pettingzoo:<module>.<env>` where the module has only `env(**kwargs)`, an AEC game: one agent moves
    per step, the others wait (envs.aec.TurnBased), in the same batches as a Parallel env."""

    maker = "env"

    def claims(self, env_id: str) -> bool:
        return not _is_parallel(env_id)

    def factory(self, env_id: str) -> Callable[..., Any]:
        module = pettingzoo_module(env_id)

        def turn_based(**kwargs):
            from envs.aec import TurnBased, is_aec

            env = module.env(**kwargs)
            if not is_aec(env):
                raise EnvError(f"env id {env_id!r}: env() returned a {type(env).__name__}, not a PettingZoo AEC env")
            return TurnBased(env)

        return turn_based


def pettingzoo_factory(env_id: str) -> Callable[..., Any]:
    """`**kwargs -> env` in the Parallel form the batches step, for either kind of PettingZoo module."""
    return (PettingZooParallel() if _is_parallel(env_id) else PettingZooTurnBased()).factory(env_id)
