"""Time to solve: `python train.py --agents 8` from the shell prompt to the target return, over seeds.

Runs train.py as a user would (a fresh process per seed, start-up included) and prints, per seed,
the wall time, the agent-steps and whether it solved; then median/min/max. Extra arguments go to
train.py. Baseline for the ratio: the median wall time of the same seeds, measured in this run,
against the 10 s target.

With `--against-sb3 PYTHON` (the python of a venv with stable-baselines3==2.9.2, see
bench/peers/sb3_ppo_cartpole.py), each seed also runs rl-baselines3-zoo's tuned PPO, alternately
with marl's run of the same seed, and the bench prints SB3's time to solve (learn() from its start
to the 100-episode mean of 475, its start-up not counted) over marl's prompt-to-exit time.

    python bench/time_to_solve.py --seeds 5 -- --agents 8
    python bench/time_to_solve.py --seeds 3 --against-sb3 ~/sb3/bin/python -- --agents 8
    python bench/time_to_solve.py --seeds 5 --logdir runs/bench/cartpole -- --agents 8   # keep the runs (bench/plot.py)
"""

from __future__ import annotations

import argparse
import statistics
import sys
import tempfile
from pathlib import Path

from common import ROOT, run_peer, run_train  # bench/common.py


def run_seed(seed: int, extra: list[str], logdir: str) -> dict:
    run = run_train(["--seed", str(seed), *extra], Path(logdir) / f"seed{seed}", check=False)
    r = run.result
    return {"seed": seed, "wall": run.wall, "steps": r and r.global_step, "solved": bool(r and r.solved),
            "code": run.returncode}


def run_sb3(python: str, seed: int) -> dict:
    return run_peer([python, str(ROOT / "bench" / "peers" / "sb3_ppo_cartpole.py"), "--seed", str(seed)])


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--seeds", type=int, default=5, help="seeds 1..N")
    p.add_argument("--target-seconds", type=float, default=10.0, help="the wall-time goal the ratio is taken against")
    p.add_argument("--logdir", default="", help="keep the runs here, as seed1, seed2, ... (default: a temporary "
                   "directory, removed at the end)")
    p.add_argument("--against-sb3", default="", metavar="PYTHON", help="also run SB3's zoo PPO with this python, "
                   "alternately with marl, and print the ratio of the times")
    p.add_argument("train_args", nargs=argparse.REMAINDER, help="arguments for train.py (after --)")
    args = p.parse_args()
    extra = [a for a in args.train_args if a != "--"] or ["--agents", "8"]
    with tempfile.TemporaryDirectory() as scratch:
        logdir = args.logdir or scratch
        results, sb3 = [], []
        for seed in range(1, args.seeds + 1):
            r = run_seed(seed, extra, logdir)
            results.append(r)
            print(f"seed {seed}: {'solved' if r['solved'] else 'NOT solved'} in {r['wall']:.1f}s wall, "
                  f"{r['steps'] or 0:,} agent-steps (exit {r['code']})", flush=True)
            if args.against_sb3:
                b = run_sb3(args.against_sb3, seed)
                sb3.append(b)
                print(f"seed {seed} SB3 zoo PPO: " + (f"solved in {b['seconds_to_solve']:.1f}s of learn(), "
                      f"{b['steps_to_solve']:,} agent-steps" if b["solved"] else
                      f"NOT solved in {b['learn_wall']:.1f}s of learn()"), flush=True)
    walls = [r["wall"] for r in results]
    steps = [r["steps"] or 0 for r in results]
    solved = sum(r["solved"] for r in results)
    print(f"train.py {' '.join(extra)}: solved {solved}/{len(results)} | wall median {statistics.median(walls):.1f}s "
          f"(min {min(walls):.1f}, max {max(walls):.1f}) | agent-steps median {statistics.median(steps):,.0f} "
          f"(min {min(steps):,}, max {max(steps):,})")
    print(f"ratio median wall / {args.target_seconds:g}s target: {statistics.median(walls) / args.target_seconds:.2f}")
    if sb3:
        solved_sb3 = [b for b in sb3 if b["solved"]]
        if solved_sb3:
            t = statistics.median(b["seconds_to_solve"] for b in solved_sb3)
            n = statistics.median(b["steps_to_solve"] for b in solved_sb3)
            print(f"SB3 zoo PPO: solved {len(solved_sb3)}/{len(sb3)} | time to solve median {t:.1f}s (start-up not "
                  f"counted) | agent-steps median {n:,.0f}")
            print(f"ratio SB3 time to solve / marl prompt-to-exit (medians): {t / statistics.median(walls):.2f} "
                  f"(goal >= 5)")
        else:
            print(f"SB3 zoo PPO: solved 0/{len(sb3)}")
    return 0 if all(r["code"] == 0 for r in results) else 1


if __name__ == "__main__":
    sys.exit(main())
