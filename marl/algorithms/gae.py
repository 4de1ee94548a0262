"""Generalized Advantage Estimation (Schulman et al. 2016, "High-Dimensional Continuous Control
Using Generalized Advantage Estimation", Eq. 16 with the TD residual of Eq. 10)."""

from __future__ import annotations

import torch


def gae(rewards: torch.Tensor, values: torch.Tensor, next_value: torch.Tensor,
        terminated: torch.Tensor, truncated: torch.Tensor, bootstrap_value: torch.Tensor,
        gamma: float, lam: float, valid: torch.Tensor | None = None) -> tuple[torch.Tensor, torch.Tensor]:
    """Advantages and returns for a rollout of T steps over any number of parallel slots.

    All inputs are [T, ...] except `next_value` ([...]: V of the observation after the last step).
    A_t = sum_l (gamma*lam)^l delta_{t+l}, summed until the episode ends (Eq. 16), where
    delta_t = r_t + gamma * V_next - V(s_t) (Eq. 10) and V_next is
      - V(s_{t'}) of the slot's next valid step t' if the episode goes on (t' = t + 1 unless
        `valid` says the slot sat steps out: a turn-based game's waiting agent),
      - 0                     if it terminated at t (a true end: nothing follows),
      - bootstrap_value[t]    if it was truncated at t (time ran out: V of the final observation).
    Invalid steps are skipped: their own outputs are meaningless (the loss masks them).
    Returns (advantages, returns = advantages + values), both [T, ...].
    """
    T = rewards.shape[0]
    done = terminated | truncated
    tail = torch.where(terminated, 0.0, bootstrap_value)  # V_next where the episode ended
    not_done = (~done).to(values.dtype)
    advantages = torch.empty_like(values)
    if valid is None or bool((~valid[:-1] | done[:-1] | valid[1:]).all()):
        # Every valid step that did not end its episode is followed by a valid one (no agent sat a
        # step out mid-episode; autoreset steps come after ends): the next valid step is t + 1, so
        # the TD residuals come in one pass and only the sum runs backwards, with the loop's
        # arithmetic on every valid step (invalid steps' outputs differ, and are meaningless in both).
        v_next = torch.where(done, tail, torch.cat([values[1:], next_value.unsqueeze(0)]))
        delta = rewards + gamma * v_next - values
        carry = gamma * lam * not_done
        a_after = torch.zeros_like(next_value)
        for t in reversed(range(T)):
            a_after = advantages[t] = delta[t] + carry[t] * a_after
        return advantages, advantages + values
    v_after, a_after = next_value, torch.zeros_like(next_value)  # V and A of the slot's next valid step
    for t in reversed(range(T)):
        v_next = torch.where(done[t], tail[t], v_after)
        delta = rewards[t] + gamma * v_next - values[t]
        advantages[t] = delta + gamma * lam * not_done[t] * a_after
        if valid is None:
            v_after, a_after = values[t], advantages[t]
        else:
            v_after = torch.where(valid[t], values[t], v_after)
            a_after = torch.where(valid[t], advantages[t], a_after)
    return advantages, advantages + values
