"""Play an exported policy and report each agent's returns: `python -m marl.evaluate runs/<run>`.

Each agent plays until it has finished --episodes whole episodes; actions are the policy's most
likely ones unless --sample is given. `--video DIR` also writes each episode of the rendered env
(the first agent's, for N independent copies of a Gymnasium env) as DIR/episode_000.mp4, ...
Exit code 2, with one line, for a mistyped flag, a run without a policy or a video that cannot be made.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

from marl.config import UsageError, _Parser, unknown_flag
from marl.evaluate.play import evaluate, load_run
from marl.evaluate.versus import pool_ids, versus
from marl.recorders import RenderError


def build_parser() -> argparse.ArgumentParser:
    p = _Parser(prog="python -m marl.evaluate", description=__doc__, allow_abbrev=False)
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
    return p


def parse(argv: list[str] | None) -> argparse.Namespace:
    """The flags, or UsageError (one line) naming a mistyped flag and the one it is closest to, as train.py does."""
    parser = build_parser()
    args, unknown = parser.parse_known_args(argv)
    flags = [a.split("=", 1)[0] for a in unknown if a.startswith("--")]
    if flags:
        raise unknown_flag(parser, flags[0])
    if unknown:
        raise UsageError(f"unexpected argument {unknown[0]!r}: one run directory, every value after its flag (see --help)")
    if args.episodes < 1:
        raise UsageError(f"--episodes must be at least 1, got {args.episodes}")
    if not (Path(args.run_dir) / "policy.pt").is_file():
        raise UsageError(f"{args.run_dir} has no policy.pt; give a run directory that train.py wrote (under --logdir)")
    try:
        args.pool_ids = pool_ids(args.pool_ids) if args.pool_ids else None
    except ValueError:
        raise UsageError(f"--pool-ids takes snapshot ids like 0-4 or 0,5,9, got {args.pool_ids!r}") from None
    if args.pool_ids and args.opponent != "pool":
        raise UsageError("--pool-ids picks the snapshots of --opponent pool; add --opponent pool")
    return args


def main(argv: list[str] | None = None) -> int:
    from marl import video
    from marl.models import ModelError

    try:
        args = parse(argv)
    except UsageError as e:
        print(f"error: {e}", file=sys.stderr)
        return 2
    import torch

    torch.set_num_threads(1)  # batches of one env copy: threads cost more than they give (4x on 2 cores)
    run_dir = Path(args.run_dir)
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
        table = versus(run_dir, args.opponent, args.episodes, args.seed, args.sample, run, args.pool_ids) if args.opponent else None
    except UsageError as e:
        print(f"error: {e}", file=sys.stderr)
        return 2
    agents = {a: {"mean": sum(r) / len(r), "min": min(r), "max": max(r), "episodes": len(r)} for a, r in results.items()}
    if args.json:
        print(json.dumps({"run": str(run_dir), "agents": agents,
                          **({"opponent": args.opponent, "seats": table} if table is not None else {})}))
        return 0
    everyone = [x for r in results.values() for x in r]
    # With --opponent the table below is the answer; the per-agent block is the policy against itself.
    indent = "  " if table is not None else ""
    if table is not None:
        print("this policy on every agent (self-play):")
    for agent, r in agents.items():
        print(f"{indent}{agent}: mean {r['mean']:8.1f} | min {r['min']:8.1f} | max {r['max']:8.1f} | {r['episodes']} episodes")
    print(f"{indent}all agents: mean {sum(everyone) / len(everyone):.1f} over {len(everyone)} episodes")
    for side, row in (table or {}).items():
        score = (f"win {row['win']:6.1%} | draw {row['draw']:6.1%} | loss {row['loss']:6.1%}" if "win" in row
                 else f"mean return {row['mean_return']:8.1f}")
        print(f"{side} (this policy) vs {args.opponent}: {score} over {row['games']} games")
    return 0
