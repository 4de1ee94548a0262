"""Time to solve: `python train.py --agents 8` from the shell prompt to the target return, over seeds.

Runs train.py as a user would (a fresh process per seed, start-up included) and prints, per seed,
the wall time, the agent-steps and whether it solved; then median/min/max. Extra arguments go to
train.py. Baseline for the ratio: the median wall time of the same seeds, measured in this run,
against the 10 s target.

    python bench/time_to_solve.py --seeds 5 -- --agents 8
    python bench/time_to_solve.py --seeds 5 --logdir runs/bench/cartpole -- --agents 8   # keep the runs (bench/plot.py)
"""

from __future__ import annotations

import argparse
import statistics
import sys
import tempfile
from pathlib import Path

from common import run_train  # bench/common.py


def run_seed(seed: int, extra: list[str], logdir: str) -> dict:
    run = run_train(["--seed", str(seed), *extra], Path(logdir) / f"seed{seed}", check=False)
    r = run.result
    return {"seed": seed, "wall": run.wall, "steps": r and r.global_step, "solved": bool(r and r.solved),
            "code": run.returncode}


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--seeds", type=int, default=5, help="seeds 1..N")
    p.add_argument("--target-seconds", type=float, default=10.0, help="the wall-time goal the ratio is taken against")
    p.add_argument("--logdir", default="", help="keep the runs here, as seed1, seed2, ... (default: a temporary "
                   "directory, removed at the end)")
    p.add_argument("train_args", nargs=argparse.REMAINDER, help="arguments for train.py (after --)")
    args = p.parse_args()
    extra = [a for a in args.train_args if a != "--"] or ["--agents", "8"]
    with tempfile.TemporaryDirectory() as scratch:
        logdir = args.logdir or scratch
        results = []
        for seed in range(1, args.seeds + 1):
            r = run_seed(seed, extra, logdir)
            results.append(r)
            print(f"seed {seed}: {'solved' if r['solved'] else 'NOT solved'} in {r['wall']:.1f}s wall, "
                  f"{r['steps'] or 0:,} agent-steps (exit {r['code']})", flush=True)
    walls = [r["wall"] for r in results]
    steps = [r["steps"] or 0 for r in results]
    solved = sum(r["solved"] for r in results)
    print(f"train.py {' '.join(extra)}: solved {solved}/{len(results)} | wall median {statistics.median(walls):.1f}s "
          f"(min {min(walls):.1f}, max {max(walls):.1f}) | agent-steps median {statistics.median(steps):,.0f} "
          f"(min {min(steps):,}, max {max(steps):,})")
    print(f"ratio median wall / {args.target_seconds:g}s target: {statistics.median(walls) / args.target_seconds:.2f}")
    return 0 if all(r["code"] == 0 for r in results) else 1


if __name__ == "__main__":
    sys.exit(main())
