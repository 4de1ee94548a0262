"""What one policy's agent-step holds: every field, its shape and dtype, derived from the spaces.

This is the one declaration of the fields. The actor's buffers are allocated from it, the
trajectories it sends are slices of them, the coordinator flattens them into samples with it,
and the learner ranks receive their shards by it. A field is a tensor, or (the observation) a
dict of tensors, one per leaf: a nested tensor dict, walked by the helpers below.
"""

from __future__ import annotations

from typing import Callable

import torch

from marl import distributions
from marl.policies import PolicySpec

Field = tuple[tuple[int, ...], torch.dtype]
SCALAR: Field = ((), torch.float32)
FLAG: Field = ((), torch.bool)
# What GAE or V-trace read, and a training sample no longer needs.
TARGET_INPUTS = ("rewards", "terminated", "truncated", "valid")


def step_fields(spec: PolicySpec, discounted_return: bool = False) -> dict:
    """Per agent-step: everything an actor records for one policy; with `discounted_return`
    (`--norm-reward`), the slot's running discounted return, whose spread scales the rewards."""
    fields = {
        "obs": {leaf.name: (leaf.shape, getattr(torch, leaf.dtype)) for leaf in spec.obs},
        "actions": (spec.action.shape, getattr(torch, spec.action.dtype)),
        "logprobs": SCALAR, "values": SCALAR, "rewards": SCALAR,
        "terminated": FLAG, "truncated": FLAG, "valid": FLAG,
    }
    if spec.mask:
        fields["action_mask"] = ((spec.action.mask_size,), torch.bool)
    if spec.central:
        fields["state"] = ((spec.state_dim,), torch.float32)
    if discounted_return:
        fields["discounted_return"] = SCALAR
    return fields


def trajectory_fields(spec: PolicySpec, state_size: int = 0, discounted_return: bool = False, after: bool = False) -> dict:
    """What an actor sends for one policy: every step field [T, E, n, ...], the bootstrap value of
    truncated steps [T, E, n], and `next_value`, V of the observation after the last step [E, n].
    A recurrent network (`state_size` > 0) adds `core_state` [C, E, n, state_size]: its state at
    the start of each of the C chunks of --seq-len steps (`num_chunks`), what the learner replays from.
    With `after` (`wants_after`: an off-policy algorithm, which bootstraps from observations, not
    values; PPO under --mode pipelined, which values them with the learner's weights), `after`
    holds the observation side of the step after the last (obs, action mask, state) [E, n, ...]."""
    fields = {**step_fields(spec, discounted_return), "bootstrap_value": SCALAR, "next_value": SCALAR}
    if state_size:
        fields["core_state"] = ((state_size,), torch.float32)
    if after:
        steps = step_fields(spec)
        fields["after"] = {k: steps[k] for k in ("obs", "action_mask", "state") if k in steps}
    return fields


def timed(name: str) -> bool:
    """Whether a trajectory field (a dotted name) has a leading time (or chunk) axis."""
    return name != "next_value" and not name.startswith("after.")


def num_chunks(T: int, seq_len: int) -> int:
    """Chunks of a T-step rollout: of `seq_len` steps each (the last may be shorter), or one if 0."""
    return -(-T // seq_len) if seq_len else 1


def time_length(name: str, T: int, seq_len: int) -> int | None:
    """The length of a trajectory field's leading axis: T steps, C chunks (`core_state`), or none
    (`next_value`, which is [E, n])."""
    if not timed(name):
        return None
    return num_chunks(T, seq_len) if name == "core_state" else T


def tree_map(fn: Callable, tree):
    """fn applied to every tensor (or field) of a nested dict, keeping its shape."""
    if isinstance(tree, dict):
        return {k: tree_map(fn, v) for k, v in tree.items()}
    return fn(tree)


def leaves(tree, prefix: str = ""):
    """(dotted name, tensor) for every leaf of a nested dict, in a fixed order."""
    if isinstance(tree, dict):
        for k, v in tree.items():
            yield from leaves(v, f"{prefix}{k}.")
    else:
        yield prefix[:-1], tree


def get(tree: dict, name: str):
    """The leaf at a dotted name ("obs.image")."""
    for key in name.split("."):
        tree = tree[key]
    return tree


def put(tree: dict, name: str, value) -> None:
    """Set the leaf at a dotted name, making the dicts on the way."""
    *path, last = name.split(".")
    for key in path:
        tree = tree.setdefault(key, {})
    tree[last] = value


def slice_slots(traj: dict, a: int, b: int) -> dict:
    """Env slots [a, b) of a trajectory: the slot axis is 1 of a timed field, 0 of `after` and `next_value`."""
    out: dict = {}
    for name, x in leaves(traj):
        put(out, name, x[:, a:b] if timed(name) else x[a:b])
    return out


def allocate(fields: dict, lead: tuple[int, ...], device: torch.device | str = "cpu") -> dict:
    """Empty tensors [*lead, *shape] for every field."""
    return tree_map(lambda f: torch.empty((*lead, *f[0]), dtype=f[1], device=device), fields)


def cat(trees: list[dict]) -> dict:
    """Concatenate nested dicts of tensors along the first axis."""
    first = trees[0]
    if isinstance(first, dict):
        return {k: cat([t[k] for t in trees]) for k in first}
    return torch.cat(trees)


def example_trajectory(spec: PolicySpec, T: int, E: int, generator: torch.Generator, state_size: int = 0,
                       seq_len: int = 0, discounted_return: bool = False, after: bool = False) -> dict:
    """A trajectory of every field of `trajectory_fields`, [T, E, n, ...], each value in its range:
    random observations (indices below nvec, any byte for uint8), legal actions, every step a
    valid transition and episodes that end now and then. For tests and benches of the learner."""
    n = len(spec.agents)
    kinds = {f"obs.{leaf.name}": leaf for leaf in spec.obs}
    out: dict = {}
    for full, (shape, dtype) in leaves(trajectory_fields(spec, state_size, discounted_return, after)):
        length = time_length(full, T, seq_len)
        lead = (E, n) if length is None else (length, E, n)
        name = full.removeprefix("after.")  # the observation after the last step: as any other
        leaf = kinds.get(name)
        if leaf is not None:
            x = leaf.kind_class.example(leaf, lead, generator)
        elif name == "actions":
            x = distributions.lookup(spec.action.kind).example(spec.action, lead, generator)
        elif dtype == torch.bool:
            x = torch.ones((*lead, *shape), dtype=torch.bool) if name in ("valid", "action_mask") else \
                torch.rand((*lead, *shape), generator=generator) < (0.05 if name == "terminated" else 0.0)
        elif dtype == torch.uint8:
            x = torch.randint(0, 256, (*lead, *shape), generator=generator, dtype=torch.uint8)
        elif name == "logprobs":
            x = -0.69 + 0.05 * torch.randn(lead, generator=generator)
        else:
            x = torch.randn((*lead, *shape), generator=generator)
        put(out, full, x)
    out["bootstrap_value"] = torch.where(out["truncated"], out["bootstrap_value"], 0.0)
    return out
