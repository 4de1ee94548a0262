"""IMPALA's V-trace actor-critic (Espeholt et al. 2018, Sec. 4.2): one pass per batch."""

from __future__ import annotations

import torch

from marl.algorithms.appo import vtrace_targets
from marl.algorithms.base import OnPolicy


def impala_loss(new_logprob: torch.Tensor, pg_advantages: torch.Tensor, new_value: torch.Tensor, vs: torch.Tensor,
                entropy: torch.Tensor, *, vf_coef: float, ent_coef: float) -> tuple[torch.Tensor, dict[str, torch.Tensor]]:
    """-rho_s log pi(a_s|x_s) (r_s + gamma v_{s+1} - V(x_s)) for the policy (the advantage held
    fixed), 0.5 (v_s - V(x_s))^2 for the value, minus the entropy bonus; averaged over the batch."""
    pg_loss = -(pg_advantages.detach() * new_logprob).mean()
    v_loss = 0.5 * ((vs.detach() - new_value) ** 2).mean()
    ent = entropy.mean()
    loss = pg_loss + vf_coef * v_loss
    if ent_coef:  # without a bonus the entropy stays out of the graph: its backward only added zeros
        loss = loss - ent_coef * ent
    return loss, {"policy_loss": pg_loss.detach(), "value_loss": v_loss.detach(), "entropy": ent.detach()}


class IMPALA(OnPolicy):
    """The paper's loss takes V-trace's advantages as they are: centring them (the learner's
    --norm-adv) adds a baseline that the importance weights do not correct, which drives the policy
    deterministic off-policy; configs/cartpole_impala.toml turns it off."""

    name = "impala"
    needs_current = True
    turn_based = False  # V-trace's recursion does not skip a waiting agent's steps yet
    epochs = 1

    def targets(self, traj: dict, current) -> tuple[torch.Tensor, torch.Tensor]:
        return vtrace_targets(self.cfg, traj, current)

    def loss(self, new_logp, entropy, new_value, mb):
        return impala_loss(new_logp, mb["advantages"], new_value, mb["returns"], entropy,
                           vf_coef=self.cfg.vf_coef, ent_coef=self.cfg.ent_coef)
