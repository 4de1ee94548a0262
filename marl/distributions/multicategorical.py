"""MultiDiscrete(nvec): independent categoricals, logits [B, sum(nvec)] side by side, masked; actions [B, k]."""

from __future__ import annotations

import torch

from envs.spaces import ActionSpec, MultiDiscreteActions
from marl.distributions.base import Distribution, register
from marl.distributions.categorical import entropy, gumbel_argmax, masked


@register
class MultiCategorical(Distribution):
    name, space = "multicategorical", MultiDiscreteActions

    def __init__(self, logits: torch.Tensor, nvec: tuple[int, ...], mask: torch.Tensor | None = None):
        self.parts = masked(logits, mask).split(list(nvec), dim=-1)

    @classmethod
    def from_params(cls, spec: ActionSpec, params: torch.Tensor, mask: torch.Tensor | None = None) -> "MultiCategorical":
        return cls(params, spec.nvec, mask)

    def sample(self, generator: torch.Generator | None = None) -> tuple[torch.Tensor, torch.Tensor]:
        action = torch.stack([gumbel_argmax(p, generator) for p in self.parts], dim=-1)
        return action, self.log_prob(action)

    def log_prob(self, action: torch.Tensor) -> torch.Tensor:
        return sum(torch.log_softmax(p, dim=-1).gather(-1, action[..., i:i + 1].long()).squeeze(-1)
                   for i, p in enumerate(self.parts))

    def entropy(self) -> torch.Tensor:
        return sum(entropy(p) for p in self.parts)

    def mode(self) -> torch.Tensor:
        return torch.stack([p.argmax(-1) for p in self.parts], dim=-1)
