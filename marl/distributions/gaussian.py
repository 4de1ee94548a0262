"""Box: a diagonal Gaussian, params [B, 2n] = mean and log-std side by side; actions [B, n] float32.

The head gives the means; the log-std is state-independent (CleanRL's and SB3's default), a
parameter of its own, zeros at the start, which the policy holds as `log_std`. The env adapter
clips a sample to the Box's bounds (`envs.spaces.BoxActions.to_env`).
"""

from __future__ import annotations

import math

import torch
from torch import nn

from envs.spaces import ActionSpec, BoxActions
from marl.distributions.base import Distribution, register


@register
class Gaussian(Distribution):
    name, space = "gaussian", BoxActions

    def __init__(self, params: torch.Tensor):
        self.mean, self.log_std = params.chunk(2, dim=-1)

    @classmethod
    def num_params(cls, spec: ActionSpec) -> int:
        return 2 * spec.num_outputs

    @classmethod
    def free_params(cls, spec: ActionSpec) -> nn.Parameter:
        return nn.Parameter(torch.zeros(spec.num_outputs))

    @classmethod
    def from_params(cls, spec: ActionSpec, params: torch.Tensor, mask: torch.Tensor | None = None) -> "Gaussian":
        return cls(params)

    @classmethod
    def example(cls, spec: ActionSpec, lead: tuple[int, ...], generator: torch.Generator) -> torch.Tensor:
        return torch.randn((*lead, *spec.shape), generator=generator)

    def sample(self, generator: torch.Generator | None = None) -> tuple[torch.Tensor, torch.Tensor]:
        noise = torch.randn(self.mean.shape, generator=generator, dtype=self.mean.dtype, device=self.mean.device)
        action = self.mean + self.log_std.exp() * noise
        return action, self.log_prob(action)

    def log_prob(self, action: torch.Tensor) -> torch.Tensor:
        z = (action - self.mean) / self.log_std.exp()
        return (-0.5 * z.pow(2) - self.log_std - 0.5 * math.log(2 * math.pi)).sum(-1)

    def entropy(self) -> torch.Tensor:
        return (0.5 + 0.5 * math.log(2 * math.pi) + self.log_std).sum(-1)

    def mode(self) -> torch.Tensor:
        return self.mean
