"""The networks of soft actor-critic (Haarnoja et al. 2018; Christodoulou 2019 for Discrete actions).

`SACActor` speaks the policy protocol (forward -> (params, value, core)), so that actors,
evaluation, videos and policy.pt run it as they run the actor-critic: its head gives what its
distribution takes, with no state-independent parameters (a Box's tanh-Gaussian gets its log-stds
from the state, as in SAC, bounded by marl.distributions.tanh_gaussian). It has no value head:
`value` is zeros, which only on-policy targets would read.

`SoftQ` is one soft Q-function: for Box actions Q(s, a) of the observation's features and the
squashed action tanh(u) in [-1, 1] (the stored u is unbounded; tanh keeps the critic's input in
the same range whatever the bounds), one output; for Discrete actions Q(s, .) over every action
(Christodoulou 2019, Sec. 4). It reads `state` with the observation where the policy's critic is
central (`--critic central`). ReLU MLPs with PyTorch's default initialisation, as CleanRL's and
SB3's SAC.
"""

from __future__ import annotations

import torch
from torch import nn

from marl import distributions
from marl.models.encoders import Encoder


class ReluMLP(nn.Module):
    """Linear + ReLU blocks, then a linear head to `n_out` (default PyTorch init, as SAC implementations use)."""

    def __init__(self, n_in: int, hidden: tuple[int, ...], n_out: int):
        super().__init__()
        widths = (n_in, *hidden)
        self.blocks = nn.ModuleList(nn.Sequential(nn.Linear(a, b), nn.ReLU()) for a, b in zip(widths, widths[1:]))
        self.head = nn.Linear(widths[-1], n_out)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = x.to(self.head.weight.dtype)
        for block in self.blocks:
            x = block(x)
        return self.head(x)


class SACActor(nn.Module):
    state_size = 0  # recurrent SAC is not built (marl.run refuses --core with --algo sac)

    def __init__(self, spec, hidden: tuple[int, ...], encoder: str = "auto"):
        super().__init__()
        self.dist = distributions.lookup(spec.action.kind)
        self.encoder = Encoder(spec.obs, encoder)
        self.actor = ReluMLP(self.encoder.out_dim, hidden, self.dist.num_params(spec.action))
        self.obs_norm = None  # --norm-obs: set by build_policy

    def forward(self, obs: dict[str, torch.Tensor], state: torch.Tensor | None = None, core=None, starts=None):
        params = self.act(obs)[0]
        return params, params.new_zeros(params.shape[0]), None

    def act(self, obs: dict[str, torch.Tensor], core=None, starts=None):
        if self.obs_norm is not None:
            obs, _ = self.obs_norm(obs)
        x = obs[self.encoder.passthrough] if self.encoder.passthrough else self.encoder(obs)
        return self.actor(x).float(), None

    def blocks(self) -> list[nn.Module]:
        return [*self.encoder.blocks(), *self.actor.blocks]


class SoftQ(nn.Module):
    def __init__(self, spec, hidden: tuple[int, ...], encoder: str = "auto"):
        super().__init__()
        self.continuous = spec.action.continuous
        self.encoder = Encoder(spec.critic_obs, encoder)
        n_act = spec.action.num_outputs
        self.q = ReluMLP(self.encoder.out_dim + (n_act if self.continuous else 0), hidden,
                         1 if self.continuous else n_act)

    def forward(self, obs: dict[str, torch.Tensor], state: torch.Tensor | None, action: torch.Tensor | None = None):
        """Box: Q(s, a) [B] of the stored (pre-squash) actions [B, n]; Discrete: Q(s, .) [B, actions]."""
        x = self.encoder({**obs, "state": state} if state is not None else obs)
        if self.continuous:
            return self.q(torch.cat([x, torch.tanh(action).to(x.dtype)], dim=-1)).float().squeeze(-1)
        return self.q(x).float()

    def blocks(self) -> list[nn.Module]:
        return [*self.encoder.blocks(), *self.q.blocks]
