"""The multi-agent env protocol at marl's edge: PettingZoo's Parallel API, so that PettingZoo envs
plug in without glue. Written down as a typing.Protocol; nothing needs to inherit from it."""

from __future__ import annotations

from typing import Any, Protocol, runtime_checkable

import gymnasium as gym


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
