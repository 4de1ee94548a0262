"""From Gymnasium spaces to plain specs, and from env observations to the arrays those specs name.

An observation space becomes a tuple of `Leaf`s: one tensor each, found in the env's observation
by its `path` (keys of nested `Dict`s, indices of `Tuple`s), stored in its own dtype (`uint8`
images stay `uint8` until the model converts them). An action space becomes an `ActionSpec`,
which `marl.distributions` turns into a distribution. Both are frozen dataclasses of plain
values, so that they cross RPC, land in checkpoints and `policy.pt`, and compare with `==`.
This module is the only one that looks inside a Gymnasium space.
"""

from __future__ import annotations

from dataclasses import dataclass

import gymnasium as gym
import numpy as np

MASK_KEY = "action_mask"  # PettingZoo's convention: a Dict observation's key, or an info key


class SpaceError(ValueError):
    """A space no encoder or head supports; the message is one line naming what is supported."""


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
    """One tensor of an observation, per agent-step.

    kind: "box" (any shape; image-shaped ones go through a CNN), "discrete" (an index, one-hot
    in the model), "multidiscrete" (indices, one one-hot each), "multibinary" (0/1 values).
    """

    name: str  # "obs" for a plain space, else the keys joined by "."
    path: tuple  # keys / indices into the env's observation (() for a plain space); None: filled by marl
    kind: str
    shape: tuple[int, ...]
    dtype: str  # the torch dtype it is stored in: "float32", "uint8" or "int64"
    nvec: tuple[int, ...] = ()  # discrete: (n,); multidiscrete: the flat nvec
    start: tuple[int, ...] = ()  # discrete / multidiscrete: subtracted so that indices start at 0

    @property
    def is_image(self) -> bool:
        """An H x W x C or C x H x W box (or H x W of uint8): what `--encoder auto` gives a CNN."""
        if self.kind != "box":
            return False
        if len(self.shape) == 3:
            return min(image_layout(self.shape)[1][1:]) >= 4
        return len(self.shape) == 2 and self.dtype == "uint8" and min(self.shape) >= 4

    @property
    def size(self) -> int:
        """Its width once flat: one-hots for discrete leaves."""
        if self.kind in ("discrete", "multidiscrete"):
            return int(sum(self.nvec))
        return int(np.prod(self.shape, dtype=np.int64))

    @property
    def stored_width(self) -> int:
        """Its width once flat as stored (an index is one number): its share of a fallback global state."""
        return max(int(np.prod(self.shape, dtype=np.int64)), 1)

    def describe(self) -> str:
        if self.kind in ("discrete", "multidiscrete"):
            return f"{self.name}: {self.kind}{list(self.nvec)}"
        return f"{self.name}: {self.kind}{list(self.shape)} {self.dtype}"


@dataclass(frozen=True)
class ActionSpec:
    """An action space as the policy's head and distribution see it.

    kind: "categorical" (Discrete), "multicategorical" (MultiDiscrete: independent categoricals),
    "bernoulli" (MultiBinary), "gaussian" (Box), "tanh_gaussian" (Box with `--action-squash tanh`,
    made from a "gaussian" one by `marl.policies` for the policy; the env's own stays "gaussian"). `shape` is the action tensor per agent-step
    (flat); `env_shape` the env's own; `nvec` the choices per categorical; `low`/`high` a Box's
    bounds, which the env adapters clip to (the Gaussian is unbounded).
    """

    kind: str
    shape: tuple[int, ...]
    env_shape: tuple[int, ...]
    nvec: tuple[int, ...] = ()
    start: tuple[int, ...] = ()
    low: tuple[float, ...] = ()
    high: tuple[float, ...] = ()

    @property
    def continuous(self) -> bool:
        """A Box action: a Gaussian, clipped by the env adapter, or tanh-squashed into the bounds."""
        return self.kind in ("gaussian", "tanh_gaussian")

    @property
    def dtype(self) -> str:
        return "float32" if self.continuous else "int64"

    @property
    def num_outputs(self) -> int:
        """What the network's head produces: logits, or the Gaussian's means (its log-std is a parameter of its own)."""
        return int(sum(self.nvec)) if self.nvec else int(np.prod(self.shape, dtype=np.int64))

    @property
    def mask_size(self) -> int:
        """Entries of an action mask: one per choice of every categorical (0: this kind takes no mask)."""
        return int(sum(self.nvec)) if self.kind in ("categorical", "multicategorical") else 0

    def describe(self) -> str:
        names = {"categorical": "Discrete", "multicategorical": "MultiDiscrete", "bernoulli": "MultiBinary", "gaussian": "Box",
                 "tanh_gaussian": "Box"}
        what = list(self.nvec) if self.kind in ("categorical", "multicategorical") else list(self.env_shape)
        return f"{names[self.kind]}{what}"


@dataclass(frozen=True)
class AgentSpec:
    """One agent's observation leaves, action, and where its action mask comes from."""

    obs: tuple[Leaf, ...]
    action: ActionSpec
    mask: str = ""  # "": none; "obs": the Dict observation's "action_mask"; "info": info["action_mask"]
    dropped: tuple[str, ...] = ()  # observation keys no network can use, left out

    @property
    def stored_width(self) -> int:
        return sum(leaf.stored_width for leaf in self.obs)

    def describe(self) -> str:
        mask = f", mask in {self.mask}" if self.mask else ""
        return f"obs {{{', '.join(leaf.describe() for leaf in self.obs)}}}, actions {self.action.describe()}{mask}"


_SUPPORTED = ("observations: Box, Discrete, MultiDiscrete, MultiBinary, and Dict/Tuple of them; "
              "actions: Discrete, MultiDiscrete, MultiBinary, Box")


def _leaves(space: gym.Space, path: tuple, name: str, dropped: list[str], where: str) -> list[Leaf]:
    if isinstance(space, gym.spaces.Dict):
        out = []
        for key, sub in space.spaces.items():
            out += _leaves(sub, (*path, key), f"{name}.{key}" if name else str(key), dropped, where)
        return out
    if isinstance(space, gym.spaces.Tuple):
        out = []
        for i, sub in enumerate(space.spaces):
            out += _leaves(sub, (*path, i), f"{name}.{i}" if name else str(i), dropped, where)
        return out
    name = name or "obs"
    if isinstance(space, gym.spaces.Box):
        dtype = "uint8" if space.dtype == np.uint8 else "float32"
        return [Leaf(name, path, "box", tuple(int(d) for d in space.shape), dtype)]
    if isinstance(space, gym.spaces.Discrete):
        return [Leaf(name, path, "discrete", (), "int64", (int(space.n),), (int(space.start),))]
    if isinstance(space, gym.spaces.MultiDiscrete):
        nvec = tuple(int(n) for n in np.asarray(space.nvec).reshape(-1))
        start = tuple(int(s) for s in np.asarray(space.start).reshape(-1))
        return [Leaf(name, path, "multidiscrete", (len(nvec),), "int64", nvec, start)]
    if isinstance(space, gym.spaces.MultiBinary):
        return [Leaf(name, path, "multibinary", (int(np.prod(space.shape)),), "uint8")]
    if path:  # inside a Dict or Tuple: a key a network cannot read (MiniGrid's text `mission`)
        dropped.append(name)
        return []
    raise SpaceError(f"{where}: observation space {space} is not supported ({_SUPPORTED})")


def observation_leaves(where: str, space: gym.Space, keys: tuple[str, ...] = ()) -> tuple[tuple[Leaf, ...], tuple[str, ...]]:
    """The leaves a network reads, and the names of those it cannot (dropped). `keys` chooses
    leaves by name (`--obs-keys image,direction`); a name also takes every leaf under it."""
    dropped: list[str] = []
    leaves = _leaves(space, (), "", dropped, where)
    if keys:
        unknown = [k for k in keys if not any(l.name == k or l.name.startswith(k + ".") for l in leaves)]
        if unknown:
            raise SpaceError(f"{where}: --obs-keys {unknown[0]!r} is not a usable key of the observation "
                             f"(keys: {', '.join(l.name for l in leaves) or 'none'})")
        chosen = [l for l in leaves if any(l.name == k or l.name.startswith(k + ".") for k in keys)]
        dropped += [l.name for l in leaves if l not in chosen]
        leaves = chosen
    if not leaves:
        raise SpaceError(f"{where}: observation space {space} has nothing a network can read ({_SUPPORTED})")
    return tuple(leaves), tuple(dropped)


def action_spec(where: str, space: gym.Space) -> ActionSpec:
    if isinstance(space, gym.spaces.Discrete):
        return ActionSpec("categorical", (), (), (int(space.n),), (int(space.start),))
    if isinstance(space, gym.spaces.MultiDiscrete):
        nvec = tuple(int(n) for n in np.asarray(space.nvec).reshape(-1))
        start = tuple(int(s) for s in np.asarray(space.start).reshape(-1))
        return ActionSpec("multicategorical", (len(nvec),), tuple(space.shape), nvec, start)
    if isinstance(space, gym.spaces.MultiBinary):
        return ActionSpec("bernoulli", (int(np.prod(space.shape)),), tuple(int(d) for d in np.atleast_1d(space.shape)))
    if isinstance(space, gym.spaces.Box):
        n = int(np.prod(space.shape))
        return ActionSpec("gaussian", (n,), tuple(space.shape), low=tuple(float(x) for x in space.low.reshape(-1)),
                          high=tuple(float(x) for x in space.high.reshape(-1)))
    raise SpaceError(f"{where}: action space {space} is not supported; a policy acts in one of Discrete, MultiDiscrete, "
                     f"MultiBinary or Box (Dict and Tuple action spaces are not)")


def agent_spec(where: str, obs_space: gym.Space, act_space: gym.Space, obs_keys: tuple[str, ...] = (),
               info_mask: bool = False) -> AgentSpec:
    """Check that a policy can handle these spaces; SpaceError naming `where` (env, agent) if not.

    A Dict observation with an "action_mask" key carries the mask (PettingZoo's convention);
    `info_mask` says the env puts it in info["action_mask"] instead.
    """
    action = action_spec(where, act_space)
    mask = ""
    if isinstance(obs_space, gym.spaces.Dict) and MASK_KEY in obs_space.spaces:
        mask = "obs"
        obs_space = gym.spaces.Dict({k: v for k, v in obs_space.spaces.items() if k != MASK_KEY})
    elif info_mask:
        mask = "info"
    if mask and not action.mask_size:
        raise SpaceError(f"{where}: the env gives an action mask, but its {action.describe()} actions take none "
                         f"(masks go with Discrete and MultiDiscrete actions)")
    leaves, dropped = observation_leaves(where, obs_space, obs_keys)
    return AgentSpec(leaves, action, mask, dropped)


def _get(obs, path: tuple):
    for key in path:
        obs = obs[key]
    return obs


def leaf_array(leaf: Leaf, obs, lead: tuple[int, ...]) -> np.ndarray:
    """The leaf's values from an observation with leading axes `lead` (a vector env's stacked one,
    or one agent's with lead ()), in the leaf's storage dtype and shape."""
    x = np.asarray(_get(obs, leaf.path))
    if leaf.kind == "box":
        return x.reshape(*lead, *leaf.shape).astype(np.uint8 if leaf.dtype == "uint8" else np.float32, copy=False)
    if leaf.kind == "multibinary":
        return x.reshape(*lead, *leaf.shape).astype(np.uint8, copy=False)
    x = x.reshape(*lead, *leaf.shape).astype(np.int64, copy=False)
    return x - np.asarray(leaf.start if leaf.kind == "multidiscrete" else leaf.start[0]) if any(leaf.start) else x


def mask_array(spec: AgentSpec, obs, info, lead: tuple[int, ...]) -> np.ndarray | None:
    """The action mask (bool, all True where the env gives none for a slot), or None if the agent has no mask."""
    if not spec.mask:
        return None
    n = spec.action.mask_size
    if spec.mask == "obs":
        return np.asarray(obs[MASK_KEY]).reshape(*lead, n).astype(bool)
    mask = np.ones((*lead, n), dtype=bool)
    if info is not None and MASK_KEY in info:
        given = np.asarray(info[MASK_KEY])
        present = np.asarray(info.get("_" + MASK_KEY, True))  # a vector env marks which sub-envs gave one
        mask[...] = np.where(np.reshape(present, (*lead, 1)) if lead else present, given.reshape(*lead, n).astype(bool), True)
    return mask


def zeros(leaf: Leaf, lead: tuple[int, ...]) -> np.ndarray:
    return np.zeros((*lead, *leaf.shape), dtype=np.dtype(leaf.dtype))


def env_action(action: ActionSpec, x: np.ndarray, lead: tuple[int, ...]) -> np.ndarray:
    """Policy actions [*lead, *shape] -> what the env takes: its own shape and dtype, Box actions
    clipped to the bounds (the policy's Gaussian is unbounded; a tanh-squashed one is inside them
    already: `marl.distributions.TanhGaussian.env_action`), index offsets added back."""
    if action.kind == "gaussian":
        x = np.clip(x.reshape(*lead, -1), np.asarray(action.low, np.float32), np.asarray(action.high, np.float32))
        return x.reshape(*lead, *action.env_shape).astype(np.float32, copy=False)
    if action.kind == "bernoulli":
        return x.reshape(*lead, *action.env_shape).astype(np.int8, copy=False)
    x = x.astype(np.int64, copy=False)
    if any(action.start):
        x = x + np.asarray(action.start if action.kind == "multicategorical" else action.start[0])
    return x.reshape(*lead, *action.env_shape)
