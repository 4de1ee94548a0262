"""Observation and reward normalisation against slow references: the moments of everything seen,
the recursion of the discounted return, and what the networks actually read."""

from __future__ import annotations

import dataclasses

import pytest
import torch

from envs import describe
from envs.spaces import Leaf
from marl.actor import RolloutWorker
from marl.config import Config
from marl.models import build_model, network_of
from marl.models.normalize import ObsNormalizer
from marl.normalize import RewardScaler, RunningMoments, batch_moments
from marl.policies import specs_of


def test_merged_batches_hold_the_moments_of_everything_seen():
    g = torch.Generator().manual_seed(0)
    batches = [torch.randn(n, 3, generator=g) * torch.tensor([1.0, 10.0, 0.1]) + 5 for n in (7, 300, 1, 0, 64)]
    m = RunningMoments((3,))
    for b in batches:
        m.merge(*batch_moments(b, None))
    everything = torch.cat(batches).double()
    torch.testing.assert_close(m.mean, everything.mean(0), rtol=1e-5, atol=1e-5)
    torch.testing.assert_close(m.var, everything.var(0, unbiased=False), rtol=1e-5, atol=1e-5)
    assert float(m.count) == pytest.approx(everything.shape[0], abs=1e-3)


def test_the_normaliser_reads_float_vectors_and_the_critics_state_only():
    leaves = (Leaf("image", None, "box", (7, 7, 3), "uint8"), Leaf("direction", None, "discrete", (), "int64", (4,), (0,)),
              Leaf("pos", None, "box", (2,), "float32"))
    norm = ObsNormalizer(leaves, clip=3.0, state_dim=5)
    assert set(norm.stats) == {"pos"}
    g = torch.Generator().manual_seed(1)
    pos, state = torch.randn(500, 2, generator=g) * 4 + 1, torch.randn(500, 5, generator=g) * 2 - 3
    obs = {"image": torch.randint(0, 255, (500, 7, 7, 3), dtype=torch.uint8, generator=g),
           "direction": torch.randint(0, 4, (500,), generator=g), "pos": pos}
    norm.update(obs, state, None)
    out, s = norm(obs, state)
    assert out["image"] is obs["image"] and out["direction"] is obs["direction"]
    want = ((pos - pos.mean(0)) / pos.std(0, unbiased=False)).clamp(-3, 3)
    torch.testing.assert_close(out["pos"], want, rtol=1e-4, atol=1e-4)
    torch.testing.assert_close(s, ((state - state.mean(0)) / state.std(0, unbiased=False)).clamp(-3, 3), rtol=1e-4, atol=1e-4)
    assert out["pos"].abs().max() <= 3.0


def test_rewards_are_scaled_by_the_spread_of_the_discounted_return_and_clipped():
    scaler = RewardScaler(clip=2.0)
    g = torch.Generator().manual_seed(2)
    returns = torch.randn(16, 4, generator=g) * 30
    rewards = torch.randn(16, 4, generator=g) * 50
    valid = torch.rand(16, 4, generator=g) < 0.8
    scaled = scaler(rewards, returns, valid, None)
    std = returns[valid].double().std(unbiased=False)
    torch.testing.assert_close(scaled, (rewards / std).float().clamp(-2, 2), rtol=1e-4, atol=1e-5)
    restored = RewardScaler(clip=2.0)
    restored.load_state_dict(scaler.state_dict())
    assert torch.equal(restored.returns.var, scaler.returns.var)


def test_actors_record_each_slots_discounted_return_across_requests_and_episodes():
    """G_t = gamma G_{t-1} + r_t on valid steps, restarting after an episode ends, carried from one
    request to the next: checked against the plain loop over the recorded rewards and flags."""
    cfg = dataclasses.replace(Config(), agents=2, envs_per_actor=3, num_steps=40, norm_reward=True, gamma=0.9)
    info = describe(cfg.env, cfg.agents)
    w = RolloutWorker(cfg, info, index=0)
    sd = build_model(specs_of(cfg, info), network_of(cfg)).state_dict()
    trs = [next(iter(w.collect(0, sd if i == 0 else None).trajectories.values())) for i in range(3)]
    G = torch.zeros(3, 2, dtype=torch.float64)
    seen_done = False
    for tr in trs:
        for t in range(tr["rewards"].shape[0]):
            for e in range(3):
                for j in range(2):
                    if tr["valid"][t, e, j]:
                        G[e, j] = 0.9 * G[e, j] + tr["rewards"][t, e, j]
                        assert tr["discounted_return"][t, e, j].item() == pytest.approx(G[e, j].item(), rel=1e-6)
                        if tr["terminated"][t, e, j] or tr["truncated"][t, e, j]:
                            G[e, j], seen_done = 0.0, True
    assert seen_done  # CartPole's early episodes end within 40 steps: the restart was exercised


def test_norm_obs_is_part_of_the_network_and_its_state_dict():
    cfg = dataclasses.replace(Config(), norm_obs=True, clip_obs=5.0)
    assert network_of(cfg)["norm_obs"] == 5.0 and "norm_obs" not in network_of(Config())  # old runs still resume
    model = build_model(specs_of(cfg, describe("CartPole-v1", 2)), network_of(cfg))
    keys = [k for k in model.state_dict() if "obs_norm" in k]
    assert sorted(keys) == [f"policies.shared.obs_norm.stats.obs.{k}" for k in ("count", "mean", "var")]
    assert not list(model.policies.shared.obs_norm.parameters())  # statistics, not trained
