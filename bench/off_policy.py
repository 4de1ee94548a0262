"""Off-policy results: DQN and SAC learning checks over seeds, SAC beside Stable-Baselines3's on a MuJoCo
task, and the speed of DQN and SAC against a one-process loop doing the same work.

Learning cases (each `train.py --config <preset> --seed s`, seeds 1..N):
- dqn_cartpole: configs/cartpole_dqn.toml, 100k agent-steps; the run stops when the mean return of
  its last 100 training episodes (epsilon-greedy) reaches 475. Reports that step, or the mean at the
  budget, and the greedy evaluation of the final policy (20 episodes per agent, as the zoo scores).
- dqn_acrobot: configs/acrobot_dqn.toml, 100k agent-steps, target -100 the same way.
- sac_pendulum: configs/pendulum_sac.toml, 20k agent-steps (100 episodes of 200 steps: the 100-episode
  window is the whole run, so the score is the final policy's): the greedy evaluation of the final
  policy over 10 episodes, and the mean of the last 10 training episodes.
- sac_halfcheetah: configs/halfcheetah_sac.toml on HalfCheetah-v5 (`pip install -e '.[mujoco]'`), 300k
  agent-steps by default; with `--sb3-python PATH` Stable-Baselines3's SAC (bench/peers/sb3_sac.py,
  run by that python: its own venv) on the same task, seed, budget and settings, one run after the
  other: the last 10 training episodes, the final policy's greedy evaluation, and the wall times.

    python bench/off_policy.py --cases dqn_cartpole,dqn_acrobot --seeds 5 --parallel 2
    python bench/off_policy.py --cases sac_pendulum --seeds 5 --parallel 2
    python bench/off_policy.py --cases sac_halfcheetah --seeds 1 --sb3-python ~/sb3/bin/python
    python bench/off_policy.py --speed                # agent-steps/s and updates/s against one process
    python bench/off_policy.py --smoke                # CI: tiny budgets, short episodes, 1 seed: that every case runs

`--parallel N` runs N seeds at once (then wall times are not comparable: compare those only from runs
made one at a time). QMIX and VDN are bench/multiagent.py's variants, beside MAPPO.
"""

from __future__ import annotations

import argparse
import statistics
import subprocess
import sys
import tempfile
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

from common import ROOT, run_peer, run_train  # bench/common.py, which also puts the repository on sys.path

# case: (train.py flags, budget, greedy evaluation episodes per agent)
CASES = {
    "dqn_cartpole": (["--config", "configs/cartpole_dqn.toml"], 100_000, 20),
    "dqn_acrobot": (["--config", "configs/acrobot_dqn.toml"], 100_000, 20),
    "sac_pendulum": (["--config", "configs/pendulum_sac.toml"], 20_000, 10),
    "sac_halfcheetah": (["--config", "configs/halfcheetah_sac.toml"], 300_000, 10),
}


def spread(values: list[float]) -> str:
    if not values:
        return "none"
    return f"median {statistics.median(values):,.1f} (min {min(values):,.1f}, max {max(values):,.1f})"


def training_returns(run_dir: Path) -> list[float]:
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    acc = EventAccumulator(str(run_dir), size_guidance={"scalars": 0})
    acc.Reload()
    return [e.value for e in acc.Scalars("charts/episodic_return")]


def run_marl(case: str, seed: int, budget: int, logdir: str, extra: tuple[str, ...] = (), episodes: int = 0) -> dict:
    """One marl run: how it ended (result.json), its last 10 training episodes, and its final policy's
    greedy evaluation (most likely actions) on seeds no training env had, over `episodes` per agent
    (default: the case's)."""
    from marl.evaluate import evaluate

    flags, _, case_episodes = CASES[case]
    episodes = episodes or case_episodes
    run_dir = Path(logdir) / f"{case}-{seed}"
    done = run_train([*flags, *extra, "--seed", str(seed), "--total-steps", str(budget), "--checkpoint-every", "0"], run_dir)
    greedy = evaluate(run_dir, episodes, seed=10_000, sample=False)[0]
    returns = training_returns(run_dir)
    r = done.result
    return {"program": "marl", "case": case, "seed": seed, "reason": r.reason, "step": r.global_step,
            "mean100": r.mean_return, "last10": statistics.mean(returns[-10:]), "wall": done.wall,
            "greedy": statistics.mean(x for v in greedy.values() for x in v), "steps_per_s": r.steps / r.seconds}


def run_sb3(python: str, seed: int, budget: int) -> dict:
    cmd = [python, str(ROOT / "bench" / "peers" / "sb3_sac.py"), "--env", "HalfCheetah-v5", "--steps", str(budget),
           "--seed", str(seed), "--learning-starts", "10000"]
    return run_peer(cmd)


def report(case: str, rows: list[dict]) -> None:
    for r in rows:
        end = f"target reached at step {r['step']:,}" if r["reason"] == "target" else \
            f"budget reached, last-100 mean {r['mean100']:,.1f}"
        print(f"{case} seed {r['seed']}: {end}; last 10 training episodes {r['last10']:,.1f}; greedy final policy "
              f"{r['greedy']:,.1f}; wall {r['wall']:,.0f} s ({r['steps_per_s']:,.0f} agent-steps/s)", flush=True)
    hit = [r for r in rows if r["reason"] == "target"]
    print(f"{case}: target reached on {len(hit)}/{len(rows)} seeds, at agent-steps {spread([float(r['step']) for r in hit])}; "
          f"greedy final policy {spread([r['greedy'] for r in rows])}; last 10 training episodes "
          f"{spread([r['last10'] for r in rows])}", flush=True)


def halfcheetah(seeds: int, budget: int, logdir: str, sb3: str, extra: tuple[str, ...] = (), episodes: int = 0) -> None:
    """marl's SAC and SB3's, one run after the other for each seed (same hour, nothing else running)."""
    for seed in range(1, seeds + 1):
        ours = run_marl("sac_halfcheetah", seed, budget, logdir, extra, episodes)
        print(f"halfcheetah seed {seed} marl: last 10 episodes {ours['last10']:,.1f}, greedy {ours['greedy']:,.1f}, "
              f"wall {ours['wall']:,.0f} s", flush=True)
        if sb3:
            theirs = run_sb3(sb3, seed, budget)
            print(f"halfcheetah seed {seed} SB3:  last 10 episodes {theirs['last10']:,.1f}, greedy {theirs['greedy']:,.1f}, "
                  f"wall {theirs['process_wall']:,.0f} s (learn() {theirs['wall']:,.0f} s); "
                  f"marl/SB3 wall {ours['wall'] / theirs['process_wall']:.2f}", flush=True)


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--cases", default="dqn_cartpole,dqn_acrobot,sac_pendulum", help=f"from {', '.join(CASES)}")
    p.add_argument("--seeds", type=int, default=5)
    p.add_argument("--budget", type=int, default=0, help="agent-steps per run (default: the case's)")
    p.add_argument("--parallel", type=int, default=1)
    p.add_argument("--sb3-python", default="", help="sac_halfcheetah: the python of a venv with stable-baselines3")
    p.add_argument("--speed", action="store_true", help="DQN's and SAC's speed against a one-process loop (bench/off_policy_speed.py)")
    p.add_argument("--smoke", action="store_true", help="tiny budgets, 50-step episodes, one seed, one evaluation "
                   "episode: that every case runs, not its numbers")
    p.add_argument("--logdir", default="", help="keep the runs here (default: a temporary directory)")
    args = p.parse_args()
    if args.speed:
        return subprocess.call([sys.executable, str(ROOT / "bench" / "off_policy_speed.py")])
    cases = args.cases.split(",")
    unknown = [c for c in cases if c not in CASES]
    if unknown:
        p.error(f"unknown case {unknown[0]!r}; choose from {', '.join(CASES)}")
    extra: tuple[str, ...] = ()
    episodes = 0  # greedy evaluation episodes per agent: the case's
    if args.smoke:
        # Episodes cut at 50 steps, so that every agent finishes some in 512 agent-steps (Acrobot's are 500 steps
        # long, HalfCheetah's 1,000), and one greedy evaluation episode each.
        args.seeds, args.budget, episodes = 1, 500, 1
        extra = ("--hidden-sizes", "32,32", "--learning-starts", "450", "--env-kwargs", '{"max_episode_steps": 50}')
    with tempfile.TemporaryDirectory() as scratch:
        logdir = args.logdir or scratch
        for case in cases:
            budget = args.budget or CASES[case][1]
            if case == "sac_halfcheetah":
                halfcheetah(args.seeds, budget, logdir, args.sb3_python, extra, episodes)
                continue
            with ThreadPoolExecutor(args.parallel) as pool:
                rows = list(pool.map(lambda s: run_marl(case, s, budget, logdir, extra, episodes), range(1, args.seeds + 1)))
            report(case, rows)
    return 0


if __name__ == "__main__":
    sys.exit(main())
