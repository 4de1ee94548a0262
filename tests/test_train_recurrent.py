"""Recurrent policies end to end: memory is what solves CartPole without velocities, and recurrent
MAPPO runs with policy mapping, async collection, 2 learner ranks, a resume and an evaluation."""

from __future__ import annotations

import re
import subprocess
import sys

import pytest
import torch

from tests.conftest import ROOT, read_scalars

# bench/recurrent.py runs these settings on 5 seeds (README, "Memory results"); here one seed.
NOVEL = ("--env", "envs:CartPoleNoVel-v1", "--agents", "8", "--seed", "1", "--seq-len", "16", "--learning-rate", "1e-3")


def test_memory_solves_cartpole_without_velocities_and_no_memory_does_not(train):
    r = train(*NOVEL, "--core", "gru", "--run-name", "gru")
    assert r.returncode == 0, r.stderr[-3000:]
    assert re.search(r"^solved: ", r.stdout, re.M), r.stdout[-1500:]
    r = train(*NOVEL, "--core", "none", "--run-name", "none")
    assert r.returncode == 0, r.stderr[-3000:]
    m = re.search(r"without reaching the target \(mean return of the last 100 episodes: ([\d.]+)\)", r.stdout)
    assert m and float(m.group(1)) < 200, r.stdout[-1500:]  # the same budget, no memory: far from 475


def test_recurrent_mappo_with_mapping_async_two_learners_resume_and_evaluate(train):
    pytest.importorskip("mpe2")
    r = train("--env", "pettingzoo:mpe2.simple_speaker_listener_v4", "--env-kwargs", '{"max_cycles": 25}',
              "--policies", "per-agent", "--critic", "central", "--core", "lstm", "--core-size", "32",
              "--learners", "2", "--mode", "async", "--num-steps", "25", "--seq-len", "10", "--total-steps", "6000",
              "--run-name", "rmappo")
    assert r.returncode == 0, r.stderr[-3000:]
    scalars = read_scalars(train.logdir / "rmappo")
    assert {"losses/speaker_0/policy_loss", "losses/listener_0/value_loss"} <= scalars.keys()
    payload = torch.load(train.logdir / "rmappo" / "policy.pt", weights_only=True)
    assert payload["network"]["core"] == "lstm"
    assert any(".actor_core.cell." in k for k in payload["state_dict"])
    assert any(".critic_core.cell." in k for k in payload["state_dict"])  # the critic remembers on its own
    r = train("--resume", str(train.logdir / "rmappo"), "--total-steps", "9000")
    assert r.returncode == 0 and "resumed from" in r.stdout, r.stderr[-3000:]
    e = subprocess.run([sys.executable, "-m", "marl.evaluate", str(train.logdir / "rmappo"), "--episodes", "2"],
                       capture_output=True, text=True, timeout=120, cwd=ROOT)
    assert e.returncode == 0, e.stderr[-2000:]
    assert "speaker_0: mean" in e.stdout and "listener_0: mean" in e.stdout
