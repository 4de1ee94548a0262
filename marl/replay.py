"""Replay for the off-policy algorithms: n-step transitions cut from time-major trajectories, kept in
a ring on each learner rank (of the env slots that rank trains on: never funnelled through rank 0)
and sampled uniformly. Nothing here knows about processes, RPC or FSDP.

A transition is a row of a nested dict of tensors: `obs` (its leaves in their stored dtypes: uint8
frames stay uint8), `actions`, `action_mask` and `state` where the policy has them, `returns` (the
n-step discounted reward sum), `discounts` (gamma^m, 0 where the episode terminated inside the m
steps), and `next_*`, the observation side of the step it bootstraps from.
"""

from __future__ import annotations

import torch

from marl.specs import get, leaves, put, tree_map

OBSERVED = ("obs", "action_mask", "state")  # what is read at a step, and so also at the step after


def nstep(traj: dict, n: int, gamma: float, team: bool = False) -> dict:
    """The valid steps of a trajectory [T, S, k, ...] (time-major; `after` holds the observation side of
    the step after the last, [S, k, ...]) as n-step transitions (Sutton & Barto 2018, Eq. 7.1):
    G_t = sum_{i<m} gamma^i r_{t+i} and discount gamma^m, where m <= n stops early at the episode's
    end (the discount is then 0 if it terminated, gamma^m if it was truncated: time ran out, so it
    bootstraps, from the final observation, which the actor's next row holds) or at the
    trajectory's end (it bootstraps from `after`).

    Rows are [R, ...] one per valid agent-step; with `team` (VDN, QMIX: one joint transition per env
    copy) [R, k, ...], one per step where every agent is valid, the agents' rewards summed and the
    episode ended where any agent's did."""
    rewards, term, trunc, valid = traj["rewards"], traj["terminated"], traj["truncated"], traj["valid"]
    if team:
        rewards, term, trunc = rewards.sum(-1, keepdim=True), term.any(-1, keepdim=True), trunc.any(-1, keepdim=True)
        valid = valid.all(-1, keepdim=True)
    T = rewards.shape[0]
    ret = torch.zeros_like(rewards)
    disc = torch.ones_like(rewards)
    steps = torch.zeros(rewards.shape, dtype=torch.int64, device=rewards.device)  # m, the steps summed
    going = torch.ones_like(valid)  # the window of step t has not ended yet
    ended_term = torch.zeros_like(valid)
    for i in range(n):
        r_i, te_i, tr_i = _ahead(rewards, i), _ahead(term, i), _ahead(trunc, i)
        inside = going & (torch.arange(T, device=rewards.device) + i < T).view(T, *[1] * (rewards.dim() - 1))
        ret = ret + inside * disc * r_i
        disc = torch.where(inside, disc * gamma, disc)
        steps = steps + inside
        ended_term = ended_term | (inside & te_i)
        going = inside & ~te_i & ~tr_i
    disc = disc.masked_fill(ended_term, 0.0)
    # The step bootstrapped from, t + m: a row of the trajectory, or `after` past its end.
    t_next = torch.arange(T, device=rewards.device).view(T, *[1] * (rewards.dim() - 1)) + steps
    rows = {"actions": traj["actions"], "returns": ret, "discounts": disc}
    for key in OBSERVED:
        if key in traj:
            rows[key] = traj[key]
            rows[f"next_{key}"] = tree_map(lambda pair: _at(*pair, t_next), _pairs(traj[key], traj["after"][key]))
    if team:
        keep = valid[..., 0]
        return tree_map(lambda x: x[keep], {**rows, "returns": ret[..., 0], "discounts": disc[..., 0]})
    return tree_map(lambda x: x[valid], rows)


def _ahead(x: torch.Tensor, i: int) -> torch.Tensor:
    """x[t + i] at t (zeros past the end)."""
    return x if i == 0 else torch.cat([x[i:], x.new_zeros((i, *x.shape[1:]))])


def _pairs(x, after):
    return {k: _pairs(x[k], after[k]) for k in x} if isinstance(x, dict) else (x, after)


def _at(x: torch.Tensor, after: torch.Tensor, t_next: torch.Tensor) -> torch.Tensor:
    """Per step t (and slot, agent), the row `t_next` of x [T, S, k, ...] followed by `after` [S, k, ...]."""
    full = torch.cat([x, after.unsqueeze(0)])
    index = t_next.expand(x.shape[:3]) if t_next.shape[2] == 1 else t_next
    index = index.reshape(*index.shape, *[1] * (x.dim() - 3)).expand(x.shape)
    return full.gather(0, index)


class ReplayShard:
    """A learner rank's ring of transitions: the newest `capacity` rows, sampled uniformly with
    replacement (the rank's own generator). Storage is allocated at the first rows, from their
    shapes and dtypes. A `Stateful` under a key of its rank (--save-buffer)."""

    def __init__(self, capacity: int, rank: int, device: torch.device):
        self.capacity, self.device, self.key = capacity, device, f"replay.learner{rank}"
        self.storage: dict | None = None
        self.pos = self.size = 0

    def __len__(self) -> int:
        return self.size

    def add(self, rows: dict) -> None:
        count = next(iter(leaves(rows)))[1].shape[0]
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
