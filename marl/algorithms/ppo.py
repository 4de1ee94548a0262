"""PPO-clip (Schulman et al. 2017, "Proximal Policy Optimization Algorithms") on GAE advantages."""

from __future__ import annotations

import torch

from marl.algorithms.base import OnPolicy
from marl.algorithms.gae import gae


def ppo_loss(new_logprob: torch.Tensor, old_logprob: torch.Tensor, advantages: torch.Tensor,
             new_value: torch.Tensor, old_value: torch.Tensor, returns: torch.Tensor,
             entropy: torch.Tensor, *, clip_coef: float, clip_vloss: bool, vf_coef: float,
             ent_coef: float) -> tuple[torch.Tensor, dict[str, torch.Tensor]]:
    """The loss to minimise, L = -L^CLIP + vf_coef * L^VF - ent_coef * S (Eq. 9).

    L^CLIP = E[min(r A, clip(r, 1-eps, 1+eps) A)], r = pi/pi_old (Eq. 7). The value loss is
    0.5 * (V - R)^2, optionally clipped around the old value as in the PPO reference code (and
    CleanRL): 0.5 * max((V - R)^2, (V_old + clip(V - V_old, -eps, eps) - R)^2).
    Also returns detached diagnostics: approx_kl ((r - 1) - log r, Schulman's low-variance
    estimator) and clipfrac (the fraction of samples whose ratio left the clip range).
    """
    logratio = new_logprob - old_logprob
    ratio = logratio.exp()
    pg_loss = torch.max(-advantages * ratio, -advantages * ratio.clamp(1 - clip_coef, 1 + clip_coef)).mean()
    if clip_vloss:
        v_clipped = old_value + (new_value - old_value).clamp(-clip_coef, clip_coef)
        v_loss = 0.5 * torch.max((new_value - returns) ** 2, (v_clipped - returns) ** 2).mean()
    else:
        v_loss = 0.5 * ((new_value - returns) ** 2).mean()
    ent = entropy.mean()
    # Without a bonus (the default) the entropy stays out of the graph: its backward only added zeros.
    loss = (pg_loss - ent_coef * ent if ent_coef else pg_loss) + vf_coef * v_loss
    with torch.no_grad():
        stats = {
            "policy_loss": pg_loss.detach(),
            "value_loss": v_loss.detach(),
            "entropy": ent.detach(),
            "approx_kl": ((ratio - 1) - logratio).mean(),
            "clipfrac": ((ratio - 1).abs() > clip_coef).float().mean(),
        }
    return loss, stats


class PPO(OnPolicy):
    """PPO as CleanRL's ppo.py: GAE targets from the behaviour values (Schulman et al. 2016),
    `update_epochs` passes over shuffled minibatches, the clipped surrogate."""

    name = "ppo"
    needs_current = False
    turn_based = True  # GAE bridges a waiting agent's steps (gae's `valid`)

    def __init__(self, cfg):
        super().__init__(cfg)
        self.epochs = cfg.update_epochs

    def targets(self, traj: dict, current=None) -> tuple[torch.Tensor, torch.Tensor]:
        return gae(traj["rewards"], traj["values"], traj["next_value"], traj["terminated"], traj["truncated"],
                   traj["bootstrap_value"], self.cfg.gamma, self.cfg.gae_lambda, traj["valid"])

    def loss(self, new_logp, entropy, new_value, mb):
        cfg = self.cfg
        return ppo_loss(new_logp, mb["logprobs"], mb["advantages"], new_value, mb["values"], mb["returns"], entropy,
                        clip_coef=cfg.clip_coef, clip_vloss=cfg.clip_vloss, vf_coef=cfg.vf_coef, ent_coef=cfg.ent_coef)
