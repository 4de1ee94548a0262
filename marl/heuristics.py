"""Scripted players for PettingZoo's line games (tic-tac-toe, connect four), to measure a trained
policy against something better than random moves: `python -m marl.evaluate runs/<run> --opponent
lookahead`.

The one-step lookahead player wins if it can, blocks if it must (plays the cell where the opponent
would complete a line next), else moves at random among the legal moves; ties are broken at random.
It reads only what the policy reads: the observation's planes (its own pieces, the opponent's) and
the legal-move mask.
"""

from __future__ import annotations

import numpy as np

# Game (the env id's last part) -> (the line length that wins, whether a move drops to the lowest empty
# cell of a column: connect four's actions are columns, tic-tac-toe's are cells in row-major order).
LINE_GAMES = {"tictactoe_v3": (3, False), "connect_four_v3": (4, True)}
_DIRECTIONS = ((0, 1), (1, 0), (1, 1), (1, -1))


def line_game(env_id: str) -> tuple[int, bool] | None:
    """(line length, gravity) of a supported game, or None."""
    return LINE_GAMES.get(env_id.rsplit(".", 1)[-1])


def cell(planes: np.ndarray, action: int, gravity: bool) -> tuple[int, int] | None:
    """The (row, column) a move fills, or None when its column is full. `planes` [rows, cols, 2]."""
    if not gravity:
        return divmod(action, planes.shape[1])
    empty = np.flatnonzero(planes[:, action].sum(axis=-1) == 0)
    return (int(empty[-1]), action) if empty.size else None  # row 0 is the top: pieces land on the highest index


def completes_line(pieces: np.ndarray, at: tuple[int, int], k: int) -> bool:
    """Whether a piece at `at` gives `pieces` ([rows, cols] of 0/1) k in a row through it."""
    rows, cols = pieces.shape
    r0, c0 = at
    for dr, dc in _DIRECTIONS:
        run = 1
        for sign in (1, -1):
            r, c = r0 + sign * dr, c0 + sign * dc
            while 0 <= r < rows and 0 <= c < cols and pieces[r, c]:
                run += 1
                r, c = r + sign * dr, c + sign * dc
        if run >= k:
            return True
    return False


def completing_moves(planes: np.ndarray, legal: np.ndarray, k: int, gravity: bool, who: int) -> list[int]:
    """The legal moves that would complete a line for plane `who` (0: the player to move, 1: its opponent,
    as if it moved now)."""
    out = []
    for a in np.flatnonzero(legal):
        at = cell(planes, int(a), gravity)
        if at is not None and completes_line(planes[..., who], at, k):
            out.append(int(a))
    return out


def lookahead_move(planes: np.ndarray, legal: np.ndarray, k: int, gravity: bool, rng: np.random.Generator) -> int:
    """Win if you can, block if you must, else a random legal move."""
    for who in (0, 1):
        moves = completing_moves(planes, legal, k, gravity, who)
        if moves:
            return int(rng.choice(moves))
    return int(rng.choice(np.flatnonzero(legal)))


def lookahead_actor(env_id: str, seed: int):
    """The one-step lookahead player as an action source (marl.sources.LookaheadSource) on every agent slot."""
    from marl.sources import LookaheadSource

    return LookaheadSource(env_id, seed)
