"""Train agents with PPO on RPC actors and an FSDP2 learner: `python train.py --agents 8`."""

from __future__ import annotations

import dataclasses
import os
import sys


def main(argv: list[str] | None = None) -> int:
    from marl.config import UsageError, parse_args, validate

    try:
        cfg = parse_args(argv)
        import torch

        from envs.registry import EnvError, describe

        try:
            cfg = validate(cfg, gpus=torch.cuda.device_count())
            info = describe(cfg.env, cfg.agents)
        except EnvError as e:
            raise UsageError(str(e)) from None
        if cfg.target_return is None and info.reward_threshold is not None:
            cfg = dataclasses.replace(cfg, target_return=float(info.reward_threshold))
        from marl.launch import launch

        return launch(cfg, info)
    except UsageError as e:
        print(f"error: {e}", file=sys.stderr)
        return 2


if __name__ == "__main__":
    code = main()
    # Every process has been joined and every log flushed by now: leave as marl.launch.exit_now
    # does, without importing it (a usage error must not wait for torch's import).
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(code)
