"""What acts for the agents of an env batch: an action source per step, one batched call per policy.

`EnvRunner` (marl.runner) asks its source `act(g, obs, mask, fresh, state)` once per policy g per
step, with every agent slot of that policy in every env copy: obs leaves [copies, n_g, ...], the
legal-move mask [copies, n_g, m] or None, `fresh` [copies, n_g] (the slot's step starts an episode:
a recurrent policy zeroes its state) and the env's global state [copies, state_dim] or None. It
answers an `Act`. A new kind of player is one class here with that method.
"""

from __future__ import annotations

from typing import Callable, NamedTuple, Protocol

import torch

from marl import distributions
from marl.policies import critic_state


class Act(NamedTuple):
    """One policy's step: `env` what the env is sent and `action` what a trajectory stores, both
    [copies, n_g, ...]; a learning policy's extras (the rest, None from other players): log-prob and
    value [copies, n_g], the critic's state input, and the recurrent state the step started from."""
    env: torch.Tensor
    action: torch.Tensor
    logprob: torch.Tensor | None = None
    value: torch.Tensor | None = None
    critic: torch.Tensor | None = None
    core: torch.Tensor | None = None


class ActionSource(Protocol):
    def act(self, g: int, obs: dict[str, torch.Tensor], mask: torch.Tensor | None, fresh: torch.Tensor,
            state: torch.Tensor | None) -> Act: ...


def _flat(mask: torch.Tensor | None) -> torch.Tensor | None:
    return None if mask is None else mask.reshape(-1, mask.shape[-1])


class PolicySource:
    """The networks' actions for every slot: sampled with `generator`, or the most likely (`greedy`).
    With `critic` the full forward (values, log-probs: what training records), else the actor alone
    (what playing needs; a centralized critic's input is not there at play time). A recurrent
    policy's state per slot lives here, [copies, n_g, size]; new weights keep it."""

    def __init__(self, model, specs, copies: int, generator: torch.Generator, greedy: bool = False,
                 critic: bool = True):
        self.model, self.specs, self.copies, self.generator = model, specs, copies, generator
        self.greedy, self.critic = greedy, critic
        self.state_sizes = [model.state_size(s.name) for s in specs]
        self.reset()

    def reset(self) -> None:
        # Beside the policy, whose device its generator shares (marl.devices.actor_device).
        self.core = [torch.zeros((self.copies, len(s.agents), size), device=self.generator.device)
                     for s, size in zip(self.specs, self.state_sizes)]

    def forward(self, g: int, obs, mask, fresh, state):
        """Policy g's distribution and values [copies, n_g] (None without `critic`), the critic's state
        input, and a recurrent policy's state after this step (None for a feed-forward one)."""
        spec, size = self.specs[g], self.state_sizes[g]
        net = self.model.policies[spec.name]
        lead = (self.copies, len(spec.agents))
        flat = {k: x.reshape(-1, *x.shape[2:]) for k, x in obs.items()}
        s = critic_state(spec, state) if self.critic else None
        value = core = None
        if not self.critic:
            params, core = net.act(flat, self.core[g].reshape(fresh.numel(), size), fresh.reshape(-1))
        elif size:
            # One step of the sequence API: a batched call over every agent slot.
            s_flat = None if s is None else s.reshape(1, -1, spec.state_dim)
            params, value, core = net({k: x.unsqueeze(0) for k, x in flat.items()}, s_flat,
                                      self.core[g].reshape(-1, size), fresh.reshape(1, -1))
        else:
            params, value, core = net(flat, None if s is None else s.reshape(-1, spec.state_dim))
        dist = distributions.make(spec.action, params, _flat(mask))
        return dist, None if value is None else value.reshape(lead), s, None if core is None else core.reshape(*lead, -1)

    def act(self, g, obs, mask, fresh, state) -> Act:
        dist, value, s, core = self.forward(g, obs, mask, fresh, state)
        before = self.core[g]
        if core is not None:
            self.core[g] = core
        if self.greedy:
            action, logprob = dist.mode(), None
        else:
            action, logprob = dist.sample(self.generator)
        shape = (self.copies, len(self.specs[g].agents))
        action = action.reshape(*shape, *self.specs[g].action.shape)
        return Act(dist.to_env(action), action,
                   None if logprob is None else logprob.reshape(shape), value, s, before if core is not None else None)


class SnapshotSource(PolicySource):
    """A frozen snapshot of the policy (--opponents pool) on the seats it holds: sampled moves, as in
    training, from a feed-forward call (it keeps no recurrent state)."""

    def __init__(self, model, specs, copies: int, generator: torch.Generator):
        super().__init__(model, specs, copies, generator)
        self.state_sizes = [0] * len(specs)

    def load(self, weights: dict[str, torch.Tensor]) -> None:
        self.model.load_state_dict(weights)


class RandomSource:
    """Uniformly random (legal) actions; Box: a standard normal, then clipped by the env (squashed by
    tanh where the policy's is): the baseline a trained policy must beat."""

    def __init__(self, specs, copies: int, generator: torch.Generator):
        self.specs, self.copies, self.generator = specs, copies, generator

    def act(self, g, obs, mask, fresh, state) -> Act:
        spec = self.specs[g]
        shape = (self.copies, len(spec.agents))
        pi = distributions.make(spec.action, distributions.uniform_params(spec.action, shape[0] * shape[1]), _flat(mask))
        action = pi.sample(self.generator)[0].reshape(*shape, *spec.action.shape)
        return Act(pi.to_env(action), action)


class LookaheadSource:
    """The one-step lookahead player of the line games (marl.heuristics) on every slot: it reads the
    board planes and the legal-move mask, as the policy does. A Python loop over boards: evaluation only."""

    def __init__(self, env_id: str, seed: int):
        import numpy as np

        from marl.heuristics import line_game

        self.k, self.gravity = line_game(env_id)
        self.rng = np.random.default_rng(seed)

    def act(self, g, obs, mask, fresh, state) -> Act:
        from marl.heuristics import lookahead_move

        boards = obs["observation"]
        lead = boards.shape[:2]
        moves = [lookahead_move(b, m, self.k, self.gravity, self.rng)
                 for b, m in zip(boards.reshape(-1, *boards.shape[2:]).numpy(), _flat(mask).numpy())]
        action = torch.tensor(moves).reshape(lead)
        return Act(action, action)


class SeatSource:
    """`base` on every slot and `other` on the seats `seats(g)` ([copies, n_g] bool) says it holds: a
    frozen snapshot's seats in training, the other sides in `marl.evaluate --opponent`. The extras
    stay `base`'s (those seats' rows are not the learner's); `other` is asked only when it holds a seat."""

    def __init__(self, base, other, seats: Callable[[int], torch.Tensor]):
        self.base, self.other, self.seats = base, other, seats

    def act(self, g, obs, mask, fresh, state) -> Act:
        mine = self.base.act(g, obs, mask, fresh, state)
        seats = self.seats(g)
        if not bool(seats.any()):
            return mine
        theirs = self.other.act(g, obs, mask, fresh, state)
        pick = seats.view(*seats.shape, *[1] * (mine.action.dim() - 2))
        return mine._replace(env=torch.where(pick, theirs.env, mine.env), action=torch.where(pick, theirs.action, mine.action))
