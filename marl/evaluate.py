"""Play an exported policy and report each agent's returns: `python -m marl.evaluate runs/<run>`.

Each agent plays until it has finished --episodes whole episodes; actions are the policy's most
likely ones unless --sample is given. Exit code 2, with one line, if the run has no policy.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path


def play(info, specs, act, episodes: int, seed: int) -> dict[str, list[float]]:
    """Each agent's returns over its first `episodes` whole episodes, one env copy, actions from
    `act(spec, obs {leaf: [n_g, ...]}, mask [n_g, mask_size] or None, starts [n_g]) -> env actions [n_g, ...]`
    for each policy; `starts` says which agents begin an episode (a recurrent policy zeroes their state)."""
    import numpy as np
    import torch

    from envs import make_agent_batch
    from marl.models.core import fresh_after
    from marl.policies import policy_obs

    env = make_agent_batch(info, 1, [list(s.agents) for s in specs])
    obs = env.reset(seed=seed)
    valid = [a.copy() for a in env.active]
    returns: list[list[float]] = [[] for _ in info.agent_ids]
    running = [np.zeros(a.shape) for a in valid]
    fresh = [np.ones(a.shape, dtype=bool) for a in valid]
    limit = 100_000 * episodes  # an agent that never finishes an episode must not hang the evaluation
    with torch.inference_mode():
        for _ in range(limit):
            if min(len(r) for r in returns) >= episodes:
                break
            actions = []
            for g, spec in enumerate(specs):
                o = policy_obs(spec, {k: v[0] for k, v in obs[g].items()}, ())
                mask = env.masks[g]
                a = act(spec, o, None if mask is None else torch.from_numpy(mask[0]), torch.from_numpy(fresh[g][0]))
                actions.append(a.reshape(1, len(spec.agents), *spec.action.shape).numpy())
            obs, rew, term, trunc, active = env.step(actions)
            for g, spec in enumerate(specs):
                running[g] += np.where(valid[g], rew[g], 0.0)
                done = (term[g] | trunc[g]) & valid[g]
                for _, j in zip(*np.nonzero(done)):
                    returns[spec.agents[j]].append(float(running[g][0, j]))
                    running[g][0, j] = 0.0
                fresh[g] = fresh_after(valid[g], term[g])
                valid[g] = active[g].copy()
        else:
            raise RuntimeError(f"{info.env_id}: not every agent finished {episodes} episodes within {limit:,} steps")
    env.close()
    return {agent_id: r[:episodes] for agent_id, r in zip(info.agent_ids, returns)}


def evaluate(run_dir: Path, episodes: int, seed: int, sample: bool) -> dict[str, list[float]]:
    """Play the run's exported policy: its most likely actions, or sampled ones."""
    import torch

    from envs import describe
    from marl import distributions
    from marl.policy_file import load_policy

    model, specs, meta = load_policy(run_dir / "policy.pt")
    info = describe(meta["env"], meta["agents"], meta["env_kwargs"], tuple(meta["obs_keys"]), tuple(meta["wrappers"]))
    generator = torch.Generator().manual_seed(seed)
    cores = {s.name: torch.zeros(len(s.agents), model.state_size(s.name)) for s in specs}  # recurrent policies' states

    def act(spec, obs, mask, starts):
        params, cores[spec.name] = model.policies[spec.name].act(obs, cores[spec.name], starts)
        pi = distributions.make(spec.action, params, mask)
        return distributions.env_action(pi, pi.sample(generator)[0] if sample else pi.mode())

    return play(info, specs, act, episodes, seed)


def random_returns(info, specs, episodes: int, seed: int) -> dict[str, list[float]]:
    """The baseline a trained policy must beat: uniformly random (legal) actions; Box: standard
    normal, then clipped by the env."""
    import torch

    from marl import distributions

    generator = torch.Generator().manual_seed(seed)

    def act(spec, obs, mask, starts):
        params = distributions.uniform_params(spec.action, len(spec.agents))
        pi = distributions.make(spec.action, params, mask)
        return distributions.env_action(pi, pi.sample(generator)[0])

    return play(info, specs, act, episodes, seed)


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m marl.evaluate", description=__doc__)
    p.add_argument("run_dir", help="a run directory, e.g. runs/CartPole-v1__1__1796000000")
    p.add_argument("--episodes", type=int, default=20, help="whole episodes per agent")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--sample", action="store_true", help="sample actions instead of taking the most likely (a greedy "
                   "policy can repeat one move forever where the observation does not change, as in MiniGrid)")
    args = p.parse_args(argv)
    import torch

    torch.set_num_threads(1)  # batches of one env copy: threads cost more than they give (4x on 2 cores)
    run_dir = Path(args.run_dir)
    if not (run_dir / "policy.pt").is_file():
        print(f"error: {run_dir} has no policy.pt; give a run directory that train.py wrote (under --logdir)",
              file=sys.stderr)
        return 2
    if args.episodes < 1:
        print(f"error: --episodes must be at least 1, got {args.episodes}", file=sys.stderr)
        return 2
    from marl.models import ModelError

    try:
        results = evaluate(run_dir, args.episodes, args.seed, args.sample)
    except ModelError as e:
        print(f"error: {run_dir}/policy.pt: {e}", file=sys.stderr)
        return 2
    everyone = [x for r in results.values() for x in r]
    for agent, r in results.items():
        print(f"{agent}: mean {sum(r) / len(r):8.1f} | min {min(r):8.1f} | max {max(r):8.1f} | {len(r)} episodes")
    print(f"all agents: mean {sum(everyone) / len(everyone):.1f} over {len(everyone)} episodes")
    return 0


if __name__ == "__main__":
    sys.exit(main())
