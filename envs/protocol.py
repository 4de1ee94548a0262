"""The env protocols, written down as typing.Protocols (nothing needs to inherit from them):

- ParallelEnv: the multi-agent env at marl's edge, PettingZoo's Parallel API, so that PettingZoo
  envs plug in without glue;
- AgentBatch: the grouped array form the actors step (its semantics: envs/batched.py's module doc);
- Backend: one kind of env id (Gymnasium, PettingZoo Parallel, PettingZoo AEC, ...), which says what
  its envs look like and builds them in both forms (envs.registry picks one by the id's prefix).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, Protocol, runtime_checkable

import gymnasium as gym
import numpy as np

if TYPE_CHECKING:
    from envs.info import EnvInfo


@runtime_checkable
class ParallelEnv(Protocol):
    """All agents act at once; every dict is keyed by agent id.

    `possible_agents` is every agent that may ever act, in a fixed order (the order marl's arrays
    use); `agents` is those still in the current episode: an agent that terminates or truncates
    leaves it, and the episode is over when it is empty.
    """

    possible_agents: list[str]
    agents: list[str]
    metadata: dict[str, Any]

    def observation_space(self, agent: str) -> gym.Space: ...

    def action_space(self, agent: str) -> gym.Space: ...

    def reset(self, seed: int | None = None, options: dict | None = None) -> tuple[dict, dict]:
        """-> (observations, infos) for every agent in `agents`."""

    def step(self, actions: dict) -> tuple[dict, dict, dict, dict, dict]:
        """actions for every agent in `agents` -> (observations, rewards, terminations, truncations, infos)."""

    def close(self) -> None: ...


class AgentBatch(Protocol):
    """`copies` copies of an env as lists with one array per group of agents (envs/batched.py's module doc).

    A batch of a backend that steps on a torch device (`Backend.on_device`: VMAS) has a `device`
    attribute, and speaks the same protocol in torch tensors on that device, actions included: no
    NumPy between the env and the policy."""

    active: list  # [g]: (copies, n_g) bool, the slot's NEXT step is a real transition (NumPy, or a torch batch's tensors)
    masks: list  # [g]: (copies, n_g, mask_size) bool legal actions, or None
    rendered_episode_over: bool  # after step(): the rendered copy's next step is a reset
    state_dim: int

    def reset(self, seed: int | None) -> list[dict[str, np.ndarray]]:
        """-> obs[g]: {leaf name: (copies, n_g, *leaf.shape)}."""

    def step(self, actions: list[np.ndarray]) -> tuple[list, list, list, list, list[np.ndarray]]:
        """actions[g]: (copies, n_g, *action.shape) -> obs, rewards, terminated, truncated, active per group."""

    def state(self) -> np.ndarray:
        """-> (copies, state_dim) float32, the central critic's input for the current observations."""

    def render(self) -> np.ndarray: ...

    def close(self) -> None: ...


class Backend(Protocol):
    """One kind of env id. `prefix` is how its ids start ("" for the fallback, Gymnasium's);
    `claims(env_id)` (after the prefix matched) whether this backend takes the id."""

    prefix: str
    own_agents: bool  # the env decides its agents (a game's seats), rather than being --agents copies of one
    on_device: bool  # its batches are torch tensors on a device make_batch is given (VMAS), not NumPy arrays

    def claims(self, env_id: str) -> bool: ...

    def describe(self, env_id: str, agents: int | None, env_kwargs: dict[str, Any], obs_keys: tuple[str, ...],
                 wrappers: tuple[str, ...]) -> EnvInfo:
        """What the env's agents look like, and what it can do (turn_based, has_state, renders); EnvError if unusable."""

    def make_env(self, env_id: str, agents: int | None, **kwargs) -> ParallelEnv:
        """One copy in the Parallel form (dicts keyed by agent), for users, evaluation and tests."""

    def make_batch(self, info: EnvInfo, copies: int, groups: list[list[int]]) -> AgentBatch:
        """`copies` copies in the grouped array form the actors step. A backend `on_device` also takes
        `device=`, where its batch steps (envs.registry.make_agent_batch passes it only to those)."""


def check_split(groups: list[list[int]], agent_ids) -> None:
    """Groups of agent indices (one group per policy) must split all the agents: non-empty, disjoint, complete."""
    n = len(agent_ids)
    if any(not g for g in groups) or sorted(i for g in groups for i in g) != list(range(n)):
        raise ValueError(f"groups {groups} must split agents 0..{n - 1} ({', '.join(agent_ids)}) into "
                         "non-empty, disjoint groups")


class AgentCounts:
    """The properties every Parallel env derives from `agents` and `possible_agents`, for our own envs."""

    @property
    def unwrapped(self):
        return self

    @property
    def num_agents(self) -> int:
        return len(self.agents)

    @property
    def max_num_agents(self) -> int:
        return len(self.possible_agents)
