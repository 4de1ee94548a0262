"""Soft actor-critic (Haarnoja et al. 2018, "Soft Actor-Critic Algorithms and Applications"): twin
soft Q-functions with target copies, a stochastic actor, and the temperature alpha tuned to a
target entropy; for Discrete actions the expectations over actions are exact sums (Christodoulou
2019, "Soft Actor-Critic for Discrete Action Settings"). Each policy of a run gets its own critics
and temperature; on a multi-agent env each agent learns from its own transitions (independent
SAC, BenchMARL's ISAC; MASAC with --critic central, whose critics read the global state).

Two phases per gradient step, as CleanRL's sac_continuous_action.py: the critics' step on the TD
loss, then the actor's and the temperature's step on theirs (the actor's loss also reaches the
critics' gradients, which the next critic step clears first).
"""

from __future__ import annotations

import math

import torch
import torch.nn.functional as F
from torch import nn

from marl import distributions
from marl.algorithms.base import OffPolicy
from marl.distributions.categorical import masked
from marl.models.sac import SoftQ
from marl.models.training_nets import TrainingNets
from marl.optim import Adam


def soft_target(returns: torch.Tensor, discounts: torch.Tensor, next_q1: torch.Tensor, next_q2: torch.Tensor,
                next_logp: torch.Tensor, alpha: torch.Tensor, next_probs: torch.Tensor | None = None) -> torch.Tensor:
    """y = G + gamma^n V(s'), the soft state value V(s') = E_{a'~pi}[min_j Q'_j(s', a') - alpha log pi(a'|s')]
    (Haarnoja et al. 2018, Eq. 3 with the clipped double Q of Fujimoto et al. 2018): of one sampled a'
    for Box actions ([B] inputs), or the exact sum over actions weighted by `next_probs` for Discrete
    ([B, A] inputs; Christodoulou 2019, Eq. 10)."""
    v = torch.min(next_q1, next_q2) - alpha * next_logp
    if next_probs is not None:
        v = (next_probs * v).sum(-1)
    return returns + discounts * v


def actor_loss(logp: torch.Tensor, q: torch.Tensor, alpha: torch.Tensor, probs: torch.Tensor | None = None) -> torch.Tensor:
    """J_pi = E_s[E_{a~pi}[alpha log pi(a|s) - min_j Q_j(s, a)]] (Haarnoja et al. 2018, Eq. 7 with the
    reparameterised a; for Discrete the exact expectation, Christodoulou 2019 Eq. 12)."""
    inner = alpha * logp - q
    return ((probs * inner).sum(-1) if probs is not None else inner).mean()


def alpha_loss(log_alpha: torch.Tensor, logp: torch.Tensor, target_entropy: float | torch.Tensor,
               probs: torch.Tensor | None = None) -> torch.Tensor:
    """J(alpha) = E[-alpha (log pi(a|s) + H_target)] (Haarnoja et al. 2018, Eq. 18), in log alpha as
    CleanRL and SB3 optimise it; Discrete: the exact expectation (Christodoulou 2019, Eq. 11), with a
    target per state where it is one ([B]: a masked state's legal actions bound its entropy)."""
    if probs is None:
        return (-log_alpha.exp() * (logp.detach() + target_entropy)).mean()
    target = target_entropy.unsqueeze(-1) if torch.is_tensor(target_entropy) else target_entropy
    return (probs.detach() * (-log_alpha.exp() * (logp.detach() + target))).sum(-1).mean()


class Temperature(nn.Module):
    """Each policy's log alpha, learnt (--autotune) or fixed at log(--alpha)."""

    def __init__(self, names, alpha: float, learn: bool):
        super().__init__()
        self.log_alpha = nn.ParameterDict({n: nn.Parameter(torch.full((1,), math.log(alpha)), requires_grad=learn)
                                           for n in names})

    def blocks(self) -> list[nn.Module]:
        return []


class SAC(OffPolicy):
    name = "sac"
    value_based = False  # its policies are actors (marl.models.sac.SACActor), its critics the learner's alone
    # What its actors act with, per action space: the tanh-squashed Gaussian, the categorical.
    action_dists = {"Box": "tanh_gaussian", "Discrete": "categorical"}
    phases = ("critic", "actor")

    @staticmethod
    def policy_network(cfg) -> dict:
        return {"actor": "sac"}

    def networks(self, policy, specs) -> TrainingNets:
        cfg = self.cfg
        hidden = tuple(cfg.hidden_sizes)
        critics = {k: nn.ModuleDict({s.name: SoftQ(s, hidden, cfg.encoder) for s in specs}) for k in ("qf1", "qf2")}
        temperature = Temperature([s.name for s in specs], cfg.alpha, cfg.autotune)
        self.specs = {s.name: s for s in specs}
        self.target_entropy = {s.name: self._target_entropy(s) for s in specs}
        return TrainingNets(policy, {**critics, "temperature": temperature}, targets=("qf1", "qf2"))

    def _target_entropy(self, spec) -> float:
        """-dim(A) for Box (Haarnoja et al. 2018b, Sec. 5); a fraction of the uniform policy's log |A|
        for Discrete (--target-entropy-scale: Christodoulou 2019 uses 0.98, CleanRL's Atari SAC 0.89,
        which kept the policy near uniform here; 0.3 by default); with an action mask, of
        log(legal actions) in each state (`_actor`)."""
        if spec.action.continuous:
            return -float(spec.action.num_outputs)
        return self.cfg.target_entropy_scale * math.log(spec.action.num_outputs)

    def optimizers(self, nets: TrainingNets) -> dict[str, torch.optim.Optimizer]:
        lr = self.cfg.learning_rate
        critics = [*nets.others["qf1"].parameters(), *nets.others["qf2"].parameters()]
        actor = [{"params": list(nets.policy.parameters())}]
        if self.cfg.autotune:
            actor.append({"params": list(nets.others["temperature"].parameters())})
        return {"critic": Adam(critics, lr=lr), "actor": Adam(actor, lr=lr)}

    def loss(self, nets: TrainingNets, batch: dict[str, dict], phase: str) -> tuple[torch.Tensor, dict[str, torch.Tensor]]:
        """The sum over policies of each one's loss of this phase on its sampled transitions."""
        total, stats = 0.0, {}
        for name, b in batch.items():
            loss, s = (self._critic if phase == "critic" else self._actor)(nets, name, b)
            total = total + loss
            stats.update({f"{name}/{k}": v for k, v in s.items()})
        return total, stats

    def _pi(self, nets: TrainingNets, name: str, obs: dict, mask: torch.Tensor | None):
        """The actor's distribution at `obs`: a Box policy's tanh-Gaussian, or a Discrete policy's
        (log-probabilities, probabilities) of every action, an illegal one's log set to 0 (its
        probability is exactly 0, and a finite log keeps every product with it finite)."""
        params = nets.policy.policies[name].act(obs)[0]
        spec = self.specs[name]
        if spec.action.continuous:
            return distributions.make(spec.action, params)
        logp = torch.log_softmax(masked(params, mask), -1)
        return (logp, logp.exp()) if mask is None else (torch.where(mask, logp, 0.0), logp.exp())

    @staticmethod
    def _normalised(nets: TrainingNets, name: str, obs: dict, state: torch.Tensor | None):
        """What the critics read: the observations (and global state) as the actor's --norm-obs statistics
        normalise them, or as they are."""
        norm = nets.policies[name].obs_norm
        return (obs, state) if norm is None else norm(obs, state)

    def _critic(self, nets: TrainingNets, name: str, b: dict):
        qf1, qf2 = nets.others["qf1"][name], nets.others["qf2"][name]
        t1, t2 = nets.targets["qf1"][name], nets.targets["qf2"][name]
        alpha = nets.others["temperature"].log_alpha[name].exp().detach()
        obs, state = self._normalised(nets, name, b["obs"], b.get("state"))
        with torch.no_grad():
            pi = self._pi(nets, name, b["next_obs"], b.get("next_action_mask"))  # (the actor normalises its own input)
            next_obs, next_state = self._normalised(nets, name, b["next_obs"], b.get("next_state"))
            if qf1.continuous:
                u, logp = pi.sample()
                y = soft_target(b["returns"], b["discounts"], t1(next_obs, next_state, u), t2(next_obs, next_state, u),
                                logp, alpha)
            else:
                logp, probs = pi
                y = soft_target(b["returns"], b["discounts"], t1(next_obs, next_state), t2(next_obs, next_state),
                                logp, alpha, probs)
        if qf1.continuous:
            q1, q2 = qf1(obs, state, b["actions"]), qf2(obs, state, b["actions"])
        else:
            a = b["actions"].long().unsqueeze(-1)
            q1, q2 = qf1(obs, state).gather(-1, a).squeeze(-1), qf2(obs, state).gather(-1, a).squeeze(-1)
        l1, l2 = F.mse_loss(q1, y), F.mse_loss(q2, y)
        return l1 + l2, {"qf1_loss": l1.detach(), "qf2_loss": l2.detach(), "qf_loss": (l1 + l2).detach() / 2,
                         "qf1_values": q1.detach().mean(), "qf2_values": q2.detach().mean()}

    def _actor(self, nets: TrainingNets, name: str, b: dict):
        qf1, qf2 = nets.others["qf1"][name], nets.others["qf2"][name]
        log_alpha = nets.others["temperature"].log_alpha[name]
        alpha = log_alpha.exp().detach()
        pi = self._pi(nets, name, b["obs"], b.get("action_mask"))
        obs, state = self._normalised(nets, name, b["obs"], b.get("state"))
        if qf1.continuous:
            u, logp = pi.sample()  # reparameterised: mean + std * noise
            probs = None
            q = torch.min(qf1(obs, state, u), qf2(obs, state, u))
        else:
            logp, probs = pi
            with torch.no_grad():
                q = torch.min(qf1(obs, state), qf2(obs, state))
        a_loss = actor_loss(logp, q, alpha, probs)
        target = self.target_entropy[name]
        if probs is not None and b.get("action_mask") is not None:
            # Entropy over the legal actions only: the uniform policy's is log(legal), state by state.
            target = self.cfg.target_entropy_scale * b["action_mask"].sum(-1).clamp(min=1).float().log()
        t_loss = alpha_loss(log_alpha, logp, target, probs)
        entropy = -(logp.detach() if probs is None else (probs * logp).detach().sum(-1))
        stats = {"actor_loss": a_loss.detach(), "alpha": alpha.squeeze(), "entropy": entropy.mean()}
        if self.cfg.autotune:
            stats["alpha_loss"] = t_loss.detach()
            return a_loss + t_loss, stats
        return a_loss, stats

