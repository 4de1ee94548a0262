"""What every env backend tells the learner and the actors about an env (EnvInfo), and the one
error a bad env id or space raises (EnvError)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import gymnasium as gym

from envs.spaces import MASK_KEY, AgentSpec, SpaceError, agent_spec


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
    turn_based: bool = False  # one agent moves per step (a PettingZoo AEC game, envs.aec)
    own_agents: bool = False  # the env decides its agents (seats of one game), rather than --agents copies of one
    renders: bool = False  # the env lists render_mode "rgb_array"

    @property
    def kwargs(self) -> dict[str, Any]:
        return dict(self.env_kwargs)

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


def one_line(x: object) -> str:
    return " ".join(str(x).split())


def spec_of(where: str, obs_space: gym.Space, act_space: gym.Space, obs_keys: tuple[str, ...],
            info: dict | None) -> AgentSpec:
    """The agent's AgentSpec (envs.spaces.agent_spec), its refusal as an EnvError."""
    try:
        return agent_spec(where, obs_space, act_space, obs_keys, info_mask=info is not None and MASK_KEY in info)
    except SpaceError as e:
        raise EnvError(str(e)) from None


def renders(metadata: dict | None) -> bool:
    return "rgb_array" in (metadata or {}).get("render_modes", ())
