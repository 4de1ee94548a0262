"""Encoders: an observation's leaves -> one feature vector, chosen by the observation space.

Flat leaves (vectors, one-hot discrete values, bits) are concatenated as they are; an image
leaf goes through a CNN of its own first (Sample Factory's and SB3's per-key encoders). Images
arrive in their stored dtype: `uint8` is scaled to [0, 1] here, inside the model, so that
buffers, RPC and checkpoints carry a quarter of the bytes.
"""

from __future__ import annotations

import math

import torch
from torch import nn

from envs.leaves import Box
from envs.spaces import Leaf, SpaceError, image_layout
from marl.distributions.base import init_layer  # noqa: F401 - the networks' init, imported from here too

ENCODERS = ("auto", "mlp", "cnn")
NATURE_MIN_SIDE = 36  # the Nature-DQN stack needs at least 36x36 pixels (8/4, 4/2, 3/1 convolutions)


class CNN(nn.Module):
    """The Nature-DQN CNN (Mnih et al. 2015) for frames of 36x36 and up, as CleanRL's Atari PPO;
    below that, the small stack of the MiniGrid baselines (rl-starter-files: 2x2 convolutions and one
    max-pool), which keeps a 7x7 view from shrinking to nothing."""

    def __init__(self, leaf: Leaf):
        super().__init__()
        self.channels_last, (c, h, w) = image_layout(leaf.shape)
        self.scale = 1 / 255 if leaf.dtype == "uint8" else None
        gain = math.sqrt(2)
        if min(h, w) >= NATURE_MIN_SIDE:
            convs = [init_layer(nn.Conv2d(c, 32, 8, stride=4), gain), nn.ReLU(),
                     init_layer(nn.Conv2d(32, 64, 4, stride=2), gain), nn.ReLU(),
                     init_layer(nn.Conv2d(64, 64, 3, stride=1), gain), nn.ReLU(), nn.Flatten()]
            features = 512
        else:
            convs = [init_layer(nn.Conv2d(c, 16, 2), gain), nn.ReLU()]
            if min(h, w) - 1 >= 6:
                convs.append(nn.MaxPool2d(2))
            convs += [init_layer(nn.Conv2d(16, 32, 2), gain), nn.ReLU(),
                      init_layer(nn.Conv2d(32, 64, 2), gain), nn.ReLU(), nn.Flatten()]
            features = 128
        self.convs = nn.Sequential(*convs)
        with torch.no_grad():
            flat = self.convs(torch.zeros(1, c, h, w)).shape[-1]
        self.fc = nn.Sequential(init_layer(nn.Linear(flat, features), gain), nn.ReLU())
        self.out_dim = features

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        # The weights' dtype, not float32: bf16 learners compute in bf16 (FSDP casts only float inputs).
        x = x.to(self.convs[0].weight.dtype)
        if self.scale is not None:
            x = x * self.scale
        if self.channels_last:
            x = x.permute(0, 3, 1, 2)
        elif x.dim() == 3:
            x = x.unsqueeze(1)
        return self.fc(self.convs(x))


def module_key(name: str) -> str:
    return name.replace(".", "__")  # a module name may not hold dots


class Encoder(nn.Module):
    """forward({leaf name: [B, *shape]}) -> [B, out_dim] features, leaves in spec order.

    `kind`: "auto" gives image leaves a CNN and each other leaf the features its kind makes
    (`envs.leaves`: one-hots of indices, flat vectors and bits, bytes scaled to [0, 1]); "mlp"
    gives images those too; "cnn" insists that every Box leaf is an image.
    """

    def __init__(self, leaves: tuple[Leaf, ...], kind: str = "auto"):
        super().__init__()
        if kind not in ENCODERS:
            raise SpaceError(f"--encoder must be one of {', '.join(ENCODERS)}, got {kind!r}")
        self.leaves = leaves
        self.kinds = [leaf.kind_class for leaf in leaves]  # looked up once: forward is on the actor's hot path
        self.cnns = nn.ModuleDict()
        for leaf in leaves:
            if kind == "cnn" and issubclass(leaf.kind_class, Box) and not leaf.is_image:
                raise SpaceError(f"--encoder cnn: observation {leaf.describe()} is not image-shaped (H x W x C, C x H x W, "
                                 f"or H x W uint8, sides of 4 and up); use --encoder auto or mlp")
            if leaf.is_image and kind != "mlp":
                self.cnns[module_key(leaf.name)] = CNN(leaf)
        self.out_dim = sum(self.cnns[module_key(l.name)].out_dim if module_key(l.name) in self.cnns else l.size for l in leaves)
        # One float vector is its own feature vector: the network reads it as is, with no call here
        # (this is CartPole's case, where a module call is a measurable part of an actor step).
        only = leaves[0] if len(leaves) == 1 else None
        self.passthrough = only.name if only and only.kind_class.passthrough(only) else None

    def forward(self, obs: dict[str, torch.Tensor]) -> torch.Tensor:
        parts = []
        for leaf, leaf_kind in zip(self.leaves, self.kinds):
            x = obs[leaf.name]
            key = module_key(leaf.name)
            parts.append(self.cnns[key](x) if key in self.cnns else leaf_kind.features(leaf, x))
        return parts[0] if len(parts) == 1 else torch.cat(parts, dim=-1)

    def blocks(self) -> list[nn.Module]:
        return list(self.cnns.values())
