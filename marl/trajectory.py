"""The experience that crosses from an actor to the coordinator: nested dicts of torch tensors.

A trajectory is T steps of E env copies x the n agents of one policy, from one actor request:
every field of `marl.specs.step_fields` as [T, E, n, ...] (time-major; the agent axis is the
policy's agents in the env's agent order, `PolicySpec.agents`), plus
- `bootstrap_value` [T, E, n]: V(final observation) where the step truncated, else 0;
- `next_value` [E, n]: V of the observation after the last step.
`valid` is False on steps that are not transitions (an autoreset step, an agent that has left its
episode, or a slot that has finished its episodes in `--rollout episodes`); they must not enter a
training batch.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

from marl.specs import TARGET_INPUTS, tree_map

Trajectory = dict  # field -> tensor, "obs" -> {leaf -> tensor}


@dataclass
class Rollout:
    """One actor request's result: a Trajectory per policy, and the episodes that finished."""

    trajectories: dict[str, Trajectory]
    episode_returns: torch.Tensor  # [K] float64, one per episode finished in this rollout
    episode_lengths: torch.Tensor  # [K] int64
    episode_agents: torch.Tensor  # [K] int64 index into the env's agent order
    policy_version: int
    actor: int
    collect_seconds: float  # actor-side wall time of the rollout

    @property
    def steps(self) -> int:
        """Agent-steps that were real transitions."""
        return sum(int(tr["valid"].sum()) for tr in self.trajectories.values())


def flatten_valid(traj: Trajectory, advantages: torch.Tensor, returns: torch.Tensor) -> dict:
    """The valid transitions of a trajectory as flat training samples [B, ...], every field but
    the targets' inputs, with the targets added."""
    mask = traj["valid"].reshape(-1)
    lead = mask.numel()

    def flat(x: torch.Tensor) -> torch.Tensor:
        return x.reshape(lead, *x.shape[3:])[mask]

    fields = {k: v for k, v in traj.items() if k not in (*TARGET_INPUTS, "bootstrap_value", "next_value")}
    return {**tree_map(flat, fields), "advantages": flat(advantages), "returns": flat(returns)}
