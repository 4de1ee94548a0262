"""Discrete(n): a categorical over logits [B, n], masked; actions [B] int64.

Written as plain tensor code rather than `torch.distributions`: the actor samples every agent of
every env copy each step, and Gumbel-max sampling is one kernel where `Categorical` builds
objects and validates arguments. Masks (PettingZoo's `action_mask`): an illegal action's logit
is set to the dtype's lowest finite value, so it is never sampled, its probability is exactly 0,
and it adds 0 to the entropy; a legal action's log-probability is its log-probability among the
legal ones.
"""

from __future__ import annotations

import torch

from envs.spaces import ActionSpec, DiscreteActions
from marl.distributions.base import Distribution, register


def masked(logits: torch.Tensor, mask: torch.Tensor | None) -> torch.Tensor:
    if mask is None:
        return logits
    return torch.where(mask, logits, torch.finfo(logits.dtype).min)


def gumbel_argmax(logits: torch.Tensor, generator: torch.Generator | None) -> torch.Tensor:
    """A sample of Categorical(logits) by the Gumbel-max trick: argmax(logits + Gumbel noise)."""
    u = torch.rand(logits.shape, generator=generator, dtype=logits.dtype, device=logits.device).clamp_(min=1e-20)
    return torch.argmax(logits - torch.log(-torch.log(u)), dim=-1)


def entropy(logits: torch.Tensor) -> torch.Tensor:
    logp = torch.log_softmax(logits, dim=-1)
    return -(logp.exp() * logp).sum(-1)


@register
class Categorical(Distribution):
    name, space = "categorical", DiscreteActions

    def __init__(self, logits: torch.Tensor, mask: torch.Tensor | None = None):
        self.logits = masked(logits, mask)

    @classmethod
    def from_params(cls, spec: ActionSpec, params: torch.Tensor, mask: torch.Tensor | None = None) -> "Categorical":
        return cls(params, mask)

    def sample(self, generator: torch.Generator | None = None) -> tuple[torch.Tensor, torch.Tensor]:
        action = gumbel_argmax(self.logits, generator)
        return action, self.log_prob(action)

    def log_prob(self, action: torch.Tensor) -> torch.Tensor:
        return torch.log_softmax(self.logits, dim=-1).gather(-1, action.long().unsqueeze(-1)).squeeze(-1)

    def entropy(self) -> torch.Tensor:
        return entropy(self.logits)

    def mode(self) -> torch.Tensor:
        return self.logits.argmax(-1)
