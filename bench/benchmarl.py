"""MAPPO on VMAS, marl beside BenchMARL 1.5.2: the same tasks, frames, batch, minibatches, learning
rate and network sizes, one program at a time, alternately, seed by seed, in one run.

BenchMARL runs from its own venv (bench/peers/benchmarl_mappo.py says how to make it), its python
given as a path. Both sides take BenchMARL's yaml defaults for the task (its kwargs passed to marl
as --env-kwargs), for MAPPO (clip 0.2, no entropy bonus, GAE lambda 0.9, gamma 0.99, no advantage
normalisation, rewards unscaled, gradient norm clipped at 5, a constant learning rate, a tanh-squashed Gaussian, a
critic shared by the agents that reads every agent's observation) and for the MLP (256-256, Tanh),
and these flags: --frames (copy-steps, every agent of a copy acting once: marl's --total-steps is
that times the agents), --frames-per-batch over --envs copies (marl: 2 actors of --envs/2 copies,
--num-steps frames-per-batch/envs), --minibatch-size and --minibatch-iters (BenchMARL's; for marl
--num-minibatches frames-per-batch/minibatch-size and --update-epochs iters x size / frames-per-batch),
--lr.

Reported per task: the final policy's mean episode return per agent with its most likely actions
(BenchMARL: its evaluation after the last iteration, one episode in each of --eval-episodes copies;
marl: `marl.evaluate` on the exported policy, --eval-episodes episodes per agent, seeds no training
env had), mean and spread over the seeds; and each program's wall time from the command to its exit
(BenchMARL's includes its evaluations before the first and after the last iteration, marl's none).

    python bench/benchmarl.py --benchmarl-python ~/benchmarl/bin/python
    python bench/benchmarl.py --benchmarl-python ~/benchmarl/bin/python --tasks navigation --seeds 1 --frames 60000

Without --benchmarl-python only marl's runs are made (as tests/test_bench.py does, at a tiny size).
"""

from __future__ import annotations

import argparse
import json
import statistics
import tempfile
from pathlib import Path

from common import ROOT, run_peer, run_train  # bench/common.py

# BenchMARL 1.5.2's conf/task/vmas/<task>.yaml: the scenario kwargs both programs are given.
TASKS = {
    "navigation": {"max_steps": 100, "n_agents": 3, "collisions": True, "agents_with_same_goal": 1,
                   "split_goals": False, "observe_all_goals": False, "shared_rew": False, "lidar_range": 0.35,
                   "agent_radius": 0.1},
    "balance": {"max_steps": 100, "n_agents": 4, "random_package_pos_on_line": True, "package_mass": 5},
    "sampling": {"max_steps": 100, "n_agents": 3, "shared_rew": False, "n_gaussians": 3, "lidar_range": 0.2,
                 "cov": 0.05, "collisions": True, "spawn_same_pos": False},
}


def marl_flags(task: str, args) -> list[str]:
    """train.py's flags for BenchMARL's MAPPO settings on `task`."""
    kwargs = TASKS[task]
    minibatches = args.frames_per_batch // args.minibatch_size
    epochs = args.minibatch_iters * args.minibatch_size // args.frames_per_batch
    return ["--env", f"vmas:{task}", "--env-kwargs", json.dumps(kwargs), "--critic", "central",
            "--hidden-sizes", "256,256", "--action-dist", "tanh_gaussian",
            "--actors", "2", "--envs-per-actor", str(args.envs // 2), "--num-steps", str(args.frames_per_batch // args.envs),
            "--num-minibatches", str(minibatches), "--update-epochs", str(epochs), "--learning-rate", str(args.lr),
            "--no-anneal-lr", "--gamma", "0.99", "--gae-lambda", "0.9", "--clip-coef", "0.2", "--ent-coef", "0",
            "--no-norm-adv", "--no-norm-reward", "--max-grad-norm", "5", "--total-steps", str(args.frames * kwargs["n_agents"]),
            "--target-return", "1e9", "--checkpoint-every", "0",
            "--mode", "sync"]  # as BenchMARL collects, and as the published rows were measured


def run_marl(task: str, seed: int, args, logdir: Path) -> dict:
    from marl.evaluate import evaluate

    run_dir = logdir / f"{task}_seed{seed}"
    run = run_train([*marl_flags(task, args), "--seed", str(seed)], run_dir)
    returns = evaluate(run_dir, args.eval_episodes, seed=10_000 + seed, sample=False)[0]
    return {"final_return": statistics.mean(x for v in returns.values() for x in v), "wall": run.wall}


def run_benchmarl(python: str, task: str, seed: int, args) -> dict:
    r = run_peer([python, str(ROOT / "bench" / "peers" / "benchmarl_mappo.py"), "--task", task, "--seed", str(seed),
                  "--frames", str(args.frames), "--frames-per-batch", str(args.frames_per_batch), "--envs", str(args.envs),
                  "--minibatch-size", str(args.minibatch_size), "--minibatch-iters", str(args.minibatch_iters),
                  "--lr", str(args.lr), "--eval-episodes", str(args.eval_episodes), "--task-kwargs", json.dumps(TASKS[task])])
    if r["task_config"] != TASKS[task]:
        raise SystemExit(f"BenchMARL's {task} config {r['task_config']} is not the one marl was given {TASKS[task]}")
    return {**r, "wall": r["process_wall"]}


def spread(xs: list[float]) -> str:
    return f"{statistics.mean(xs):.2f} ({min(xs):.2f} to {max(xs):.2f})"


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--benchmarl-python", default="", metavar="PYTHON", help="BenchMARL's venv's python (without it: "
                   "marl's runs only)")
    p.add_argument("--tasks", default="navigation,balance,sampling")
    p.add_argument("--seeds", type=int, default=3, help="seeds 1..N")
    p.add_argument("--frames", type=int, default=180_000)
    p.add_argument("--frames-per-batch", type=int, default=6000)
    p.add_argument("--envs", type=int, default=60)
    p.add_argument("--minibatch-size", type=int, default=400)
    p.add_argument("--minibatch-iters", type=int, default=45)
    p.add_argument("--lr", type=float, default=5e-4)
    p.add_argument("--eval-episodes", type=int, default=50)
    args = p.parse_args()
    tasks = args.tasks.split(",")
    if unknown := [t for t in tasks if t not in TASKS]:
        p.error(f"--tasks: no BenchMARL settings for {', '.join(unknown)}; known: {', '.join(TASKS)}")
    if args.envs % 2 or args.frames_per_batch % args.envs or args.frames_per_batch % args.minibatch_size or \
            (args.minibatch_iters * args.minibatch_size) % args.frames_per_batch:
        p.error("--envs must be even and divide --frames-per-batch, which --minibatch-size and "
                "--minibatch-iters x --minibatch-size must be multiples of")
    rows = []
    with tempfile.TemporaryDirectory() as scratch:
        for task in tasks:
            ours, theirs = [], []
            for seed in range(1, args.seeds + 1):
                ours.append(run_marl(task, seed, args, Path(scratch)))
                line = f"{task} seed {seed}: marl return {ours[-1]['final_return']:.3f} in {ours[-1]['wall']:.0f} s"
                if args.benchmarl_python:
                    theirs.append(run_benchmarl(args.benchmarl_python, task, seed, args))
                    line += f" | BenchMARL return {theirs[-1]['final_return']:.3f} in {theirs[-1]['wall']:.0f} s"
                print(line, flush=True)
            rows.append((task, ours, theirs))
    if not args.benchmarl_python:
        return 0
    print(f"\nMAPPO, {args.frames:,} frames, {args.frames_per_batch:,} per batch over {args.envs} copies, minibatches of "
          f"{args.minibatch_size} x {args.minibatch_iters}, lr {args.lr:g}, seeds 1-{args.seeds}; return per agent, "
          f"most likely actions, {args.eval_episodes} episodes")
    print("| task | marl return | BenchMARL return | marl wall (s) | BenchMARL wall (s) | marl / BenchMARL wall |")
    print("| --- | --- | --- | --- | --- | --- |")
    for task, ours, theirs in rows:
        w_ours, w_theirs = (statistics.median(r["wall"] for r in side) for side in (ours, theirs))
        print(f"| {task} | {spread([r['final_return'] for r in ours])} | {spread([r['final_return'] for r in theirs])} | "
              f"{w_ours:.0f} | {w_theirs:.0f} | {w_ours / w_theirs:.2f} |")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
