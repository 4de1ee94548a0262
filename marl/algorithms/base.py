"""The seam between the learner and an algorithm.

An algorithm turns a learner rank's share of time-major trajectories into training targets, says
how many passes it makes over them, and gives the loss of a minibatch. The learner does what is
the same for all of them: the forward pass, backward, the global-norm clip, the optimizer step,
FSDP, and the all-reduce of the metrics by name. Nothing here knows of processes, RPC or FSDP.

An algorithm declares what it can do (`turn_based`, ...) as class attributes, and reads its
hyperparameters from `cfg`: the fields of its own `marl.config.Section` (as V-trace's
`VTraceSection`), which `marl.config.SECTIONS` composes into `Config`.

An off-policy algorithm (`off_policy`: DQN, ...) follows `OffPolicyAlgorithm` instead: the
learner keeps a replay shard per rank of the transitions it cuts (`marl.replay.nstep`), and the
algorithm owns its networks (the policy, targets, critics, a mixer: `TrainingNets`), its
optimizers, its loss on a sampled batch, its target updates and its exploration schedule.
"""

from __future__ import annotations

from typing import Protocol

import torch
from torch import nn


class Algorithm(Protocol):
    name: str
    epochs: int  # passes over each batch
    needs_current: bool  # targets read the current network's log-probs and values over the trajectories
    # Capabilities, which marl.run checks before a run starts (instead of refusing algorithms by name):
    turn_based: bool  # its targets skip the steps an agent sat out waiting for its turn (traj["valid"])

    def targets(self, traj: dict, current: tuple[torch.Tensor, torch.Tensor] | None) -> tuple[torch.Tensor, torch.Tensor]:
        """(advantages, value targets), each [T, S, n], for one policy's trajectories [T, S, n, ...].
        `current` is (log-probs of the taken actions, values) under the learner's weights, where
        `needs_current`."""

    def minibatches(self, sizes: dict[str, int], k: int, generator: torch.Generator) -> list[dict[str, torch.Tensor]]:
        """One pass: for each of `k` minibatches, the unit indices of each policy (`sizes`: units per
        policy, a multiple of k). A unit is a sample, or for a recurrent network a whole sequence
        (the learner decides which: `marl.trajectory.sequences`)."""

    def loss(self, new_logp: torch.Tensor, entropy: torch.Tensor, new_value: torch.Tensor,
             mb: dict) -> tuple[torch.Tensor, dict[str, torch.Tensor]]:
        """The minibatch's loss to minimise and its detached metrics by name."""


class OffPolicyAlgorithm(Protocol):
    name: str
    off_policy: bool  # True
    value_based: bool  # its policies are Q-networks (marl.models.q_network), else actor-critics
    turn_based: bool
    team: bool  # one transition per env copy with every agent in it (VDN, QMIX), else one per agent-step
    action_dist: str | None  # the distribution its policies act with ("epsilon_greedy"), None: the space's own

    def networks(self, policy: nn.Module) -> nn.Module:
        """Its networks around the policy set (a marl.models.training_nets.TrainingNets)."""

    def optimizers(self, nets: nn.Module) -> list[torch.optim.Optimizer]: ...

    def loss(self, nets: nn.Module, batch: dict[str, dict]) -> tuple[torch.Tensor, dict[str, torch.Tensor]]:
        """The loss of one gradient step on each policy's sampled transitions (marl.replay), and its
        detached metrics as `<policy>/<name>`; run inside the root's forward."""

    def after_update(self, nets: nn.Module, updates: int) -> None:
        """After the `updates`-th gradient step of the run: the target networks' update, when due."""

    def explore(self, nets: nn.Module, step: int) -> dict[str, float]:
        """Set the actors' exploration for the rollouts after agent-step `step`; returns it as metrics."""


def sample_minibatches(sizes: dict[str, int], k: int, generator: torch.Generator) -> list[dict[str, torch.Tensor]]:
    """Every policy's samples shuffled and cut into `k` equal minibatches (CleanRL's ppo.py)."""
    perms = {name: torch.randperm(n, generator=generator) for name, n in sizes.items()}
    return [{name: p[i * (sizes[name] // k):(i + 1) * (sizes[name] // k)] for name, p in perms.items()} for i in range(k)]


def learning_rate(cfg, global_step: int) -> float:
    """The configured rate, annealed linearly over the step budget down to 0.1% of it (CleanRL's schedule)."""
    frac = max(1.0 - global_step / cfg.total_steps, 0.0) if cfg.anneal_lr else 1.0
    return cfg.learning_rate * max(frac, 1e-3)


def episode_flags(traj: dict, values: torch.Tensor, gamma: float) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """(discounts, next values, continues) of the V-trace recursion from a trajectory's flags and
    `values` [T, ...]: gamma unless the episode terminated; V(x_{t+1}) from `values`, or where only
    the actor saw the next observation (past the last step, and the final observation of a
    truncation) the actor's value of it; 0 where the episode ended."""
    done = traj["terminated"] | traj["truncated"]
    later = torch.cat([values[1:], traj["next_value"].unsqueeze(0)])
    next_values = torch.where(traj["truncated"], traj["bootstrap_value"], later)
    discounts = torch.full_like(values, gamma).masked_fill(traj["terminated"], 0.0)
    return discounts, next_values, (~done).to(values.dtype)


def linear_schedule(start: float, end: float, duration: float, step: int) -> float:
    """From `start` at step 0 to `end` at `duration`, then `end` (CleanRL's linear_schedule)."""
    if duration <= 0:
        return end
    return start + (end - start) * min(step / duration, 1.0)


def gradient_steps(cfg, before: int, after: int) -> int:
    """Gradient steps an off-policy algorithm owes for the agent-steps collected between `before`
    and `after`: one per --train-frequency agent-steps past --learning-starts. A function of the
    global counts only, so that every learner rank takes the same number."""
    def owed(step: int) -> int:
        return int((step - cfg.learning_starts) // cfg.train_frequency) if step >= cfg.learning_starts else 0
    return owed(after) - owed(before)
