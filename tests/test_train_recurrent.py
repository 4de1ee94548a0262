"""Recurrent policies end to end: memory is what balances CartPole without velocities, and recurrent
MAPPO runs with V-trace, policy mapping, async collection, 2 learner ranks, a resume and an evaluation."""

from __future__ import annotations

import re

import pytest
import torch

from tests.conftest import evaluate_cli, read_scalars

# bench/recurrent.py runs these settings on 5 seeds (README, "Memory results"); here one seed. With
# a GRU, seed 1 solves (a mean of 475 over the last 100 episodes) at 105,415 agent-steps; without
# memory, the same budget ends near 50.
NOVEL = ("--env", "envs:CartPoleNoVel-v1", "--agents", "8", "--seed", "1", "--seq-len", "16", "--learning-rate", "1e-3",
         "--norm-obs", "--norm-reward", "--total-steps", "150000")


def final_return(out: str) -> float:
    m = re.search(r"mean return of the last 100 episodes: ([\d.]+)\)", out)
    assert m, out[-1500:]
    return float(m.group(1))


def test_memory_is_what_balances_cartpole_without_velocities(train):
    """The same run with and without a GRU: only the one that remembers past positions (and so
    knows the velocities) balances the pole to 475; the other, given as many samples, stays near random
    (about 20-50)."""
    r = train(*NOVEL, "--core", "gru", "--run-name", "gru")
    assert r.returncode == 0, r.stderr[-3000:]
    solved = re.search(r"^solved: mean return .* reached 475 at step ([\d,]+) ", r.stdout, re.M)
    assert solved, r.stdout[-1500:]
    # Without memory, the same run given the samples the GRU solved with.
    r = train(*NOVEL, "--core", "none", "--total-steps", solved.group(1).replace(",", ""), "--run-name", "none")
    assert r.returncode == 0, r.stderr[-3000:]
    assert not re.search(r"^solved: ", r.stdout, re.M) and final_return(r.stdout) < 100, r.stdout[-1500:]


def test_recurrent_mappo_with_vtrace_mapping_async_two_learners_resume_and_evaluate(train):
    """IMPALA's V-trace targets replay the whole trajectories from the recorded states on each rank
    (tests/test_fsdp.py checks APPO's and PPO's steps on 2 ranks against 1)."""
    pytest.importorskip("mpe2")
    r = train("--env", "pettingzoo:mpe2.simple_speaker_listener_v4", "--env-kwargs", '{"max_cycles": 25}',
              "--policies", "per-agent", "--critic", "central", "--core", "lstm", "--core-size", "32",
              "--algo", "impala", "--learners", "2", "--mode", "async", "--num-steps", "25", "--seq-len", "10",
              "--total-steps", "6000", "--run-name", "rmappo")
    assert r.returncode == 0, r.stderr[-3000:]
    scalars = read_scalars(train.logdir / "rmappo")
    assert {"losses/speaker_0/policy_loss", "losses/listener_0/value_loss"} <= scalars.keys()
    payload = torch.load(train.logdir / "rmappo" / "policy.pt", weights_only=True)
    assert payload["network"]["core"] == "lstm"
    assert any(".actor_core.rnn." in k for k in payload["state_dict"])
    assert any(".critic_core.rnn." in k for k in payload["state_dict"])  # the critic remembers on its own
    r = train("--resume", str(train.logdir / "rmappo"), "--total-steps", "9000")
    assert r.returncode == 0 and "resumed from" in r.stdout, r.stderr[-3000:]
    e = evaluate_cli([str(train.logdir / "rmappo"), "--episodes", "2"], timeout=120)
    assert e.returncode == 0, e.stderr[-2000:]
    assert "speaker_0: mean" in e.stdout and "listener_0: mean" in e.stdout
