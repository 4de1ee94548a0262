"""Replay for the off-policy algorithms: n-step transitions cut from time-major trajectories, kept in
a ring on each learner rank (of the env slots that rank trains on: never funnelled through rank 0)
and sampled uniformly. Nothing here knows about processes, RPC or FSDP.

A transition is a row of a nested dict of tensors: `obs` (its leaves in their stored dtypes: uint8
frames stay uint8), `actions`, `action_mask` and `state` where the policy has them, `returns` (the
n-step discounted reward sum), `discounts` (gamma^m, 0 where the episode terminated inside the m
steps), and `next_*`, the observation side of the step it bootstraps from.

- `agent_transitions`: one row per valid agent-step of a policy (DQN, IQL, SAC).
- `team_transitions`: one row per env step where every agent of every policy acted (VDN, QMIX):
  each policy's fields under `policies` [R, n_g, ...], the team's reward (the mean of the agents':
  the shared reward itself where every agent gets it)
  and its global `state`.
- `sequence_rows`: a recurrent Q-network's chunks of --seq-len steps with the state it started
  them from (R2D2's stored state, Kapturowski et al. 2019), the targets computed in the loss.

Gymnasium's NEXT_STEP autoreset (and marl's PettingZoo batches, which do the same) makes this
simple: the row after a step that ended its episode holds that episode's final observation (the
reset happens a step later, on a row that is not `valid`), so the observation a transition
bootstraps from is always the trajectory's row t + m, or past the last row, `after`.
"""

from __future__ import annotations

import torch

from marl.models.core import fresh_after
from marl.specs import get, leaves, put, tree_map

OBSERVED = ("obs", "action_mask", "state")  # what is read at a step, and so also at the step after


def nstep_windows(rewards: torch.Tensor, terminated: torch.Tensor, truncated: torch.Tensor, n: int,
                  gamma: float) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """For every step t of [T, ...]: G_t = sum_{i<m} gamma^i r_{t+i}, the discount gamma^m (0 if the
    episode terminated inside the window), and t + m, the row it bootstraps from (Sutton & Barto
    2018, Eq. 7.1). The window of m <= n steps stops early at the episode's end (terminated: no
    bootstrap; truncated: time ran out, so it bootstraps from the final observation) or at the
    trajectory's end (row T: the observation after the last step)."""
    T = rewards.shape[0]
    ret = torch.zeros_like(rewards)
    disc = torch.ones_like(rewards)
    steps = torch.zeros(rewards.shape, dtype=torch.int64, device=rewards.device)  # m, the steps summed
    going = torch.ones(rewards.shape, dtype=torch.bool, device=rewards.device)  # the window of step t is open
    ended_term = torch.zeros_like(going)
    time = torch.arange(T, device=rewards.device).view(T, *[1] * (rewards.dim() - 1))
    for i in range(n):
        inside = going & (time + i < T)
        ret = ret + inside * disc * _ahead(rewards, i)
        disc = torch.where(inside, disc * gamma, disc)
        steps = steps + inside
        te_i, tr_i = _ahead(terminated, i), _ahead(truncated, i)
        ended_term = ended_term | (inside & te_i)
        going = inside & ~te_i & ~tr_i
    return ret, disc.masked_fill(ended_term, 0.0), time + steps


def _ahead(x: torch.Tensor, i: int) -> torch.Tensor:
    """x[t + i] at t (zeros past the end)."""
    return x if i == 0 else torch.cat([x[i:], x.new_zeros((i, *x.shape[1:]))])


def _pairs(x, after):
    return {k: _pairs(x[k], after[k]) for k in x} if isinstance(x, dict) else (x, after)


def _at(x: torch.Tensor, after: torch.Tensor, t_next: torch.Tensor) -> torch.Tensor:
    """Per step t (and slot, agent), the row `t_next` [T, S] or [T, S, k] of x [T, S, k, ...] followed by
    `after` [S, k, ...]."""
    full = torch.cat([x, after.unsqueeze(0)])
    index = t_next if t_next.dim() == 3 else t_next.unsqueeze(-1).expand(x.shape[:3])
    index = index.reshape(*index.shape, *[1] * (x.dim() - 3)).expand(x.shape)
    return full.gather(0, index)


def _observed(traj: dict, t_next: torch.Tensor) -> dict:
    """The observation side of every step, and of the step each bootstraps from (`next_*`)."""
    rows = {}
    for key in OBSERVED:
        if key in traj:
            rows[key] = traj[key]
            rows[f"next_{key}"] = tree_map(lambda pair: _at(*pair, t_next), _pairs(traj[key], traj["after"][key]))
    return rows


def agent_transitions(traj: dict, n: int, gamma: float) -> dict:
    """One policy's trajectory [T, S, k, ...] (with `after` [S, k, ...]) as n-step transitions [R, ...],
    one per valid agent-step."""
    ret, disc, t_next = nstep_windows(traj["rewards"], traj["terminated"], traj["truncated"], n, gamma)
    rows = {"actions": traj["actions"], "returns": ret, "discounts": disc, **_observed(traj, t_next)}
    return tree_map(lambda x: x[traj["valid"]], rows)


def team_transitions(trajs: dict[str, dict], n: int, gamma: float) -> dict:
    """Every policy's trajectories of the same env slots (dict by policy) as joint n-step transitions
    [R], one per step where every agent acted: the team's reward is the mean of its agents' (the
    shared reward itself where every agent is given it, as in coop_nav), its
    episode ends where any agent's does, and the global `state` (where the policies record it: it
    is the same for every agent, marl.policies.critic_state) comes from the first policy's first agent."""
    joint = {k: torch.cat([t[k] for t in trajs.values()], dim=2) for k in ("rewards", "terminated", "truncated", "valid")}
    valid = joint["valid"].all(-1)
    ret, disc, t_next = nstep_windows(joint["rewards"].mean(-1), joint["terminated"].any(-1), joint["truncated"].any(-1),
                                      n, gamma)
    policies = {}
    for name, traj in trajs.items():
        rows = {"actions": traj["actions"], **_observed({k: v for k, v in traj.items() if k != "state"}, t_next)}
        policies[name] = tree_map(lambda x: x[valid], rows)
    out = {"policies": policies, "returns": ret[valid], "discounts": disc[valid]}
    first = next(iter(trajs.values()))
    if "state" in first:
        state = {"state": first["state"][:, :, :1], "after": {"state": first["after"]["state"][:, :1]}}
        out["state"] = state["state"][valid][:, 0]
        out["next_state"] = _at(state["state"], state["after"]["state"], t_next)[valid][:, 0]
    return out


STEP_FIELDS = ("actions", "rewards", "terminated", "truncated", "valid")


def _chunks(x: torch.Tensor, C: int, L: int, length: int) -> torch.Tensor:
    """Rows c * L .. c * L + length - 1 of x [T', ...] for each chunk c, zero past the end: [C, length, ...]."""
    need = (C - 1) * L + length
    if x.shape[0] < need:
        x = torch.cat([x, x.new_zeros((need - x.shape[0], *x.shape[1:]))])
    index = torch.arange(C, device=x.device).unsqueeze(1) * L + torch.arange(length, device=x.device)
    return x[index]


def _sequences(traj: dict, seq_len: int, agents_apart: bool) -> dict:
    """The chunks of a trajectory [T, S, k, ...] (with `after` and `core_state` [C, S, k, size]) as rows:
    the step fields [L], the observation side and episode `starts` [L + 1] (the step after the chunk
    included: its TD targets bootstrap from it), and the state the actor started the chunk from.
    Rows are chunk x slot x agent [N, L(+1), ...] (`agents_apart`) or chunk x slot [N, L(+1), k, ...]."""
    T = traj["valid"].shape[0]
    L = min(seq_len, T) if seq_len else T
    C = -(-T // L)
    starts = torch.cat([torch.zeros_like(traj["valid"][:1]), fresh_after(traj["valid"], traj["terminated"])])
    rows = {k: _chunks(traj[k], C, L, L) for k in STEP_FIELDS}
    rows["starts"] = _chunks(starts, C, L, L + 1)
    for key in OBSERVED:
        if key in traj:
            rows[key] = tree_map(lambda pair: _chunks(torch.cat([pair[0], pair[1].unsqueeze(0)]), C, L, L + 1),
                                 _pairs(traj[key], traj["after"][key]))
    rows = tree_map(lambda x: x.movedim(1, 3 if agents_apart else 2), rows)  # [C, S, (k,) length, (k,) ...]
    rows["core_state"] = traj["core_state"]  # [C, S, k, size]
    lead = 3 if agents_apart else 2
    return tree_map(lambda x: x.reshape(-1, *x.shape[lead:]), rows)


def agent_sequences(traj: dict, seq_len: int) -> dict:
    """A recurrent Q-network's rows of one policy: every chunk of --seq-len steps of every agent slot
    with a valid step, [N, L(+1), ...], and its stored initial state `core_state` [N, size] (R2D2's
    stored state; the n-step targets are computed in the loss, over the unrolled sequence)."""
    rows = _sequences(traj, seq_len, agents_apart=True)
    return tree_map(lambda x: x[rows["valid"].any(1)], rows)


def team_sequences(trajs: dict[str, dict], seq_len: int) -> dict:
    """The joint chunks of every policy's trajectories of the same env slots, as team_transitions' rows
    are joint steps: per policy its fields [N, L(+1), n_g, ...] and states [N, n_g, size] under
    `policies`; the team's reward (mean), ends (any) and `valid` (every agent acted) [N, L]; the global
    `state` [N, L + 1, D] where recorded. Chunks without a valid team step are left out."""
    policies = {name: _sequences(t, seq_len, agents_apart=False) for name, t in trajs.items()}
    joint = {k: torch.cat([p[k] for p in policies.values()], dim=2) for k in ("rewards", "terminated", "truncated", "valid")}
    out = {"policies": {name: {k: v for k, v in p.items() if k not in ("rewards", "terminated", "truncated", "valid", "state")}
                        for name, p in policies.items()},
           "rewards": joint["rewards"].mean(-1), "terminated": joint["terminated"].any(-1),
           "truncated": joint["truncated"].any(-1), "valid": joint["valid"].all(-1)}
    first = next(iter(policies.values()))
    if "state" in first:
        out["state"] = first["state"][:, :, 0]
    keep = out["valid"].any(1)
    return tree_map(lambda x: x[keep], out)


class ReplayShard:
    """A learner rank's ring of transitions: the newest `capacity` rows, sampled uniformly with
    replacement (the rank's own generator). Storage is allocated at the first rows, from their
    shapes and dtypes. A `Stateful` under a key of its rank (--save-buffer)."""

    def __init__(self, capacity: int, rank: int, device: torch.device, name: str = ""):
        self.capacity, self.device = capacity, device
        self.key = f"replay.{name}.learner{rank}" if name else f"replay.learner{rank}"
        self.storage: dict | None = None
        self.pos = self.size = 0

    def __len__(self) -> int:
        return self.size

    def add(self, rows: dict) -> None:
        count = next(iter(leaves(rows)))[1].shape[0]
        if not count:
            return
        if self.storage is None:
            self.storage = tree_map(lambda x: torch.zeros((self.capacity, *x.shape[1:]), dtype=x.dtype, device=self.device),
                                    rows)
        if count > self.capacity:  # only the newest fit
            rows, count = tree_map(lambda x: x[-self.capacity:], rows), self.capacity
        idx = (self.pos + torch.arange(count, device=self.device)) % self.capacity
        for name, x in leaves(rows):
            get(self.storage, name)[idx] = x.to(self.device)
        self.pos = (self.pos + count) % self.capacity
        self.size = min(self.size + count, self.capacity)

    def sample(self, k: int, generator: torch.Generator) -> dict:
        idx = torch.randint(self.size, (k,), generator=generator).to(self.device)
        return tree_map(lambda x: x[idx], self.storage)

    def state_dict(self) -> dict:
        out = {"pos": torch.tensor(self.pos), "size": torch.tensor(self.size)}
        for name, x in leaves(self.storage or {}):
            out[f"rows.{name}"] = x
        return out

    def load_state_dict(self, state: dict) -> None:
        self.pos, self.size = int(state["pos"]), int(state["size"])
        rows = {k[len("rows."):]: v for k, v in state.items() if k.startswith("rows.")}
        if rows:
            self.storage = {}
            for name, x in rows.items():
                put(self.storage, name, x.to(self.device))
