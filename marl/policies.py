"""Policy mapping: which network acts for which agent, and what each network takes and gives.

`--policies shared` (the default) is parameter sharing: one network for every agent. `per-agent`
gives each agent its own. A mapping `{pattern: policy}` (TOML table or JSON on the command line)
names groups, as RLlib's `policy_mapping_fn` does: each agent goes to the first pattern
(`fnmatch`, in the mapping's order) that matches its id. Agents of one policy must have the same
observation and action spaces. Everything here is a pure function of the env's spaces and the
config, so every process derives the same specs.
"""

from __future__ import annotations

import fnmatch
from dataclasses import dataclass

import torch

from envs import EnvInfo


class PolicyError(ValueError):
    """A policy mapping that cannot work; the message is one line naming the fix."""


@dataclass(frozen=True)
class PolicySpec:
    """One network: the agents it acts for and its input and output sizes."""

    name: str
    agents: tuple[int, ...]  # indices into EnvInfo.agent_ids, in the env's agent order
    env_obs_dim: int  # the env's observation size for these agents
    obs_dim: int  # the actor's input: env_obs_dim, plus a one-hot of the agent within the policy if --agent-id-input
    critic_dim: int  # the critic's input: obs_dim (local critic), or the global state + obs_dim with --critic central
    central: bool  # the critic reads the global state (MAPPO), not the agent's own observation (IPPO)
    action_kind: str
    action_shape: tuple[int, ...]
    num_actions: int

    @property
    def action_dtype(self) -> torch.dtype:
        return torch.int64 if self.action_kind == "discrete" else torch.float32

    @property
    def agent_id_dim(self) -> int:
        return self.obs_dim - self.env_obs_dim

    def shape(self) -> dict:
        """What must match for saved weights to load into this network (plain values)."""
        return {"agents": list(self.agents), "obs_dim": self.obs_dim, "critic_dim": self.critic_dim,
                "central": self.central, "action_kind": self.action_kind, "num_actions": self.num_actions}


def assign(agent_ids: tuple[str, ...], policies) -> list[tuple[str, list[int]]]:
    """(policy name, agent indices) per policy, in order of first appearance. `policies` is
    "shared", "per-agent", or a mapping from agent-id patterns to policy names."""
    if policies == "shared":
        return [("shared", list(range(len(agent_ids))))]
    if policies == "per-agent":
        return [(_name(agent, "agent id"), [i]) for i, agent in enumerate(agent_ids)]
    if not isinstance(policies, dict) or not policies:
        raise PolicyError(f"--policies must be shared, per-agent, or a mapping of agent patterns to policy names, got {policies!r}")
    groups: dict[str, list[int]] = {}
    for i, agent in enumerate(agent_ids):
        name = next((p for pattern, p in policies.items() if fnmatch.fnmatchcase(agent, pattern)), None)
        if name is None:
            raise PolicyError(f"--policies: agent {agent!r} matches none of the patterns {list(policies)}; "
                              f"add a pattern for it (e.g. \"*\" last as a catch-all)")
        groups.setdefault(_name(str(name), "policy name"), []).append(i)
    chosen = {p: [a for a in agent_ids if next(q for q in policies if fnmatch.fnmatchcase(a, q)) == p] for p in policies}
    unused = [p for p, agents in chosen.items() if not agents]
    if unused:
        raise PolicyError(f"--policies: pattern {unused[0]!r} takes no agent of this env (agents: {', '.join(agent_ids)}; "
                          f"the first pattern that matches an agent wins)")
    return list(groups.items())


def _name(name: str, what: str) -> str:
    """A policy's name keys its module and its TensorBoard tags: no dots, no slashes, not empty."""
    if not name or "." in name or "/" in name:
        raise PolicyError(f"--policies: {what} {name!r} cannot name a policy (it must be non-empty, without '.' or '/'); "
                          f"map the agents to another name")
    return name


def policy_specs(info: EnvInfo, policies, agent_id_input: bool, critic: str) -> tuple[PolicySpec, ...]:
    """The networks of a run; PolicyError if a policy's agents do not share their spaces."""
    specs = []
    for name, agents in assign(info.agent_ids, policies):
        first = info.specs[agents[0]]
        for i in agents[1:]:
            if info.specs[i] != first:
                a, b = info.agent_ids[agents[0]], info.agent_ids[i]
                raise PolicyError(f"--policies: policy {name!r} acts for {a} and {b}, whose spaces differ "
                                  f"({_describe(first)} vs {_describe(info.specs[i])}); give them separate policies "
                                  f"(--policies per-agent, or a mapping)")
        one_hot = len(agents) if agent_id_input and len(agents) > 1 else 0
        obs_dim = first.obs_dim + one_hot
        critic_dim = info.state_dim + obs_dim if critic == "central" else obs_dim
        specs.append(PolicySpec(name, tuple(agents), first.obs_dim, obs_dim, critic_dim, critic == "central",
                                first.action_kind, first.action_shape, first.num_actions))
    return tuple(specs)


def specs_of(cfg, info: EnvInfo) -> tuple[PolicySpec, ...]:
    """The networks of the run that `cfg` configures."""
    return policy_specs(info, cfg.policies, cfg.agent_id_input, cfg.critic)


def actor_input(spec: PolicySpec, obs: torch.Tensor) -> torch.Tensor:
    """[..., n, env_obs_dim] observations of the policy's n agents -> the actor's input [..., n, obs_dim]."""
    if not spec.agent_id_dim:
        return obs
    return torch.cat([obs, torch.eye(spec.agent_id_dim, dtype=obs.dtype).expand(*obs.shape[:-1], -1)], dim=-1)


def critic_input(spec: PolicySpec, actor_obs: torch.Tensor, state: torch.Tensor | None) -> torch.Tensor | None:
    """The critic's input for the policy's n agents, or None when it reads the actor's input.

    With --critic central: the env's global state `state` [..., state_dim] (one per env copy),
    followed by the agent's own actor input, which is MAPPO's agent-specific global state (Yu et
    al. 2022, Sec. 5.1 "Agent-Specific Global State"): the global state alone tells a shared critic
    neither which agent it values nor what that agent sees relative to itself.
    """
    if not spec.central:
        return None
    n = len(spec.agents)
    shared = state.unsqueeze(-2).expand(*state.shape[:-1], n, state.shape[-1])
    return torch.cat([shared, actor_obs], dim=-1)


def _describe(spec) -> str:
    action = f"Discrete({spec.num_actions})" if spec.action_kind == "discrete" else f"Box({spec.num_actions})"
    return f"obs {spec.obs_dim}, actions {action}"
