"""Action distributions, built from an `ActionSpec` and the network's head output.

`make(spec, params, mask)` is the only place that looks at an action kind: everything else
calls `sample`, `log_prob`, `entropy` and `mode` on what it returns, and `env_action(d, action)`
for what the env is sent (the action itself, but for a tanh-squashed Gaussian's sample). Written as plain tensor code
rather than `torch.distributions`: the actor samples every agent of every env copy each step,
and Gumbel-max sampling is one kernel where `Categorical` builds objects and validates arguments.
The tests check each against `torch.distributions`.

Masks (PettingZoo's `action_mask`): an illegal action's logit is set to the dtype's lowest
finite value, so it is never sampled, its probability is exactly 0, and it adds 0 to the entropy;
the log-probability of a legal action is its log-probability among the legal ones.
"""

from __future__ import annotations

import math

import torch

from envs.spaces import ActionSpec


def _masked(logits: torch.Tensor, mask: torch.Tensor | None) -> torch.Tensor:
    if mask is None:
        return logits
    return torch.where(mask, logits, torch.finfo(logits.dtype).min)


def _gumbel_argmax(logits: torch.Tensor, generator: torch.Generator | None) -> torch.Tensor:
    """A sample of Categorical(logits) by the Gumbel-max trick: argmax(logits + Gumbel noise)."""
    u = torch.rand(logits.shape, generator=generator, dtype=logits.dtype).clamp_(min=1e-20)
    return torch.argmax(logits - torch.log(-torch.log(u)), dim=-1)


def _categorical_entropy(logits: torch.Tensor) -> torch.Tensor:
    logp = torch.log_softmax(logits, dim=-1)
    return -(logp.exp() * logp).sum(-1)


class Categorical:
    """Discrete(n): logits [B, n]; actions [B] int64."""

    def __init__(self, logits: torch.Tensor, mask: torch.Tensor | None = None):
        self.logits = _masked(logits, mask)

    def sample(self, generator: torch.Generator | None = None) -> tuple[torch.Tensor, torch.Tensor]:
        action = _gumbel_argmax(self.logits, generator)
        return action, self.log_prob(action)

    def log_prob(self, action: torch.Tensor) -> torch.Tensor:
        return torch.log_softmax(self.logits, dim=-1).gather(-1, action.long().unsqueeze(-1)).squeeze(-1)

    def entropy(self) -> torch.Tensor:
        return _categorical_entropy(self.logits)

    def mode(self) -> torch.Tensor:
        return self.logits.argmax(-1)


class MultiCategorical:
    """MultiDiscrete(nvec): independent categoricals, logits [B, sum(nvec)] side by side; actions [B, k]."""

    def __init__(self, logits: torch.Tensor, nvec: tuple[int, ...], mask: torch.Tensor | None = None):
        self.parts = _masked(logits, mask).split(list(nvec), dim=-1)

    def sample(self, generator: torch.Generator | None = None) -> tuple[torch.Tensor, torch.Tensor]:
        action = torch.stack([_gumbel_argmax(p, generator) for p in self.parts], dim=-1)
        return action, self.log_prob(action)

    def log_prob(self, action: torch.Tensor) -> torch.Tensor:
        return sum(torch.log_softmax(p, dim=-1).gather(-1, action[..., i:i + 1].long()).squeeze(-1)
                   for i, p in enumerate(self.parts))

    def entropy(self) -> torch.Tensor:
        return sum(_categorical_entropy(p) for p in self.parts)

    def mode(self) -> torch.Tensor:
        return torch.stack([p.argmax(-1) for p in self.parts], dim=-1)


class Bernoulli:
    """MultiBinary(n): one logit per bit [B, n]; actions [B, n] int64 in {0, 1}."""

    def __init__(self, logits: torch.Tensor):
        self.logits = logits

    def sample(self, generator: torch.Generator | None = None) -> tuple[torch.Tensor, torch.Tensor]:
        u = torch.rand(self.logits.shape, generator=generator, dtype=self.logits.dtype)
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


class Gaussian:
    """Box: a diagonal Gaussian, params [B, 2n] = mean and log-std side by side; actions [B, n] float32."""

    def __init__(self, params: torch.Tensor):
        self.mean, self.log_std = params.chunk(2, dim=-1)

    def sample(self, generator: torch.Generator | None = None) -> tuple[torch.Tensor, torch.Tensor]:
        action = self.mean + self.log_std.exp() * torch.randn(self.mean.shape, generator=generator, dtype=self.mean.dtype)
        return action, self.log_prob(action)

    def log_prob(self, action: torch.Tensor) -> torch.Tensor:
        z = (action - self.mean) / self.log_std.exp()
        return (-0.5 * z.pow(2) - self.log_std - 0.5 * math.log(2 * math.pi)).sum(-1)

    def entropy(self) -> torch.Tensor:
        return (0.5 + 0.5 * math.log(2 * math.pi) + self.log_std).sum(-1)

    def mode(self) -> torch.Tensor:
        return self.mean


LOG_STD_BOUNDS = (-5.0, 2.0)  # a tanh-squashed Gaussian's log-std is kept inside these (as SAC implementations do)
# The soft bound maps the network's 0 to a log-std of 0, as the unsquashed Gaussian starts.
_LOG_STD_OFFSET = math.log(-LOG_STD_BOUNDS[0] / LOG_STD_BOUNDS[1])


class TanhGaussian:
    """Box with `--action-squash tanh`: u ~ N(mean, std), and the env acts with
    low + (tanh(u) + 1) (high - low) / 2 (`env_action`). The stored action is u: the squash loses
    precision near the bounds, where atanh of the stored value would not give u back.

    log_prob(u) is the density of the env's action, by the change of variables:
    log N(u) - sum_i log((high_i - low_i) / 2 * (1 - tanh(u_i)^2)), with log(1 - tanh(u)^2) computed
    as 2 (log 2 - u - softplus(-2u)), which does not underflow for large |u|. The entropy is the
    Gaussian's (the squashed one has no closed form; SB3 estimates it from samples instead). The
    log-std is bounded smoothly, lo + (hi - lo) sigmoid(x + c): a hard clamp would stop its
    gradient for good once Adam had pushed it past a bound.
    """

    def __init__(self, params: torch.Tensor, low: torch.Tensor, high: torch.Tensor):
        mean, raw = params.chunk(2, dim=-1)
        lo, hi = LOG_STD_BOUNDS
        self.base = Gaussian(torch.cat([mean, lo + (hi - lo) * torch.sigmoid(raw + _LOG_STD_OFFSET)], dim=-1))
        self.low, self.half_range = low.to(mean.dtype), ((high - low) / 2).to(mean.dtype)
        self.log_half_range = torch.log(self.half_range).sum()

    def sample(self, generator: torch.Generator | None = None) -> tuple[torch.Tensor, torch.Tensor]:
        u, _ = self.base.sample(generator)
        return u, self.log_prob(u)

    def log_prob(self, action: torch.Tensor) -> torch.Tensor:
        log_det = 2 * (math.log(2) - action - torch.nn.functional.softplus(-2 * action))
        return self.base.log_prob(action) - log_det.sum(-1) - self.log_half_range

    def entropy(self) -> torch.Tensor:
        return self.base.entropy()

    def mode(self) -> torch.Tensor:
        return self.base.mean

    def env_action(self, action: torch.Tensor) -> torch.Tensor:
        """The stored u [B, n] -> the action the env takes, inside its bounds."""
        return self.low + (torch.tanh(action) + 1) * self.half_range


Distribution = Categorical | MultiCategorical | Bernoulli | Gaussian | TanhGaussian


def make(spec: ActionSpec, params: torch.Tensor, mask: torch.Tensor | None = None) -> Distribution:
    """The distribution of `spec`'s kind over the head's output `params` [B, ...] (see each class)."""
    if spec.kind == "categorical":
        return Categorical(params, mask)
    if spec.kind == "multicategorical":
        return MultiCategorical(params, spec.nvec, mask)
    if spec.kind == "bernoulli":
        return Bernoulli(params)
    if spec.kind == "gaussian":
        return Gaussian(params)
    if spec.kind == "tanh_gaussian":
        return TanhGaussian(params, torch.tensor(spec.low), torch.tensor(spec.high))
    raise ValueError(f"no distribution for action kind {spec.kind!r}")


def env_action(dist: Distribution, action: torch.Tensor) -> torch.Tensor:
    """What the env is sent for a sampled (or most likely) action: the action as the trajectory
    stores it, but a tanh-squashed Gaussian's u squashed into the Box (the env adapters then put
    every action into the env's own shape and dtype: `envs.spaces.env_action`)."""
    return dist.env_action(action) if isinstance(dist, TanhGaussian) else action


def uniform_params(spec: ActionSpec, batch: int) -> torch.Tensor:
    """Head outputs for the random baseline: uniform choices, fair bits, a standard normal (squashed
    by tanh where the policy's is)."""
    return torch.zeros(batch, spec.num_outputs * (2 if spec.continuous else 1))
