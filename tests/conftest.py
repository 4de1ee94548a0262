"""Helpers for tests that start real processes: every process a test starts is ended by the test."""

from __future__ import annotations

import contextlib
import importlib
import io
import multiprocessing
import os
import signal
import subprocess
import sys
import tempfile
import traceback
import uuid
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent


def processes_with_token(token: str | None, sessions: tuple[int, ...] = ()) -> list[int]:
    """Live PIDs whose environment carries `token`, or in one of `sessions`: the processes one test
    started, and only those (a run forked by TrainRunner leads a session of its own; the environment
    a process shows in /proc is the one it was exec'd with).

    Zombies are dead already (in a container whose PID 1 does not reap, orphans stay zombies).
    """
    needle = f"MARL_TEST_TOKEN={token}".encode() if token else None
    pids = []
    for d in Path("/proc").iterdir():
        if d.name.isdigit() and int(d.name) != os.getpid():
            try:
                stat = (d / "stat").read_text().rsplit(")", 1)[1].split()
                if stat[0] != "Z" and (int(stat[3]) in sessions or needle and needle in (d / "environ").read_bytes().split(b"\0")):
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


# What `python train.py` and `python -m marl.evaluate` import, imported once by each test worker's fork
# server (torch._dynamo too: a sharded learner imports it, and bench/ and some tests' own code).
PRELOAD = ["torch", "torch._dynamo", "torch.distributed.fsdp", "torch.distributed.checkpoint", "torch.distributed.rpc",
           "gymnasium", "numpy", "torch.utils.tensorboard", "envs", "marl.launch", "marl.coordinator", "marl.learner",
           "marl.actor", "marl.evaluate.cli", "train", "tests.conftest"]


def _forkserver():
    ctx = multiprocessing.get_context("forkserver")
    ctx.set_forkserver_preload(PRELOAD)  # read when the server starts, at the first run of this worker
    return ctx


ENTRIES = {"train": ("train.py", "train", "main"), "evaluate": ("-m marl.evaluate", "marl.evaluate.cli", "main")}


def _run_main(entry: str, argv: list[str], env: dict[str, str], out: str, err: str) -> None:
    """In a child of the fork server: become `python train.py ARGV` (or `python -m marl.evaluate
    ARGV`) started from ROOT with `env`, its output in the files `out` and `err`, as the leader of a
    session of its own (which the test ends)."""
    code: object = 1
    try:
        os.setsid()
        signal.signal(signal.SIGINT, signal.default_int_handler)  # as a python started from a terminal
        signal.signal(signal.SIGTERM, signal.SIG_DFL)
        os.environ.clear()
        os.environ.update(env)
        sys.path[:0] = [p for p in env.get("PYTHONPATH", "").split(os.pathsep) if p]
        os.chdir(ROOT)
        for fd, path in ((1, out), (2, err)):
            f = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
            os.dup2(f, fd)
            os.close(f)
        sys.stdout = io.TextIOWrapper(io.FileIO(1, "w", closefd=False), write_through=True)
        sys.stderr = io.TextIOWrapper(io.FileIO(2, "w", closefd=False), write_through=True)
        program, module, function = ENTRIES[entry]
        sys.argv = [program, *argv]
        code = getattr(importlib.import_module(module), function)(argv)
    except SystemExit as e:  # argparse's --help and its usage errors; as the interpreter, a message goes to stderr
        code = e.code
        if not isinstance(code, int) and code is not None:
            print(code, file=sys.stderr)
    except BaseException:
        traceback.print_exc()
    finally:
        try:
            sys.stdout.flush()
            sys.stderr.flush()
        finally:
            os._exit(code if isinstance(code, int) else 0 if code is None else 1)


def run_forked(entry: str, argv: list[str], env: dict[str, str], timeout: float,
               sessions: list[int] | None = None) -> subprocess.CompletedProcess:
    """`python train.py ARGV` or `python -m marl.evaluate ARGV` (`entry`), as a child of a fork server
    that has imported torch and marl once per test worker: the same code from the program's `main` on,
    in a process of its own with its own output, without paying the 3-6 s of imports (a 2-core
    machine's) that most short runs are made of. On a timeout every process of its session is killed;
    a session with processes left when it returns goes into `sessions`, for the test to end."""
    with tempfile.TemporaryDirectory() as tmp:
        out, err = Path(tmp) / "stdout", Path(tmp) / "stderr"
        proc = _forkserver().Process(target=_run_main, args=(entry, argv, env, str(out), str(err)))
        # The server, started by a worker's first run, finds tests.conftest from its working directory.
        with contextlib.chdir(ROOT):
            proc.start()
        proc.join(timeout)
        timed_out = proc.exitcode is None
        if timed_out:
            kill_all(processes_with_token(None, (proc.pid,)))
            proc.join()
        # A session's id may be another run's once none of its processes is left: keep only live ones.
        if sessions is not None and processes_with_token(None, (proc.pid,)):
            sessions.append(proc.pid)
        stdout, stderr = (f.read_text() if f.exists() else "" for f in (out, err))
    cmd = [sys.executable, *ENTRIES[entry][0].split(), *argv]
    if timed_out:
        raise subprocess.TimeoutExpired(cmd, timeout, stdout, stderr)
    return subprocess.CompletedProcess(cmd, proc.exitcode, stdout, stderr)


def evaluate_cli(argv: list[str], timeout: float = 300, env: dict[str, str] | None = None) -> subprocess.CompletedProcess:
    """`python -m marl.evaluate ARGV` (see run_forked), with this process's environment unless `env`."""
    return run_forked("evaluate", argv, env or dict(os.environ), timeout)


class TrainRunner:
    """Runs `train.py` as a user would (its `main`, see `__call__`; `start` execs it), tagging every process
    of the run so that none can hide."""

    def __init__(self, tmp_path: Path):
        self.token = uuid.uuid4().hex
        self.logdir = tmp_path / "runs"
        self.extra_env: dict[str, str] = {}  # e.g. PYTHONPATH for a user's own network module
        self.sessions: list[int] = []  # of the runs it forked

    def env(self) -> dict:
        return {**os.environ, "MARL_TEST_TOKEN": self.token, "PYTHONUNBUFFERED": "1", **self.extra_env}

    def __call__(self, *args: str, timeout: float = 300, logdir: bool = True) -> subprocess.CompletedProcess:
        """`python train.py ARGS` (see run_forked)."""
        argv = [*(("--logdir", str(self.logdir)) if logdir else ()), *args]
        return run_forked("train", argv, self.env(), timeout, self.sessions)

    def start(self, *args: str) -> subprocess.Popen:
        cmd = [sys.executable, str(ROOT / "train.py"), "--logdir", str(self.logdir), *args]
        # As from a terminal: SIGINT at its default, even where this test runner was started with it
        # ignored (as shells do for background jobs), or Ctrl-C could not be tested.
        return subprocess.Popen(cmd, env=self.env(), stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, cwd=ROOT,
                                preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL))

    def survivors(self) -> list[int]:
        return processes_with_token(self.token, tuple(self.sessions))


@pytest.fixture
def train(tmp_path):
    runner = TrainRunner(tmp_path)
    try:
        yield runner
    finally:
        kill_all(runner.survivors())
