"""The batch of experience that crosses from an actor to the coordinator, as torch tensors."""

from __future__ import annotations

from dataclasses import dataclass

import torch


@dataclass
class Trajectory:
    """T steps of E env copies x N agents, from one actor request.

    Per-step fields are [T, E, N, ...]; the agent axis is the env's agent order (`EnvInfo.agent_ids`).
    `valid` is False on steps that are not transitions (an autoreset step, or a slot that has
    finished its episodes in `--rollout episodes`); they must not enter a training batch.
    """

    obs: torch.Tensor  # [T, E, N, *obs_shape] float32, the observation acted on
    actions: torch.Tensor  # [T, E, N, *action_shape]
    logprobs: torch.Tensor  # [T, E, N] log pi_behaviour(a|o)
    values: torch.Tensor  # [T, E, N] V(o) of the behaviour policy
    rewards: torch.Tensor  # [T, E, N]
    terminated: torch.Tensor  # [T, E, N] bool
    truncated: torch.Tensor  # [T, E, N] bool
    valid: torch.Tensor  # [T, E, N] bool
    bootstrap_value: torch.Tensor  # [T, E, N] V(final observation) where truncated, else 0
    next_value: torch.Tensor  # [E, N] V of the observation after the last step
    episode_returns: torch.Tensor  # [K] float64, one per episode finished in this rollout
    episode_lengths: torch.Tensor  # [K] int64
    episode_agents: torch.Tensor  # [K] int64 index into the agent order
    policy_version: int
    actor: int
    collect_seconds: float  # actor-side wall time of the rollout

    @property
    def steps(self) -> int:
        """Agent-steps that were real transitions."""
        return int(self.valid.sum())


def flatten_valid(traj: Trajectory, advantages: torch.Tensor, returns: torch.Tensor) -> dict[str, torch.Tensor]:
    """The valid transitions of a trajectory as flat training samples [B, ...]."""
    mask = traj.valid.reshape(-1)
    lead = mask.numel()

    def flat(x: torch.Tensor) -> torch.Tensor:
        return x.reshape(lead, *x.shape[3:])[mask]

    return {
        "obs": flat(traj.obs),
        "actions": flat(traj.actions),
        "logprobs": flat(traj.logprobs),
        "values": flat(traj.values),
        "advantages": flat(advantages),
        "returns": flat(returns),
    }
