"""The built-in actor-critic: encoder (chosen by the observation space) -> optional recurrent
core (`--core gru|lstm`) -> MLP torsos -> heads (chosen by the action space).

Separate actor and critic torsos, as CleanRL's ppo.py; an encoder with weights (a CNN) is shared
by both, as CleanRL's Atari PPO and Sample Factory do, unless the critic reads an input of its own
(MAPPO's global state). Plain PyTorch: the learner shards it (`marl.sharding.parallelize`), the actors
run a CPU copy as is. `blocks()` are the units FSDP2 may shard one by one.

With a core, the actor and the critic each get their own (sb3-contrib's RecurrentPPO default and
MAPPO's recurrent critic): the value loss does not shape the policy's memory, and a centralized
critic remembers the global state it reads, not the agent's view.
"""

from __future__ import annotations

import math

import torch
from torch import nn

from marl import distributions
from marl.models.activations import Tanh
from marl.models.core import Core
from marl.models.encoders import Encoder, init_layer


class MLP(nn.Module):
    """Tanh blocks (or another `activation`), then `head(width)`: the last layer, made after the
    blocks (their init draws come first). The tanh is marl.models.activations': torch's own, or
    where that is MKL's generic kernel, the sigmoid form in training."""

    def __init__(self, n_in: int, hidden: tuple[int, ...], head, activation: type[nn.Module] = Tanh):
        super().__init__()
        widths = (n_in, *hidden)
        self.blocks = nn.ModuleList(
            nn.Sequential(init_layer(nn.Linear(a, b), math.sqrt(2)), activation()) for a, b in zip(widths, widths[1:]))
        self.head = head(widths[-1])

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        # Features made inside the model (one-hots, scaled bytes) are float32; bf16 weights want bf16.
        x = x.to(self.head.weight.dtype)
        for block in self.blocks:
            x = block(x)
        return self.head(x)


class ActorCritic(nn.Module):
    """forward(obs, state, core, starts) -> (params, value, core): `params` is what
    `marl.distributions.make` takes (the head the distribution made, with its free parameters:
    a Gaussian's means and state-independent log-std side by side), `value` is the critic's. The critic reads `state` (a centralized critic's global state,
    MAPPO) with the observation where the policy has one, else the actor's own features.

    Feed-forward (`state_size` 0): obs leaves [B, ...] -> params [B, P], value [B], core None.
    Recurrent: obs leaves [T, B, ...], `core` [B, state_size] (the actor's state, then the
    critic's), `starts` [T, B] -> params [T * B, P], value [T * B] (time-major, flattened: FSDP2
    warns when a sharded root returns a view, which a reshape would be), the state after step T."""

    def __init__(self, spec, hidden: tuple[int, ...], encoder: str = "auto", core: str = "none", core_size: int = 64):
        super().__init__()
        self.encoder = Encoder(spec.obs, encoder)
        self.critic_encoder = Encoder(spec.critic_obs, encoder) if spec.central else None
        actor_in = self.encoder.out_dim
        critic_in = self.encoder.out_dim if self.critic_encoder is None else self.critic_encoder.out_dim
        self.actor_core = self.critic_core = None
        self.state_size = 0
        if core != "none":
            self.actor_core, self.critic_core = Core(core, actor_in, core_size), Core(core, critic_in, core_size)
            actor_in = critic_in = core_size
            self.state_size = self.actor_core.state_size + self.critic_core.state_size
        self.dist = distributions.lookup(spec.action.kind)
        self.actor = MLP(actor_in, hidden, lambda n: self.dist.head(spec.action, n))
        self.critic = MLP(critic_in, hidden, lambda n: init_layer(nn.Linear(n, 1), 1.0))
        # Made last, and named log_std, as before distributions made it: checkpoints keep loading.
        self.log_std = self.dist.free_params(spec.action)
        self.obs_norm = None  # --norm-obs: a marl.models.normalize.ObsNormalizer (set by build_policy)

    def forward(self, obs: dict[str, torch.Tensor], state: torch.Tensor | None = None, core: torch.Tensor | None = None,
                starts: torch.Tensor | None = None) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor | None]:
        if self.obs_norm is not None:
            obs, state = self.obs_norm(obs, state)
        if not self.state_size:
            x = self._encode(obs)
            c = x if self.critic_encoder is None else self.critic_encoder({**obs, "state": state})
            # A reduction rather than squeeze(): FSDP2 warns when a sharded root returns a view.
            return self._params(x), self.critic(c).sum(-1), None
        T, B = starts.shape
        flat = {k: v.flatten(0, 1) for k, v in obs.items()}
        x = self._encode(flat)
        c = x if self.critic_encoder is None else self.critic_encoder({**flat, "state": state.flatten(0, 1)})
        ha, hc = core.split([self.actor_core.state_size, self.critic_core.state_size], dim=-1)
        xa, ha = self.actor_core(x.unflatten(0, (T, B)), ha, starts)
        xc, hc = self.critic_core(c.unflatten(0, (T, B)), hc, starts)
        return self._params(xa.flatten(0, 1)), self.critic(xc.flatten(0, 1)).sum(-1), torch.cat([ha, hc], dim=-1)

    def act(self, obs: dict[str, torch.Tensor], core: torch.Tensor | None = None,
            starts: torch.Tensor | None = None) -> tuple[torch.Tensor, torch.Tensor | None]:
        """The actor alone, one step (obs leaves [B, ...], `starts` [B]): what playing needs (a
        centralized critic's input is not there at play time). The critic's state passes through."""
        if self.obs_norm is not None:
            obs, _ = self.obs_norm(obs)
        if not self.state_size:
            return self._params(self._encode(obs)), None
        ha, hc = core.split([self.actor_core.state_size, self.critic_core.state_size], dim=-1)
        xa, ha = self.actor_core(self._encode(obs).unsqueeze(0), ha, starts.unsqueeze(0))
        return self._params(xa[0]), torch.cat([ha, hc], dim=-1)

    def _encode(self, obs: dict[str, torch.Tensor]) -> torch.Tensor:
        return obs[self.encoder.passthrough] if self.encoder.passthrough else self.encoder(obs)

    def _params(self, x: torch.Tensor) -> torch.Tensor:
        return self.dist.params(self.actor(x), self.log_std)

    def blocks(self) -> list[nn.Module]:
        encoders = [self.encoder] + ([self.critic_encoder] if self.critic_encoder is not None else [])
        cores = [self.actor_core, self.critic_core] if self.state_size else []
        return [*(b for e in encoders for b in e.blocks()), *cores, *self.actor.blocks, *self.critic.blocks]
