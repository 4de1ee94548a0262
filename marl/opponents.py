"""The pool of frozen opponents (--opponents pool): snapshots of the policy's weights that play
one seat of some games, so that the policy keeps beating its past selves, not only today's copy.

Kept on rank 0 with the coordinator, saved in every checkpoint's trainer state (a --resume keeps
it), and drawn from uniformly for each actor request. Once full, `--pool-keep latest` drops the
oldest snapshot for each new one; `history` keeps a uniform sample of every snapshot ever taken
(reservoir sampling, Vitter 1985, Algorithm R), so that an opponent is drawn uniformly from the
whole history, as Bansal et al. 2018 ("Emergent Complexity via Multi-Agent Competition", Sec. 5.2)
found best on some of their games: early, weaker selves stay in the pool.
"""

from __future__ import annotations

import torch


class OpponentPool:
    def __init__(self, size: int, seed: int, keep: str = "latest"):
        self.size, self.keep = size, keep
        self.snapshots: list[tuple[int, int, dict[str, torch.Tensor]]] = []  # (id, iteration, weights)
        self.next_id = 0
        self.generator = torch.Generator().manual_seed(seed)

    def add(self, iteration: int, weights: dict[str, torch.Tensor]) -> None:
        """A snapshot of `weights` (the coordinator's gathered copy: it is never written to again);
        once there are `size`, the oldest leaves (`latest`) or, with probability size / snapshots taken,
        a uniformly drawn one makes room (`history`; else the new one is not kept)."""
        snapshot = (self.next_id, iteration, weights)
        self.next_id += 1
        if self.keep == "latest" or len(self.snapshots) < self.size:
            self.snapshots.append(snapshot)
            del self.snapshots[:-self.size]
            return
        k = int(torch.randint(self.next_id, (1,), generator=self.generator))
        if k < self.size:
            self.snapshots[k] = snapshot
            self.snapshots.sort(key=lambda s: s[0])

    @property
    def ids(self) -> list[int]:
        return [i for i, _, _ in self.snapshots]

    def draw(self) -> tuple[int, dict[str, torch.Tensor]]:
        """One snapshot, uniformly: (id, weights)."""
        k = int(torch.randint(len(self.snapshots), (1,), generator=self.generator))
        snap, _, weights = self.snapshots[k]
        return snap, weights

    def state_dict(self) -> dict:
        return {"ids": [i for i, _, _ in self.snapshots], "iterations": [it for _, it, _ in self.snapshots],
                "weights": [w for _, _, w in self.snapshots], "next_id": self.next_id,
                "generator": self.generator.get_state()}

    def load_state_dict(self, state: dict) -> None:
        self.snapshots = list(zip(state["ids"], state["iterations"], state["weights"]))
        self.next_id = int(state["next_id"])
        self.generator.set_state(state["generator"])
