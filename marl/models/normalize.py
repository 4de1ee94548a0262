"""`--norm-obs`: the part of a network that normalises what it reads.

(x - mean) / sqrt(var + eps), clipped to +-`--clip-obs`, for every float vector leaf of an
observation and a centralized critic's global state, with `marl.normalize.RunningMoments` held
as buffers: the statistics travel in the model's state dict, to actors with the weights, into
checkpoints and `policy.pt`, so that actors, learners and `marl.evaluate` normalise alike. Images,
bytes and indices are left as they are: a CNN scales its bytes, an index becomes a one-hot.
The learner ranks merge each batch into the statistics (`update`) after training on it.
"""

from __future__ import annotations

import torch
from torch import nn

from marl.models.encoders import module_key
from marl.normalize import RunningMoments, batch_moments


def normalisable(leaf) -> bool:
    """A float vector leaf (not an image): what `--norm-obs` normalises."""
    return leaf.kind_class.normalisable(leaf)


class ObsNormalizer(nn.Module):
    """forward(obs {leaf: x}, state) -> the same with every normalisable leaf, and `state` (a
    centralized critic's input, `state_dim` floats) normalised and clipped; other leaves pass through."""

    def __init__(self, leaves, clip: float, state_dim: int = 0):
        super().__init__()
        self.clip = clip
        self.stats = nn.ModuleDict({module_key(leaf.name): RunningMoments(leaf.shape) for leaf in leaves if normalisable(leaf)})
        self.names = {module_key(leaf.name): leaf.name for leaf in leaves if normalisable(leaf)}
        self.state = RunningMoments((state_dim,)) if state_dim else None

    def _normalise(self, m: RunningMoments, x: torch.Tensor) -> torch.Tensor:
        return ((x.float() - m.mean.float()) * m.scale()).clamp(-self.clip, self.clip)

    def forward(self, obs: dict[str, torch.Tensor], state: torch.Tensor | None = None):
        obs = {**obs, **{name: self._normalise(self.stats[key], obs[name]) for key, name in self.names.items()}}
        if self.state is not None and state is not None:
            state = self._normalise(self.state, state)
        return obs, state

    @torch.no_grad()
    def update(self, obs: dict[str, torch.Tensor], state: torch.Tensor | None, group) -> None:
        """Merge a batch of samples (leaves [N, ...], the same N for all) from every rank of `group`."""
        pairs = [(self.stats[key], obs[name]) for key, name in self.names.items()]
        if self.state is not None:
            pairs.append((self.state, state))
        for m, x in pairs:
            m.merge(*batch_moments(x.reshape(x.shape[0], *m.mean.shape), group))
