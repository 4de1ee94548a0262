"""DQN (Mnih et al. 2015) with double Q-learning (van Hasselt et al. 2016), the dueling head (Wang
et al. 2016, in marl.models.q_network), n-step returns, a Huber loss and a target network updated
hard or softly. On a multi-agent env each agent learns from its own transitions with the shared
(or its policy's) Q-network: independent Q-learning (IQL, Tan 1993)."""

from __future__ import annotations

import torch
import torch.nn.functional as F

from marl.algorithms.base import OffPolicy, linear_schedule
from marl.replay import nstep_windows
from marl.distributions.categorical import masked
from marl.models.training_nets import TrainingNets
from marl.optim import Adam


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


class DQN(OffPolicy):
    """Each policy's Q-network learns from its agents' own transitions, its target a copy of it."""

    name = "dqn"
    recurrent = True  # a recurrent Q-network trains on stored sequences (marl.replay.agent_sequences)

    def networks(self, policy, specs) -> TrainingNets:
        return TrainingNets(policy, targets=("policy",))

    def optimizers(self, nets: TrainingNets) -> dict[str, torch.optim.Optimizer]:
        return {"q": Adam(nets.policy.parameters(), lr=self.cfg.learning_rate)}

    def epsilon(self, step: int) -> float:
        """CleanRL's linear schedule: start_e to end_e over the first exploration_fraction of the budget."""
        cfg = self.cfg
        return linear_schedule(cfg.start_e, cfg.end_e, cfg.exploration_fraction * cfg.total_steps, step)

    def explore(self, nets: TrainingNets, step: int) -> dict[str, float]:
        eps = self.epsilon(step)
        for net in nets.policies.values():
            net.epsilon.fill_(eps)
        return {"epsilon": eps}

    def loss(self, nets: TrainingNets, batch: dict[str, dict], phase: str) -> tuple[torch.Tensor, dict[str, torch.Tensor]]:
        """The sum over policies of each one's mean TD loss on its sampled transitions."""
        total, stats = 0.0, {}
        for name, b in batch.items():
            online, target = nets.policies[name], nets.targets["policy"].policies[name]
            if online.state_size:
                loss, q_mean = self.sequence_loss(online, target, b)
                total = total + loss
                stats[f"{name}/td_loss"], stats[f"{name}/q_values"] = loss.detach(), q_mean
                continue
            q, next_online = self.online_q(online, b["obs"], b["next_obs"])
            q_taken = q.gather(-1, b["actions"].long().unsqueeze(-1)).squeeze(-1)
            with torch.no_grad():
                y = td_target(b["returns"], b["discounts"], target.q_values(b["next_obs"]), next_online,
                              b.get("next_action_mask"))
            loss = td_loss(q_taken, y)
            total = total + loss
            stats[f"{name}/td_loss"], stats[f"{name}/q_values"] = loss.detach(), q_taken.detach().mean()
        return total, stats

    def online_q(self, online, obs: dict, next_obs: dict) -> tuple[torch.Tensor, torch.Tensor | None]:
        """The online network's Q at the observations, and (detached; double Q only) at the next ones,
        from one forward over both: half the calls of two."""
        if not self.cfg.double_q:
            return online.q_values(obs), None
        both = online.q_values({k: torch.cat([obs[k], next_obs[k]]) for k in obs})
        q, next_q = both.chunk(2)
        return q, next_q.detach()


    def sequence_loss(self, online, target, b: dict) -> tuple[torch.Tensor, torch.Tensor]:
        """A recurrent Q-network's loss on sequences (marl.replay.agent_sequences) replayed from their
        stored states (R2D2, Kapturowski et al. 2019): the Huber TD loss over their valid steps."""
        tm = lambda x: x.transpose(0, 1)  # noqa: E731 - [N, L, ...] -> time-major
        mask = b.get("action_mask")
        taken, greedy = unroll(online, target, {k: tm(v) for k, v in b["obs"].items()}, tm(b["starts"]), b["core_state"],
                               tm(b["actions"]), None if mask is None else tm(mask), self.cfg.double_q)
        ret, disc, t_next = nstep_windows(tm(b["rewards"]), tm(b["terminated"]), tm(b["truncated"]), self.cfg.n_step,
                                          self.cfg.gamma)
        y = ret + disc * greedy.gather(0, t_next)
        valid = tm(b["valid"])
        return td_loss(taken[valid], y[valid]), taken.detach()[valid].mean()


def unroll(online, target, obs: dict, starts: torch.Tensor, core: torch.Tensor, actions: torch.Tensor,
           mask: torch.Tensor | None, double: bool) -> tuple[torch.Tensor, torch.Tensor]:
    """Time-major sequences of L + 1 steps (the last one only bootstrapped from) replayed from their
    stored states by a recurrent Q-network and its target: (Q of the taken actions [L, M], with
    grad; and detached, at every step t <= L, the target's Q of the action the online network
    (double Q) or the target itself picks there among the legal ones [L + 1, M])."""
    q, _ = online.q_values(obs, core, starts)
    with torch.no_grad():
        q_target, _ = target.q_values(obs, core, starts)
        best = masked(q.detach() if double else q_target, mask).argmax(-1, keepdim=True)
        greedy = q_target.gather(-1, best).squeeze(-1)
    return q[:-1].gather(-1, actions.long().unsqueeze(-1)).squeeze(-1), greedy


class IQL(DQN):
    """Independent Q-learning (Tan 1993): DQN on a multi-agent env, each agent learning from its own
    transitions as if the others were part of the env, through its policy's Q-network (shared by
    default: parameter sharing). The name BenchMARL and EPyMARL give it."""

    name = "iql"
