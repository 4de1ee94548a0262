"""Train agents with PPO on RPC actors and an FSDP2 learner: `python train.py --agents 8`."""

from __future__ import annotations

import gc
import os
import sys


def main(argv: list[str] | None = None) -> int:
    # torch's import makes some 10^5 objects, and the collector walked them again and again while they
    # were made: 0.14 s of its 1.1 s (docs/results/index.md). Nothing made here is garbage to collect.
    gc.disable()
    from marl.config import UsageError, parse_values
    from marl.run import prepare

    try:
        cfg, info = prepare(parse_values(argv))
        from marl.launch import launch

        gc.enable()  # before any process is born: each inherits a working collector (marl.launch.run_rank)
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
