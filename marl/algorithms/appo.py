"""APPO: PPO's clipped surrogate on V-trace advantages and value targets, for asynchronous
collection (as Sample Factory's and RLlib's APPO): the importance weights correct the policy lag
of rollouts made by older weights, and the clip keeps each of several epochs close to them."""

from __future__ import annotations

import torch

from marl.algorithms.base import episode_flags
from marl.algorithms.ppo import PPO
from marl.algorithms.vtrace import vtrace


def vtrace_targets(cfg, traj: dict, current: tuple[torch.Tensor, torch.Tensor]) -> tuple[torch.Tensor, torch.Tensor]:
    """(pg advantages, v_s) under the learner's weights (`current`: log-probs of the taken actions and
    values). The bootstrap values past the sequence and at truncations are the actor's."""
    logp, values = current.logprobs, current.values
    discounts, next_values, continues = episode_flags(traj, values, cfg.gamma)
    vs, adv = vtrace(traj["logprobs"], logp, traj["rewards"], values, next_values, discounts, continues,
                     rho_bar=cfg.vtrace_rho, c_bar=cfg.vtrace_c)
    return adv, vs


class APPO(PPO):
    """PPO's epochs, minibatches and clipped loss; only the targets differ (V-trace's, under the learner's weights)."""

    name = "appo"
    needs_current = True
    turn_based = False  # V-trace's recursion does not skip a waiting agent's steps yet
    decouples = False  # V-trace's importance weights correct any lag, --mode pipelined's included

    def targets(self, traj: dict, current) -> tuple[torch.Tensor, torch.Tensor]:
        return vtrace_targets(self.cfg, traj, current)
