"""V-trace off-policy targets (Espeholt et al. 2018, "IMPALA: Scalable Distributed Deep-RL with
Importance Weighted Actor-Learner Architectures", Sec. 4.1, Eq. 1 and Remark 1)."""

from __future__ import annotations

import torch


def vtrace(behaviour_logp: torch.Tensor, target_logp: torch.Tensor, rewards: torch.Tensor, values: torch.Tensor,
           next_values: torch.Tensor, discounts: torch.Tensor, continues: torch.Tensor, rho_bar: float = 1.0,
           c_bar: float = 1.0, pg_rho_bar: float | None = None) -> tuple[torch.Tensor, torch.Tensor]:
    """V-trace value targets v_s and policy-gradient advantages, all [T, ...] time-major.

    Eq. 1: v_s = V(x_s) + sum_{t>=s} gamma^{t-s} (prod_{i=s}^{t-1} c_i) delta_t, with
    delta_t = rho_t (r_t + gamma V(x_{t+1}) - V(x_t)), rho_t = min(rho_bar, pi/mu), c_i = min(c_bar, pi/mu);
    computed by Remark 1's recursion v_s - V(x_s) = delta_s + gamma c_s (v_{s+1} - V(x_{s+1})).
    The policy-gradient advantage is rho^pg_s (r_s + gamma v_{s+1} - V(x_s)) (Sec. 4.2), with
    rho^pg clipped at `pg_rho_bar` (default: rho_bar).

    Episode ends inside the sequence: `discounts` is gamma where the episode goes on past t and 0
    where it terminated at t; `next_values[t]` is V(x_{t+1}), or V(final observation) where it was
    truncated at t (time ran out: bootstrap, as GAE does); `continues[t]` is 0 where the episode
    ended at t (terminated or truncated), which cuts the trace there, and 1 otherwise. Past the last
    step, v_T is next_values[T-1] (the bootstrap).
    """
    rho = (target_logp - behaviour_logp).exp()
    clipped_rho = rho.clamp(max=rho_bar)
    cs = rho.clamp(max=c_bar)
    deltas = clipped_rho * (rewards + discounts * next_values - values)
    carry = discounts * cs * continues
    vs_minus_v = torch.empty_like(values)
    acc = torch.zeros_like(values[0])
    for t in reversed(range(values.shape[0])):
        acc = deltas[t] + carry[t] * acc
        vs_minus_v[t] = acc
    vs = values + vs_minus_v
    # v_{s+1} where the episode goes on within the sequence, else the bootstrap value.
    vs_next = torch.where(continues.bool(), torch.cat([vs[1:], next_values[-1:]]), next_values)
    pg_rho = rho.clamp(max=rho_bar if pg_rho_bar is None else pg_rho_bar)
    return vs, pg_rho * (rewards + discounts * vs_next - values)
