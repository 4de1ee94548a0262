"""Helpers for tests that start real processes: every process a test starts is ended by the test."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import uuid
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent


def processes_with_token(token: str) -> list[int]:
    """Live PIDs whose environment carries `token`: the processes one test started, and only those.

    Zombies are dead already (in a container whose PID 1 does not reap, orphans stay zombies).
    """
    needle = f"MARL_TEST_TOKEN={token}".encode()
    pids = []
    for d in Path("/proc").iterdir():
        if d.name.isdigit() and int(d.name) != os.getpid():
            try:
                state = (d / "stat").read_text().rsplit(")", 1)[1].split()[0]
                if state != "Z" and needle in (d / "environ").read_bytes().split(b"\0"):
                    pids.append(int(d.name))
            except OSError:
                pass
    return pids


def kill_all(pids: list[int]) -> None:
    for pid in pids:
        try:
            os.kill(pid, signal.SIGKILL)
        except ProcessLookupError:
            pass


def read_scalars(run_dir: Path) -> dict[str, list[tuple[int, float]]]:
    """Every scalar of a run, read back with TensorBoard's own event reader."""
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    acc = EventAccumulator(str(run_dir), size_guidance={"scalars": 0})
    acc.Reload()
    return {tag: [(e.step, e.value) for e in acc.Scalars(tag)] for tag in acc.Tags()["scalars"]}


class TrainRunner:
    """Runs `train.py` as a user would, tagging every process of the run so that none can hide."""

    def __init__(self, tmp_path: Path):
        self.token = uuid.uuid4().hex
        self.logdir = tmp_path / "runs"
        self.extra_env: dict[str, str] = {}  # e.g. PYTHONPATH for a user's own network module

    def env(self) -> dict:
        return {**os.environ, "MARL_TEST_TOKEN": self.token, "PYTHONUNBUFFERED": "1", **self.extra_env}

    def __call__(self, *args: str, timeout: float = 300, logdir: bool = True) -> subprocess.CompletedProcess:
        cmd = [sys.executable, str(ROOT / "train.py"), *(("--logdir", str(self.logdir)) if logdir else ()), *args]
        return subprocess.run(cmd, env=self.env(), capture_output=True, text=True, timeout=timeout, cwd=ROOT)

    def start(self, *args: str) -> subprocess.Popen:
        cmd = [sys.executable, str(ROOT / "train.py"), "--logdir", str(self.logdir), *args]
        # As from a terminal: SIGINT at its default, even where this test runner was started with it
        # ignored (as shells do for background jobs), or Ctrl-C could not be tested.
        return subprocess.Popen(cmd, env=self.env(), stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, cwd=ROOT,
                                preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL))

    def survivors(self) -> list[int]:
        return processes_with_token(self.token)


@pytest.fixture
def train(tmp_path):
    runner = TrainRunner(tmp_path)
    try:
        yield runner
    finally:
        kill_all(runner.survivors())
