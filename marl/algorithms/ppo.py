"""PPO-clip (Schulman et al. 2017, "Proximal Policy Optimization Algorithms") on GAE advantages."""

from __future__ import annotations

import torch

from marl.algorithms.base import OnPolicy
from marl.algorithms.gae import gae


def ppo_loss(new_logprob: torch.Tensor, old_logprob: torch.Tensor, advantages: torch.Tensor,
             new_value: torch.Tensor, old_value: torch.Tensor, returns: torch.Tensor,
             entropy: torch.Tensor, *, clip_coef: float, clip_vloss: bool, vf_coef: float,
             ent_coef: float, prox_logprob: torch.Tensor | None = None) -> tuple[torch.Tensor, dict[str, torch.Tensor]]:
    """The loss to minimise, L = -L^CLIP + vf_coef * L^VF - ent_coef * S (Eq. 9).

    L^CLIP = E[min(r A, clip(r, 1-eps, 1+eps) A)], r = pi/pi_old (Eq. 7). The value loss is
    0.5 * (V - R)^2, optionally clipped around the old value as in the PPO reference code (and
    CleanRL): 0.5 * max((V - R)^2, (V_old + clip(V - V_old, -eps, eps) - R)^2).
    With `prox_logprob`, the decoupled objective of Hilton et al. 2021 ("Batch size-invariance
    for policy optimization", Sec. 3), for data that an older policy pi_behav (`old_logprob`)
    collected: L^CLIP = E[(pi_prox / pi_behav) min(r A, clip(r, 1-eps, 1+eps) A)] with
    r = pi/pi_prox, so that the clip keeps the update near the proximal policy (the learner's
    weights before it) while the importance weight corrects the behaviour's lag. With
    pi_prox = pi_behav it is Eq. 7.
    Also returns detached diagnostics: approx_kl ((r - 1) - log r, Schulman's low-variance
    estimator) and clipfrac (the fraction of samples whose ratio left the clip range).
    """
    anchor = old_logprob if prox_logprob is None else prox_logprob
    logratio = new_logprob - anchor
    ratio = logratio.exp()
    surrogate = torch.max(-advantages * ratio, -advantages * ratio.clamp(1 - clip_coef, 1 + clip_coef))
    pg_loss = (surrogate if prox_logprob is None else (prox_logprob - old_logprob).exp() * surrogate).mean()
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
    decouples = True  # --mode pipelined: the decoupled objective, anchored on the proximal policy

    def __init__(self, cfg):
        super().__init__(cfg)
        self.epochs = cfg.update_epochs
        self.decoupled = self.decouples and cfg.mode == "pipelined"
        if self.decoupled:
            self.needs_current = True  # the proximal policy's log-probs and values

    @classmethod
    def wants_after(cls, cfg) -> bool:
        return cls.decouples and cfg.mode == "pipelined"  # V past the last step under the proximal weights

    def anchored(self, traj: dict, current) -> dict:
        """--mode pipelined: a rollout that the weights one version older collected, seen from the
        proximal policy (the learner's weights before this update): its log-probs
        (`prox_logprobs`, the decoupled loss's anchor) and its values for GAE, past the last step
        too where the learner has that observation (a feed-forward policy). Each of the three
        takes samples to solve down (docs/results/index.md, "Pipelined collection")."""
        if not self.decoupled:
            return traj
        anchored = {**traj, "prox_logprobs": current.logprobs, "values": current.values}
        if current.next_value is not None:
            anchored["next_value"] = current.next_value
        return anchored

    def targets(self, traj: dict, current=None) -> tuple[torch.Tensor, torch.Tensor]:
        return gae(traj["rewards"], traj["values"], traj["next_value"], traj["terminated"], traj["truncated"],
                   traj["bootstrap_value"], self.cfg.gamma, self.cfg.gae_lambda, traj["valid"])

    def loss(self, new_logp, entropy, new_value, mb):
        cfg = self.cfg
        return ppo_loss(new_logp, mb["logprobs"], mb["advantages"], new_value, mb["values"], mb["returns"], entropy,
                        clip_coef=cfg.clip_coef, clip_vloss=cfg.clip_vloss, vf_coef=cfg.vf_coef, ent_coef=cfg.ent_coef,
                        prox_logprob=mb.get("prox_logprobs"))
