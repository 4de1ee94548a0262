"""bench/atari_throughput.py runs at its --smoke size and prints each of its four measurements with
its ratio. No timing is asserted: the figures are the script's job, on a quiet machine."""

from __future__ import annotations

import importlib.util
import os
import re
import subprocess
import sys
import time

import pytest

from tests.conftest import ROOT, kill_all, processes_with_token

RATIO = r"\d+\.\d\d"


def test_atari_bench_smoke():
    pytest.importorskip("ale_py")
    token = f"bench-atari-{os.getpid()}"
    env = {**os.environ, "MARL_TEST_TOKEN": token}
    try:
        r = subprocess.run([sys.executable, "bench/atari_throughput.py", "--smoke"], capture_output=True, text=True,
                           timeout=300, cwd=ROOT, env=env)
        assert r.returncode == 0, r.stdout[-2000:] + r.stderr[-3000:]
        out = r.stdout
        # 1. Gymnasium's AtariPreprocessing needs opencv, which no extra of this project installs:
        # without it the bench still runs and says why that ratio is missing.
        if importlib.util.find_spec("cv2") is not None:
            assert re.search(rf"ratio ale_py / Gymnasium: {RATIO}\b", out), out
        else:
            assert re.search(r"ratio ale_py / Gymnasium: n/a \(.*opencv", out), out
        assert re.search(r"ale_py AtariVectorEnv .*\d", out), out
        # 2. the one-process roofline
        assert re.search(rf"ratio update samples/s / collect agent-steps/s: {RATIO}\b", out), out
        # 3. marl through launch, against the roofline
        assert re.search(rf"ratio marl collection / roofline collect: {RATIO}\b", out), out
        assert re.search(rf"ratio marl training / roofline PPO iteration: {RATIO}\b", out), out
        # 4. bytes per rollout, uint8 frames against float32 ones
        m = re.search(rf"ratio float32 / uint8: ({RATIO})\b", out)
        assert m, out
        assert 3.5 < float(m.group(1)) <= 4.0  # bytes, not timing: the frames are most of a rollout
        assert "counted with torch RPC's pickler" in out or "counted with torch.save" in out, out
        # The bench has exited; its actor processes may take a moment more to be reaped on a loaded machine.
        deadline = time.monotonic() + 15
        while processes_with_token(token) and time.monotonic() < deadline:
            time.sleep(0.2)
        assert not processes_with_token(token)
    finally:
        kill_all(processes_with_token(token))
