"""Action distributions: a registry of classes, one module each, found by `ActionSpec.kind`.

`make(spec, params, mask)` looks the class up and builds it from the head's output; everything
else calls `sample`, `log_prob`, `entropy`, `mode` and `to_env` (what the env is sent: the action
itself, a tanh-squashed Gaussian's u squashed, a Beta's x scaled to the bounds) on what it
returns. Each class also says how many parameters it takes, makes the network's head, and gives
the random player's parameters (`base.Distribution`). The tests check each against
`torch.distributions`.

The space's default (`--action-dist auto`): Discrete -> categorical (masked), MultiDiscrete ->
multicategorical (masked), MultiBinary -> bernoulli, Box -> gaussian; a Box may also take
tanh_gaussian, tanh_normal (its scale state-dependent) or beta. A new distribution is one module here, imported below.
"""

from __future__ import annotations

import torch

from envs.spaces import ActionSpec
from marl.distributions import (bernoulli, beta, categorical, epsilon_greedy, gaussian, multicategorical,  # noqa: F401 - registers
                                tanh_gaussian, tanh_normal)
from marl.distributions.base import REGISTRY, Distribution, lookup
from marl.distributions.tanh_gaussian import LOG_STD_BOUNDS  # noqa: F401 - part of the public names

__all__ = ["REGISTRY", "Distribution", "LOG_STD_BOUNDS", "lookup", "make", "uniform_params"]


def make(spec: ActionSpec, params: torch.Tensor, mask: torch.Tensor | None = None) -> Distribution:
    """The distribution `spec.kind` names over the head's output `params` [B, num_params] (see each class)."""
    return lookup(spec.kind).from_params(spec, params, mask)


def uniform_params(spec: ActionSpec, batch: int) -> torch.Tensor:
    """Head outputs for the random baseline: uniform choices, fair bits, a standard normal (squashed
    by tanh where the policy's is), Beta(1, 1) (uniform over the bounds)."""
    return lookup(spec.kind).uniform_params(spec, batch)
