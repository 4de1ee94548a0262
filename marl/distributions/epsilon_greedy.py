"""Discrete(n) acted in by a value method (DQN and its kin): epsilon-greedy over Q-values.

The params are the Q-values [B, n] with the exploration rate epsilon as one more column: the
Q-network holds epsilon as a buffer that the learner sets from its schedule, so it reaches the
actors with the weights they already pull (sync and async alike) and `mode` (evaluation, videos,
exports) is the greedy action. With probability epsilon an action is uniform over the legal ones,
else the legal action of highest Q (Mnih et al. 2015); illegal actions (masks) are never taken.
"""

from __future__ import annotations

import torch

from envs.spaces import ActionSpec, DiscreteActions
from marl.distributions.base import Distribution, register
from marl.distributions.categorical import gumbel_argmax, masked


@register
class EpsilonGreedy(Distribution):
    name, space = "epsilon_greedy", DiscreteActions

    def __init__(self, q: torch.Tensor, epsilon: torch.Tensor, mask: torch.Tensor | None = None):
        self.q, self.epsilon, self.mask = masked(q, mask), epsilon, mask

    @classmethod
    def refuses(cls, spec: ActionSpec) -> str:
        wrong = super().refuses(spec)
        return wrong and "value methods (dqn, vdn, qmix) act in Discrete actions; use --algo ppo or sac for others"

    @classmethod
    def num_params(cls, spec: ActionSpec) -> int:
        return spec.num_outputs + 1

    @staticmethod
    def q_values(params: torch.Tensor) -> torch.Tensor:
        """The Q-values of a network's params (the epsilon column dropped)."""
        return params[..., :-1]

    @classmethod
    def from_params(cls, spec: ActionSpec, params: torch.Tensor, mask: torch.Tensor | None = None) -> "EpsilonGreedy":
        return cls(params[..., :-1], params[..., -1], mask)

    @classmethod
    def uniform_params(cls, spec: ActionSpec, batch: int) -> torch.Tensor:
        return torch.cat([torch.zeros(batch, spec.num_outputs), torch.ones(batch, 1)], dim=-1)

    def _legal(self) -> torch.Tensor:
        return torch.ones_like(self.q, dtype=torch.bool) if self.mask is None else self.mask

    def probs(self) -> torch.Tensor:
        legal = self._legal()
        uniform = legal / legal.sum(-1, keepdim=True)
        greedy = torch.nn.functional.one_hot(self.mode(), self.q.shape[-1]).to(self.q.dtype)
        eps = self.epsilon.unsqueeze(-1)
        return eps * uniform + (1 - eps) * greedy

    def sample(self, generator: torch.Generator | None = None) -> tuple[torch.Tensor, torch.Tensor]:
        explore = torch.rand(self.epsilon.shape, generator=generator, dtype=self.q.dtype, device=self.q.device) < self.epsilon
        legal = torch.where(self._legal(), 0.0, torch.finfo(self.q.dtype).min).to(self.q.dtype)
        action = torch.where(explore, gumbel_argmax(legal, generator), self.mode())
        return action, self.log_prob(action)

    def log_prob(self, action: torch.Tensor) -> torch.Tensor:
        return self.probs().gather(-1, action.long().unsqueeze(-1)).squeeze(-1).log()

    def entropy(self) -> torch.Tensor:
        p = self.probs()
        return -(p * p.clamp(min=1e-30).log()).sum(-1)

    def mode(self) -> torch.Tensor:
        return self.q.argmax(-1)
