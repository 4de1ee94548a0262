"""Two torchrun "nodes" on loopback: two agents started as separate process trees, rendezvous over
c10d, FSDP2 over gloo across both, a node-1 actor SIGKILLed mid-run, and a second launch resuming."""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
import time

import torch

from marl import result
from marl.config import load_toml
from tests.conftest import ROOT, read_scalars

# On equal nodes each node's first local ranks are learners: node 0 runs learner0 and actor0, node 1
# learner1 and actor1, so the learner group spans both nodes and both step envs.
NPROC = (2, 2)


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def start_nodes(train, run: str, *args: str, max_restarts: int = 0) -> list[subprocess.Popen]:
    port = free_port()
    nodes = []
    for node, nproc in enumerate(NPROC):
        cmd = [sys.executable, "-m", "torch.distributed.run", "--nnodes", "2", "--node-rank", str(node),
               "--nproc-per-node", str(nproc), "--rdzv-backend", "c10d", "--rdzv-endpoint", f"127.0.0.1:{port}",
               "--rdzv-id", f"{run}-{port}", "--max-restarts", str(max_restarts), "--monitor-interval", "0.5",
               str(ROOT / "train.py"), "--learners", "2", "--actors", "2", "--logdir", str(train.logdir),
               "--run-name", run, *args]
        nodes.append(subprocess.Popen(cmd, env=train.env(), stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                                      cwd=ROOT, start_new_session=True))  # each node a process tree of its own
    return nodes


def end_nodes(nodes: list[subprocess.Popen]) -> None:
    for p in nodes:
        if p.poll() is None:
            os.killpg(p.pid, signal.SIGKILL)


def finish(nodes: list[subprocess.Popen], timeout: float = 240) -> str:
    """Node 0's stdout, once both nodes have exited 0; both trees are ended whatever happens."""
    try:
        outs = [p.communicate(timeout=timeout) for p in nodes]
    finally:
        end_nodes(nodes)
    assert all(p.returncode == 0 for p in nodes), "".join(err[-3000:] for _, err in outs)
    return outs[0][0]


def children(pid: int) -> dict[int, str]:
    found = {}
    for d in os.listdir("/proc"):
        if d.isdigit():
            try:
                stat = open(f"/proc/{d}/stat").read()
            except OSError:
                continue
            rest = stat.rsplit(")", 1)[1].split()
            if int(rest[1]) == pid and rest[0] != "Z":
                found[int(d)] = stat[stat.index("(") + 1:stat.rindex(")")]
    return found


def test_two_nodes_heal_a_killed_actor_then_a_second_launch_resumes(train):
    run = train.logdir / "nodes"
    nodes = start_nodes(train, "nodes", "--target-return", "150", "--checkpoint-every", "3", max_restarts=1)
    try:
        # Each agent is the parent of its node's workers; kill node 1's actor once training is under way.
        deadline, victim = time.monotonic() + 120, None
        while time.monotonic() < deadline and victim is None:
            ckpts = list((run / "checkpoints").glob("iter_*")) if (run / "checkpoints").is_dir() else []
            workers = children(nodes[1].pid)
            if ckpts and "marl-actor1" in workers.values():
                assert sorted(children(nodes[0].pid).values()) == ["marl-actor0", "marl-learner0"]
                assert sorted(workers.values()) == ["marl-actor1", "marl-learner1"]
                victim = next(pid for pid, name in workers.items() if name == "marl-actor1")
            time.sleep(0.2)
        assert victim is not None, "node 1 never ran actor1 past a checkpoint"
        os.kill(victim, signal.SIGKILL)
        out0 = finish(nodes)
    finally:
        end_nodes(nodes)
    assert "marl: torchrun restart 1: resuming from " in out0
    assert "solved: mean return" in out0 and "reached 150 at step" in out0
    assert torch.load(sorted((run / "checkpoints").iterdir())[-1] / "trainer.pt", weights_only=True)["learners"] == 2
    assert not train.survivors()
    first = read_scalars(run)["charts/SPS"]
    assert read_scalars(run)["perf/restarts"][-1][1] == 1

    # A second two-node launch goes on from the newest checkpoint, to a higher target: above the mean
    # the first one ended at, which can be far past 150. A world healed from an early checkpoint starts
    # every env copy at once, and once its policy is good they reach the 500-step limit together: seen
    # here as 100.4 -> 305.3 in one iteration, when the heal came after iteration 5.
    target = max(200, int(result.load(run).mean_return) + 20)
    out0 = finish(start_nodes(train, "nodes", "--resume", str(run), "--target-return", str(target)))
    assert f"resumed from {run / 'checkpoints'}" in out0 and f"reached {target} at step" in out0
    steps = [s for s, _ in read_scalars(run)["charts/SPS"]]
    assert steps[:len(first)] == [s for s, _ in first] and steps == sorted(set(steps)) and len(steps) > len(first)
    assert load_toml(str(run / "config.toml"))["target_return"] == target
    assert not train.survivors()
