"""Continuous control end to end: the Pendulum preset's normalisation statistics go into checkpoints,
policy.pt and a resumed run; tanh-squashed Box actions train and play, alone and under MAPPO; a Box env
on CartPole's defaults points at the preset; Hopper learns with the MuJoCo preset (a short version of
bench/continuous.py, which measures both presets' learning)."""

from __future__ import annotations


import pytest
import torch

from tests.conftest import evaluate_cli


def norm_count(run) -> float:
    sd = torch.load(run / "policy.pt", weights_only=True)["state_dict"]
    return float(sd["policies.shared.obs_norm.stats.obs.count"])


def evaluates(train, run) -> None:
    e = evaluate_cli([str(run), "--episodes", "2"], timeout=120)
    assert e.returncode == 0 and "all agents: mean" in e.stdout, e.stderr


def test_the_pendulum_preset_saves_and_resumes_its_statistics(train):
    """Three updates of the preset (its learning is bench/continuous.py's, 5 seeds, README; the Hopper
    test below is continuous control's learning check here)."""
    r = train("--config", "configs/pendulum.toml", "--total-steps", "12000", "--run-name", "pend")
    assert r.returncode == 0, r.stderr[-3000:]
    assert "start from a preset" not in r.stdout  # the preset is what the hint points at
    run = train.logdir / "pend"
    before = norm_count(run)
    assert before > 12_000  # every valid agent-step merged into the observation statistics
    ckpt = sorted((run / "checkpoints").iterdir())[-1]
    from marl.checkpoint import LEARNER_FILE

    saved = torch.load(ckpt / LEARNER_FILE, weights_only=True)  # one unsharded learner: its whole state in one file
    assert "var" in saved["reward_norm.shared"] and "policies.shared.obs_norm.stats.obs.mean" in saved["model"]
    evaluates(train, run)
    r = train("--resume", str(run), "--total-steps", "16000")
    assert r.returncode == 0 and "resumed from" in r.stdout, r.stderr[-3000:]
    assert norm_count(run) > before  # the resumed run went on from the saved statistics, not from zero


def test_tanh_squashed_box_actions_train_and_play_and_the_defaults_point_at_the_preset(train, monkeypatch):
    r = train("--env", "Pendulum-v1", "--agents", "2", "--action-dist", "tanh_gaussian", "--total-steps", "3000",
              "--run-name", "tanh")
    assert r.returncode == 0, r.stderr[-3000:]
    assert "start from a preset: --config configs/pendulum.toml" in r.stdout
    payload = torch.load(train.logdir / "tanh" / "policy.pt", weights_only=True)
    assert payload["policies"][0]["action"]["kind"] == "tanh_gaussian"
    acts_with_the_squashed_density(payload, monkeypatch)
    evaluates(train, train.logdir / "tanh")


def acts_with_the_squashed_density(payload: dict, monkeypatch) -> None:
    """An actor with the trained weights records, for every step, the log-density of the env's
    action a = low + (tanh(u) + 1) (high - low) / 2, not of the Gaussian sample u; and every action
    the env itself is given is inside Pendulum's bounds [-2, 2] (which Pendulum would clip to, unseen)."""
    import dataclasses

    import numpy as np
    from gymnasium.envs.classic_control.pendulum import PendulumEnv

    given = []
    step = PendulumEnv.step
    monkeypatch.setattr(PendulumEnv, "step", lambda env, action: (given.append(np.asarray(action)), step(env, action))[1])

    from envs import describe
    from marl import distributions
    from marl.actor import RolloutWorker
    from marl.config import Config
    from marl.policies import specs_of

    cfg = dataclasses.replace(Config(), env="Pendulum-v1", agents=2, action_dist="tanh_gaussian", num_steps=64)
    info = describe(cfg.env, cfg.agents)
    (spec,) = specs_of(cfg, info)
    worker = RolloutWorker(cfg, info, 0)
    t = worker.collect(0, payload["state_dict"]).trajectories[spec.name]
    u, logp = t["actions"][t["valid"]], t["logprobs"][t["valid"]]
    with torch.no_grad():
        pd, _, _ = worker.policy.policies[spec.name]({k: v[t["valid"]] for k, v in t["obs"].items()}, None)
    base = distributions.make(spec.action, pd)  # a Gaussian of u (TanhGaussian is one), its log-std already bounded
    gaussian = torch.distributions.Normal(base.mean, base.log_std.exp()).log_prob(u).sum(-1)
    half = (torch.tensor(spec.action.high) - torch.tensor(spec.action.low)) / 2
    log_det = torch.log(half * (1 - torch.tanh(u.double()) ** 2)).sum(-1).float()
    torch.testing.assert_close(logp, gaussian - log_det, rtol=1e-4, atol=1e-4)
    assert (logp - gaussian).abs().max() > 0.1  # the correction is there: a plain Gaussian's would not match
    a = np.concatenate([g.ravel() for g in given])
    assert len(a) >= u.shape[0] and a.min() >= -2 and a.max() <= 2 and a.max() - a.min() > 0.5, (len(a), a.min(), a.max())


def test_continuous_simple_spread_trains_under_mappo_with_tanh_and_normalised_observations(train):
    pytest.importorskip("mpe2")
    r = train("--config", "configs/simple_spread.toml", "--env-kwargs",
              '{"N": 3, "max_cycles": 25, "continuous_actions": true}', "--norm-obs", "--norm-reward",
              "--action-dist", "tanh_gaussian", "--envs-per-actor", "4", "--total-steps", "6000", "--run-name", "spread")
    assert r.returncode == 0, r.stderr[-3000:]
    sd = torch.load(train.logdir / "spread" / "policy.pt", weights_only=True)["state_dict"]
    assert float(sd["policies.shared.obs_norm.state.count"]) > 5_000  # the central critic's state is normalised too
    evaluates(train, train.logdir / "spread")


def test_hopper_learns_with_the_mujoco_preset(train):
    """A shorter version of bench/continuous.py's MuJoCo case: random play scores about 15 on Hopper-v5
    (its episodes end when it falls); five updates of the preset take the mean past 45."""
    pytest.importorskip("mujoco")
    from tests.conftest import read_scalars

    r = train("--config", "configs/mujoco.toml", "--total-steps", "10000", "--run-name", "hopper")
    assert r.returncode == 0, r.stderr[-3000:]
    returns = [v for _, v in read_scalars(train.logdir / "hopper")["charts/episodic_return"]]
    assert returns[0] < 30 and returns[-1] > 45, returns
