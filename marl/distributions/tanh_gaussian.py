"""Box, `--action-dist tanh_gaussian`: a Gaussian whose sample is squashed by tanh into the bounds."""

from __future__ import annotations

import math

import torch

from envs.spaces import ActionSpec
from marl.distributions.base import needs_finite_bounds, register
from marl.distributions.gaussian import Gaussian

LOG_STD_BOUNDS = (-5.0, 2.0)  # its log-std is kept inside these (as SAC implementations do)
# The soft bound maps the network's 0 to a log-std of 0, as the unsquashed Gaussian starts.
_LOG_STD_OFFSET = math.log(-LOG_STD_BOUNDS[0] / LOG_STD_BOUNDS[1])


@register
class TanhGaussian(Gaussian):
    """u ~ N(mean, std), and the env acts with low + (tanh(u) + 1) (high - low) / 2 (`to_env`).
    The stored action is u: the squash loses precision near the bounds, where atanh of the stored
    value would not give u back.

    log_prob(u) is the density of the env's action, by the change of variables:
    log N(u) - sum_i log((high_i - low_i) / 2 * (1 - tanh(u_i)^2)), with log(1 - tanh(u)^2) computed
    as 2 (log 2 - u - softplus(-2u)), which does not underflow for large |u|. The entropy is the
    Gaussian's (the squashed one has no closed form; SB3 estimates it from samples instead). The
    log-std is bounded smoothly, lo + (hi - lo) sigmoid(x + c): a hard clamp would stop its
    gradient for good once Adam had pushed it past a bound.
    """

    name = "tanh_gaussian"
    refuses = classmethod(needs_finite_bounds)

    def __init__(self, params: torch.Tensor, low: torch.Tensor, high: torch.Tensor):
        mean, raw = params.chunk(2, dim=-1)
        super().__init__(torch.cat([mean, self.log_std_of(raw)], dim=-1))
        self.low, self.half_range = low.to(mean.dtype), ((high - low) / 2).to(mean.dtype)
        self.log_half_range = torch.log(self.half_range).sum()

    @staticmethod
    def log_std_of(raw: torch.Tensor) -> torch.Tensor:
        """The log-std from its raw parameter: bounded smoothly to LOG_STD_BOUNDS."""
        lo, hi = LOG_STD_BOUNDS
        return lo + (hi - lo) * torch.sigmoid(raw + _LOG_STD_OFFSET)

    @classmethod
    def from_params(cls, spec: ActionSpec, params: torch.Tensor, mask: torch.Tensor | None = None) -> "TanhGaussian":
        return cls(params, torch.tensor(spec.low, device=params.device), torch.tensor(spec.high, device=params.device))

    def log_prob(self, action: torch.Tensor) -> torch.Tensor:
        log_det = 2 * (math.log(2) - action - torch.nn.functional.softplus(-2 * action))
        return super().log_prob(action) - log_det.sum(-1) - self.log_half_range

    def to_env(self, action: torch.Tensor) -> torch.Tensor:
        """The stored u [B, n] -> the action the env takes, inside its bounds."""
        return self.low + (torch.tanh(action) + 1) * self.half_range
