"""Play an exported policy and report each agent's returns: `python -m marl.evaluate runs/<run>`.

Each agent plays until it has finished --episodes whole episodes; actions are the policy's most
likely ones unless --sample is given. Exit code 2, with one line, if the run has no policy.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path


def evaluate(run_dir: Path, episodes: int, seed: int, sample: bool) -> dict[str, list[float]]:
    import numpy as np
    import torch

    from envs import make_batched
    from marl.models import sample as sample_actions
    from marl.policy_file import load_policy

    model, meta = load_policy(run_dir / "policy.pt")
    agents = meta["agents"]
    env = make_batched(meta["env"], agents, copies=1)
    obs = env.reset(seed=seed)
    returns = [[] for _ in range(agents)]
    running = np.zeros(agents)
    resetting = np.zeros(agents, dtype=bool)  # the next step of this agent is an autoreset step
    generator = torch.Generator().manual_seed(seed)
    kind = meta["model"]["action_kind"]
    with torch.inference_mode():
        while min(len(r) for r in returns) < episodes:
            pd, _ = model(torch.from_numpy(obs[0]).float())
            if sample:
                action, _ = sample_actions(pd, kind, generator)
            else:
                action = pd.argmax(-1) if kind == "discrete" else pd.chunk(2, dim=-1)[0]
            obs, rew, term, trunc = env.step(action.numpy()[None])
            running += np.where(resetting, 0.0, rew[0])
            done = (term[0] | trunc[0]) & ~resetting
            for a in np.flatnonzero(done):
                returns[a].append(float(running[a]))
                running[a] = 0.0
            resetting = done
    return {agent_id: r[:episodes] for agent_id, r in zip(meta["agent_ids"], returns)}


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m marl.evaluate", description=__doc__)
    p.add_argument("run_dir", help="a run directory, e.g. runs/CartPole-v1__1__1796000000")
    p.add_argument("--episodes", type=int, default=20, help="whole episodes per agent")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--sample", action="store_true", help="sample actions instead of taking the most likely")
    args = p.parse_args(argv)
    run_dir = Path(args.run_dir)
    if not (run_dir / "policy.pt").is_file():
        print(f"error: {run_dir} has no policy.pt; give a run directory that train.py wrote (under --logdir)",
              file=sys.stderr)
        return 2
    if args.episodes < 1:
        print(f"error: --episodes must be at least 1, got {args.episodes}", file=sys.stderr)
        return 2
    results = evaluate(run_dir, args.episodes, args.seed, args.sample)
    everyone = [x for r in results.values() for x in r]
    for agent, r in results.items():
        print(f"{agent}: mean {sum(r) / len(r):8.1f} | min {min(r):8.1f} | max {max(r):8.1f} | {len(r)} episodes")
    print(f"all agents: mean {sum(everyone) / len(everyone):.1f} over {len(everyone)} episodes")
    return 0


if __name__ == "__main__":
    sys.exit(main())
