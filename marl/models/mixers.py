"""Mixers of value decomposition: the team's Q from each agent's Q of its own action.

VDN (Sunehag et al. 2018, Eq. 1): Q_tot = sum_i Q_i. QMIX (Rashid et al. 2018, Sec. 4.2): a
two-layer network of the agents' Qs whose weights hypernetworks make from the global state s,
taken in absolute value so that Q_tot is monotonic in every Q_i (dQ_tot / dQ_i >= 0, Eq. 5): the
argmax of Q_tot is then every agent's own argmax, so agents act greedily on their own Q. The
biases are not constrained; the last one is a small state-value network V(s).
"""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import nn


class VDNMixer(nn.Module):
    def forward(self, qs: torch.Tensor, state: torch.Tensor | None = None) -> torch.Tensor:
        """qs [B, agents] -> Q_tot [B]."""
        return qs.sum(-1)

    def blocks(self) -> list[nn.Module]:
        return []


class QMixer(nn.Module):
    def __init__(self, agents: int, state_dim: int, embed: int = 32, hypernet_embed: int = 64):
        """pymarl's QMixer with two-layer hypernetworks for the weights (its `hypernet_layers = 2`)."""
        super().__init__()
        self.agents, self.embed = agents, embed
        self.hyper_w1 = nn.Sequential(nn.Linear(state_dim, hypernet_embed), nn.ReLU(), nn.Linear(hypernet_embed, embed * agents))
        self.hyper_b1 = nn.Linear(state_dim, embed)
        self.hyper_w2 = nn.Sequential(nn.Linear(state_dim, hypernet_embed), nn.ReLU(), nn.Linear(hypernet_embed, embed))
        self.hyper_b2 = nn.Sequential(nn.Linear(state_dim, embed), nn.ReLU(), nn.Linear(embed, 1))

    def forward(self, qs: torch.Tensor, state: torch.Tensor) -> torch.Tensor:
        """qs [B, agents], state [B, state_dim] -> Q_tot [B]."""
        s = state.to(self.hyper_b1.weight.dtype)
        w1 = self.hyper_w1(s).abs().view(-1, self.agents, self.embed)
        b1 = self.hyper_b1(s).view(-1, 1, self.embed)
        hidden = F.elu(torch.bmm(qs.to(s.dtype).unsqueeze(1), w1) + b1)  # [B, 1, embed]
        w2 = self.hyper_w2(s).abs().view(-1, self.embed, 1)
        b2 = self.hyper_b2(s).view(-1, 1, 1)
        return (torch.bmm(hidden, w2) + b2).view(-1).float()

    def blocks(self) -> list[nn.Module]:
        return []
