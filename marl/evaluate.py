"""Play an exported policy and report each agent's returns: `python -m marl.evaluate runs/<run>`.

Each agent plays until it has finished --episodes whole episodes; actions are the policy's most
likely ones unless --sample is given. `--video DIR` also writes each episode of the rendered env
(the first agent's, for N independent copies of a Gymnasium env) as DIR/episode_000.mp4, ...
Exit code 2, with one line, if the run has no policy or the video cannot be made.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import sys
from pathlib import Path


class Frames:
    """The rendered env's frames, cut into whole episodes: the first frame of each is its reset's, then
    one per step, so an episode of L steps has L + 1 frames (envs' `render()`, `rendered_episode_over`)."""

    def __init__(self, env, episodes: int):
        self.env, self.episodes = env, episodes
        self.done: list[list] = []
        self.current: list = []

    def grab(self) -> None:
        if len(self.done) >= self.episodes:
            return
        try:
            frame = self.env.render()
        except Exception as e:  # noqa: BLE001 - each renderer fails its own way (MuJoCo without OpenGL, ...)
            raise RenderError(f"render() failed ({type(e).__name__}: {' '.join(str(e).split())})") from None
        if frame is None or getattr(frame, "ndim", 0) != 3:
            raise RenderError(f"render() gave {type(frame).__name__}, not an (H, W, 3) frame")
        self.current.append(frame)
        if self.env.rendered_episode_over:
            self.done.append(self.current)
            self.current = []


class RenderError(Exception):
    """The env cannot give rgb_array frames; the message is one line."""


def rendering_batch(info, groups: list[list[int]]):
    """One copy of the env, built to give frames (render_mode="rgb_array"); RenderError if it won't build so."""
    from envs import make_agent_batch
    from marl.video import headless

    headless()
    filmed = dataclasses.replace(info, env_kwargs=tuple(sorted({**info.kwargs, "render_mode": "rgb_array"}.items())))
    try:
        return make_agent_batch(filmed, 1, groups)
    except (TypeError, ValueError) as e:
        raise RenderError(f"it does not build with render_mode='rgb_array' ({' '.join(str(e).split())})") from None


def _one_frame(info, reply) -> None:
    """In a child process: build the env to render, reset it, grab a frame; send "" or why not."""
    env = None
    try:
        groups = [list(range(len(info.agent_ids)))] if info.homogeneous else [[i] for i in range(len(info.agent_ids))]
        env = rendering_batch(info, groups)
        env.reset(seed=0)
        Frames(env, 1).grab()
        reply.send("")
    except RenderError as e:
        reply.send(str(e))
    finally:
        if env is not None:
            env.close()


def check_filmable(info, flag: str) -> None:
    """UsageError (one line) unless the env builds with render_mode="rgb_array" and gives a frame.
    Tried in a forked child: the process that asks forks the run's ranks next, and an OpenGL context
    (MuJoCo's EGL) made before a fork hangs the child that uses it."""
    import multiprocessing

    from marl.config import UsageError

    ctx = multiprocessing.get_context("fork")
    receive, send = ctx.Pipe(duplex=False)
    child = ctx.Process(target=_one_frame, args=(info, send), daemon=True)
    child.start()
    send.close()
    try:
        why = receive.recv() if receive.poll(120) else "no frame within 120 s"
    except EOFError:
        why = "the renderer crashed"
    child.join(5)
    if child.is_alive():
        child.kill()
    if why:
        raise UsageError(f"{flag}: {info.env_id} cannot be filmed: {why}")


def play(info, specs, act, episodes: int, seed: int, video: bool = False,
         film_only: bool = False) -> tuple[dict[str, list[float]], list[list]]:
    """Each agent's returns over its first `episodes` whole episodes, one env copy, actions from
    `act(spec, obs {leaf: [n_g, ...]}, mask [n_g, mask_size] or None, starts [n_g]) -> env actions [n_g, ...]`
    for each policy; `starts` says which agents begin an episode (a recurrent policy zeroes their state).
    With `video`, also the frames of the rendered env's first `episodes` episodes (`Frames`), else [];
    `film_only` stops as soon as those are filmed, whatever the other agents' returns."""
    import numpy as np
    import torch

    from envs import make_agent_batch
    from marl.models.core import fresh_after
    from marl.policies import policy_obs

    groups = [list(s.agents) for s in specs]
    env = rendering_batch(info, groups) if video else make_agent_batch(info, 1, groups)
    frames = Frames(env, episodes) if video else None
    obs = env.reset(seed=seed)
    if frames is not None:
        frames.grab()
    valid = [a.copy() for a in env.active]
    returns: list[list[float]] = [[] for _ in info.agent_ids]
    running = [np.zeros(a.shape) for a in valid]
    # In its episode: rewards count from its first move to its end, also while it waits for its
    # turn (a turn-based game's loser gets its -1 at the winner's move).
    playing = [np.zeros(a.shape, dtype=bool) for a in valid]
    fresh = [np.ones(a.shape, dtype=bool) for a in valid]
    limit = 100_000 * episodes  # an agent that never finishes an episode must not hang the evaluation
    with torch.inference_mode():
        for _ in range(limit):
            if min(len(r) for r in returns) >= episodes or (film_only and len(frames.done) >= episodes):
                break
            actions = []
            for g, spec in enumerate(specs):
                o = policy_obs(spec, {k: v[0] for k, v in obs[g].items()}, ())
                mask = env.masks[g]
                a = act(spec, o, None if mask is None else torch.from_numpy(mask[0]), torch.from_numpy(fresh[g][0]))
                actions.append(a.reshape(1, len(spec.agents), *spec.action.shape).numpy())
            for g in range(len(specs)):
                playing[g] |= valid[g]
            obs, rew, term, trunc, active = env.step(actions)
            if frames is not None:
                frames.grab()
            for g, spec in enumerate(specs):
                running[g] += np.where(playing[g], rew[g], 0.0)
                done = (term[g] | trunc[g]) & playing[g]
                for _, j in zip(*np.nonzero(done)):
                    returns[spec.agents[j]].append(float(running[g][0, j]))
                    running[g][0, j] = 0.0
                playing[g] &= ~done
                fresh[g] = fresh_after(valid[g], term[g])
                valid[g] = active[g].copy()
        else:
            raise RuntimeError(f"{info.env_id}: not every agent finished {episodes} episodes within {limit:,} steps")
    env.close()
    return {agent_id: r[:episodes] for agent_id, r in zip(info.agent_ids, returns)}, frames.done if frames else []


def policy_actor(model, specs, seed: int, sample: bool):
    """`act` for `play`: the networks' most likely actions, or sampled ones; recurrent states kept per policy."""
    import torch

    from marl import distributions

    generator = torch.Generator().manual_seed(seed)
    cores = {s.name: torch.zeros(len(s.agents), model.state_size(s.name)) for s in specs}

    def act(spec, obs, mask, starts):
        params, cores[spec.name] = model.policies[spec.name].act(obs, cores[spec.name], starts)
        pi = distributions.make(spec.action, params, mask)
        return distributions.env_action(pi, pi.sample(generator)[0] if sample else pi.mode())

    return act


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


def random_actor(seed: int):
    """`act` for `play`: uniformly random (legal) actions; Box: standard normal, then clipped by the env."""
    import torch

    from marl import distributions

    generator = torch.Generator().manual_seed(seed)

    def act(spec, obs, mask, starts):
        params = distributions.uniform_params(spec.action, len(spec.agents))
        pi = distributions.make(spec.action, params, mask)
        return distributions.env_action(pi, pi.sample(generator)[0])

    return act


def random_returns(info, specs, episodes: int, seed: int) -> dict[str, list[float]]:
    """The baseline a trained policy must beat: every agent acting at random (`random_actor`)."""
    return play(info, specs, random_actor(seed), episodes, seed)[0]


def side_actor(agents: tuple[int, ...], mine, theirs):
    """`act` for `play`: the agents in `agents` (indices in agent order) act by `mine`, every other agent by `theirs`."""
    import torch

    def act(spec, obs, mask, starts):
        a, b = mine(spec, obs, mask, starts), theirs(spec, obs, mask, starts)
        here = torch.tensor([i in agents for i in spec.agents]).view(-1, *[1] * (a.dim() - 1))
        return torch.where(here, a, b)

    return act


def outcomes(returns: list[float]) -> dict[str, float]:
    """A game's result by the sign of the seat's return: PettingZoo's classic games pay +1 / 0 / -1."""
    n = len(returns)
    return {"win": sum(r > 0 for r in returns) / n, "draw": sum(r == 0 for r in returns) / n,
            "loss": sum(r < 0 for r in returns) / n, "games": n}


def pool_ids(text: str) -> list[int]:
    """`--pool-ids`: "0-4", "0,3,5" or both ("0-2,7") -> the snapshot ids; ValueError if it is none of these."""
    ids: list[int] = []
    for part in text.split(","):
        first, _, last = part.strip().partition("-")
        ids.extend(range(int(first), int(last or first) + 1))
    return ids


def pool_of(run_dir: Path, ids=None) -> list[dict]:
    """The weights of the frozen snapshots in the pool of a run's newest checkpoint: all of them, or those
    of `ids` in that order; UsageError if it has no pool or lacks one of `ids`."""
    from marl import checkpoint
    from marl.config import UsageError

    newest = checkpoint.latest(run_dir)
    state = checkpoint.read_trainer(newest) if newest is not None else {}
    if "opponents" not in state:
        raise UsageError(f"--opponent pool: {run_dir} has no checkpoint with a pool of opponents; it trains "
                         f"one with --opponents pool")
    held = dict(zip(state["opponents"]["ids"], state["opponents"]["weights"]))
    if ids is None:
        return list(held.values())
    missing = [i for i in ids if i not in held]
    if missing:
        raise UsageError(f"--pool-ids: snapshot {missing[0]} is not in {run_dir}'s newest pool (it holds ids "
                         f"{min(held)}-{max(held)}; a larger --pool-size keeps more)")
    return [held[i] for i in ids]


def versus(run_dir: Path, opponent: str, games: int, seed: int, sample: bool, run=None,
           snapshot_ids: list[int] | None = None) -> dict[str, dict[str, float]]:
    """Each side in turn (a seat; a team where several policies play) played by the run's policy against
    `opponent` on every other side: "random"; "lookahead" (marl.heuristics, in the line games it knows);
    "pool": the frozen snapshots of the run's newest checkpoint (those of `snapshot_ids` if given); or another
    run's directory: its policy, for the same env. Per side: its mean return, and in a turn-based game its
    win / draw / loss rates. `run`: `load_run(run_dir)`, if already loaded."""
    from marl.config import UsageError
    from marl.policy_file import load_policy

    model, specs, meta, info = run or load_run(run_dir)
    if opponent == "random":
        theirs = random_actor(seed + 1)
    elif opponent == "lookahead":
        from marl.heuristics import LINE_GAMES, line_game, lookahead_actor

        if line_game(info.env_id) is None:
            raise UsageError(f"--opponent lookahead plays {' and '.join(LINE_GAMES)} only, not {info.env_id}")
        theirs = lookahead_actor(info.env_id, seed + 1)
    elif opponent == "pool":
        from marl.models import build_model

        snapshots = pool_of(run_dir, snapshot_ids or None)
        return versus_snapshots(info, specs, lambda: policy_actor(model, specs, seed, sample), snapshots,
                                build_model(specs, meta["network"]).eval(), games, seed)
    else:
        other = Path(opponent)
        if not (other / "policy.pt").is_file():
            raise UsageError(f"--opponent {opponent}: no policy.pt there; pass random, lookahead, pool or a run directory")
        other_model, other_specs, other_meta = load_policy(other / "policy.pt")
        if (other_meta["env"], other_meta["agent_ids"]) != (meta["env"], meta["agent_ids"]):
            raise UsageError(f"--opponent {opponent} was trained on {other_meta['env']}, not {meta['env']}")
        if [s.to_dict() for s in other_specs] != [s.to_dict() for s in specs]:
            raise UsageError(f"--opponent {opponent} maps its agents to other policies than {run_dir}")
        theirs = policy_actor(other_model, other_specs, seed + 1, sample)
    return versus_table(info, specs, lambda: policy_actor(model, specs, seed, sample), theirs, games, seed)


def versus_snapshots(info, specs, mine, snapshots: list[dict], model, games: int, seed: int) -> dict[str, dict[str, float]]:
    """`versus_table` against each frozen snapshot in turn (`model` takes each one's weights, sampling),
    about `games` games per side in all, split evenly; the means over all of them."""
    each = max(1, games // len(snapshots))
    totals: dict[str, dict[str, float]] = {}
    for k, weights in enumerate(snapshots):
        model.load_state_dict(weights)
        # The snapshots sample their moves, as when they play in training: greedy against greedy
        # would be one game, played `each` times.
        table = versus_table(info, specs, mine, policy_actor(model, specs, seed + 7 * k, True), each, seed + 7 * k)
        for side, row in table.items():
            t = totals.setdefault(side, dict.fromkeys(row, 0.0))
            for key, value in row.items():  # games add up; rates and means weigh by their games
                t[key] += value if key == "games" else value * row["games"]
    return {side: {k: v / t["games"] if k != "games" else int(v) for k, v in t.items()} for side, t in totals.items()}


def versus_table(info, specs, mine, theirs, games: int, seed: int) -> dict[str, dict[str, float]]:
    """For each side in turn (marl.policies.sides): `mine()` (a fresh `act`) on its agents, `theirs` on every
    other; the side's mean return per game (over its agents) and, in a turn-based game, its outcomes."""
    from marl.policies import sides

    table = {}
    for k, (name, agents) in enumerate(sides(specs, info.agent_ids)):
        returns = play(info, specs, side_actor(agents, mine(), theirs), games, seed + 1_000 * k)[0]
        per_game = [sum(r) / len(r) for r in zip(*(returns[info.agent_ids[i]] for i in agents))]
        table[name] = {"mean_return": sum(per_game) / len(per_game), "games": len(per_game),
                       **(outcomes(per_game) if info.turn_based else {})}
    return table


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m marl.evaluate", description=__doc__)
    p.add_argument("run_dir", help="a run directory, e.g. runs/CartPole-v1__1__1796000000")
    p.add_argument("--episodes", type=int, default=20, help="whole episodes per agent")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--sample", action="store_true", help="sample actions instead of taking the most likely (a greedy "
                   "policy can repeat one move forever where the observation does not change, as in MiniGrid)")
    p.add_argument("--video", metavar="DIR", default="", help="also write each episode of the rendered env (the first "
                   "agent's for N copies of a Gymnasium env) to DIR/episode_000.mp4, ... (pip install -e '.[video]')")
    p.add_argument("--video-format", choices=("mp4", "gif"), default="mp4", help="gif: animated pictures, e.g. for a README")
    p.add_argument("--opponent", default="", help="play each side in turn (a seat; a team where several policies "
                   "play) against `random` (uniformly random legal moves), `lookahead` (tic-tac-toe and connect four: "
                   "win if it can, block if it must, else random), `pool` (the frozen snapshots in the run's newest "
                   "checkpoint, --opponents pool: --episodes games per side split evenly among them) or another run's "
                   "policy (its directory) on the other sides, --episodes games per side, and print each side's mean "
                   "return and, in turn-based games, its win / draw / loss rates")
    p.add_argument("--pool-ids", default="", help="with --opponent pool: only these snapshots, by id (\"0-4\", "
                   "\"0,5,9\"): e.g. the first ones, to see whether the policy still beats its early selves")
    p.add_argument("--json", action="store_true", help="print one JSON object instead: per agent mean / min / max "
                   "return, and with --opponent a row per side")
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
    try:
        snapshot_ids = pool_ids(args.pool_ids) if args.pool_ids else None
    except ValueError:
        print(f"error: --pool-ids takes snapshot ids like 0-4 or 0,5,9, got {args.pool_ids!r}", file=sys.stderr)
        return 2
    if snapshot_ids and args.opponent != "pool":
        print("error: --pool-ids picks the snapshots of --opponent pool; add --opponent pool", file=sys.stderr)
        return 2
    from marl import video
    from marl.config import UsageError
    from marl.models import ModelError

    try:
        if args.video:
            video.require("--video")
        run = load_run(run_dir)
        results, episodes = evaluate(run_dir, args.episodes, args.seed, args.sample, bool(args.video), run)
    except ModelError as e:
        print(f"error: {run_dir}/policy.pt: {e}", file=sys.stderr)
        return 2
    except UsageError as e:
        print(f"error: {e}", file=sys.stderr)
        return 2
    except RenderError as e:
        print(f"error: --video: {run_dir}'s env cannot be filmed: {e}", file=sys.stderr)
        return 2
    if args.video:
        out = Path(args.video)
        out.mkdir(parents=True, exist_ok=True)
        for i, frames in enumerate(episodes):
            path = out / f"episode_{i:03d}.{args.video_format}"
            video.write(path, frames)
            print(f"video: {path} ({len(frames)} frames, {frames[0].shape[1]}x{frames[0].shape[0]})")
    try:
        table = (versus(run_dir, args.opponent, args.episodes, args.seed, args.sample, run, snapshot_ids)
                 if args.opponent else None)
    except UsageError as e:
        print(f"error: {e}", file=sys.stderr)
        return 2
    agents = {a: {"mean": sum(r) / len(r), "min": min(r), "max": max(r), "episodes": len(r)} for a, r in results.items()}
    if args.json:
        print(json.dumps({"run": str(run_dir), "agents": agents,
                          **({"opponent": args.opponent, "seats": table} if table is not None else {})}))
        return 0
    everyone = [x for r in results.values() for x in r]
    for agent, r in agents.items():
        print(f"{agent}: mean {r['mean']:8.1f} | min {r['min']:8.1f} | max {r['max']:8.1f} | {r['episodes']} episodes")
    print(f"all agents: mean {sum(everyone) / len(everyone):.1f} over {len(everyone)} episodes")
    for side, row in (table or {}).items():
        score = (f"win {row['win']:6.1%} | draw {row['draw']:6.1%} | loss {row['loss']:6.1%}" if "win" in row
                 else f"mean return {row['mean_return']:8.1f}")
        print(f"{side} (this policy) vs {args.opponent}: {score} over {row['games']} games")
    return 0


if __name__ == "__main__":
    sys.exit(main())
