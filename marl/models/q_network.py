"""The built-in Q-network of the value methods (DQN, IQL, VDN, QMIX): encoder (chosen by the
observation space, as the actor-critic's) -> ReLU MLP -> Q-values, one per action, or the dueling
head of Wang et al. 2016 (Eq. 9: Q = V + A - mean_a A).

It speaks the actor-critic's protocol (forward -> (params, value, core)), so that actors,
evaluation, videos and policy.pt run it unchanged: `params` are the Q-values with epsilon as one
more column (`marl.distributions.epsilon_greedy`), `value` is the greedy action's Q. Epsilon is a
buffer: the learner sets it from the schedule, the weights carry it to the actors.
"""

from __future__ import annotations

import torch
from torch import nn

from marl.models.actor_critic import MLP
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
    state_size = 0  # recurrent Q-networks are not built yet (marl.run refuses --core with a value method)

    def __init__(self, spec, hidden: tuple[int, ...], encoder: str = "auto", dueling: bool = False):
        super().__init__()
        from marl import distributions

        self.dist = distributions.lookup(spec.action.kind)
        self.encoder = Encoder(spec.obs, encoder)
        n = spec.action.num_outputs
        head = (lambda w: DuelingHead(w, n)) if dueling else (lambda w: init_layer(nn.Linear(w, n), 1.0))
        self.q = MLP(self.encoder.out_dim, hidden, head, activation=nn.ReLU)
        self.register_buffer("epsilon", torch.ones(()))
        self.obs_norm = None  # --norm-obs: set by build_policy

    def q_values(self, obs: dict[str, torch.Tensor]) -> torch.Tensor:
        if self.obs_norm is not None:
            obs, _ = self.obs_norm(obs)
        x = obs[self.encoder.passthrough] if self.encoder.passthrough else self.encoder(obs)
        return self.q(x).float()

    def forward(self, obs: dict[str, torch.Tensor], state: torch.Tensor | None = None, core=None, starts=None):
        q = self.q_values(obs)
        eps = self.epsilon.to(q.dtype).expand(*q.shape[:-1], 1)
        return torch.cat([q, eps], dim=-1), q.amax(-1), None

    def act(self, obs: dict[str, torch.Tensor], core=None, starts=None):
        return self.forward(obs)[0], None

    def blocks(self) -> list[nn.Module]:
        return [*self.encoder.blocks(), *self.q.blocks]
