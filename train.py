"""Train agents with PPO on RPC actors and an FSDP2 learner: `python train.py --agents 8`."""

from __future__ import annotations

import os
import sys


def main(argv: list[str] | None = None) -> int:
    # torch's C++ warnings are TensorPipe's "pipe closed" / "EOF" at every normal stop and dropped
    # actor, which say nothing a user can act on; marl reports those events itself. Read when torch
    # loads, so set before it is imported; TORCH_CPP_LOG_LEVEL=WARNING shows them again.
    os.environ.setdefault("TORCH_CPP_LOG_LEVEL", "ERROR")
    from marl.config import UsageError, parse_values
    from marl.run import prepare

    try:
        cfg, info = prepare(parse_values(argv))
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
