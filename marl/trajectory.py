"""The experience that crosses from an actor to the coordinator, as torch tensors."""

from __future__ import annotations

from dataclasses import dataclass

import torch


@dataclass
class Trajectory:
    """T steps of E env copies x the n agents of one policy, from one actor request.

    Per-step fields are [T, E, n, ...]; the agent axis is the policy's agents in the env's agent
    order (`PolicySpec.agents`). `valid` is False on steps that are not transitions (an autoreset
    step, an agent that has left its episode, or a slot that has finished its episodes in
    `--rollout episodes`); they must not enter a training batch.
    """

    obs: torch.Tensor  # [T, E, n, obs_dim] float32, the actor's input (agent one-hot included)
    actions: torch.Tensor  # [T, E, n, *action_shape]
    logprobs: torch.Tensor  # [T, E, n] log pi_behaviour(a|o)
    values: torch.Tensor  # [T, E, n] V of the behaviour policy
    rewards: torch.Tensor  # [T, E, n]
    terminated: torch.Tensor  # [T, E, n] bool
    truncated: torch.Tensor  # [T, E, n] bool
    valid: torch.Tensor  # [T, E, n] bool
    bootstrap_value: torch.Tensor  # [T, E, n] V(final observation) where truncated, else 0
    next_value: torch.Tensor  # [E, n] V of the observation after the last step
    critic_obs: torch.Tensor | None = None  # [T, E, n, critic_dim]: the centralized critic's input, only with --critic central

    @property
    def steps(self) -> int:
        """Agent-steps that were real transitions."""
        return int(self.valid.sum())


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
        return sum(tr.steps for tr in self.trajectories.values())


def flatten_valid(traj: Trajectory, advantages: torch.Tensor, returns: torch.Tensor) -> dict[str, torch.Tensor]:
    """The valid transitions of a trajectory as flat training samples [B, ...]."""
    mask = traj.valid.reshape(-1)
    lead = mask.numel()

    def flat(x: torch.Tensor) -> torch.Tensor:
        return x.reshape(lead, *x.shape[3:])[mask]

    samples = {
        "obs": flat(traj.obs),
        "actions": flat(traj.actions),
        "logprobs": flat(traj.logprobs),
        "values": flat(traj.values),
        "advantages": flat(advantages),
        "returns": flat(returns),
    }
    if traj.critic_obs is not None:
        samples["critic_obs"] = flat(traj.critic_obs)
    return samples
