"""What the benches share: `python train.py` run as a user runs it, and how it ended read from the
result.json it wrote (marl.result), never from its console text."""

from __future__ import annotations

import json
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from marl.result import Result, load  # noqa: E402


@dataclass
class Finished:
    result: Result | None  # None when train.py failed (`check=False`)
    wall: float  # seconds from the command to its exit, start-up included
    returncode: int
    stdout: str  # for what result.json does not hold (the start-up line, the progress lines)


def run_train(args: list[str], run_dir: Path, check: bool = True) -> Finished:
    """`train.py *args` with its logs in `run_dir` (--logdir its parent, --run-name its name). A
    failed run ends the bench with the run's last output, unless `check` is False."""
    run_dir = Path(run_dir)
    cmd = [sys.executable, str(ROOT / "train.py"), *args, "--logdir", str(run_dir.parent), "--run-name", run_dir.name]
    start = time.perf_counter()
    proc = subprocess.run(cmd, capture_output=True, text=True, cwd=ROOT)
    wall = time.perf_counter() - start
    if proc.returncode != 0:
        sys.stderr.write(proc.stdout[-2000:] + proc.stderr[-3000:])
        if check:
            raise SystemExit(f"train.py {' '.join(args)} failed with exit code {proc.returncode}")
    return Finished(load(run_dir) if proc.returncode == 0 else None, wall, proc.returncode, proc.stdout)


def run_peer(cmd: list[str]) -> dict:
    """A peer program's run (bench/peers/, in its own venv): the JSON line it prints last, plus
    `process_wall`, its seconds from the command to its exit. A failure ends the bench."""
    start = time.perf_counter()
    out = subprocess.run(cmd, capture_output=True, text=True)
    if out.returncode != 0:
        raise SystemExit(f"{' '.join(cmd)} failed:\n{out.stderr[-3000:]}")
    return {**json.loads(out.stdout.strip().splitlines()[-1]), "process_wall": time.perf_counter() - start}
