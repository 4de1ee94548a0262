"""VMAS collection: marl's actors against one process stepping the same batched env with the same policy,
measured in the same run (`pip install -e '.[vmas]'`).

The one-process loop is VMAS's own env of all the copies, the same network with the same weights
acting for every agent slot of a policy in one forward, sampling, and VMAS's step, with finished
copies reset as marl's backend resets them (`envs.vmas_backend.reset_copies`): no RPC, no other
process, one thread, on the device marl's first actor uses (`marl.devices.actor_device`: a GPU where
the machine has one, else the CPU). Both sides count real transitions only (not a reset step's). marl's number is
agent-steps per second of those that reach the coordinator: real actor processes over RPC, each
owning one VMAS env of --envs-per-actor copies, trajectories as tensors, no learning. With --actors A
the one process steps the A x --envs-per-actor copies as one env (VMAS's own way to scale on a core).
Scenarios with a plain Box observation (VMAS's default).

    python bench/vmas_speed.py                                   # navigation, 1 actor x 1,024 copies
    python bench/vmas_speed.py --scenario balance --envs-per-actor 4096 --requests 5
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

import torch  # noqa: E402

from collect_throughput import measure_actors  # noqa: E402 - bench/collect_throughput.py
from envs import describe  # noqa: E402
from envs.vmas_backend import make_vmas, reset_copies  # noqa: E402
from marl import distributions  # noqa: E402
from marl.config import Config, validate  # noqa: E402
from marl.devices import actor_device  # noqa: E402
from marl.launch import launch  # noqa: E402
from marl.models import build_model, network_of  # noqa: E402
from marl.policies import specs_of  # noqa: E402


def one_process(cfg: Config, info, weights: dict, seconds: float, device: torch.device) -> float:
    """Agent-steps/s of one process stepping all the run's copies as one VMAS env with the run's policy,
    both on `device`."""
    torch.set_num_threads(1)
    copies = cfg.actors * cfg.envs_per_actor
    env = make_vmas(cfg.env, copies, dict(cfg.env_kwargs), seed=0, device=device)
    specs = specs_of(cfg, info)
    model = build_model(specs, network_of(cfg)).to(device)
    model.load_state_dict(weights)
    generator = torch.Generator(device).manual_seed(0)
    obs = env.reset(seed=0)
    n = len(info.agent_ids)
    done = torch.zeros(copies, dtype=torch.bool, device=device)
    steps, start = 0, time.perf_counter()
    with torch.inference_mode():
        while time.perf_counter() - start < seconds:
            actions = [None] * n
            for spec in specs:
                x = torch.stack([obs[j] for j in spec.agents], dim=1).flatten(0, 1)
                params, _, _ = model.policies[spec.name]({"obs": x})
                pi = distributions.make(spec.action, params)
                a = pi.to_env(pi.sample(generator)[0]).reshape(copies, len(spec.agents), *spec.action.shape)
                for k, j in enumerate(spec.agents):
                    actions[j] = spec.action.space.to_env_tensor(spec.action, a[:, k])
            obs, _, terminated, truncated, _ = env.step(actions)
            steps += int((~done).sum()) * n  # a resetting copy's step is no transition
            if bool(done.any()):
                obs = reset_copies(env, done)
            done = (terminated | truncated) & ~done
    return steps / (time.perf_counter() - start)


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--scenario", default="navigation")
    p.add_argument("--env-kwargs", default='{"n_agents": 4}', help="JSON, as train.py's")
    p.add_argument("--actors", type=int, default=1)
    p.add_argument("--envs-per-actor", type=int, default=1024)
    p.add_argument("--num-steps", type=int, default=100)
    p.add_argument("--requests", type=int, default=10, help="timed requests per actor")
    p.add_argument("--one-process-seconds", type=float, default=10.0)
    args = p.parse_args()
    cfg = validate(dataclasses.replace(Config(), env=f"vmas:{args.scenario}", env_kwargs=json.loads(args.env_kwargs),
                                       agents=0, actors=args.actors, envs_per_actor=args.envs_per_actor,
                                       num_steps=args.num_steps, run_name="bench"), gpus=0)
    info = describe(cfg.env, None, dict(cfg.env_kwargs))
    cfg = dataclasses.replace(cfg, agents=len(info.agent_ids))
    weights = build_model(specs_of(cfg, info), network_of(cfg)).state_dict()
    # Where marl's first actor steps the env and runs its policy (a GPU where there is one): its local
    # rank comes after the learners' (marl.launch starts learners first, then actors).
    device = actor_device(info, local_rank=cfg.learners)
    alone = one_process(cfg, info, weights, args.one_process_seconds, device)
    result: dict = {}
    code = launch(cfg, info, rank0_main=measure_actors(args.requests, result, weights))
    if code != 0 or "rate" not in result:
        print("vmas_speed: the actor run failed", file=sys.stderr)
        return 1
    slots = cfg.actors * cfg.envs_per_actor * len(info.agent_ids)
    print(f"{cfg.env} {dict(cfg.env_kwargs)}: {cfg.actors} actor(s) x {cfg.envs_per_actor} copies ({slots} agent slots), "
          f"{cfg.num_steps} steps per request, env and policy on {device}")
    print(f"one process, one VMAS env, 1 thread, no RPC: {alone:>12,.0f} agent-steps/s")
    print(f"marl actors over RPC:                        {result['rate']:>12,.0f} agent-steps/s")
    print(f"ratio marl / one process: {result['rate'] / alone:.2f} (target >= 0.90)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
