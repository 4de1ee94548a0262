"""Collection throughput: marl's RPC actors against a one-process roofline, measured in the same run.

The roofline is what one process does with no RPC and no other process: the same total number of
envs in one Gymnasium vector env, the same policy forward and sampling, one thread. marl's number
is agent-steps per second of real transitions that reach the coordinator: real actor processes,
real RPC, trajectories as tensors, no learning.

    python bench/collect_throughput.py                  # --agents 8, 2 actors, 128 env copies each
    python bench/collect_throughput.py --envs-per-actor 4 --requests 50
"""

from __future__ import annotations

import argparse
import dataclasses
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

import gymnasium as gym  # noqa: E402
import torch  # noqa: E402

from envs import describe  # noqa: E402
from marl import distributions  # noqa: E402
from marl.config import Config, validate  # noqa: E402
from marl.coordinator import ActorPool  # noqa: E402
from marl.launch import launch  # noqa: E402
from marl.models import build_model, network_of  # noqa: E402
from marl.models.actor_critic import ActorCritic  # noqa: E402
from marl.policies import specs_of  # noqa: E402

TARGET = 1_000_000


def roofline(cfg: Config, seconds: float) -> float:
    """Agent-steps/s of one process stepping every env of the run in one vector env."""
    torch.set_num_threads(1)
    info = describe(cfg.env, cfg.agents)
    n = cfg.actors * cfg.envs_per_actor * cfg.agents
    envs = gym.make_vec(cfg.env, num_envs=n, vectorization_mode="vector_entry_point")
    (spec,) = specs_of(cfg, info)  # the one shared policy
    model = ActorCritic(spec, cfg.hidden_sizes, cfg.encoder)
    obs, _ = envs.reset(seed=0)
    steps, start = 0, time.perf_counter()
    with torch.inference_mode():
        while time.perf_counter() - start < seconds:
            pd, _, _ = model({"obs": torch.from_numpy(obs)})
            action, _ = distributions.make(spec.action, pd).sample()
            obs, *_ = envs.step(action.numpy())
            steps += n
    return steps / (time.perf_counter() - start)


def measure_actors(requests: int, result: dict, weights: dict | None = None):
    """rank 0's main for marl.launch: `requests` timed collections per actor with `weights` (default: a
    fresh network's), their agent-steps/s and the actors' busy time into `result`."""
    def rank0_main(cfg: Config, info, learner_group, device, control) -> int:
        pool = ActorPool(cfg, info)
        acting = weights if weights is not None else build_model(specs_of(cfg, info), network_of(cfg)).state_dict()
        for _ in range(2):  # warm-up: actor construction, first weights
            pool.collect(0, acting)
        steps, start = 0, time.perf_counter()
        busy = 0.0
        for _ in range(requests):
            rollouts = pool.collect(0, acting)
            steps += sum(r.steps for r in rollouts)
            busy += max(r.collect_seconds for r in rollouts)
        wall = time.perf_counter() - start
        result.update(rate=steps / wall, wall=wall, busy=busy)
        return 0

    return rank0_main


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--agents", type=int, default=8)
    p.add_argument("--actors", type=int, default=Config().actors)
    p.add_argument("--envs-per-actor", type=int, default=128)
    p.add_argument("--num-steps", type=int, default=Config().num_steps)
    p.add_argument("--requests", type=int, default=20, help="timed requests per actor")
    p.add_argument("--roofline-seconds", type=float, default=3.0)
    args = p.parse_args()
    cfg = validate(dataclasses.replace(Config(), agents=args.agents, actors=args.actors, envs_per_actor=args.envs_per_actor,
                                       num_steps=args.num_steps, run_name="bench"), gpus=0)
    info = describe(cfg.env, cfg.agents)
    roof = roofline(cfg, args.roofline_seconds)
    result: dict = {}
    code = launch(cfg, info, rank0_main=measure_actors(args.requests, result))
    if code != 0 or "rate" not in result:
        print("collect_throughput: the actor run failed", file=sys.stderr)
        return 1
    slots = cfg.actors * cfg.envs_per_actor * cfg.agents
    rate = result["rate"]
    print(f"{cfg.env} x {cfg.agents} agents, {cfg.actors} actors x {cfg.envs_per_actor} env copies ({slots} agent slots), "
          f"{cfg.num_steps} steps per request")
    print(f"roofline, 1 process, 1 thread, no RPC: {roof:>12,.0f} agent-steps/s")
    print(f"marl actors over RPC:                  {rate:>12,.0f} agent-steps/s")
    print(f"ratio marl / roofline: {rate / roof:.2f} (target >= 0.35)")
    print(f"ratio marl / {TARGET:,} target: {rate / TARGET:.2f} (target >= 1.00)")
    print(f"actor busy {result['busy'] / result['wall']:.0%} of the wall time (the rest is RPC, transfer and coordinator)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
