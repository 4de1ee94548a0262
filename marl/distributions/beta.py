"""Box, `--action-dist beta`: independent Beta distributions scaled to the bounds (Chou et al. 2017,
"Improving Stochastic Policy Gradients in Continuous Control with Deep RL using the Beta
Distribution"). A Gaussian puts mass outside the bounds, which the env's clipping turns into a
bias at the edges; a Beta has none there.

params [B, 2n] = raw alpha and beta; alpha = softplus(x) + 1, beta likewise (the paper's choice:
both above 1, so each Beta is unimodal and its density finite). The stored action is x in (0, 1),
and the env acts with low + x (high - low) (`to_env`). log_prob(x) is the density of the env's
action: log Beta(x; alpha, beta) - sum_i log(high_i - low_i); the entropy is the env action's
likewise, H(Beta) + sum_i log(high_i - low_i) (the constant moves no gradient).
"""

from __future__ import annotations

import torch

from envs.spaces import ActionSpec, BoxActions
from marl.distributions.base import Distribution, needs_finite_bounds, register

# A float32 sample may round to exactly 0 or 1, where log x or log(1 - x) is -inf and the policy
# gradient NaN; samples are kept this far inside (0, 1), which moves the env action by at most
# EPS (high - low).
EPS = 1e-6


def standard_gamma(concentration: torch.Tensor, generator: torch.Generator | None) -> torch.Tensor:
    """Gamma(concentration, 1) samples for concentrations >= 1, by Marsaglia and Tsang (2000):
    d = a - 1/3, c = 1 / sqrt(9d); for z ~ N(0, 1), v = (1 + cz)^3, accept d v when
    log u < z^2 / 2 + d - d v + d log v. Written here because `torch._standard_gamma` takes no
    generator, and actors sample with their own; each round accepts over 95% of what is left."""
    d = concentration - 1 / 3
    c = torch.rsqrt(9 * d)
    out = torch.empty_like(concentration)
    todo = torch.ones_like(concentration, dtype=torch.bool)
    while todo.any():
        z = torch.randn(concentration.shape, generator=generator, dtype=concentration.dtype, device=concentration.device)
        u = torch.rand(concentration.shape, generator=generator, dtype=concentration.dtype, device=concentration.device)
        v = (1 + c * z) ** 3
        ok = todo & (v > 0) & (torch.log(u) < 0.5 * z * z + d - d * v + d * torch.log(v.clamp(min=1e-30)))
        out = torch.where(ok, d * v, out)
        todo &= ~ok
    return out


@register
class Beta(Distribution):
    name, space = "beta", BoxActions
    refuses = classmethod(needs_finite_bounds)

    def __init__(self, params: torch.Tensor, low: torch.Tensor, high: torch.Tensor):
        a, b = params.chunk(2, dim=-1)
        self.alpha, self.beta = torch.nn.functional.softplus(a) + 1, torch.nn.functional.softplus(b) + 1
        self.low, self.range = low.to(params.dtype), (high - low).to(params.dtype)
        self.log_range = torch.log(self.range).sum()

    @classmethod
    def head_size(cls, spec: ActionSpec) -> int:
        return 2 * spec.num_outputs

    @classmethod
    def num_params(cls, spec: ActionSpec) -> int:
        return 2 * spec.num_outputs

    @classmethod
    def from_params(cls, spec: ActionSpec, params: torch.Tensor, mask: torch.Tensor | None = None) -> "Beta":
        return cls(params, torch.tensor(spec.low, device=params.device), torch.tensor(spec.high, device=params.device))

    @classmethod
    def uniform_params(cls, spec: ActionSpec, batch: int) -> torch.Tensor:
        # softplus(-inf) + 1 = 1: Beta(1, 1) is the uniform distribution over the bounds.
        return torch.full((batch, cls.num_params(spec)), -torch.inf)

    @classmethod
    def example(cls, spec: ActionSpec, lead: tuple[int, ...], generator: torch.Generator) -> torch.Tensor:
        return torch.rand((*lead, *spec.shape), generator=generator).clamp(EPS, 1 - EPS)

    def sample(self, generator: torch.Generator | None = None) -> tuple[torch.Tensor, torch.Tensor]:
        x = standard_gamma(self.alpha, generator)
        x = (x / (x + standard_gamma(self.beta, generator))).clamp(EPS, 1 - EPS)
        return x, self.log_prob(x)

    def _log_beta(self) -> torch.Tensor:
        return torch.lgamma(self.alpha) + torch.lgamma(self.beta) - torch.lgamma(self.alpha + self.beta)

    def log_prob(self, action: torch.Tensor) -> torch.Tensor:
        logp = (self.alpha - 1) * torch.log(action) + (self.beta - 1) * torch.log1p(-action) - self._log_beta()
        return logp.sum(-1) - self.log_range

    def entropy(self) -> torch.Tensor:
        a, b = self.alpha, self.beta
        h = self._log_beta() - (a - 1) * torch.digamma(a) - (b - 1) * torch.digamma(b) + (a + b - 2) * torch.digamma(a + b)
        return h.sum(-1) + self.log_range

    def mode(self) -> torch.Tensor:
        # (alpha - 1) / (alpha + beta - 2) for alpha, beta > 1; Beta(1, 1) has none: its mean, 1/2.
        excess = self.alpha + self.beta - 2
        return torch.where(excess > 0, (self.alpha - 1) / excess.clamp(min=1e-12), 0.5).clamp(EPS, 1 - EPS)

    def to_env(self, action: torch.Tensor) -> torch.Tensor:
        """The stored x [B, n] in (0, 1) -> low + x (high - low), the action the env takes."""
        return self.low + action * self.range
