"""Turn-based games by self-play: win / draw / loss of trained policies against random play, the
one-step lookahead player, and early snapshots, with and without the pool of frozen opponents.

Cases (each `train.py --config <preset>`, seeds --first-seed.., to the preset's budget, sync mode):
- tictactoe: configs/tictactoe.toml (PettingZoo's tictactoe_v3);
- connect_four: configs/connect_four.toml (connect_four_v3).

Variants:
- self: self-play alone. It runs with `--opponents pool --pool-prob 0 --pool-size 1000`, which keeps
  every snapshot and plays none (the run is self-play's, step for step: tests/test_aec.py), so that
  its early snapshots are there to measure against;
- pool: the preset as it is (both play a pool of past selves: tic-tac-toe a fifth of its games,
  connect four half).

Each final policy plays its most likely moves, each seat in turn, --games games per seat against:
uniformly random legal moves; the lookahead player (marl.heuristics: win if it can, block if it
must, else random); and the first --first-snapshots snapshots of the same seed's self run
(iterations 0, 10, 20, ...: early selves, sampling their moves as in training), the same opponents
for both variants.

    python bench/selfplay.py --cases tictactoe,connect_four --seeds 1
    python bench/selfplay.py --cases tictactoe --variants pool --seeds 3 --first-seed 2
    python bench/selfplay.py --smoke            # CI: the self run alone, tiny budget, a few games: that it runs
"""

from __future__ import annotations

import argparse
import os
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from multiagent import train  # noqa: E402  (bench/ is on sys.path: the script's own folder)

from marl.evaluate import pool_of  # noqa: E402

CASES = {"tictactoe": "configs/tictactoe.toml", "connect_four": "configs/connect_four.toml"}
VARIANTS = {"self": ["--opponents", "pool", "--pool-prob", "0", "--pool-size", "1000"], "pool": []}
# The goals against random play: (least win rate, most loss rate) per seat, first seat first.
GOALS = {"tictactoe": ((0.90, 0.03), (0.70, 0.03)), "connect_four": ((0.95, 1.0), (0.95, 1.0))}


def score(run_dir: Path, early: list[dict], games: int) -> dict[str, dict[str, dict[str, float]]]:
    """The run's final policy against random play, the lookahead player and the `early` snapshots: the seat tables."""
    import torch

    from marl.evaluate import load_run, policy_actor, versus, versus_snapshots
    from marl.models import build_model

    run = load_run(run_dir)
    model, specs, meta, info = run
    seed = 20_000  # never a training seed's envs
    # Batches of one env copy, as `marl.evaluate` plays them: threads cost more than they give there.
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        return {"random": versus(run_dir, "random", games, seed, False, run),
                "lookahead": versus(run_dir, "lookahead", games, seed, False, run),
                "early": versus_snapshots(info, specs, lambda: policy_actor(model, specs, seed, False), early,
                                          build_model(specs, meta["network"]).eval(), games, seed)}
    finally:
        torch.set_num_threads(threads)  # the next run trains with what it had


def row(rates: dict[str, float]) -> str:
    return f"{rates['win']:6.1%} {rates['draw']:6.1%} {rates['loss']:6.1%}"


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--cases", default=",".join(CASES), help=f"comma-separated, from {', '.join(CASES)}")
    p.add_argument("--variants", default=",".join(VARIANTS), help=f"comma-separated, from {', '.join(VARIANTS)}")
    p.add_argument("--seeds", type=int, default=1)
    p.add_argument("--first-seed", type=int, default=1)
    p.add_argument("--budget", type=int, default=None, help="agent-steps per run (default: the preset's total_steps)")
    p.add_argument("--games", type=int, default=1000, help="games per seat against each opponent")
    p.add_argument("--first-snapshots", type=int, default=5, help="early snapshots of the self run to play against")
    p.add_argument("--smoke", action="store_true", help="tic-tac-toe, the self variant alone, a tiny budget, 10 "
                   "games: that the bench runs")
    p.add_argument("--logdir", default="", help="keep the runs here (default: a temporary directory)")
    args = p.parse_args()
    cases, variants = args.cases.split(","), args.variants.split(",")
    if args.smoke:
        # The self run alone: it is the one with flags of its own, the one every variant's yardstick comes from,
        # and it is scored as the pool run would be. The preset itself (the pool variant) is trained by
        # tests/test_aec.py.
        cases, args.budget, args.games, args.first_snapshots = ["tictactoe"], 3_000, 10, 2
        variants = ["self"]
    bad = [c for c in cases if c not in CASES] + [v for v in variants if v not in VARIANTS]
    if bad:
        p.error(f"unknown case or variant {bad[0]!r}: cases {', '.join(CASES)}; variants {', '.join(VARIANTS)}")
    extra = ["--snapshot-every", "1"] if args.smoke else []  # a few iterations must still make a few snapshots
    with tempfile.TemporaryDirectory() as scratch:
        logdir = args.logdir or scratch
        os.makedirs(logdir, exist_ok=True)
        for case in cases:
            print(f"{case}: seat | vs random: win draw loss | vs lookahead: win draw loss | vs first "
                  f"{args.first_snapshots} snapshots of self: win draw loss", flush=True)
            for seed in range(args.first_seed, args.first_seed + args.seeds):
                # The self run comes first: its early snapshots are every variant's yardstick.
                order = ["self"] + [v for v in variants if v != "self"]
                early = None
                for variant in order:
                    result = train(CASES[case], VARIANTS[variant] + extra, seed, args.budget, logdir,
                                   f"{case}-{variant}-{seed}")
                    if early is None:
                        early = pool_of(result.run_dir, range(args.first_snapshots))  # ids 0, 1, ...: the first
                    if variant not in variants:
                        continue
                    tables = score(result.run_dir, early, args.games)
                    goals = []
                    for k, seat in enumerate(tables["random"]):
                        print(f"{case} {variant} seed {seed} {seat}: {row(tables['random'][seat])} | "
                              f"{row(tables['lookahead'][seat])} | {row(tables['early'][seat])}", flush=True)
                        least_win, most_loss = GOALS[case][k]
                        goals.append(tables["random"][seat]["win"] >= least_win and
                                     tables["random"][seat]["loss"] <= most_loss)
                    print(f"{case} {variant} seed {seed}: {result.global_step:,} agent-steps in {result.seconds:.0f}s | "
                          f"goal against random {'met' if all(goals) else 'missed'}", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
