"""Policy mapping: which network acts for which agent, and what each network takes and gives.

`--policies shared` (the default) is parameter sharing: one network for every agent. `per-agent`
gives each agent its own. A mapping `{pattern: policy}` (TOML table or JSON on the command line)
names groups, as RLlib's `policy_mapping_fn` does: each agent goes to the first pattern
(`fnmatch`, in the mapping's order) that matches its id. Agents of one policy must have the same
observation and action spaces. Everything here is a pure function of the env's spaces and the
config, so every process derives the same specs.
"""

from __future__ import annotations

import dataclasses
import fnmatch
from dataclasses import dataclass

import torch

from envs import EnvInfo
from envs.spaces import ActionSpec, Leaf
from marl import distributions


class PolicyError(ValueError):
    """A policy mapping that cannot work; the message is one line naming the fix."""


@dataclass(frozen=True)
class PolicySpec:
    """One network: the agents it acts for, what it reads and how it acts (plain values)."""

    name: str
    agents: tuple[int, ...]  # indices into EnvInfo.agent_ids, in the env's agent order
    obs: tuple[Leaf, ...]  # the observation's leaves, and "agent_id" (a one-hot within the policy) with --agent-id-input
    action: ActionSpec
    mask: str  # where the action mask comes from ("" if none): AgentSpec.mask
    central: bool  # the critic reads the global state (MAPPO), not the agent's own observation (IPPO)
    state_dim: int  # the global state's size with --critic central, else 0

    @property
    def agent_id_input(self) -> bool:
        return any(leaf.name == "agent_id" for leaf in self.obs)

    @property
    def critic_obs(self) -> tuple[Leaf, ...]:
        """The critic's input: MAPPO's agent-specific global state (the env's state, then the agent's own input)."""
        return (Leaf("state", None, "box", (self.state_dim,), "float32"), *self.obs) if self.central else self.obs

    def to_dict(self) -> dict:
        return dataclasses.asdict(self)

    @classmethod
    def from_dict(cls, d: dict) -> "PolicySpec":
        return cls(**{**d, "agents": tuple(d["agents"]), "obs": tuple(Leaf(**leaf) for leaf in d["obs"]),
                      "action": ActionSpec(**d["action"])})


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


def policy_specs(info: EnvInfo, policies, agent_id_input: bool, critic: str,
                 action_dist="auto") -> tuple[PolicySpec, ...]:
    """The networks of a run; PolicyError if a policy's agents do not share their spaces, or if
    `action_dist` (a registered distribution, or "auto": the space's default; or a dict of one per
    action space's name, where an algorithm acts its own way) cannot act in a policy's actions."""
    if isinstance(action_dist, str) and action_dist != "auto" and action_dist not in distributions.REGISTRY:
        raise PolicyError(f"--action-dist must be auto or one of {', '.join(distributions.REGISTRY)}, got {action_dist!r}")
    specs = []
    for name, agents in assign(info.agent_ids, policies):
        first = info.specs[agents[0]]
        for i in agents[1:]:
            if info.specs[i] != first:
                a, b = info.agent_ids[agents[0]], info.agent_ids[i]
                raise PolicyError(f"--policies: policy {name!r} acts for {a} and {b}, whose spaces differ "
                                  f"({_describe(first)} vs {_describe(info.specs[i])}); give them separate policies "
                                  f"(--policies per-agent, or a mapping)")
        obs = first.obs
        if agent_id_input and len(agents) > 1:
            obs = (*obs, Leaf("agent_id", None, "discrete", (), "int64", (len(agents),), (0,)))
        action = first.action
        chosen = action_dist.get(action.space.name, "") if isinstance(action_dist, dict) else action_dist
        if isinstance(action_dist, dict) and not chosen:
            raise PolicyError(f"policy {name!r} acts in {action.describe()}, which this algorithm does not act in "
                              f"(it acts in {' or '.join(action_dist)} actions)")
        if chosen != "auto":
            why = distributions.lookup(chosen).refuses(action)
            if why:
                raise PolicyError(f"--action-dist {chosen}: policy {name!r} acts in {action.describe()}, and {why}")
            action = dataclasses.replace(action, kind=chosen)
        specs.append(PolicySpec(name, tuple(agents), obs, action, first.mask, critic == "central",
                                info.state_dim if critic == "central" else 0))
    return tuple(specs)


def specs_of(cfg, info: EnvInfo) -> tuple[PolicySpec, ...]:
    """The networks of the run that `cfg` configures: an algorithm that acts its own way (a value
    method's epsilon-greedy Q-network, SAC's squashed Gaussian) chooses the distribution, else
    --action-dist does."""
    from marl.algorithms import ALGORITHMS

    own, dist = ALGORITHMS[cfg.algo].action_dists, cfg.action_dist
    if own and dist != "auto":
        raise PolicyError(f"--action-dist {dist}: --algo {cfg.algo} chooses its own ("
                          f"{', '.join(f'{d} for {s}' for s, d in own.items())}); drop --action-dist")
    if not own and dist == "epsilon_greedy":
        raise PolicyError(f"--action-dist epsilon_greedy acts on Q-values, which --algo {cfg.algo} does not learn; "
                          f"use --algo dqn")
    if own:
        try:
            return policy_specs(info, cfg.policies, cfg.agent_id_input, cfg.critic, own)
        except PolicyError as e:
            raise PolicyError(f"--algo {cfg.algo}: {e}") from None
    return policy_specs(info, cfg.policies, cfg.agent_id_input, cfg.critic, dist)


def sides(specs: tuple[PolicySpec, ...], agent_ids: tuple[str, ...]) -> list[tuple[str, tuple[int, ...]]]:
    """The sides of a competitive game, (name, agent indices) each: each policy's agents where there are
    several policies (a team per policy: simple_tag's adversaries and its runner), else each agent alone
    (the seats of a symmetric game that one shared policy plays). --opponents pool hands one side to a
    frozen snapshot; `marl.evaluate --opponent` plays each side in turn."""
    if len(specs) > 1:
        return [(s.name, tuple(s.agents)) for s in specs]
    return [(agent_ids[i], (i,)) for i in specs[0].agents]


def agent_ids(spec: PolicySpec, lead: tuple[int, ...], device=None) -> torch.Tensor:
    """The "agent_id" leaf for [*lead, n] slots: each agent's position within its policy."""
    return torch.arange(len(spec.agents), device=device).expand(*lead, len(spec.agents))


def policy_obs(spec: PolicySpec, arrays: dict, lead: tuple[int, ...], device=None) -> dict[str, torch.Tensor]:
    """The env's arrays (NumPy's, or a torch env's tensors on `device`) for the policy's [*lead, n]
    slots as tensors (no copies), with the "agent_id" leaf where the policy reads one."""
    obs = {k: torch.as_tensor(v) for k, v in arrays.items()}
    if spec.agent_id_input:
        obs["agent_id"] = agent_ids(spec, lead, device)
    return obs


def critic_state(spec: PolicySpec, state: torch.Tensor | None) -> torch.Tensor | None:
    """The env's global state [..., state_dim] (one per env copy) repeated for each of the policy's
    n agents, or None when the critic reads the actor's input.

    The critic then reads it together with the agent's own input, which is MAPPO's agent-specific
    global state (Yu et al. 2022, Sec. 5.1 "Agent-Specific Global State"): the global state alone
    tells a shared critic neither which agent it values nor what that agent sees relative to itself.
    """
    if not spec.central:
        return None
    n = len(spec.agents)
    return state.unsqueeze(-2).expand(*state.shape[:-1], n, state.shape[-1])


def _describe(spec) -> str:
    return spec.describe()
