"""DQN (Mnih et al. 2015) with double Q-learning (van Hasselt et al. 2016), the dueling head (Wang
et al. 2016, in marl.models.q_network), n-step returns, a Huber loss and a target network updated
hard or softly. On a multi-agent env each agent learns from its own transitions with the shared
(or its policy's) Q-network: independent Q-learning (IQL, Tan 1993)."""

from __future__ import annotations

import torch
import torch.nn.functional as F

from marl.algorithms.base import linear_schedule
from marl.distributions.categorical import masked
from marl.models.training_nets import TrainingNets


def td_target(returns: torch.Tensor, discounts: torch.Tensor, next_q_target: torch.Tensor,
              next_q_online: torch.Tensor | None = None, next_mask: torch.Tensor | None = None) -> torch.Tensor:
    """y = G^(n) + gamma^n Q'(s', a*) with a* = argmax_a Q(s', a) under the online network (double
    DQN, van Hasselt et al. 2016 Eq. 4) or, without `next_q_online`, under the target network
    itself (Mnih et al. 2015: max_a Q'(s', a)); `discounts` is gamma^n, or 0 past a termination.
    Only legal actions (`next_mask`) are chosen."""
    chooser = next_q_target if next_q_online is None else next_q_online
    best = masked(chooser, next_mask).argmax(-1, keepdim=True)
    return returns + discounts * next_q_target.gather(-1, best).squeeze(-1)


def td_loss(q_taken: torch.Tensor, target: torch.Tensor) -> torch.Tensor:
    """The Huber loss of the TD error (delta 1), averaged: Mnih et al. 2015's clipped error gradient."""
    return F.smooth_l1_loss(q_taken, target.detach())


class DQN:
    name = "dqn"
    off_policy = True
    value_based = True  # its policies are Q-networks, acting epsilon-greedily (marl.distributions.epsilon_greedy)
    turn_based = False  # an agent's transition spanning the other players' moves is not cut yet
    team = False  # one transition per agent-step
    action_dist = "epsilon_greedy"

    def __init__(self, cfg):
        self.cfg = cfg

    def networks(self, policy) -> TrainingNets:
        return TrainingNets(policy, targets=("policy",))

    def optimizers(self, nets: TrainingNets) -> list[torch.optim.Optimizer]:
        return [torch.optim.Adam(nets.policy.parameters(), lr=self.cfg.learning_rate, fused=True)]

    def epsilon(self, step: int) -> float:
        """CleanRL's linear schedule: start_e to end_e over the first exploration_fraction of the budget."""
        cfg = self.cfg
        return linear_schedule(cfg.start_e, cfg.end_e, cfg.exploration_fraction * cfg.total_steps, step)

    def explore(self, nets: TrainingNets, step: int) -> dict[str, float]:
        eps = self.epsilon(step)
        for net in nets.policy.policies.values():
            net.epsilon.fill_(eps)
        return {"epsilon": eps}

    def loss(self, nets: TrainingNets, batch: dict[str, dict]) -> tuple[torch.Tensor, dict[str, torch.Tensor]]:
        """The sum over policies of each one's mean TD loss on its sampled transitions."""
        total, stats = 0.0, {}
        for name, b in batch.items():
            online, target = nets.policy.policies[name], nets.targets["policy"].policies[name]
            q = online.q_values(b["obs"])
            q_taken = q.gather(-1, b["actions"].long().unsqueeze(-1)).squeeze(-1)
            with torch.no_grad():
                next_online = online.q_values(b["next_obs"]) if self.cfg.double_q else None
                y = td_target(b["returns"], b["discounts"], target.q_values(b["next_obs"]), next_online,
                              b.get("next_action_mask"))
            loss = td_loss(q_taken, y)
            total = total + loss
            stats[f"{name}/td_loss"], stats[f"{name}/q_values"] = loss.detach(), q_taken.detach().mean()
        return total, stats

    def after_update(self, nets: TrainingNets, updates: int) -> None:
        """The target network follows every target_network_frequency gradient steps (tau 1: copied)."""
        if updates % self.cfg.target_network_frequency == 0:
            nets.update_targets(self.cfg.tau)
