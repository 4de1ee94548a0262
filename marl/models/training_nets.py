"""The networks an off-policy algorithm trains, as one root module for FSDP2 and the checkpoint:
the `policy` (the PolicySet that actors run and that is published), the algorithm's other networks
by name (critics, a mixer, a temperature), and frozen target copies of those it names (Mnih et al.
2015's target network; Lillicrap et al. 2016's soft update).

`forward(fn, *args)` runs `fn(self, *args)`: an algorithm computes its whole loss inside the root's
forward, because FSDP2 gathers the root's own parameters in the root's forward and every network
here may call another (a target on the next observations, a mixer on the Q-values).
"""

from __future__ import annotations

import copy
from typing import Callable

import torch
from torch import nn

from marl.models import PolicySet, size_based_units


class TrainingNets(nn.Module):
    def __init__(self, policy: PolicySet, others: dict[str, nn.Module] | None = None, targets: tuple[str, ...] = ()):
        super().__init__()
        self.policy = policy
        self.others = nn.ModuleDict(others or {})
        self.targets = nn.ModuleDict({name: copy.deepcopy(self.source(name)) for name in targets})
        for p in self.targets.parameters():
            p.requires_grad_(False)

    def source(self, name: str) -> nn.Module:
        return self.policy if name == "policy" else self.others[name]

    def forward(self, fn: Callable, *args):
        return fn(self, *args)

    @torch.no_grad()
    def update_targets(self, tau: float) -> None:
        """theta' <- tau theta + (1 - tau) theta' for every target (tau 1: a hard copy); buffers are copied."""
        for name, target in self.targets.items():
            source = self.source(name)
            for t, s in zip(target.parameters(), source.parameters()):
                t.lerp_(s.detach(), tau)
            for t, s in zip(target.buffers(), source.buffers()):
                t.copy_(s)

    @property
    def policies(self) -> nn.ModuleDict:
        return self.policy.policies

    @property
    def fp32_inputs(self) -> bool:
        """A sampled batch holds TD targets' inputs (returns, discounts): bf16 would round them."""
        return True

    def state_size(self, name: str) -> int:
        return self.policy.state_size(name)

    def blocks(self, min_params: int = 0) -> list[nn.Module]:
        """The policy's blocks and its target's, and those the other networks declare (else the
        submodules FSDP's size-based rule picks)."""
        out = self.policy.blocks(min_params)
        for name, target in self.targets.items():
            out += _blocks(target, min_params)
        for module in self.others.values():
            out += _blocks(module, min_params)
        return out


def _blocks(module: nn.Module, min_params: int) -> list[nn.Module]:
    if isinstance(module, PolicySet):
        return module.blocks(min_params)
    if isinstance(module, nn.ModuleDict):  # a network per policy
        return [b for m in module.values() for b in _blocks(m, min_params)]
    return module.blocks() if hasattr(module, "blocks") else size_based_units(module, min_params)
