"""How a run ended: the one schema of runs/<run>/result.json, written by rank 0 and read by
`marl.train()`, the benches and sweeps. No other module lists these fields."""

from __future__ import annotations

import dataclasses
import json
from dataclasses import dataclass
from pathlib import Path

RESULT_FILE = "result.json"
WINDOW = 100  # episodes in the "mean return" that decides when a run is solved (Gymnasium's convention)


@dataclass
class Result:
    """What `python train.py` prints last, as values."""

    reason: str  # "target" (the mean return reached --target-return), "budget" (--total-steps spent), or
    # "heal" (an actor failed: every process starts again from the checkpoint; never saved)
    global_step: int  # agent-steps in all, resumed runs included
    steps: int  # taken by this process: fewer than global_step after a resume
    seconds: float  # its training time, from the first rollout
    mean_return: float | None  # of the last WINDOW episodes
    lost_actors: int  # dropped and not healed
    iterations: int
    run_dir: Path | None = None  # where it was read from (not saved)

    @property
    def solved(self) -> bool:
        return self.reason == "target"


def save(run_dir: Path, result: Result) -> Path:
    path = Path(run_dir) / RESULT_FILE
    fields = {f.name: getattr(result, f.name) for f in dataclasses.fields(Result) if f.name != "run_dir"}
    path.write_text(json.dumps(fields) + "\n")
    return path


def load(run_dir: Path) -> Result:
    """The result a finished run saved; FileNotFoundError if the run did not finish."""
    run_dir = Path(run_dir)
    done = json.loads((run_dir / RESULT_FILE).read_text())
    names = {f.name for f in dataclasses.fields(Result)} - {"run_dir"}
    return Result(**{k: v for k, v in done.items() if k in names}, run_dir=run_dir)
