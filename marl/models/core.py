"""Memory: a recurrent core (GRU or LSTM) over time-major sequences that restart where episodes do.

A recurrent network's state is one float tensor per agent slot, [B, state_size] (an LSTM's h and
c side by side), so that actors, trajectories and the learner carry it as any other field. The
same `forward(x [T, B, F], state [B, S], starts [T, B])` serves an actor's single step (T = 1) and
the learner's replay of a whole sequence: `starts[t]` zeroes a slot's state before step t, where
its episode begins. Which steps begin an episode is decided here, once, for both sides.
"""

from __future__ import annotations

import torch
from torch import nn


def fresh_after(valid: torch.Tensor, terminated: torch.Tensor) -> torch.Tensor:
    """Whether the step after this one starts from a zero state: the episode terminated here, or
    this was no transition of an episode (a NEXT_STEP autoreset step, an agent that has left, a slot
    past its episode quota), so the next valid step belongs to a new episode.

    Not after a truncation: the step after it is the autoreset step (or an agent's padding), whose
    observation is the episode's final one, and its value is the truncation's bootstrap value, which
    must read the episode's memory. The autoreset step itself is invalid, so the step after it starts
    afresh."""
    return ~valid | terminated


def episode_starts(traj: dict) -> torch.Tensor:
    """`starts` [T, ...] of a trajectory: step t starts afresh if step t - 1 says so. Step 0 never
    does: the actor records the state it starts a rollout chunk from already zeroed."""
    after = fresh_after(traj["valid"], traj["terminated"])
    return torch.cat([torch.zeros_like(after[:1]), after[:-1]])


class Core(nn.Module):
    """nn.GRU or nn.LSTM (one layer) over a sequence, each slot's state zeroed where its episode starts.

    The sequence is cut at the steps where any slot starts an episode, and each span between cuts
    runs as one call of torch's fused RNN kernel, the state zeroed at a span's first step for the
    slots that start there: exactly a step-by-step loop (what an actor does, one step at a time),
    with one kernel call per span instead of per step. Envs whose episodes start together (coop_nav,
    MPE) cost a few calls per sequence. Measured alternatives, on CPU: a Python loop of cell steps
    (one call per step) and the episodes' pieces as one packed sequence (one call, but its backward
    was 6x slower than an unpacked one). Weights are orthogonal, biases zero (CleanRL's
    ppo_atari_lstm.py)."""

    def __init__(self, kind: str, n_in: int, size: int):
        super().__init__()
        if kind not in ("gru", "lstm"):
            raise ValueError(f"unknown core {kind!r}")
        self.kind, self.size = kind, size
        self.rnn = (nn.GRU if kind == "gru" else nn.LSTM)(n_in, size)
        for name, p in self.rnn.named_parameters():
            if name.startswith("weight"):
                nn.init.orthogonal_(p, 1.0)
            else:
                nn.init.zeros_(p)
        self.state_size = size * (2 if kind == "lstm" else 1)

    def forward(self, x: torch.Tensor, state: torch.Tensor, starts: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """x [T, B, F], state [B, state_size], starts [T, B] bool -> (outputs [T, B, size], state after the last step)."""
        dtype = self.rnn.weight_ih_l0.dtype
        x, h = x.to(dtype), state.to(dtype)
        keep = (~starts).to(dtype).unsqueeze(-1)
        T = x.shape[0]
        cuts = [0, *(torch.nonzero(starts[1:].any(dim=1)).flatten() + 1).tolist(), T] if T > 1 else [0, T]
        outs = []
        for a, b in zip(cuts, cuts[1:]):
            h = h * keep[a]
            if self.kind == "gru":
                y, h = self.rnn(x[a:b], h.unsqueeze(0))
                h = h[0]
            else:
                y, (hx, cx) = self.rnn(x[a:b], tuple(h.unsqueeze(0).chunk(2, dim=-1)))
                h = torch.cat([hx[0], cx[0]], dim=-1)
            outs.append(y)
        # A fresh tensor, not a view: FSDP2 warns when a unit returns one.
        return (outs[0] if len(outs) == 1 else torch.cat(outs)), (h + 0 if self.kind == "gru" else h)
