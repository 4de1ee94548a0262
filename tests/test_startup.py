"""The start-up line of a run started from Python counts from its own marl.train() call."""

from __future__ import annotations

import re
import subprocess
import sys

from tests.conftest import ROOT

SCRIPT = """
import time
import marl
import torch  # noqa: F401 - imported before the sleep, as in a notebook that already ran torch
time.sleep(4)  # a notebook's kernel, started long before the run
for name in ("first", "second"):
    marl.train(logdir=sys.argv[1], run_name=name, agents=2, total_steps=3000, target_return=1e9)
"""


def test_each_train_call_counts_its_start_up_from_its_own_call(train, tmp_path):
    r = subprocess.run([sys.executable, "-c", "import sys\n" + SCRIPT, str(tmp_path / "runs")], env=train.env(),
                       capture_output=True, text=True, timeout=300, cwd=ROOT)
    assert r.returncode == 0, r.stderr[-2000:]
    lines = [line for line in r.stdout.splitlines() if line.startswith("start-up: ")]
    checks = [float(re.search(r"imports and checks (\d+\.\d+)s", line).group(1)) for line in lines]
    assert len(checks) == 2, r.stdout[-2000:]
    # Neither the sleep before the first call nor the whole first run before the second.
    assert all(c < 3.5 for c in checks), lines
