"""The user's own network, `--model module:Class`, and the protocol it follows.

    class Net(torch.nn.Module):
        def __init__(self, obs_space, action_space, num_outputs, **model_kwargs): ...
        def forward(self, obs) -> (head, value)

- `obs_space` is the observation as the network receives it (a `gymnasium.spaces` object:
  `Box`, `Discrete`, ..., or a `Dict` of them once the action mask and unusable keys are taken
  out); `forward` gets a batch of it: a tensor [B, *shape] for a plain space, a dict of them for
  a `Dict`, in their stored dtypes (`uint8` images, `int64` indices): the network converts them,
  to its weights' dtype (bf16 under `--precision bf16`).
- `num_outputs` is the size of the head marl turns into the action distribution
  (`head_size` of `marl.distributions`): logits for Discrete (n) and MultiDiscrete (sum of nvec),
  one logit per bit for MultiBinary, the means for a Box's Gaussian (marl adds a learned
  log-std), raw alphas then betas for `--action-dist beta`. Action masks are applied by marl,
  after the network.
- `forward` returns `(head [B, num_outputs], value [B])`.
- `model_kwargs` are `--model-kwargs` (JSON, or a TOML table): plain values, saved with the run.
- No FSDP code: the learner shards any submodule of a million parameters or more as a unit of its
  own (FSDP's size-based auto-wrap) and the rest with the root.

A recurrent network says so with an attribute `state_size` (an int > 0: the floats of its state
per agent, e.g. an LSTM's h and c side by side), and its forward takes time-major sequences:

        def forward(self, obs, state, starts) -> (head, value, state)

- `obs`: leaves [T, B, ...]; `state` [B, state_size], the state before step 0 (zeros when an
  episode starts there); `starts` [T, B] bool, True where a slot's episode starts at step t:
  the network must zero that slot's state before step t (episodes end inside a sequence).
- returns `(head [T, B, num_outputs], value [T, B], state after step T-1 [B, state_size])`.
- Actors call it one step at a time (T = 1), the learner over whole sequences from the state the
  actor recorded: both must give the same numbers. `marl.models.core.Core` is a GRU/LSTM layer that
  does the resets; a network may use it.
"""

from __future__ import annotations

import importlib
import os
import sys

import gymnasium as gym
import torch
from torch import nn

from envs.spaces import Leaf
from marl import distributions


class ModelError(ValueError):
    """A --model that cannot be used; the message is one line naming the fix."""


def leaf_space(leaf: Leaf) -> gym.Space:
    return leaf.kind_class.model_space(leaf)


def observation_space(leaves: tuple[Leaf, ...]) -> gym.Space:
    """What the user's network is given: a plain space, or a Dict keyed by leaf name."""
    if len(leaves) == 1 and leaves[0].name == "obs":
        return leaf_space(leaves[0])
    return gym.spaces.Dict({leaf.name: leaf_space(leaf) for leaf in leaves})


def action_space(action) -> gym.Space:
    return action.space.model_space(action)


def load_class(path: str) -> type:
    """`module:Class` -> the class; ModelError with one line if it cannot be had. The working
    directory is importable, as it is for `python -m`."""
    module_name, _, name = path.partition(":")
    if not module_name or not name:
        raise ModelError(f"--model {path!r}: expected module:Class, e.g. my_nets:GridNet")
    if os.getcwd() not in sys.path:
        sys.path.append(os.getcwd())
    try:
        module = importlib.import_module(module_name)
    except Exception as e:  # noqa: BLE001 - an ImportError or the module's own error at import: the same answer
        raise ModelError(f"--model {path}: module {module_name!r} does not import ({type(e).__name__}: "
                         f"{' '.join(str(e).split())}); check the name and that it is on the Python path") from None
    cls = getattr(module, name, None)
    if cls is None:
        raise ModelError(f"--model {path}: module {module_name!r} has no {name!r}")
    if not (isinstance(cls, type) and issubclass(cls, nn.Module)):
        raise ModelError(f"--model {path}: {name} is not a torch.nn.Module subclass")
    return cls


class CustomPolicy(nn.Module):
    """The user's network behind the same interface as the built-in ActorCritic."""

    def __init__(self, spec, path: str, kwargs: dict):
        super().__init__()
        cls = load_class(path)
        self.plain = len(spec.obs) == 1 and spec.obs[0].name == "obs"
        self.dist = distributions.lookup(spec.action.kind)
        try:
            self.net = cls(observation_space(spec.obs), action_space(spec.action), self.dist.head_size(spec.action), **kwargs)
        except Exception as e:  # noqa: BLE001 - whatever the constructor raised, the user must fix it there
            raise ModelError(f"--model {path}: {cls.__name__}(obs_space, action_space, num_outputs, **model_kwargs) "
                             f"failed: {type(e).__name__}: {' '.join(str(e).split())}") from None
        size = getattr(self.net, "state_size", 0)
        if not isinstance(size, int) or isinstance(size, bool) or size < 0:
            raise ModelError(f"--model {path}: state_size must be an int (0 for a feed-forward network), got {size!r}")
        self.state_size = size
        self.log_std = self.dist.free_params(spec.action)  # named as before distributions made it: checkpoints load
        self.obs_norm = None  # --norm-obs: a marl.models.normalize.ObsNormalizer (set by build_policy)

    def forward(self, obs: dict[str, torch.Tensor], state: torch.Tensor | None = None, core: torch.Tensor | None = None,
                starts: torch.Tensor | None = None) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor | None]:
        if self.obs_norm is not None:
            obs, _ = self.obs_norm(obs)
        x = obs["obs"] if self.plain else obs
        if self.state_size:
            head, value, core = self.net(x, core, starts)
            # Flattened time-major, as the built-in network's; copied, since FSDP2 warns of a returned view.
            head, value = head.flatten(0, 1).clone(), value.flatten(0, 1).clone()
        else:
            (head, value), core = self.net(x), None
        return self.dist.params(head, self.log_std), value, core

    def act(self, obs: dict[str, torch.Tensor], core: torch.Tensor | None = None,
            starts: torch.Tensor | None = None) -> tuple[torch.Tensor, torch.Tensor | None]:
        if not self.state_size:
            return self(obs)[0], None
        head, _, core = self(_step(obs), None, core, starts.unsqueeze(0))
        return head, core


def _step(obs: dict[str, torch.Tensor]) -> dict[str, torch.Tensor]:
    """One step as a sequence of length 1."""
    return {k: v.unsqueeze(0) for k, v in obs.items()}
