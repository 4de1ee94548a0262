"""MultiBinary(n): one logit per bit [B, n]; actions [B, n] int64 in {0, 1}."""

from __future__ import annotations

import torch

from envs.spaces import ActionSpec, MultiBinaryActions
from marl.distributions.base import Distribution, register


@register
class Bernoulli(Distribution):
    name, space = "bernoulli", MultiBinaryActions

    def __init__(self, logits: torch.Tensor):
        self.logits = logits

    @classmethod
    def from_params(cls, spec: ActionSpec, params: torch.Tensor, mask: torch.Tensor | None = None) -> "Bernoulli":
        return cls(params)

    def sample(self, generator: torch.Generator | None = None) -> tuple[torch.Tensor, torch.Tensor]:
        u = torch.rand(self.logits.shape, generator=generator, dtype=self.logits.dtype, device=self.logits.device)
        action = (u < torch.sigmoid(self.logits)).long()
        return action, self.log_prob(action)

    def log_prob(self, action: torch.Tensor) -> torch.Tensor:
        # log sigmoid(l) for a 1, log sigmoid(-l) for a 0: -softplus(-l) and -softplus(l).
        signed = torch.where(action.bool(), self.logits, -self.logits)
        return torch.nn.functional.logsigmoid(signed).sum(-1)

    def entropy(self) -> torch.Tensor:
        p = torch.sigmoid(self.logits)
        return (torch.nn.functional.softplus(self.logits) - p * self.logits).sum(-1)

    def mode(self) -> torch.Tensor:
        return (self.logits > 0).long()
