"""The protocol of an action distribution, and the registry that finds one by name.

A distribution class owns everything that differs between kinds of action: the action space
family it acts in, how many parameters it takes (RLlib's `Distribution.required_input_dim`,
Sample Factory's `calc_num_action_parameters`), the head a network makes them with, what the env
is sent (`to_env`), and the random player's parameters (`uniform_params`). `ActionSpec.kind`
names it. A new distribution is one module of this package with a class registered by `@register`.
"""

from __future__ import annotations

import math

import torch
from torch import nn

from envs.spaces import ActionSpace, ActionSpec


def init_layer(layer: nn.Module, std: float) -> nn.Module:
    # Orthogonal init with these gains is what makes PPO fast (CleanRL, Huang et al. 2022).
    nn.init.orthogonal_(layer.weight, std)
    nn.init.zeros_(layer.bias)
    return layer


class Distribution:
    """An action distribution over a batch, from the head's params [B, num_params(spec)].

    Instances: `sample(generator) -> (action, log_prob)`, `log_prob(action)`, `entropy()`, `mode()`
    (each [B] but actions), `to_env(action)`: the action the env is sent for a stored one.
    """

    name: str  # what `ActionSpec.kind` holds
    space: type[ActionSpace]  # the action space family it acts in

    @classmethod
    def refuses(cls, spec: ActionSpec) -> str:
        """Why it cannot act in `spec` and the fix ("" if it can), the end of a one-line PolicyError."""
        return wrong_space(cls, spec)

    @classmethod
    def head_size(cls, spec: ActionSpec) -> int:
        """What the network's head produces: logits, or a Gaussian's means (the size a user's --model is given)."""
        return spec.num_outputs

    @classmethod
    def num_params(cls, spec: ActionSpec) -> int:
        """What `from_params` takes per sample: the head's output and the distribution's own free parameters."""
        return cls.head_size(spec)

    @classmethod
    def head(cls, spec: ActionSpec, n_in: int) -> nn.Module:
        """The network's last layer; std 0.01 starts every policy near uniform (CleanRL's actor head)."""
        return init_layer(nn.Linear(n_in, cls.head_size(spec)), 0.01)

    @classmethod
    def free_params(cls, spec: ActionSpec) -> nn.Parameter | None:
        """A state-independent parameter the policy holds for it (a Gaussian's log-std), or None."""
        return None

    @staticmethod
    def params(out: torch.Tensor, free: nn.Parameter | None) -> torch.Tensor:
        """The head's output [..., head_size] with the free parameters -> what `from_params` takes."""
        return out if free is None else torch.cat([out, free.to(out.dtype).expand_as(out)], dim=-1)

    @classmethod
    def from_params(cls, spec: ActionSpec, params: torch.Tensor, mask: torch.Tensor | None = None) -> "Distribution":
        raise NotImplementedError

    @classmethod
    def uniform_params(cls, spec: ActionSpec, batch: int) -> torch.Tensor:
        """Params of the random baseline [batch, num_params]: uniform choices, fair bits, a standard normal."""
        return torch.zeros(batch, cls.num_params(spec))

    @classmethod
    def example(cls, spec: ActionSpec, lead: tuple[int, ...], generator: torch.Generator) -> torch.Tensor:
        """Random legal actions [*lead, *shape] as stored (tests and benches): indices below nvec, or bits."""
        high = spec.nvec if spec.nvec else (2,) * spec.num_outputs
        return torch.stack([torch.randint(0, k, lead, generator=generator) for k in high], -1).reshape(*lead, *spec.shape)

    def to_env(self, action: torch.Tensor) -> torch.Tensor:
        return action


REGISTRY: dict[str, type[Distribution]] = {}


def register(cls: type[Distribution]) -> type[Distribution]:
    REGISTRY[cls.name] = cls
    return cls


def lookup(kind: str) -> type[Distribution]:
    return REGISTRY[kind]


def wrong_space(cls: type[Distribution], spec: ActionSpec) -> str:
    return "" if spec.space is cls.space else f"{cls.name} acts in {cls.space.name} actions: use --action-dist auto"


def needs_finite_bounds(cls: type[Distribution], spec: ActionSpec) -> str:
    """`refuses` of a distribution that maps into a Box's bounds (tanh squashing, Beta)."""
    wrong = wrong_space(cls, spec)
    if wrong or all(math.isfinite(x) for x in (*spec.low, *spec.high)):
        return wrong
    return (f"{cls.name} maps into finite bounds only, and some of its dimensions are unbounded "
            f"(low {list(spec.low)}, high {list(spec.high)}): use --action-dist gaussian")
