"""Running statistics that normalise what a network reads and what the critic learns to predict.

- `RunningMoments`: the mean and variance of a stream of batches, merged batch by batch with the
  parallel rule of Chan, Golub and LeVeque (1979), as SB3's `RunningMeanStd`. Held in float64
  buffers, so that a model carries them in its state dict: to actors with the weights, into
  checkpoints and `policy.pt`, through FSDP2 (which shards parameters, not buffers).
- `batch_moments`: one batch's count, mean and variance over every learner rank (two all-reduces:
  the sum, then the squared deviations from the global mean), so that every rank merges the same
  numbers and 1 rank and 2 ranks hold the same statistics.
- `marl.models.normalize.ObsNormalizer` (`--norm-obs`) keeps one per observation leaf, inside the model.
- `RewardScaler` (`--norm-reward`): rewards divided by the running standard deviation of the
  discounted return (Gymnasium's `NormalizeReward`, SB3's `VecNormalize`), clipped to
  +-`--clip-reward`. The return G_t = gamma * G_{t-1} + r_t runs per agent slot on the actors and
  restarts after each episode; the statistics are one per policy, kept by the learner ranks.
"""

from __future__ import annotations

import torch
import torch.distributed as dist
from torch import nn

EPS = 1e-8  # added to the variance before the square root (SB3's and Gymnasium's epsilon)


class RunningMoments(nn.Module):
    """Mean and variance over every sample merged so far, per element of `shape`."""

    def __init__(self, shape: tuple[int, ...] = ()):
        super().__init__()
        # SB3's start: a tiny count, so that the first batch's moments are taken almost as they are.
        self.register_buffer("count", torch.tensor(1e-4, dtype=torch.float64))
        self.register_buffer("mean", torch.zeros(shape, dtype=torch.float64))
        self.register_buffer("var", torch.ones(shape, dtype=torch.float64))

    @torch.no_grad()
    def merge(self, n: torch.Tensor, mean: torch.Tensor, var: torch.Tensor) -> None:
        """Fold in a batch of `n` samples with moments (`mean`, `var`). A batch of none changes
        nothing, by the formulas themselves (no host sync to test for it)."""
        total = self.count + n
        delta = mean - self.mean
        m2 = self.var * self.count + var * n + delta.pow(2) * self.count * n / total
        self.mean.add_(delta * n / total)
        self.var.copy_(m2 / total)
        self.count.copy_(total)

    def scale(self) -> torch.Tensor:
        """1 / standard deviation, in float32."""
        return torch.rsqrt(self.var + EPS).float()


def batch_moments(x: torch.Tensor, group: dist.ProcessGroup | None) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """(count, mean, variance) of the samples x [N, *shape] of every rank of `group` together, in
    float64, the same on every rank. N may differ between ranks, and be 0."""
    x = x.double()
    sums = torch.cat([x.new_tensor([x.shape[0]]), x.sum(0).reshape(-1)])
    if group is not None:
        dist.all_reduce(sums, group=group)
    n, mean = sums[0], (sums[1:] / sums[0].clamp(min=1)).reshape(x.shape[1:])
    dev = (x - mean).pow(2).sum(0)
    if group is not None:
        dist.all_reduce(dev, group=group)
    return n, mean, dev / n.clamp(min=1)


class RewardScaler:
    """One policy's reward scale (`--norm-reward`): a Stateful part of a learner rank's checkpoint."""

    def __init__(self, clip: float, device: torch.device | str = "cpu"):
        self.clip = clip
        self.returns = RunningMoments(()).to(device)

    def __call__(self, rewards: torch.Tensor, discounted_return: torch.Tensor, valid: torch.Tensor, group) -> torch.Tensor:
        """Merge the valid steps' discounted returns of every rank, then scale `rewards` with the
        updated statistics (SB3's order)."""
        self.returns.merge(*batch_moments(discounted_return[valid].reshape(-1), group))
        return (rewards * self.returns.scale()).clamp(-self.clip, self.clip)

    def state_dict(self) -> dict:
        return dict(self.returns.state_dict())

    def load_state_dict(self, state: dict) -> None:
        self.returns.load_state_dict(state)
