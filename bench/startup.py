"""Start-up: from the shell command to the first trajectory at the coordinator, part by part.

Runs `python train.py --total-steps 1` as a user would, several times, and reads the start-up
line the coordinator prints (imports and checks | processes and rendezvous | learner | actors and
first rollout). The baseline, measured in the same run: `python -c "import torch"`, the floor of
any process that uses torch.

    python bench/startup.py --runs 5
"""

from __future__ import annotations

import argparse
import re
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
TARGET = 2.0  # issue 28: command to first rollout


def torch_import_seconds() -> float:
    start = time.perf_counter()
    subprocess.run([sys.executable, "-c", "import torch"], check=True)
    return time.perf_counter() - start


def one_start(extra: list[str]) -> tuple[float, dict[str, float]]:
    with tempfile.TemporaryDirectory() as logdir:
        out = subprocess.run([sys.executable, str(ROOT / "train.py"), "--total-steps", "1", "--logdir", logdir,
                              "--run-name", "startup", *extra], capture_output=True, text=True, cwd=ROOT)
    m = re.search(r"start-up: ([\d.]+)s from the command to the first rollout \((.*)\)", out.stdout)
    if out.returncode != 0 or not m:
        sys.stderr.write(out.stdout[-2000:] + out.stderr[-3000:])
        raise SystemExit("startup: train.py failed")
    parts = {name.strip(): float(sec) for name, sec in re.findall(r"([a-z ]+) ([\d.]+)s", m.group(2))}
    return float(m.group(1)), parts


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--runs", type=int, default=5)
    p.add_argument("train_args", nargs=argparse.REMAINDER, help="extra train.py flags, after --")
    args = p.parse_args()
    extra = [a for a in args.train_args if a != "--"]
    floor = statistics.median(torch_import_seconds() for _ in range(min(3, args.runs)))
    runs = [one_start(extra) for _ in range(args.runs)]
    total = statistics.median(t for t, _ in runs)
    print(f"python -c 'import torch' (baseline): {floor:.2f}s")
    for name in runs[0][1]:
        print(f"  {name:<28} {statistics.median(parts[name] for _, parts in runs):.2f}s (median of {args.runs})")
    print(f"command -> first rollout: median {total:.2f}s (min {min(t for t, _ in runs):.2f}, max {max(t for t, _ in runs):.2f})")
    print(f"ratio start-up / torch import: {total / floor:.2f}")
    print(f"ratio start-up / {TARGET:g}s target: {total / TARGET:.2f} (target <= 1.00)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
