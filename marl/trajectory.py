"""The experience that crosses from an actor to the coordinator: nested dicts of torch tensors.

A trajectory is T steps of E env copies x the n agents of one policy, from one actor request:
every field of `marl.specs.step_fields` as [T, E, n, ...] (time-major; the agent axis is the
policy's agents in the env's agent order, `PolicySpec.agents`), plus
- `bootstrap_value` [T, E, n]: V(final observation) where the step truncated, else 0;
- `next_value` [E, n]: V of the observation after the last step;
- `core_state` [C, E, n, S], a recurrent network's state at the start of each chunk of --seq-len
  steps (`marl.specs.num_chunks`), zeroed where an episode starts there.
`valid` is False on steps that are not transitions (an autoreset step, an agent that has left its
episode, or a slot that has finished its episodes in `--rollout episodes`); they must not enter a
training batch.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

from marl.models.core import episode_starts
from marl.specs import TARGET_INPUTS, tree_map

Trajectory = dict  # field -> tensor, "obs" -> {leaf -> tensor}


@dataclass
class Rollout:
    """One actor request's result: a Trajectory per policy, and the episodes that finished."""

    trajectories: dict[str, Trajectory]
    episode_returns: torch.Tensor  # [K] float64, one per episode finished in this rollout
    episode_lengths: torch.Tensor  # [K] int64
    episode_agents: torch.Tensor  # [K] int64 index into the env's agent order
    policy_version: int
    actor: int
    collect_seconds: float  # actor-side wall time of the rollout

    @property
    def steps(self) -> int:
        """Agent-steps that were real transitions."""
        return sum(int(tr["valid"].sum()) for tr in self.trajectories.values())


def flatten_valid(traj: Trajectory, advantages: torch.Tensor, returns: torch.Tensor) -> dict:
    """The valid transitions of a trajectory as flat training samples [B, ...], every field but
    the targets' inputs, with the targets added."""
    mask = traj["valid"].reshape(-1)
    lead = mask.numel()

    def flat(x: torch.Tensor) -> torch.Tensor:
        return x.reshape(lead, *x.shape[3:])[mask]

    fields = {k: v for k, v in traj.items() if k not in (*TARGET_INPUTS, "bootstrap_value", "next_value")}
    return {**tree_map(flat, fields), "advantages": flat(advantages), "returns": flat(returns)}


def to_sequences(traj: Trajectory, seq_len: int, fields: dict[str, torch.Tensor] | None = None) -> dict:
    """A recurrent network's view of a trajectory: each env slot x agent x chunk of `seq_len` steps
    (0: the whole trajectory) as one sequence, batch-first [N = C * slots * n, L, ...], the last
    chunk padded with invalid steps: the step fields (and `fields`, more [T, slots, n] tensors such
    as the targets), `starts` [N, L] (where an episode begins inside a sequence) and each
    sequence's initial state `core_state` [N, S]."""
    T = traj["valid"].shape[0]
    L = min(seq_len, T) if seq_len else T  # one chunk (C = 1) when --seq-len is past the rollout
    C = traj["core_state"].shape[0]
    steps = {k: v for k, v in traj.items() if k not in ("rewards", "terminated", "truncated", "bootstrap_value", "next_value", "core_state")}
    steps.update(fields or {}, starts=episode_starts(traj))

    def chunked(x: torch.Tensor) -> torch.Tensor:
        if C * L > T:
            x = torch.cat([x, x.new_zeros((C * L - T, *x.shape[1:]))])
        x = x.reshape(C, L, *x.shape[1:]).movedim(1, 3)  # [C, slots, n, L, ...]
        return x.reshape(-1, L, *x.shape[4:])

    return {**tree_map(chunked, steps), "core_state": traj["core_state"].reshape(-1, traj["core_state"].shape[-1])}


def from_sequences(x: torch.Tensor, T: int, slots: int, n: int) -> torch.Tensor:
    """`to_sequences`'s layout [N, L, ...] back to the trajectory's [T, slots, n, ...]."""
    L = x.shape[1]
    x = x.reshape(-1, slots, n, L, *x.shape[2:]).movedim(3, 1)  # [C, L, slots, n, ...]
    return x.reshape(-1, slots, n, *x.shape[4:])[:T]


def sequences(traj: Trajectory, advantages: torch.Tensor, returns: torch.Tensor, seq_len: int) -> dict:
    """The training sequences of a trajectory (`to_sequences`, with the targets and `valid`),
    leaving out those without a valid step."""
    out = to_sequences(traj, seq_len, {"advantages": advantages, "returns": returns})
    keep = out["valid"].any(dim=1)
    return tree_map(lambda v: v[keep], out)
