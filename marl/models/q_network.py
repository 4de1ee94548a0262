"""The built-in Q-network of the value methods (DQN, IQL, VDN, QMIX): encoder (chosen by the
observation space, as the actor-critic's) -> optional recurrent core (`--core gru|lstm`, DRQN) ->
ReLU MLP -> Q-values, one per action, or the dueling head of Wang et al. 2016 (Eq. 9:
Q = V + A - mean_a A).

It speaks the actor-critic's protocol (forward -> (params, value, core)), so that actors,
evaluation, videos and policy.pt run it unchanged: `params` are the Q-values with epsilon as one
more column (`marl.distributions.epsilon_greedy`), `value` is the greedy action's Q. Epsilon is a
buffer: the learner sets it from the schedule, the weights carry it to the actors.
"""

from __future__ import annotations

import torch
from torch import nn

from marl.models.actor_critic import MLP
from marl.models.core import Core
from marl.models.encoders import Encoder, init_layer


class DuelingHead(nn.Module):
    def __init__(self, n_in: int, actions: int):
        super().__init__()
        self.value, self.advantage = init_layer(nn.Linear(n_in, 1), 1.0), init_layer(nn.Linear(n_in, actions), 1.0)

    @property
    def weight(self) -> torch.Tensor:  # MLP casts its input to its head's weight dtype
        return self.value.weight

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        a = self.advantage(x)
        return self.value(x) + a - a.mean(-1, keepdim=True)


class QNetwork(nn.Module):
    def __init__(self, spec, hidden: tuple[int, ...], encoder: str = "auto", dueling: bool = False,
                 core: str = "none", core_size: int = 64):
        super().__init__()
        from marl import distributions

        self.dist = distributions.lookup(spec.action.kind)
        self.encoder = Encoder(spec.obs, encoder)
        n_in = self.encoder.out_dim
        self.core = Core(core, n_in, core_size) if core != "none" else None
        self.state_size = self.core.state_size if self.core is not None else 0
        n = spec.action.num_outputs
        head = (lambda w: DuelingHead(w, n)) if dueling else (lambda w: init_layer(nn.Linear(w, n), 1.0))
        self.q = MLP(core_size if self.core is not None else n_in, hidden, head, activation=nn.ReLU)
        self.register_buffer("epsilon", torch.ones(()))
        self.obs_norm = None  # --norm-obs: set by build_policy

    def q_values(self, obs: dict[str, torch.Tensor], core: torch.Tensor | None = None,
                 starts: torch.Tensor | None = None) -> torch.Tensor | tuple[torch.Tensor, torch.Tensor]:
        """Feed-forward: obs leaves [B, ...] -> Q [B, A]. Recurrent: obs leaves [T, B, ...], the state
        [B, S] before step 0 and `starts` [T, B] -> (Q [T, B, A], the state after step T - 1)."""
        if self.obs_norm is not None:
            obs, _ = self.obs_norm(obs)
        if self.core is None:
            return self.q(self._encode(obs)).float()
        T, B = starts.shape
        x = self._encode({k: v.flatten(0, 1) for k, v in obs.items()})
        x = x.reshape(T, B, x.shape[-1])  # not unflatten: ONNX's exporter folds its sizes into constants
        y, core = self.core(x, core, starts)
        return self.q(y).float(), core

    def _encode(self, obs: dict[str, torch.Tensor]) -> torch.Tensor:
        return obs[self.encoder.passthrough] if self.encoder.passthrough else self.encoder(obs)

    def _params(self, q: torch.Tensor) -> torch.Tensor:
        eps = self.epsilon.to(q.dtype).expand(*q.shape[:-1], 1)
        return torch.cat([q, eps], dim=-1)

    def forward(self, obs: dict[str, torch.Tensor], state: torch.Tensor | None = None, core=None, starts=None):
        """As the actor-critic's: feed-forward [B] rows, or recurrent [T, B] time-major, flattened."""
        if self.core is None:
            q = self.q_values(obs)
            return self._params(q), q.amax(-1), None
        q, core = self.q_values(obs, core, starts)
        q = q.flatten(0, 1)
        return self._params(q), q.amax(-1), core

    def act(self, obs: dict[str, torch.Tensor], core=None, starts=None):
        if self.core is None:
            return self._params(self.q_values(obs)), None
        q, core = self.q_values({k: v.unsqueeze(0) for k, v in obs.items()}, core, starts.unsqueeze(0))
        return self._params(q[0]), core

    def blocks(self) -> list[nn.Module]:
        return [*self.encoder.blocks(), *([self.core] if self.core is not None else []), *self.q.blocks]
