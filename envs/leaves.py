"""Observation leaves and their kinds: one class per kind of tensor an observation holds.

A `Leaf` is plain values (it crosses RPC, lands in checkpoints and `policy.pt`, compares with
`==`); its `kind` string names a class registered here, which owns everything that differs
between kinds: the Gymnasium space it comes from, its stored dtype, how its array is read from
an env observation, its width, the features the default encoder makes of it, the space a
user's `--model` is shown, and random example values. A box of image shape is the `Image`
kind (a CNN takes it), found from the shape, so that it stays "box" in saved specs.

A new kind is one class here, registered with `@_kind`.
"""

from __future__ import annotations

from dataclasses import dataclass

import gymnasium as gym
import numpy as np
import torch


def image_layout(shape: tuple[int, ...]) -> tuple[bool, tuple[int, int, int]]:
    """(channels_last, (C, H, W)) of an image-shaped box: two equal axes are the spatial ones
    (84x84x4, 4x84x84, chess's 8x8x111); else HWC when the last axis is the smallest (MiniGrid's
    7x7x3 also has equal sides), CHW otherwise; an H x W image has one channel."""
    if len(shape) == 2:
        return False, (1, *shape)
    if shape[0] == shape[1] != shape[2]:
        return True, (shape[2], shape[0], shape[1])
    if shape[1] == shape[2] != shape[0]:
        return False, tuple(shape)
    if shape[-1] < shape[0]:
        return True, (shape[2], shape[0], shape[1])
    return False, tuple(shape)


@dataclass(frozen=True)
class Leaf:
    """One tensor of an observation, per agent-step. `kind` names its class in `KINDS`."""

    name: str  # "obs" for a plain space, else the keys joined by "."
    path: tuple  # keys / indices into the env's observation (() for a plain space); None: filled by marl
    kind: str
    shape: tuple[int, ...]
    dtype: str  # the torch dtype it is stored in: "float32", "uint8" or "int64"
    nvec: tuple[int, ...] = ()  # discrete: (n,); multidiscrete: the flat nvec
    start: tuple[int, ...] = ()  # discrete / multidiscrete: subtracted so that indices start at 0

    @property
    def kind_class(self) -> type[LeafKind]:
        return KINDS[self.kind].refine(self)

    @property
    def is_image(self) -> bool:
        """An H x W x C or C x H x W box (or H x W of uint8): what `--encoder auto` gives a CNN."""
        return self.kind_class.image

    @property
    def size(self) -> int:
        """Its width once flat as the encoder makes it: one-hots for indices."""
        return self.kind_class.width(self)

    @property
    def stored_width(self) -> int:
        """Its width once flat as stored (an index is one number): its share of a fallback global state."""
        return max(int(np.prod(self.shape, dtype=np.int64)), 1)

    def describe(self) -> str:
        return f"{self.name}: {self.kind_class.describe(self)}"


class LeafKind:
    """What one kind of leaf is; stateless, every method takes the leaf."""

    name: str  # what `Leaf.kind` holds
    space: type[gym.Space]  # the Gymnasium space it comes from
    image = False  # the default encoder gives it a CNN (unless --encoder mlp)

    @classmethod
    def refine(cls, leaf: Leaf) -> type[LeafKind]:
        """The class that describes this leaf (a box of image shape: Image)."""
        return cls

    @classmethod
    def leaf(cls, space: gym.Space, path: tuple, name: str) -> Leaf:
        raise NotImplementedError

    @classmethod
    def normalisable(cls, leaf: Leaf) -> bool:
        """Whether --norm-obs normalises it (float vectors; images, bytes and indices are left as they are)."""
        return False

    @classmethod
    def passthrough(cls, leaf: Leaf) -> bool:
        """Whether, alone, it is its own feature vector (a float32 vector: no encoder call at all)."""
        return False

    @classmethod
    def read(cls, leaf: Leaf, x: np.ndarray, lead: tuple[int, ...]) -> np.ndarray:
        """The env's value for the leaf, leading axes `lead`, in the stored dtype and shape."""
        return x.reshape((*lead, *leaf.shape)).astype(np.dtype(leaf.dtype), copy=False)

    @classmethod
    def read_tensor(cls, leaf: Leaf, x: torch.Tensor) -> torch.Tensor:
        """`read` of a batch [B, ...] in torch: what an exported policy's graph does with the env's values."""
        return x.reshape(x.shape[0], *leaf.shape).to(getattr(torch, leaf.dtype))

    @classmethod
    def width(cls, leaf: Leaf) -> int:
        return int(np.prod(leaf.shape, dtype=np.int64))

    @classmethod
    def features(cls, leaf: Leaf, x: torch.Tensor) -> torch.Tensor:
        """The default encoder's float features [B, width] of a batch [B, *shape] (leaves without a CNN)."""
        return x.reshape(x.shape[0], -1).float()

    @classmethod
    def model_space(cls, leaf: Leaf) -> gym.Space:
        """The space a user's `--model` is shown for this leaf."""
        raise NotImplementedError

    @classmethod
    def example(cls, leaf: Leaf, lead: tuple[int, ...], generator: torch.Generator) -> torch.Tensor:
        """Random values in the leaf's range, [*lead, *shape] in its stored dtype (tests and benches)."""
        return torch.randint(0, 2, (*lead, *leaf.shape), generator=generator, dtype=getattr(torch, leaf.dtype))

    @classmethod
    def describe(cls, leaf: Leaf) -> str:
        return f"{leaf.kind}{list(leaf.shape)} {leaf.dtype}"


KINDS: dict[str, type[LeafKind]] = {}


def _kind(cls: type[LeafKind]) -> type[LeafKind]:
    KINDS[cls.name] = cls
    return cls


@_kind
class Box(LeafKind):
    """A float (or byte) box of any shape, flattened into the features."""

    name, space = "box", gym.spaces.Box

    @classmethod
    def refine(cls, leaf: Leaf) -> type[LeafKind]:
        shape = leaf.shape
        if len(shape) == 3:
            return Image if min(image_layout(shape)[1][1:]) >= 4 else cls
        return Image if len(shape) == 2 and leaf.dtype == "uint8" and min(shape) >= 4 else cls

    @classmethod
    def leaf(cls, space: gym.spaces.Box, path: tuple, name: str) -> Leaf:
        return Leaf(name, path, cls.name, tuple(int(d) for d in space.shape), "uint8" if space.dtype == np.uint8 else "float32")

    @classmethod
    def normalisable(cls, leaf: Leaf) -> bool:
        return leaf.dtype.startswith("float")

    @classmethod
    def passthrough(cls, leaf: Leaf) -> bool:
        return leaf.dtype == "float32" and len(leaf.shape) == 1

    @classmethod
    def features(cls, leaf: Leaf, x: torch.Tensor) -> torch.Tensor:
        flat = x.reshape(x.shape[0], -1).float()
        return flat / 255 if leaf.dtype == "uint8" else flat

    @classmethod
    def model_space(cls, leaf: Leaf) -> gym.Space:
        if leaf.dtype == "uint8":
            return gym.spaces.Box(0, 255, leaf.shape, np.uint8)
        return gym.spaces.Box(-np.inf, np.inf, leaf.shape, np.float32)

    @classmethod
    def example(cls, leaf: Leaf, lead: tuple[int, ...], generator: torch.Generator) -> torch.Tensor:
        if leaf.dtype == "uint8":
            return torch.randint(0, 256, (*lead, *leaf.shape), generator=generator, dtype=torch.uint8)
        return torch.randn((*lead, *leaf.shape), generator=generator)


class Image(Box):
    """A box of image shape (H x W x C, C x H x W, or H x W bytes, sides of 4 and up): a CNN's input
    under the default encoder; flattened (bytes scaled to [0, 1]) under --encoder mlp."""

    image = True

    @classmethod
    def normalisable(cls, leaf: Leaf) -> bool:
        return False


@_kind
class Index(LeafKind):
    """Discrete(n): one index, stored from 0, one-hot in the model."""

    name, space = "discrete", gym.spaces.Discrete

    @classmethod
    def leaf(cls, space: gym.spaces.Discrete, path: tuple, name: str) -> Leaf:
        return Leaf(name, path, cls.name, (), "int64", (int(space.n),), (int(space.start),))

    @classmethod
    def read(cls, leaf: Leaf, x: np.ndarray, lead: tuple[int, ...]) -> np.ndarray:
        x = x.reshape((*lead, *leaf.shape)).astype(np.int64, copy=False)
        return x - np.asarray(leaf.start).reshape(leaf.shape) if any(leaf.start) else x

    @classmethod
    def read_tensor(cls, leaf: Leaf, x: torch.Tensor) -> torch.Tensor:
        x = x.reshape(x.shape[0], *leaf.shape).long()
        return x - torch.tensor(leaf.start, device=x.device).reshape(leaf.shape) if any(leaf.start) else x

    @classmethod
    def width(cls, leaf: Leaf) -> int:
        return int(sum(leaf.nvec))

    @classmethod
    def features(cls, leaf: Leaf, x: torch.Tensor) -> torch.Tensor:
        return torch.nn.functional.one_hot(x.long(), leaf.nvec[0]).float()

    @classmethod
    def model_space(cls, leaf: Leaf) -> gym.Space:
        return gym.spaces.Discrete(leaf.nvec[0])

    @classmethod
    def example(cls, leaf: Leaf, lead: tuple[int, ...], generator: torch.Generator) -> torch.Tensor:
        return torch.stack([torch.randint(0, k, lead, generator=generator) for k in leaf.nvec], -1).reshape(*lead, *leaf.shape)

    @classmethod
    def describe(cls, leaf: Leaf) -> str:
        return f"{leaf.kind}{list(leaf.nvec)}"


@_kind
class MultiIndex(Index):
    """MultiDiscrete(nvec): indices, stored from 0, one one-hot each."""

    name, space = "multidiscrete", gym.spaces.MultiDiscrete

    @classmethod
    def leaf(cls, space: gym.spaces.MultiDiscrete, path: tuple, name: str) -> Leaf:
        nvec = tuple(int(n) for n in np.asarray(space.nvec).reshape(-1))
        start = tuple(int(s) for s in np.asarray(space.start).reshape(-1))
        return Leaf(name, path, cls.name, (len(nvec),), "int64", nvec, start)

    @classmethod
    def features(cls, leaf: Leaf, x: torch.Tensor) -> torch.Tensor:
        return torch.cat([torch.nn.functional.one_hot(x[..., i].long(), n).float() for i, n in enumerate(leaf.nvec)], -1)

    @classmethod
    def model_space(cls, leaf: Leaf) -> gym.Space:
        return gym.spaces.MultiDiscrete(list(leaf.nvec))


@_kind
class Bits(LeafKind):
    """MultiBinary(n): 0/1 values, stored as bytes, read as they are."""

    name, space = "multibinary", gym.spaces.MultiBinary

    @classmethod
    def leaf(cls, space: gym.spaces.MultiBinary, path: tuple, name: str) -> Leaf:
        return Leaf(name, path, cls.name, (int(np.prod(space.shape)),), "uint8")

    @classmethod
    def model_space(cls, leaf: Leaf) -> gym.Space:
        return gym.spaces.MultiBinary(leaf.shape[0])


def kind_for(space: gym.Space) -> type[LeafKind] | None:
    """The kind a Gymnasium space's leaf is, or None if no kind reads it."""
    return next((k for k in KINDS.values() if isinstance(space, k.space)), None)
