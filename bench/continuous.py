"""Continuous control results: the presets in configs/ over several seeds, each run's curve read from its
progress lines and its end from its result.json.

Cases (each `train.py --config <preset>` with `--seed s`, run to its whole budget):
- pendulum (and pendulum_beta, the same with `--action-dist beta`): configs/pendulum.toml, 600k agent-steps. Reports, per seed, the first step at which the
  mean return of the last 100 episodes reached -250 (the goal: within 300k), that mean at 300k, its
  lowest after 300k and at the end (the goal: no collapse, every mean after 300k at -300 or above).
- hopper, halfcheetah: configs/mujoco.toml on Hopper-v5 / HalfCheetah-v5, 1M agent-steps
  (`pip install -e '.[mujoco]'`). Reports the mean of the last 100 episodes at the end and the wall time.

    python bench/continuous.py --cases pendulum --seeds 5 --parallel 2
    python bench/continuous.py --cases pendulum,pendulum_beta --seeds 5 --parallel 2   # Beta beside the Gaussian
    python bench/continuous.py --cases hopper,halfcheetah --seeds 3
    python bench/continuous.py --smoke               # CI: one short iteration, 1 seed

`--cleanrl PATH` also runs CleanRL's `ppo_continuous_action.py` (a copy of it at PATH, with `tyro`
installed; under Gymnasium 1.4 its `TransformObservation(...)` call needs `env.observation_space` as
a third argument) on the same MuJoCo task, seed and budget, one run after the other with marl's, and
reports the mean of its last 100 episodes and its wall time beside marl's.

`--parallel N` runs N seeds at once (faster on a quiet machine, but then wall times are not
comparable between runs: compare wall times only from runs made one at a time).
"""

from __future__ import annotations

import argparse
import re
import subprocess
import sys
import tempfile
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

from common import run_train  # bench/common.py, which also puts the repository on sys.path
from marl.result import Result  # noqa: E402

CASES = {
    "pendulum": (["--config", "configs/pendulum.toml"], 600_000, 300_000, -250.0, -300.0),
    # The same preset with the Beta policy (Chou et al. 2017) in place of the clipped Gaussian.
    "pendulum_beta": (["--config", "configs/pendulum.toml", "--action-dist", "beta"], 600_000, 300_000, -250.0, -300.0),
    "hopper": (["--config", "configs/mujoco.toml", "--env", "Hopper-v5"], 1_000_000, None, None, None),
    "halfcheetah": (["--config", "configs/mujoco.toml", "--env", "HalfCheetah-v5"], 1_000_000, None, None, None),
}
LINE = re.compile(r"^iter +\d+ \| step +([\d,]+) \|.*\| return +(\S+) \(last (\d+)\)", re.M)


def curve(stdout: str) -> list[tuple[int, float]]:
    """(agent-step, mean return of the last 100 episodes) per iteration, once 100 episodes have finished."""
    return [(int(s.replace(",", "")), float(r)) for s, r, n in LINE.findall(stdout) if int(n) == 100]


def run(case: str, seed: int, budget: int, logdir: str,
        extra: tuple[str, ...] = ()) -> tuple[str, int, list[tuple[int, float]], Result, float]:
    """One run to its budget: its curve (from the progress lines: result.json holds no curve), how it ended."""
    args = [*CASES[case][0], *extra, "--seed", str(seed), "--total-steps", str(budget), "--target-return", "1e9",
            "--checkpoint-every", "0"]
    done = run_train(args, Path(logdir) / f"{case}-{seed}")
    return case, seed, curve(done.stdout), done.result, done.wall


def run_cleanrl(path: str, case: str, seed: int, budget: int) -> tuple[float, float]:
    """CleanRL's script on the case's env: (mean return of its last 100 episodes, wall seconds)."""
    env = CASES[case][0][-1]
    cmd = [sys.executable, path, "--env-id", env, "--seed", str(seed), "--total-timesteps", str(budget), "--no-cuda"]
    start = time.perf_counter()
    with tempfile.TemporaryDirectory() as cwd:  # it writes runs/ where it is started
        out = subprocess.run(cmd, capture_output=True, text=True, cwd=cwd)
    wall = time.perf_counter() - start
    if out.returncode != 0:
        sys.stderr.write(out.stdout[-2000:] + out.stderr[-3000:])
        raise SystemExit(f"continuous: CleanRL failed for {case} seed {seed}")
    returns = [float(r) for r in re.findall(r"episodic_return=\[?(-?[\d.]+)", out.stdout)]
    last = returns[-100:]
    return (sum(last) / len(last) if last else float("nan")), wall


def report(case: str, seed: int, points: list[tuple[int, float]], result: Result, wall: float) -> bool | None:
    """One line per run; whether it met the case's goals (None: the case has none)."""
    _, budget, by, reach, floor = CASES[case]
    if not points:
        print(f"{case} seed {seed}: fewer than 100 episodes finished ({wall:.0f}s)", flush=True)
        return False if reach is not None else None
    end = result.mean_return
    if reach is None:
        print(f"{case} seed {seed}: last 100 at {result.global_step:,}: {end:.1f} | {wall:.0f}s wall", flush=True)
        return None
    first = next((s for s, r in points if r >= reach), None)
    at = [r for s, r in points if s <= by]
    after = [r for s, r in points if s > by]
    # The goal: reached by `by`, and from then on no collapse: every mean of the last 100 at `floor` or above.
    ok = first is not None and first <= by and min(after or [end]) >= floor
    print(f"{case} seed {seed}: reached {reach:g} at {'never' if first is None else f'{first:,}'} | "
          f"at {by:,}: {at[-1] if at else float('nan'):.1f} | lowest after: {min(after) if after else float('nan'):.1f} | "
          f"end ({result.global_step:,}): {end:.1f} | {'meets' if ok else 'misses'} the goal | {wall:.0f}s wall", flush=True)
    return ok


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--cases", default="pendulum", help=f"comma-separated, of {', '.join(CASES)}")
    p.add_argument("--seeds", type=int, default=5, help="seeds per case: --first-seed, --first-seed + 1, ...")
    p.add_argument("--first-seed", type=int, default=1)
    p.add_argument("--parallel", type=int, default=1, help="runs at once")
    p.add_argument("--budget", type=int, default=0, help="agent-steps per run (default: the case's)")
    p.add_argument("--smoke", action="store_true", help="pendulum, 1 seed, one iteration of 2k agent-steps and "
                   "1 epoch, in 10-step episodes (so that 100 finish and every line of the report runs): that the bench runs")
    p.add_argument("--cleanrl", default="", help="path of CleanRL's ppo_continuous_action.py, run beside marl on MuJoCo cases")
    args = p.parse_args()
    cases = ["pendulum"] if args.smoke else args.cases.split(",")
    unknown = [c for c in cases if c not in CASES]
    if unknown:
        p.error(f"unknown case {unknown[0]!r}; choose from {', '.join(CASES)}")
    seeds = 1 if args.smoke else args.seeds
    smoke = ("--env-kwargs", '{"max_episode_steps": 10}', "--num-steps", "128", "--update-epochs", "1")
    with tempfile.TemporaryDirectory() as logdir, ThreadPoolExecutor(args.parallel) as pool:
        jobs = [pool.submit(run, case, seed, 1_000 if args.smoke else args.budget or CASES[case][1], logdir,
                            smoke if args.smoke else ())
                for case in cases for seed in range(args.first_seed, args.first_seed + seeds)]
        results: dict[str, list] = {}
        for job in jobs:
            case, seed, points, result, wall = job.result()
            results.setdefault(case, []).append((report(case, seed, points, result, wall), points, result))
    for case in cases if args.cleanrl else []:
        if CASES[case][2] is None:  # the MuJoCo cases: the ones CleanRL's script runs
            for seed in range(args.first_seed, args.first_seed + seeds):
                mean, wall = run_cleanrl(args.cleanrl, case, seed, args.budget or CASES[case][1])
                print(f"{case} seed {seed}: CleanRL ppo_continuous_action.py: last 100 episodes {mean:.1f} | "
                      f"{wall:.0f}s wall", flush=True)
    for case, rs in results.items():
        ends = sorted(r.mean_return for _, pts, r in rs if pts)
        met = [ok for ok, _, _ in rs if ok is not None]
        goal = f"goal met on {sum(met)}/{len(met)} seeds | " if met else ""
        print(f"{case}: {goal}end of run, last 100 episodes: median {ends[len(ends) // 2] if ends else float('nan'):.1f} "
              f"(min {ends[0] if ends else float('nan'):.1f}, max {ends[-1] if ends else float('nan'):.1f})", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
