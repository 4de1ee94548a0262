"""Generalized Advantage Estimation (Schulman et al. 2016, "High-Dimensional Continuous Control
Using Generalized Advantage Estimation", Eq. 16 with the TD residual of Eq. 10)."""

from __future__ import annotations

import torch


def gae(rewards: torch.Tensor, values: torch.Tensor, next_value: torch.Tensor,
        terminated: torch.Tensor, truncated: torch.Tensor, bootstrap_value: torch.Tensor,
        gamma: float, lam: float) -> tuple[torch.Tensor, torch.Tensor]:
    """Advantages and returns for a rollout of T steps over any number of parallel slots.

    All inputs are [T, ...] except `next_value` ([...]: V of the observation after the last step).
    A_t = sum_l (gamma*lam)^l delta_{t+l}, summed until the episode ends (Eq. 16), where
    delta_t = r_t + gamma * V_next - V(s_t) (Eq. 10) and V_next is
      - V(s_{t+1})            if the episode goes on,
      - 0                     if it terminated at t (a true end: nothing follows),
      - bootstrap_value[t]    if it was truncated at t (time ran out: V of the final observation).
    Returns (advantages, returns = advantages + values), both [T, ...].
    """
    T = rewards.shape[0]
    done = terminated | truncated
    tail = torch.where(terminated, 0.0, bootstrap_value)  # V_next where the episode ended
    not_done = (~done).to(values.dtype)
    advantages = torch.empty_like(values)
    last = torch.zeros_like(next_value)
    for t in reversed(range(T)):
        v_next = next_value if t == T - 1 else values[t + 1]
        v_next = torch.where(done[t], tail[t], v_next)
        delta = rewards[t] + gamma * v_next - values[t]
        last = delta + gamma * lam * not_done[t] * last
        advantages[t] = last
    return advantages, advantages + values
