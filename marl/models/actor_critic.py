"""The built-in actor-critic: encoder (chosen by the observation space) -> MLP torsos -> heads
(chosen by the action space).

Separate actor and critic torsos, as CleanRL's ppo.py; an encoder with weights (a CNN) is shared
by both, as CleanRL's Atari PPO and Sample Factory do, unless the critic reads an input of its own
(MAPPO's global state). Plain PyTorch: the learner shards it (`learner.parallelize`), the actors
run a CPU copy as is. `blocks()` are the units FSDP2 may shard one by one.
"""

from __future__ import annotations

import math

import torch
from torch import nn

from marl.models.encoders import Encoder, init_layer


class Tanh(nn.Module):
    """tanh(x) computed as 2 * sigmoid(2x) - 1: the same function, but torch's CPU tanh kernel
    measured 3.5x slower than its sigmoid here (167 us vs 48 us for 1024x64 floats, 1 thread), and
    the activations were the larger part of an actor's forward pass."""

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return torch.sigmoid(2 * x) * 2 - 1


class MLP(nn.Module):
    def __init__(self, n_in: int, hidden: tuple[int, ...], n_out: int, head_std: float):
        super().__init__()
        widths = (n_in, *hidden)
        self.blocks = nn.ModuleList(
            nn.Sequential(init_layer(nn.Linear(a, b), math.sqrt(2)), Tanh()) for a, b in zip(widths, widths[1:]))
        self.head = init_layer(nn.Linear(widths[-1], n_out), head_std)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        # Features made inside the model (one-hots, scaled bytes) are float32; bf16 weights want bf16.
        x = x.to(self.head.weight.dtype)
        for block in self.blocks:
            x = block(x)
        return self.head(x)


class ActorCritic(nn.Module):
    """forward(obs, state) -> (params, value): `params` is what `marl.distributions.make` takes
    (logits; for Box actions the means and the log-std side by side), `value` is [B]. The critic
    reads `state` (a centralized critic's global state, MAPPO) with the observation where the
    policy has one, else the actor's own features."""

    def __init__(self, spec, hidden: tuple[int, ...], encoder: str = "auto"):
        super().__init__()
        self.encoder = Encoder(spec.obs, encoder)
        self.actor = MLP(self.encoder.out_dim, hidden, spec.action.num_outputs, head_std=0.01)
        self.critic_encoder = Encoder(spec.critic_obs, encoder) if spec.central else None
        critic_in = self.encoder.out_dim if self.critic_encoder is None else self.critic_encoder.out_dim
        self.critic = MLP(critic_in, hidden, 1, head_std=1.0)
        self.log_std = nn.Parameter(torch.zeros(spec.action.num_outputs)) if spec.action.kind == "gaussian" else None

    def forward(self, obs: dict[str, torch.Tensor], state: torch.Tensor | None = None) -> tuple[torch.Tensor, torch.Tensor]:
        x = self._encode(obs)
        c = x if self.critic_encoder is None else self.critic_encoder({**obs, "state": state})
        # A reduction rather than squeeze(): FSDP2 warns when a sharded root returns a view.
        return self._params(x), self.critic(c).sum(-1)

    def act(self, obs: dict[str, torch.Tensor]) -> torch.Tensor:
        """The actor alone: what playing needs (a centralized critic's input is not there at play time)."""
        return self._params(self._encode(obs))

    def _encode(self, obs: dict[str, torch.Tensor]) -> torch.Tensor:
        return obs[self.encoder.passthrough] if self.encoder.passthrough else self.encoder(obs)

    def _params(self, x: torch.Tensor) -> torch.Tensor:
        pd = self.actor(x)
        if self.log_std is not None:
            pd = torch.cat([pd, self.log_std.to(pd.dtype).expand_as(pd)], dim=-1)
        return pd

    def blocks(self) -> list[nn.Module]:
        encoders = [self.encoder] + ([self.critic_encoder] if self.critic_encoder is not None else [])
        return [*(b for e in encoders for b in e.blocks()), *self.actor.blocks, *self.critic.blocks]
