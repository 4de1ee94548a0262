"""Networks: every policy of a run in one module, built-in (encoder -> core -> MLP -> heads) or the user's own.

A run's network is described by plain data (`network_of(cfg)`: the built-in's encoder and widths,
or a `--model module:Class` with its kwargs), which checkpoints and `policy.pt` keep, so that any
process can rebuild it. No model knows FSDP: `marl.sharding.parallelize` shards `blocks()`.
"""

from __future__ import annotations

import torch
from torch import nn

from envs.spaces import SpaceError
from marl.models.actor_critic import ActorCritic
from marl.models.core import Core
from marl.models.custom import CustomPolicy, ModelError
from marl.models.normalize import ObsNormalizer
from marl.models.q_network import QNetwork
from marl.models.sac import SACActor


def network_of(cfg) -> dict:
    """How to rebuild the run's networks, as plain values."""
    if cfg.model:
        network = {"model": cfg.model, "model_kwargs": dict(cfg.model_kwargs)}
    else:
        network = {"model": "", "encoder": cfg.encoder, "hidden_sizes": list(cfg.hidden_sizes)}
    # What is off is left out, so that a network is described as before the option existed: old runs still resume.
    if cfg.core != "none":
        network.update(core=cfg.core, core_size=cfg.core_size)
    if cfg.norm_obs:
        network.update(norm_obs=cfg.clip_obs)
    from marl.algorithms import ALGORITHMS

    # An off-policy algorithm's policies: a Q-network (value methods) or SAC's actor, instead of the actor-critic.
    network.update(ALGORITHMS[cfg.algo].policy_network(cfg))
    return network


def build_policy(spec, network: dict) -> nn.Module:
    # A network described without a core is feed-forward, without norm_obs unnormalised (network_of).
    if network["model"]:
        policy = CustomPolicy(spec, network["model"], network["model_kwargs"])
    elif "q" in network:
        policy = QNetwork(spec, tuple(network["hidden_sizes"]), network["encoder"], network["q"] == "dueling",
                          network.get("core", "none"), network.get("core_size", 64))
    elif network.get("actor") == "sac":
        policy = SACActor(spec, tuple(network["hidden_sizes"]), network["encoder"])
    else:
        policy = ActorCritic(spec, tuple(network["hidden_sizes"]), network["encoder"], network.get("core", "none"),
                             network.get("core_size", 64))
    if "norm_obs" in network:
        # A Q-network reads no global state (QMIX's mixer takes it raw): its normaliser has no statistics of it.
        policy.obs_norm = ObsNormalizer(spec.obs, network["norm_obs"], 0 if "q" in network else spec.state_dim)
    return policy


def size_based_units(module: nn.Module, min_params: int) -> list[nn.Module]:
    """FSDP's size-based auto-wrap rule: in post-order, a submodule whose parameters not already in
    a unit number at least `min_params` becomes a unit (the root takes what is left). A recurrent
    `Core` is never split: it calls its RNN once per span between episode starts, a number that
    differs between ranks, and a unit called a different number of times on each rank would make
    their collectives disagree."""
    units: list[nn.Module] = []
    claimed: set[int] = set()

    def visit(m: nn.Module) -> int:
        free = 0 if isinstance(m, Core) else sum(visit(child) for child in m.children())
        free += sum(p.numel() for p in m.parameters(recurse=isinstance(m, Core)) if id(p) not in claimed)
        if m is not module and free >= max(min_params, 1):
            units.append(m)
            claimed.update(id(p) for p in m.parameters())
            return 0
        return free

    visit(module)
    return units


class PolicySet(nn.Module):
    """Every policy of a run in one module, so that one FSDP2 root and one optimizer step cover them all.

    forward({policy: (obs, state, core, starts)}) -> {policy: (params, value, core)}: one call for
    all policies, because FSDP2 gathers the root's parameters in the root's own forward. `state` is
    a centralized critic's input, `core` and `starts` a recurrent policy's (else None; see
    ActorCritic.forward for the shapes).
    """

    def __init__(self, specs, network: dict):
        super().__init__()
        self.policies = nn.ModuleDict({s.name: build_policy(s, network) for s in specs})

    def forward(self, inputs: dict[str, tuple]):
        return {name: self.policies[name](*args) for name, args in inputs.items()}

    @property
    def fp32_inputs(self) -> bool:
        """Whether a policy normalises its observations itself (--norm-obs): bf16 learners then give
        them to it in fp32 (marl.sharding)."""
        return any(p.obs_norm is not None for p in self.policies.values())

    def state_size(self, name: str) -> int:
        """Floats of recurrent state per agent slot of policy `name`; 0 for a feed-forward network."""
        return self.policies[name].state_size

    def blocks(self, min_params: int = 0) -> list[nn.Module]:
        """Candidate FSDP / activation-checkpointing units: what a built-in network declares, and
        for a user's network the submodules that FSDP's size-based rule picks. A user's recurrent
        network stays whole with the root: it may call its RNN once per span between episode
        starts, a count that differs between ranks, and a unit called a different number of times
        on each rank would make their collectives disagree."""
        out = []
        for p in self.policies.values():
            if hasattr(p, "blocks"):
                out += p.blocks()
            elif not p.state_size:
                out += size_based_units(p.net, min_params)
        return out


def build_model(specs, network: dict) -> PolicySet:
    return PolicySet(specs, network)


def example_inputs(spec, state_size: int, batch: int = 2, steps: int = 3) -> tuple:
    """Zero observations of every leaf in its stored dtype, [batch, ...], or for a recurrent network
    [steps, batch, ...] with a zero state and an episode starting inside: a dry forward's input."""
    lead = (steps, batch) if state_size else (batch,)
    obs = {leaf.name: torch.zeros((*lead, *leaf.shape), dtype=getattr(torch, leaf.dtype)) for leaf in spec.obs}
    state = torch.zeros(*lead, spec.state_dim) if spec.central else None
    if not state_size:
        return obs, state, None, None
    starts = torch.zeros(lead, dtype=torch.bool)
    starts[0], starts[steps // 2, 0] = True, True
    return obs, state, torch.zeros(batch, state_size), starts


def check_network(specs, network: dict) -> bool:
    """Build the networks and run one dry forward before any process starts: a network that does
    not fit the spaces or breaks the protocol fails here with one line (ModelError). Returns
    whether any of them is recurrent."""
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
        size = model.state_size(spec.name)
        name, want = network["model"] or "built-in", policy.dist.head_size(spec.action)
        lead, what = ([3, 2], "sequences of 3 steps x 2 slots") if size else ([2], "a batch of 2 observations")
        try:
            with torch.no_grad():
                out = policy.net(*_user_inputs(policy, example_inputs(spec, size))) if network["model"] else \
                    policy(*example_inputs(spec, size))
        except Exception as e:  # noqa: BLE001 - a user's forward may raise anything
            raise ModelError(f"--model {name}: a dry forward on {what} ({spec.name}) failed: "
                             f"{type(e).__name__}: {' '.join(str(e).split())}") from None
        if not network["model"]:
            continue  # the built-in network's outputs are ours to get right (tests/test_models.py)
        returns = "(head, value, state)" if size else "(head, value)"
        if not (isinstance(out, tuple) and len(out) == (3 if size else 2) and all(isinstance(t, torch.Tensor) for t in out)):
            raise ModelError(f"--model {name}: forward must return {returns} tensors"
                             f"{' (it has state_size ' + str(size) + ')' if size else ''}, got "
                             f"{type(out).__name__}{' of ' + str(len(out)) if isinstance(out, tuple) else ''}")
        head, value = out[0], out[1]
        if tuple(head.shape) != (*lead, want) or tuple(value.shape) != tuple(lead):
            raise ModelError(f"--model {name}: forward on {what} returned head {list(head.shape)} and value "
                             f"{list(value.shape)}; expected head {[*lead, want]} (num_outputs) and value {lead}")
        if size and tuple(out[2].shape) != (2, size):
            raise ModelError(f"--model {name}: forward on {what} returned a state of {list(out[2].shape)}; "
                             f"expected [2, {size}] (slots x state_size)")
    return any(model.state_size(s.name) for s in specs)


def _user_inputs(policy: CustomPolicy, inputs: tuple) -> tuple:
    """What CustomPolicy hands the user's network, so that its own output is what gets checked."""
    obs, _, core, starts = inputs
    x = obs["obs"] if policy.plain else obs
    return (x, core, starts) if policy.state_size else (x,)
