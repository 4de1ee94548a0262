"""Collectives of the learner ranks: the commands rank 0 broadcasts to the others, and the env slots
of a batch of rollouts packed side by side and scattered to the ranks.

Every command goes out as one broadcast of a fixed size, so that every rank enters every
collective that follows (FSDP's, the state-dict gather, DCP's) in the same order. Each rank trains
on whole env slots: rank r holds slots [r * per_rank, (r + 1) * per_rank) of the packed batch.
Nothing here knows about RPC, actors or the Learner.
"""

from __future__ import annotations

import enum
from dataclasses import dataclass, field

import torch
import torch.distributed as dist

from marl.specs import get, leaves, put, time_length, timed


class Command(enum.IntEnum):
    STOP = 0
    TRAIN = 1  # arg: the global step (the learning-rate schedule's)
    GATHER = 2  # every rank enters the full state-dict gather
    SAVE = 3  # arg: the iteration to checkpoint


@dataclass(frozen=True)
class Order:
    """One command with what the other ranks need to follow it."""

    command: Command
    arg: int = 0
    bounds: list[int] = field(default_factory=lambda: [0])  # TRAIN: the rollouts' slot boundaries (`slot_bounds`)
    steps: list[int] | None = None  # TRAIN: each policy's T, in the order of the specs


class CommandChannel:
    """Rank 0 `send`s orders, the other ranks `receive` them. The header is [command, arg, number of
    bounds, the bounds padded to `rollouts + 1`, each policy's T]: its size is fixed by the config,
    so every rank knows it without asking."""

    def __init__(self, group: dist.ProcessGroup, device: torch.device, rollouts: int, policies: int):
        self.group, self.device = group, device
        self.cap, self.policies = rollouts + 1, policies

    def send(self, order: Order) -> None:
        bounds, steps = order.bounds, order.steps or [0] * self.policies
        values = [int(order.command), order.arg, len(bounds), *bounds, *[0] * (self.cap - len(bounds)), *steps]
        # float64 holds every step count and boundary exactly (up to 2**53).
        dist.broadcast(torch.tensor(values, dtype=torch.float64, device=self.device), group=self.group, group_src=0)

    def receive(self) -> Order:
        header = torch.empty(3 + self.cap + self.policies, dtype=torch.float64, device=self.device)
        dist.broadcast(header, group=self.group, group_src=0)
        nb = int(header[2])
        return Order(Command(int(header[0])), int(header[1]), header[3:3 + nb].long().tolist(),
                     header[3 + self.cap:].long().tolist())


def slot_bounds(copies: list[int]) -> list[int]:
    """Where each rollout's env slots start on the packed slot axis, and where the last ends."""
    bounds = [0]
    for c in copies:
        bounds.append(bounds[-1] + c)
    return bounds


def slots_per_rank(bounds: list[int], world: int) -> int:
    """Env slots each rank holds: all of them split evenly, the last rank's share padded."""
    return -(-bounds[-1] // world)


def slot_ranges(bounds: list[int], rank: int, per_rank: int) -> list[tuple[int, int]]:
    """The rank's slots [rank * per_rank, (rank + 1) * per_rank) cut at the rollouts' boundaries,
    local to it: each range came from one rollout (targets must not run across two)."""
    lo, hi = rank * per_rank, (rank + 1) * per_rank
    out = []
    for a, b in zip(bounds, bounds[1:]):
        a, b = max(a, lo), min(b, hi)
        if a < b:
            out.append((a - lo, b - lo))
    return out


def pack(parts: list[dict], slots: int) -> dict:
    """Rollouts' trajectories of one policy side by side on the slot axis: [T, slots, n, ...], shorter
    ones and the padding slots filled with invalid steps (zeros; `valid` False). A recurrent
    policy's `core_state` [C, ...] is padded to the most chunks, as the steps are to the most steps."""
    out: dict = {}
    for name, _ in leaves(parts[0]):
        has_time = timed(name)
        length = max(get(p, name).shape[0] for p in parts) if has_time else None
        tensors = []
        for p in parts:
            x = get(p, name)
            if has_time and x.shape[0] < length:
                x = torch.cat([x, x.new_zeros((length - x.shape[0], *x.shape[1:]))])
            tensors.append(x)
        axis = 1 if has_time else 0
        x = torch.cat(tensors, dim=axis)
        have = x.shape[axis]
        if have < slots:
            pad = list(x.shape)
            pad[axis] = slots - have
            x = torch.cat([x, x.new_zeros(pad)], dim=axis)
        put(out, name, x)
    return out


def scatter(fields: dict, agents: int, T: int, seq_len: int, per_rank: int, group: dist.ProcessGroup,
            device: torch.device, packed: dict | None = None) -> dict:
    """This rank's `per_rank` env slots of one policy's trajectories: rank 0 passes all of them,
    `packed` ([T, slots, n, ...], `next_value` [slots, n], `core_state` [C, slots, n, S]), the
    others pass None and receive. `fields` is the policy's `marl.specs.trajectory_fields`; every
    one of them goes, in the same order on every rank."""
    shard: dict = {}
    if dist.get_world_size(group) == 1:  # the whole batch is this rank's: no collective to enter
        for name, _ in leaves(fields):
            put(shard, name, get(packed, name).to(device).contiguous())
        return shard
    for name, (shape, dtype) in leaves(fields):
        length = time_length(name, T, seq_len)
        lead = (length, per_rank, agents) if length is not None else (per_rank, agents)
        out = torch.empty((*lead, *shape), dtype=dtype, device=device)
        chunks = None
        if packed is not None:
            chunks = [c.to(device).contiguous() for c in get(packed, name).split(per_rank, dim=0 if length is None else 1)]
        dist.scatter(out, chunks, group=group, group_src=0)
        put(shard, name, out)
    return shard


def gather_1d(x: torch.Tensor, group: dist.ProcessGroup, device: torch.device) -> torch.Tensor:
    """Every rank's 1-D tensor, concatenated in rank order (they may differ in length)."""
    world = dist.get_world_size(group)
    if world == 1:
        return x
    counts = [torch.zeros((), dtype=torch.int64, device=device) for _ in range(world)]
    dist.all_gather(counts, torch.tensor(x.numel(), device=device), group=group)
    longest = int(max(counts))
    padded = torch.cat([x, x.new_zeros(longest - x.numel())])
    parts = [torch.empty_like(padded) for _ in range(world)]
    dist.all_gather(parts, padded, group=group)
    return torch.cat([p[: int(c)] for p, c in zip(parts, counts)])


def mean_over_ranks(values: dict[str, torch.Tensor], group: dist.ProcessGroup, device: torch.device) -> dict[str, float]:
    """The all-reduced mean of a dict of scalars, by name (every rank holds the same names)."""
    if not values:
        return {}
    names = sorted(values)
    stacked = torch.stack([torch.as_tensor(values[n], device=device).float() for n in names])
    dist.all_reduce(stacked, group=group)
    return dict(zip(names, (stacked / dist.get_world_size(group)).tolist()))


def per_policy_means(means: dict[str, float]) -> dict[str, float]:
    """Metrics by `<policy>/<name>` with, for every such name, its mean over the policies as `<name>`."""
    out = dict(means)
    for name in {n.split("/", 1)[1] for n in means if "/" in n}:
        per_policy = [v for n, v in means.items() if n.endswith("/" + name)]
        out[name] = sum(per_policy) / len(per_policy)
    return out
