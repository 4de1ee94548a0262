"""Box, `--action-dist tanh_normal`: tanh_gaussian with a state-dependent scale, as TorchRL's
TanhNormal behind a `NormalParamExtractor` (BenchMARL's continuous policies)."""

from __future__ import annotations

import math

import torch

from envs.spaces import ActionSpec
from marl.distributions.base import register
from marl.distributions.tanh_gaussian import TanhGaussian

# TorchRL's "biased_softplus_1.0": scale = softplus(x + b) + 0.01, with b such that the network's 0 is a
# scale of 1 (as tanh_gaussian's log-std starts at 0); its extractor then keeps the scale above 1e-4.
_MIN_SCALE, _SCALE_FLOOR = 0.01, 1e-4
_BIAS = math.log(math.expm1(1.0 - _MIN_SCALE))


@register
class TanhNormal(TanhGaussian):
    """The head gives the Gaussian's means and its scales' raw values side by side (2n outputs, no
    free parameter): scale = softplus(raw + b) + 0.01, at least 1e-4. Squashing, log-probabilities
    and entropy are tanh_gaussian's."""

    name = "tanh_normal"

    @classmethod
    def head_size(cls, spec: ActionSpec) -> int:
        return 2 * spec.num_outputs

    @classmethod
    def free_params(cls, spec: ActionSpec) -> None:
        return None

    @staticmethod
    def log_std_of(raw: torch.Tensor) -> torch.Tensor:
        return (torch.nn.functional.softplus(raw + _BIAS) + _MIN_SCALE).clamp_min(_SCALE_FLOOR).log()
