"""BenchMARL 1.5.2's MAPPO on one VMAS task, for bench/benchmarl.py. Run it with the python of a venv
that has BenchMARL (never marl's; it brings torchrl, tensordict, hydra and its own torch):

    python3 -m venv ~/benchmarl
    ~/benchmarl/bin/pip install torch==2.14.1 torchvision==0.29.1 benchmarl==1.5.2 vmas==1.5.2
    ~/benchmarl/bin/python bench/peers/benchmarl_mappo.py --task navigation --seed 1 --frames 300000

It imports nothing of marl. Settings: BenchMARL's own yaml defaults (experiment, mappo, the task's
and the 256-256 Tanh MLP's), with the flags overriding the budget, the collection batch, the
minibatches and the learning rate; no logger but the JSON file BenchMARL writes its evaluations to,
no rendering, no checkpoints. BenchMARL evaluates before the first iteration and after the last one
(`evaluation_interval` = the budget), with the policy's deterministic action, one episode in each of
--eval-episodes copies. Prints one JSON line: the final evaluation's mean episode return (per agent,
BenchMARL's `return`), the last training batch's (BenchMARL's `mean_return`), the seconds of
`Experiment.run()` and of the process until then (imports, env and model construction).
"""

from __future__ import annotations

import time

START = time.perf_counter()

import argparse  # noqa: E402
import json  # noqa: E402
import tempfile  # noqa: E402
from pathlib import Path  # noqa: E402

from benchmarl.algorithms import MappoConfig  # noqa: E402
from benchmarl.environments import VmasTask  # noqa: E402
from benchmarl.experiment import Experiment, ExperimentConfig  # noqa: E402
from benchmarl.models.mlp import MlpConfig  # noqa: E402


def final_return(folder: Path) -> float:
    """The mean return of the last evaluation in the marl-eval JSON that BenchMARL wrote."""
    (path,) = folder.rglob("*.json")
    data = json.loads(path.read_text())
    while not any(k.startswith("step_") for k in data):  # env / task / algorithm / seed levels
        (data,) = data.values()
    last = max((k for k in data if k.startswith("step_")), key=lambda k: int(k.split("_")[1]))
    returns = data[last]["return"]
    return sum(returns) / len(returns)


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--task", required=True, help="navigation, balance, sampling, ...")
    p.add_argument("--seed", type=int, default=1)
    p.add_argument("--frames", type=int, required=True, help="max_n_frames: env steps of one copy, all agents")
    p.add_argument("--frames-per-batch", type=int, default=6000)
    p.add_argument("--envs", type=int, default=10, help="VMAS copies stepped as one batch")
    p.add_argument("--minibatch-size", type=int, default=400)
    p.add_argument("--minibatch-iters", type=int, default=45)
    p.add_argument("--lr", type=float, default=5e-5)
    p.add_argument("--eval-episodes", type=int, default=100)
    p.add_argument("--task-kwargs", default="{}", help="JSON overriding the task's yaml")
    args = p.parse_args()

    cfg = ExperimentConfig.get_from_yaml()
    cfg.max_n_frames = args.frames
    cfg.on_policy_collected_frames_per_batch = args.frames_per_batch
    cfg.on_policy_n_envs_per_worker = args.envs
    cfg.on_policy_minibatch_size = args.minibatch_size
    cfg.on_policy_n_minibatch_iters = args.minibatch_iters
    cfg.lr = args.lr
    cfg.loggers, cfg.create_json, cfg.render = [], True, False
    cfg.evaluation, cfg.evaluation_interval, cfg.evaluation_episodes = True, args.frames, args.eval_episodes
    cfg.checkpoint_interval, cfg.checkpoint_at_end = 0, False
    task = VmasTask[args.task.upper()].get_from_yaml()
    task.config.update(json.loads(args.task_kwargs))
    with tempfile.TemporaryDirectory() as folder:
        cfg.save_folder = folder
        experiment = Experiment(task=task, algorithm_config=MappoConfig.get_from_yaml(),
                                model_config=MlpConfig.get_from_yaml(), critic_model_config=MlpConfig.get_from_yaml(),
                                seed=args.seed, config=cfg)
        setup = time.perf_counter() - START
        start = time.perf_counter()
        experiment.run()
        run = time.perf_counter() - start
        final = final_return(Path(folder))
    print(json.dumps({"program": "benchmarl", "task": args.task, "seed": args.seed, "frames": experiment.total_frames,
                      "final_return": final, "last_batch_return": experiment.mean_return, "run_seconds": run,
                      "setup_seconds": setup, "task_config": task.config}))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
