"""V-trace against slow references: Eq. 1 summed term by term (with episode ends and truncations
inside the sequence), and deepmind/scalable_agent's own ground-truth calculation and test inputs."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from marl.algorithms.vtrace import vtrace


def eq1_slow(log_rhos, rewards, values, next_values, discounts, continues, rho_bar, c_bar, pg_rho_bar):
    """v_s = V(x_s) + sum_{t=s}^{end} (prod_{i=s}^{t-1} gamma_i c_i) rho_t delta_t, the sum stopping at
    the step where the episode ends; written loop by loop, straight from the paper."""
    T = len(rewards)
    rhos = np.exp(log_rhos)
    vs = np.zeros_like(values)
    for s in range(T):
        for b in range(values.shape[1]):
            total, weight = values[s, b], 1.0
            for t in range(s, T):
                delta = min(rho_bar, rhos[t, b]) * (rewards[t, b] + discounts[t, b] * next_values[t, b] - values[t, b])
                total += weight * delta
                if not continues[t, b]:
                    break
                weight *= discounts[t, b] * min(c_bar, rhos[t, b])
            vs[s, b] = total
    adv = np.zeros_like(values)
    for s in range(T):
        for b in range(values.shape[1]):
            nxt = vs[s + 1, b] if continues[s, b] and s + 1 < T else next_values[s, b]
            adv[s, b] = min(pg_rho_bar, rhos[s, b]) * (rewards[s, b] + discounts[s, b] * nxt - values[s, b])
    return vs, adv


def test_vtrace_equals_eq1_with_episode_ends_and_truncations_inside_the_sequence():
    rng = np.random.default_rng(0)
    T, B, gamma = 9, 6, 0.97
    log_rhos = rng.uniform(-2.0, 2.0, (T, B))
    rewards, values = rng.normal(size=(T, B)), rng.normal(size=(T, B))
    terminated = rng.random((T, B)) < 0.15
    truncated = (rng.random((T, B)) < 0.15) & ~terminated
    done = terminated | truncated
    # V(x_{t+1}) within an episode; V(final observation) at a truncation; anything at a termination.
    next_values = np.concatenate([values[1:], rng.normal(size=(1, B))])
    next_values = np.where(truncated, rng.normal(size=(T, B)), next_values)
    discounts = np.where(terminated, 0.0, gamma)
    continues = ~done
    for rho_bar, c_bar, pg in [(1.0, 1.0, 1.0), (3.7, 1.0, 2.2), (0.5, 0.9, 0.5)]:
        want_vs, want_adv = eq1_slow(log_rhos, rewards, values, next_values, discounts, continues, rho_bar, c_bar, pg)
        t = lambda x: torch.as_tensor(np.asarray(x, dtype=np.float64))  # noqa: E731
        vs, adv = vtrace(t(np.zeros((T, B))), t(log_rhos), t(rewards), t(values), t(next_values), t(discounts),
                         t(continues), rho_bar, c_bar, pg)
        np.testing.assert_allclose(vs.numpy(), want_vs, rtol=1e-10, atol=1e-10)
        np.testing.assert_allclose(adv.numpy(), want_adv, rtol=1e-10, atol=1e-10)


def scalable_agent_ground_truth(discounts, log_rhos, rewards, values, bootstrap_value, clip_rho_threshold,
                                clip_pg_rho_threshold):
    """deepmind/scalable_agent vtrace_test.py's `_ground_truth_calculation`, ported from numpy as is."""
    vs = []
    seq_len = len(discounts)
    rhos = np.exp(log_rhos)
    cs = np.minimum(rhos, 1.0)
    clipped_rhos = np.minimum(rhos, clip_rho_threshold) if clip_rho_threshold else rhos
    clipped_pg_rhos = np.minimum(rhos, clip_pg_rho_threshold) if clip_pg_rho_threshold else rhos
    values_t_plus_1 = np.concatenate([values, bootstrap_value[None, :]], axis=0)
    for s in range(seq_len):
        v_s = np.copy(values[s])
        for t in range(s, seq_len):
            v_s += (np.prod(discounts[s:t], axis=0) * np.prod(cs[s:t], axis=0) * clipped_rhos[t]
                    * (rewards[t] + discounts[t] * values_t_plus_1[t + 1] - values[t]))
        vs.append(v_s)
    vs = np.stack(vs, axis=0)
    pg_advantages = clipped_pg_rhos * (rewards + discounts * np.concatenate([vs[1:], bootstrap_value[None, :]], axis=0)
                                       - values)
    return vs, pg_advantages


@pytest.mark.parametrize("batch_size", [1, 5])
def test_vtrace_matches_scalable_agents_test(batch_size):
    """Their test_vtrace inputs: rho from about 0.08 to 12.2, per-column discounts, clip thresholds 3.7 and 2.2."""
    seq_len = 5
    shaped = lambda *s: np.arange(np.prod(s), dtype=np.float32).reshape(*s)  # noqa: E731
    log_rhos = 5 * (shaped(seq_len, batch_size) / (batch_size * seq_len) - 0.5)
    discounts = np.array([[0.9 / (b + 1) for b in range(batch_size)] for _ in range(seq_len)])
    rewards = shaped(seq_len, batch_size)
    values = shaped(seq_len, batch_size) / batch_size
    bootstrap = shaped(batch_size) + 1.0
    want_vs, want_adv = scalable_agent_ground_truth(discounts, log_rhos, rewards, values, bootstrap, 3.7, 2.2)
    t = lambda x: torch.as_tensor(np.asarray(x, dtype=np.float64))  # noqa: E731
    next_values = np.concatenate([values[1:], bootstrap[None]])
    vs, adv = vtrace(t(np.zeros_like(log_rhos)), t(log_rhos), t(rewards), t(values), t(next_values), t(discounts),
                     t(np.ones_like(log_rhos)), rho_bar=3.7, c_bar=1.0, pg_rho_bar=2.2)
    np.testing.assert_allclose(vs.numpy(), want_vs, rtol=1e-6)
    np.testing.assert_allclose(adv.numpy(), want_adv, rtol=1e-6)


def test_on_policy_vtrace_is_the_n_step_return():
    """With pi = mu and no clipping active, v_s is the discounted return to the end, bootstrapped (Remark 1)."""
    T, gamma = 6, 0.9
    rewards = torch.arange(T, dtype=torch.float64)
    values = torch.zeros(T, dtype=torch.float64) + 0.3
    next_values = torch.cat([values[1:], torch.tensor([2.0], dtype=torch.float64)])
    f64 = {"dtype": torch.float64}
    vs, _ = vtrace(torch.zeros(T, **f64), torch.zeros(T, **f64), rewards, values, next_values,
                   torch.full((T,), gamma, **f64), torch.ones(T, **f64))
    want = [sum(gamma ** (k - s) * rewards[k].item() for k in range(s, T)) + gamma ** (T - s) * 2.0 for s in range(T)]
    np.testing.assert_allclose(vs.numpy(), want, rtol=1e-12)


def _trajectory(T: int = 12, E: int = 5, seed: int = 0) -> dict:
    g = torch.Generator().manual_seed(seed)
    terminated = torch.rand(T, E, generator=g) < 0.15
    truncated = (torch.rand(T, E, generator=g) < 0.15) & ~terminated
    return {"rewards": torch.randn(T, E, generator=g, dtype=torch.float64),
            "values": torch.randn(T, E, generator=g, dtype=torch.float64),
            "next_value": torch.randn(E, generator=g, dtype=torch.float64),
            "bootstrap_value": torch.where(truncated, torch.randn(T, E, generator=g, dtype=torch.float64), 0.0),
            "terminated": terminated, "truncated": truncated,
            "logprobs": torch.randn(T, E, generator=g, dtype=torch.float64)}


def test_on_policy_vtrace_targets_are_gae_with_lambda_1():
    """With the learner's policy and values equal to the actor's, V-trace's value targets are the
    lambda = 1 returns and its advantages GAE(lambda = 1)'s: truncations bootstrap, terminations do not."""
    import dataclasses

    from marl.algorithms import gae
    from marl.algorithms.appo import vtrace_targets
    from marl.config import Config
    from marl.on_policy import Current

    cfg = dataclasses.replace(Config(), gamma=0.97)
    tr = _trajectory()
    adv, vs = vtrace_targets(cfg, tr, Current(tr["logprobs"], tr["values"], None))
    want_adv, want_ret = gae(tr["rewards"], tr["values"], tr["next_value"], tr["terminated"], tr["truncated"],
                             tr["bootstrap_value"], cfg.gamma, 1.0)
    torch.testing.assert_close(vs, want_ret, rtol=1e-12, atol=1e-12)
    torch.testing.assert_close(adv, want_adv, rtol=1e-12, atol=1e-12)


def test_impala_loss_is_the_per_sample_average_of_eq_4_2():
    from marl.algorithms import impala_loss

    g = torch.Generator().manual_seed(3)
    logp, adv, v, vs, ent = (torch.randn(7, generator=g, dtype=torch.float64) for _ in range(5))
    loss, stats = impala_loss(logp, adv, v, vs, ent, vf_coef=0.5, ent_coef=0.01)
    want = sum(-adv[i] * logp[i] + 0.5 * 0.5 * (vs[i] - v[i]) ** 2 - 0.01 * ent[i] for i in range(7)) / 7
    assert loss.item() == pytest.approx(want.item(), rel=1e-12)
    assert stats["policy_loss"].item() == pytest.approx((-(adv * logp)).mean().item(), rel=1e-12)
