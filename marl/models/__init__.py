"""Networks: every policy of a run in one module, built-in (encoder -> MLP -> heads) or the user's own.

A run's network is described by plain data (`network_of(cfg)`: the built-in's encoder and widths,
or a `--model module:Class` with its kwargs), which checkpoints and `policy.pt` keep, so that any
process can rebuild it. No model knows FSDP: the learner's `parallelize` shards `blocks()`.
"""

from __future__ import annotations

import torch
from torch import nn

from envs.spaces import SpaceError
from marl.models.actor_critic import ActorCritic
from marl.models.custom import CustomPolicy, ModelError


def network_of(cfg) -> dict:
    """How to rebuild the run's networks, as plain values."""
    if cfg.model:
        return {"model": cfg.model, "model_kwargs": dict(cfg.model_kwargs)}
    return {"model": "", "encoder": cfg.encoder, "hidden_sizes": list(cfg.hidden_sizes)}


def build_policy(spec, network: dict) -> nn.Module:
    if network["model"]:
        return CustomPolicy(spec, network["model"], network["model_kwargs"])
    return ActorCritic(spec, tuple(network["hidden_sizes"]), network["encoder"])


def size_based_units(module: nn.Module, min_params: int) -> list[nn.Module]:
    """FSDP's size-based auto-wrap rule: in post-order, a submodule whose parameters not already in
    a unit number at least `min_params` becomes a unit (the root takes what is left)."""
    units: list[nn.Module] = []
    claimed: set[int] = set()

    def visit(m: nn.Module) -> int:
        free = sum(visit(child) for child in m.children())
        free += sum(p.numel() for p in m.parameters(recurse=False) if id(p) not in claimed)
        if m is not module and free >= max(min_params, 1):
            units.append(m)
            claimed.update(id(p) for p in m.parameters())
            return 0
        return free

    visit(module)
    return units


class PolicySet(nn.Module):
    """Every policy of a run in one module, so that one FSDP2 root and one optimizer step cover them all.

    forward({policy: (obs, state or None)}) -> {policy: (params, value)}: one call for all
    policies, because FSDP2 gathers the root's parameters in the root's own forward.
    """

    def __init__(self, specs, network: dict):
        super().__init__()
        self.policies = nn.ModuleDict({s.name: build_policy(s, network) for s in specs})

    def forward(self, inputs: dict[str, tuple[dict[str, torch.Tensor], torch.Tensor | None]]):
        return {name: self.policies[name](obs, state) for name, (obs, state) in inputs.items()}

    def blocks(self, min_params: int = 0) -> list[nn.Module]:
        """Candidate FSDP / activation-checkpointing units: what a built-in network declares, and
        for a user's network the submodules that FSDP's size-based rule picks."""
        out = []
        for p in self.policies.values():
            out += p.blocks() if hasattr(p, "blocks") else size_based_units(p.net, min_params)
        return out


def build_model(specs, network: dict) -> PolicySet:
    return PolicySet(specs, network)


def example_inputs(spec, batch: int = 2) -> tuple[dict[str, torch.Tensor], torch.Tensor | None]:
    """Zero observations of every leaf, in its stored dtype: a dry forward's input."""
    obs = {leaf.name: torch.zeros((batch, *leaf.shape), dtype=getattr(torch, leaf.dtype)) for leaf in spec.obs}
    return obs, torch.zeros(batch, spec.state_dim) if spec.central else None


def check_network(specs, network: dict) -> None:
    """Build the networks and run one dry forward before any process starts: a network that does
    not fit the spaces or breaks the protocol fails here with one line (ModelError)."""
    if network["model"] and any(s.central for s in specs):
        raise ModelError(f"--model {network['model']}: a custom network brings its own critic; "
                         f"--critic central works with the built-in network only")
    with torch.random.fork_rng(devices=[]):
        try:
            model = build_model(specs, network)
        except SpaceError as e:
            raise ModelError(str(e)) from None
    for spec in specs:
        policy = model.policies[spec.name]
        want = spec.action.num_outputs
        try:
            with torch.no_grad():
                out = policy(*example_inputs(spec))
        except Exception as e:  # noqa: BLE001 - a user's forward may raise anything
            raise ModelError(f"--model {network['model'] or 'built-in'}: a dry forward on a batch of 2 observations "
                             f"({spec.name}) failed: {type(e).__name__}: {' '.join(str(e).split())}") from None
        if not (isinstance(out, tuple) and len(out) == 2 and all(isinstance(t, torch.Tensor) for t in out)):
            raise ModelError(f"--model {network['model']}: forward must return (head, value) tensors, got {type(out).__name__}")
        head, value = out
        width = want * (2 if spec.action.kind == "gaussian" else 1)
        if tuple(head.shape) != (2, width) or tuple(value.shape) != (2,):
            raise ModelError(f"--model {network['model']}: forward on a batch of 2 returned head {list(head.shape)} and "
                             f"value {list(value.shape)}; expected head [2, {want}] (num_outputs) and value [2]")
