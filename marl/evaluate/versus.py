"""A policy against opponents, side by side: random play, the lookahead player, the frozen snapshots
of a run's pool, or another run's policy; per side its mean return and, in a turn-based game, its
win / draw / loss rates."""

from __future__ import annotations

from pathlib import Path

import torch

from marl.evaluate.play import load_run, play, policy_actor, random_actor
from marl.sources import SeatSource


def outcomes(returns: list[float]) -> dict[str, float]:
    """A game's result by the sign of the seat's return: PettingZoo's classic games pay +1 / 0 / -1."""
    n = len(returns)
    return {"win": sum(r > 0 for r in returns) / n, "draw": sum(r == 0 for r in returns) / n,
            "loss": sum(r < 0 for r in returns) / n, "games": n}


def pool_ids(text: str) -> list[int]:
    """`--pool-ids`: "0-4", "0,3,5" or both ("0-2,7") -> the snapshot ids; ValueError if it is none of these."""
    ids: list[int] = []
    for part in text.split(","):
        first, _, last = part.strip().partition("-")
        ids.extend(range(int(first), int(last or first) + 1))
    return ids


def pool_of(run_dir: Path, ids=None) -> list[dict]:
    """The weights of the frozen snapshots in the pool of a run's newest checkpoint: all of them, or those
    of `ids` in that order; UsageError if it has no pool or lacks one of `ids`."""
    from marl import checkpoint
    from marl.config import UsageError

    newest = checkpoint.latest(run_dir)
    state = checkpoint.read_trainer(newest) if newest is not None else {}
    if "opponents" not in state:
        raise UsageError(f"--opponent pool: {run_dir} has no checkpoint with a pool of opponents; it trains "
                         f"one with --opponents pool")
    held = dict(zip(state["opponents"]["ids"], state["opponents"]["weights"]))
    if ids is None:
        return list(held.values())
    missing = [i for i in ids if i not in held]
    if missing:
        raise UsageError(f"--pool-ids: snapshot {missing[0]} is not in {run_dir}'s newest pool (it holds ids "
                         f"{min(held)}-{max(held)}; a larger --pool-size keeps more)")
    return [held[i] for i in ids]


def versus(run_dir: Path, opponent: str, games: int, seed: int, sample: bool, run=None,
           snapshot_ids: list[int] | None = None) -> dict[str, dict[str, float]]:
    """Each side in turn (a seat; a team where several policies play) played by the run's policy against
    `opponent` on every other side: "random"; "lookahead" (marl.heuristics, in the line games it knows);
    "pool": the frozen snapshots of the run's newest checkpoint (those of `snapshot_ids` if given); or another
    run's directory: its policy, for the same env. Per side: its mean return, and in a turn-based game its
    win / draw / loss rates. `run`: `load_run(run_dir)`, if already loaded."""
    from marl.config import UsageError
    from marl.policy_file import load_policy

    model, specs, meta, info = run or load_run(run_dir)
    if opponent == "random":
        theirs = random_actor(seed + 1, specs)
    elif opponent == "lookahead":
        from marl.heuristics import LINE_GAMES, line_game, lookahead_actor

        if line_game(info.env_id) is None:
            raise UsageError(f"--opponent lookahead plays {' and '.join(LINE_GAMES)} only, not {info.env_id}")
        theirs = lookahead_actor(info.env_id, seed + 1)
    elif opponent == "pool":
        from marl.models import build_model

        snapshots = pool_of(run_dir, snapshot_ids or None)
        return versus_snapshots(info, specs, lambda: policy_actor(model, specs, seed, sample), snapshots,
                                build_model(specs, meta["network"]).eval(), games, seed)
    else:
        other = Path(opponent)
        if not (other / "policy.pt").is_file():
            raise UsageError(f"--opponent {opponent}: no policy.pt there; pass random, lookahead, pool or a run directory")
        other_model, other_specs, other_meta = load_policy(other / "policy.pt")
        if (other_meta["env"], other_meta["agent_ids"]) != (meta["env"], meta["agent_ids"]):
            raise UsageError(f"--opponent {opponent} was trained on {other_meta['env']}, not {meta['env']}")
        if [s.to_dict() for s in other_specs] != [s.to_dict() for s in specs]:
            raise UsageError(f"--opponent {opponent} maps its agents to other policies than {run_dir}")
        theirs = policy_actor(other_model, other_specs, seed + 1, sample)
    return versus_table(info, specs, lambda: policy_actor(model, specs, seed, sample), theirs, games, seed)


def versus_snapshots(info, specs, mine, snapshots: list[dict], model, games: int, seed: int) -> dict[str, dict[str, float]]:
    """`versus_table` against each frozen snapshot in turn (`model` takes each one's weights, sampling),
    about `games` games per side in all, split evenly; the means over all of them."""
    each = max(1, games // len(snapshots))
    totals: dict[str, dict[str, float]] = {}
    for k, weights in enumerate(snapshots):
        model.load_state_dict(weights)
        # The snapshots sample their moves, as when they play in training: greedy against greedy
        # would be one game, played `each` times.
        table = versus_table(info, specs, mine, policy_actor(model, specs, seed + 7 * k, True), each, seed + 7 * k)
        for side, row in table.items():
            t = totals.setdefault(side, dict.fromkeys(row, 0.0))
            for key, value in row.items():  # games add up; rates and means weigh by their games
                t[key] += value if key == "games" else value * row["games"]
    return {side: {k: v / t["games"] if k != "games" else int(v) for k, v in t.items()} for side, t in totals.items()}


def versus_table(info, specs, mine, theirs, games: int, seed: int) -> dict[str, dict[str, float]]:
    """For each side in turn (marl.policies.sides): `mine()` (a fresh action source) on its agents, `theirs`
    on every other; the side's mean return per game (over its agents) and, in a turn-based game, its outcomes."""
    from marl.policies import sides

    table = {}
    for k, (name, agents) in enumerate(sides(specs, info.agent_ids)):
        others = [torch.tensor([[i not in agents for i in s.agents]]) for s in specs]  # [1 copy, n_g]
        returns = play(info, specs, SeatSource(mine(), theirs, others.__getitem__), games, seed + 1_000 * k)[0]
        per_game = [sum(r) / len(r) for r in zip(*(returns[info.agent_ids[i]] for i in agents))]
        table[name] = {"mean_return": sum(per_game) / len(per_game), "games": len(per_game),
                       **(outcomes(per_game) if info.turn_based else {})}
    return table
