"""The default run's training loop before and after a change, in alternating pairs in the same hour.

Checks out `--before` (a git revision) into a temporary worktree, then runs
`python train.py --agents 8 --seed S` there and in this tree by turns (before, after, before, ...),
each to its target, and reads each run's result.json: the training loop's agent-steps per second
(`steps / seconds`, from the first rollout to the end; start-up not counted) and the step it solved at,
and the median iteration's agent-steps/s (`iteration_rate`: robust to a few slow seconds of a shared
machine, which swing whole-run ratios by 20%). Prints each pair's ratios (after / before) and their
medians over pairs. The machine's speed drifts
between hours, so only the ratios of one invocation compare; run nothing else beside it.

    python bench/before_after.py --before 8f4dfff --pairs 5
    python bench/before_after.py --before HEAD~1 --pairs 1 --seeds 1   # the CI smoke
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from marl.result import load  # noqa: E402  (result.json's schema is older than this bench: read what both write)


def iteration_rate(run_dir: Path) -> float:
    """The median over a run's iterations of agent-steps / wall time, each iteration from its logged
    point to the next (TensorBoard's wall time of `charts/SPS`): the loop's speed with the seconds
    the shared machine lost to others mostly left out, as they fall on a few iterations."""
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    acc = EventAccumulator(str(run_dir), size_guidance={"scalars": 0})
    acc.Reload()
    points = acc.Scalars("charts/SPS")
    if len(points) < 2:
        return float("nan")  # a run of one iteration has no iteration between two points
    return statistics.median((b.step - a.step) / (b.wall_time - a.wall_time) for a, b in zip(points, points[1:]))


def run(tree: Path, seed: int, logdir: str, name: str) -> tuple[float, float, int, str]:
    """(agent-steps/s of the training loop, its median iteration's, the step it ended at, why it ended)
    of one default run in `tree`."""
    env = {**os.environ, "PYTHONPATH": str(tree)}
    cmd = [sys.executable, "train.py", "--agents", "8", "--seed", str(seed), "--logdir", logdir, "--run-name", name]
    out = subprocess.run(cmd, cwd=tree, env=env, capture_output=True, text=True)
    if out.returncode != 0:
        sys.stderr.write(out.stdout[-2000:] + out.stderr[-2000:])
        raise SystemExit(f"before_after: train.py failed in {tree}")
    result = load(Path(logdir) / name)
    return result.steps / result.seconds, iteration_rate(Path(logdir) / name), result.global_step, result.reason


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0], allow_abbrev=False)
    p.add_argument("--before", required=True, help="git revision to compare this tree against")
    p.add_argument("--pairs", type=int, default=5, help="alternating (before, after) pairs per seed")
    p.add_argument("--seeds", type=int, default=1, help="seeds 1..N (each pair runs the same seed in both trees)")
    args = p.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        before = Path(tmp) / "before"
        subprocess.run(["git", "worktree", "add", "--detach", str(before), args.before], cwd=ROOT, check=True,
                       capture_output=True)
        try:
            ratios, per_iteration = [], []
            for seed in range(1, args.seeds + 1):
                for i in range(args.pairs):
                    b, b_it, b_step, b_why = run(before, seed, tmp, f"before-{seed}-{i}")
                    a, a_it, a_step, a_why = run(ROOT, seed, tmp, f"after-{seed}-{i}")
                    ratios.append(a / b)
                    per_iteration.append(a_it / b_it)
                    print(f"seed {seed} pair {i + 1}: before {b:,.0f} steps/s ({b_why} at {b_step:,}) | "
                          f"after {a:,.0f} steps/s ({a_why} at {a_step:,}) | after/before {a / b:.3f} | "
                          f"median iteration {b_it:,.0f} -> {a_it:,.0f} steps/s, {a_it / b_it:.3f}", flush=True)
            for what, r in (("training loop", ratios), ("median iteration", per_iteration)):
                print(f"{what}, after/before: median {statistics.median(r):.3f} over {len(r)} pairs "
                      f"(min {min(r):.3f}, max {max(r):.3f})")
        finally:
            subprocess.run(["git", "worktree", "remove", "--force", str(before)], cwd=ROOT, capture_output=True)


if __name__ == "__main__":
    main()
