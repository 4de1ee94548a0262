"""From Gymnasium spaces to plain specs, and from env observations to the arrays those specs name.

An observation space becomes a tuple of `Leaf`s: one tensor each, found in the env's observation
by its `path` (keys of nested `Dict`s, indices of `Tuple`s), stored in its own dtype (`uint8`
images stay `uint8` until the model converts them). An action space becomes an `ActionSpec`,
which `marl.distributions` turns into a distribution. Both are frozen dataclasses of plain
values, so that they cross RPC, land in checkpoints and `policy.pt`, and compare with `==`.
This module and `envs.leaves` (the observation leaf kinds) are the only ones that look inside a
Gymnasium space; an action space's family (`ActionSpec.space`: Discrete, MultiDiscrete,
MultiBinary, Box) owns its shapes, masks and what the env is sent.
"""

from __future__ import annotations

from dataclasses import dataclass

import gymnasium as gym
import numpy as np

from envs.leaves import Leaf, image_layout, kind_for  # noqa: F401 - Leaf and image_layout are imported from here

MASK_KEY = "action_mask"  # PettingZoo's convention: a Dict observation's key, or an info key


class SpaceError(ValueError):
    """A space no encoder or head supports; the message is one line naming what is supported."""


@dataclass(frozen=True)
class ActionSpec:
    """An action space as the policy's head and distribution see it.

    kind: the name of its distribution in `marl.distributions` (the env's own spec holds its
    space's default: "categorical", "multicategorical", "bernoulli" or "gaussian"; `marl.policies`
    swaps in `--action-dist`'s choice for the policy). `shape` is the action tensor per agent-step
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
    def space(self) -> type[ActionSpace]:
        """Its family, read from what it holds: a Box has bounds, Discrete one index, MultiDiscrete several, MultiBinary neither."""
        if self.low:
            return BoxActions
        if self.nvec:
            return MultiDiscreteActions if self.shape else DiscreteActions
        return MultiBinaryActions

    @property
    def continuous(self) -> bool:
        return self.space.continuous

    @property
    def dtype(self) -> str:
        return "float32" if self.continuous else "int64"

    @property
    def num_outputs(self) -> int:
        """Choices (logits) of a categorical, bits, or a Box's dimensions: the head's size per parameter."""
        return int(sum(self.nvec)) if self.nvec else int(np.prod(self.shape, dtype=np.int64))

    @property
    def mask_size(self) -> int:
        """Entries of an action mask: one per choice of every categorical (0: this kind takes no mask)."""
        return int(sum(self.nvec))

    def describe(self) -> str:
        return f"{self.space.name}{list(self.nvec) if self.nvec else list(self.env_shape)}"


class ActionSpace:
    """One family of Gymnasium action space; stateless, every method takes the spec."""

    name: str  # the Gymnasium class's name
    default: str  # the distribution `--action-dist auto` gives it
    continuous = False

    @classmethod
    def spec(cls, space: gym.Space) -> ActionSpec:
        raise NotImplementedError

    @classmethod
    def to_env(cls, spec: ActionSpec, x: np.ndarray, lead: tuple[int, ...]) -> np.ndarray:
        """Policy actions [*lead, *shape] -> the env's own shape and dtype, index offsets added back."""
        x = x.astype(np.int64, copy=False)
        if any(spec.start):
            x = x + np.asarray(spec.start).reshape(spec.shape)
        return x.reshape((*lead, *spec.env_shape))

    @classmethod
    def to_env_tensor(cls, spec: ActionSpec, x):
        """`to_env` of a batch [B, *shape] in torch: what an exported policy's graph acts with."""
        import torch

        x = x.long()
        if any(spec.start):
            x = x + torch.tensor(spec.start, device=x.device).reshape(spec.shape)
        return x.reshape(-1, *spec.env_shape)

    @classmethod
    def model_space(cls, spec: ActionSpec) -> gym.Space:
        """The space a user's `--model` is shown."""
        raise NotImplementedError


class DiscreteActions(ActionSpace):
    name, default = "Discrete", "categorical"

    @classmethod
    def spec(cls, space: gym.spaces.Discrete) -> ActionSpec:
        return ActionSpec(cls.default, (), (), (int(space.n),), (int(space.start),))

    @classmethod
    def model_space(cls, spec: ActionSpec) -> gym.Space:
        return gym.spaces.Discrete(spec.nvec[0])


class MultiDiscreteActions(ActionSpace):
    name, default = "MultiDiscrete", "multicategorical"

    @classmethod
    def spec(cls, space: gym.spaces.MultiDiscrete) -> ActionSpec:
        nvec = tuple(int(n) for n in np.asarray(space.nvec).reshape(-1))
        start = tuple(int(s) for s in np.asarray(space.start).reshape(-1))
        return ActionSpec(cls.default, (len(nvec),), tuple(space.shape), nvec, start)

    @classmethod
    def model_space(cls, spec: ActionSpec) -> gym.Space:
        return gym.spaces.MultiDiscrete(list(spec.nvec))


class MultiBinaryActions(ActionSpace):
    name, default = "MultiBinary", "bernoulli"

    @classmethod
    def spec(cls, space: gym.spaces.MultiBinary) -> ActionSpec:
        return ActionSpec(cls.default, (int(np.prod(space.shape)),), tuple(int(d) for d in np.atleast_1d(space.shape)))

    @classmethod
    def to_env(cls, spec: ActionSpec, x: np.ndarray, lead: tuple[int, ...]) -> np.ndarray:
        return x.reshape((*lead, *spec.env_shape)).astype(np.int8, copy=False)

    @classmethod
    def to_env_tensor(cls, spec: ActionSpec, x):
        import torch

        return x.reshape(-1, *spec.env_shape).to(torch.int8)

    @classmethod
    def model_space(cls, spec: ActionSpec) -> gym.Space:
        return gym.spaces.MultiBinary(list(spec.env_shape))


class BoxActions(ActionSpace):
    name, default, continuous = "Box", "gaussian", True

    @classmethod
    def spec(cls, space: gym.spaces.Box) -> ActionSpec:
        return ActionSpec(cls.default, (int(np.prod(space.shape)),), tuple(space.shape),
                          low=tuple(float(x) for x in space.low.reshape(-1)), high=tuple(float(x) for x in space.high.reshape(-1)))

    @classmethod
    def to_env(cls, spec: ActionSpec, x: np.ndarray, lead: tuple[int, ...]) -> np.ndarray:
        # Clipped: a Gaussian is unbounded; a squashed or Beta action is inside the bounds already.
        x = np.clip(x.reshape(*lead, -1), np.asarray(spec.low, np.float32), np.asarray(spec.high, np.float32))
        return x.reshape((*lead, *spec.env_shape)).astype(np.float32, copy=False)

    @classmethod
    def to_env_tensor(cls, spec: ActionSpec, x):
        import torch

        x = x.reshape(x.shape[0], -1).float()
        x = torch.minimum(torch.maximum(x, torch.tensor(spec.low, device=x.device)), torch.tensor(spec.high, device=x.device))
        return x.reshape(-1, *spec.env_shape)

    @classmethod
    def model_space(cls, spec: ActionSpec) -> gym.Space:
        return gym.spaces.Box(np.asarray(spec.low, np.float32).reshape(spec.env_shape),
                              np.asarray(spec.high, np.float32).reshape(spec.env_shape))


ACTION_SPACES = {gym.spaces.Discrete: DiscreteActions, gym.spaces.MultiDiscrete: MultiDiscreteActions,
                 gym.spaces.MultiBinary: MultiBinaryActions, gym.spaces.Box: BoxActions}


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
    kind = kind_for(space)
    if kind is not None:
        return [kind.leaf(space, path, name)]
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
    family = next((f for t, f in ACTION_SPACES.items() if isinstance(space, t)), None)
    if family is None:
        raise SpaceError(f"{where}: action space {space} is not supported; a policy acts in one of Discrete, MultiDiscrete, "
                         f"MultiBinary or Box (Dict and Tuple action spaces are not)")
    return family.spec(space)


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
    return leaf.kind_class.read(leaf, np.asarray(_get(obs, leaf.path)), lead)


def leaf_tensor(leaf: Leaf, obs, copies: int):
    """`leaf_array` of a torch env's observation with one leading axis (`copies`), in torch on its device."""
    return leaf.kind_class.read_tensor(leaf, _get(obs, leaf.path).reshape(copies, *leaf.shape))


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
    clipped to the bounds, index offsets added back (`ActionSpace.to_env` of the spec's family)."""
    return action.space.to_env(action, x, lead)
