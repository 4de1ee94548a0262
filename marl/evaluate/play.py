"""Playing a policy on one env copy and scoring each agent: `play` runs marl.runner's EnvRunner with
an action source (marl.sources) until every agent has finished its episodes."""

from __future__ import annotations

from pathlib import Path

import torch

from marl.recorders import FrameRecorder, ReturnsRecorder
from marl.runner import EnvRunner
from marl.sources import PolicySource, RandomSource


def play(info, specs, source, episodes: int, seed: int, video: bool = False,
         film_only: bool = False) -> tuple[dict[str, list[float]], list[list]]:
    """Each agent's returns over its first `episodes` whole episodes on one env copy, every policy's
    actions from `source` (an ActionSource: `policy_actor`, `random_actor`, ...). Rewards count from an
    agent's first move to its episode's end, also while it waits for its turn (a turn-based game's
    loser gets its -1 at the winner's move). With `video`, also the frames of the rendered env's first
    `episodes` episodes (FrameRecorder), else []; `film_only` stops as soon as those are filmed."""
    from envs import make_agent_batch
    from marl.evaluate.filming import rendering_batch

    groups = [list(s.agents) for s in specs]
    env = rendering_batch(info, groups) if video else make_agent_batch(info, 1, groups)
    runner = EnvRunner(env, specs, 1, name=info.env_id, turn_based=info.turn_based)
    returns = ReturnsRecorder(specs)
    frames = FrameRecorder(env, episodes) if video else None
    runner.reset(seed)
    if frames is not None:
        frames.grab()
    with torch.inference_mode():
        runner.run(source, [returns] + ([frames] if frames else []), quota=episodes,
                   until=(lambda: frames.full) if film_only else None)
    env.close()
    return returns.by_agent(info.agent_ids), frames.done if frames else []


def policy_actor(model, specs, seed: int, sample: bool) -> PolicySource:
    """The networks (the actor alone) on one env copy: their most likely actions, or sampled ones."""
    return PolicySource(model, specs, 1, torch.Generator().manual_seed(seed), greedy=not sample, critic=False)


def random_actor(seed: int, specs) -> RandomSource:
    """Uniformly random (legal) actions on one env copy (marl.sources.RandomSource)."""
    return RandomSource(specs, 1, torch.Generator().manual_seed(seed))


def load_run(run_dir: Path):
    """A run's exported policy and its env: (model, specs, policy.pt's metadata, EnvInfo)."""
    from envs import describe
    from marl.policy_file import load_policy

    model, specs, meta = load_policy(run_dir / "policy.pt")
    info = describe(meta["env"], meta["agents"], meta["env_kwargs"], tuple(meta["obs_keys"]), tuple(meta["wrappers"]))
    return model, specs, meta, info


def evaluate(run_dir: Path, episodes: int, seed: int, sample: bool, video: bool = False, run=None):
    """Play the run's exported policy: its most likely actions, or sampled ones -> (returns, frames).
    `run`: what `load_run(run_dir)` gives, if already loaded."""
    model, specs, _, info = run or load_run(run_dir)
    return play(info, specs, policy_actor(model, specs, seed, sample), episodes, seed, video)


def random_returns(info, specs, episodes: int, seed: int) -> dict[str, list[float]]:
    """The baseline a trained policy must beat: every agent acting at random."""
    return play(info, specs, random_actor(seed, specs), episodes, seed)[0]
