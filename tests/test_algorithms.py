import math

import pytest
import torch

from marl.algorithms import gae, ppo_loss


def gae_reference(rewards, values, next_value, terminated, truncated, bootstrap, gamma, lam):
    """Straight from the definition, one slot and one t at a time: A_t = sum_l (gamma lam)^l delta_{t+l}
    over the rest of the episode, with delta's next value 0 after a termination, the bootstrap after
    a truncation, V(s_{t+1}) otherwise (next_value after the last step)."""
    T, S = rewards.shape
    adv = torch.zeros(T, S, dtype=torch.float64)
    for s in range(S):
        def delta(t):
            if terminated[t, s]:
                v_next = 0.0
            elif truncated[t, s]:
                v_next = float(bootstrap[t, s])
            else:
                v_next = float(next_value[s]) if t == T - 1 else float(values[t + 1, s])
            return float(rewards[t, s]) + gamma * v_next - float(values[t, s])

        for t in range(T):
            total, weight = 0.0, 1.0
            for k in range(t, T):
                total += weight * delta(k)
                if terminated[k, s] or truncated[k, s]:
                    break
                weight *= gamma * lam
            adv[t, s] = total
    return adv, adv + values.double()


@pytest.mark.parametrize("seed", [0, 1, 2])
def test_gae_matches_the_definition_with_terminations_and_truncations(seed):
    g = torch.Generator().manual_seed(seed)
    T, S = 17, 6
    rewards = torch.randn(T, S, generator=g)
    values = torch.randn(T, S, generator=g)
    next_value = torch.randn(S, generator=g)
    u = torch.rand(T, S, generator=g)
    terminated = u < 0.15
    truncated = (u >= 0.15) & (u < 0.3)
    bootstrap = torch.where(truncated, torch.randn(T, S, generator=g), 0.0)
    # Both kinds of end must really be in the data, including at the last step.
    terminated[-1, 0], truncated[-1, 1] = True, True
    terminated[-1, 1] = False
    bootstrap[-1, 1] = 3.0
    assert terminated.any() and truncated.any()
    adv, ret = gae(rewards, values, next_value, terminated, truncated, bootstrap, 0.97, 0.9)
    ref_adv, ref_ret = gae_reference(rewards, values, next_value, terminated, truncated, bootstrap, 0.97, 0.9)
    torch.testing.assert_close(adv.double(), ref_adv, rtol=1e-5, atol=1e-5)
    torch.testing.assert_close(ret.double(), ref_ret, rtol=1e-5, atol=1e-5)


def test_gae_truncation_bootstraps_and_termination_does_not():
    z = torch.zeros(1, 2)
    rewards = torch.ones(1, 2)
    terminated = torch.tensor([[True, False]])
    truncated = torch.tensor([[False, True]])
    bootstrap = torch.tensor([[5.0, 5.0]])  # only the truncated slot may use it
    adv, _ = gae(rewards, z, torch.full((2,), 100.0), terminated, truncated, bootstrap, 0.5, 1.0)
    assert adv.tolist() == [[1.0, 1.0 + 0.5 * 5.0]]


def test_ppo_loss_hand_computed():
    # Two samples, worked by hand with clip 0.2:
    #  sample 0: ratio e^0.5 = 1.6487 > 1.2, A = +1 -> min(1.6487, 1.2) = 1.2 (clipped)
    #  sample 1: ratio e^-0.1 = 0.9048 in range, A = -2 -> min(-1.8097, -1.8097) = -1.8097
    #  L^CLIP = (1.2 - 1.8097) / 2 = -0.30484 ; policy loss = +0.30484
    #  value: new (1.0, 0.0), old (0.5, 0.0), returns (2.0, 1.0)
    #   unclipped (1-2)^2 = 1, (0-1)^2 = 1 ; clipped v: 0.5 + clip(0.5) = 0.7 -> (0.7-2)^2 = 1.69 ; 0 -> 1
    #   value loss = 0.5 * mean(max(1, 1.69), max(1, 1)) = 0.5 * 1.345 = 0.6725
    #  entropy mean 0.3 ; loss = 0.30484 - 0.01 * 0.3 + 0.5 * 0.6725 = 0.636590
    new_lp = torch.tensor([0.5, -0.1])
    old_lp = torch.zeros(2)
    loss, stats = ppo_loss(new_lp, old_lp, torch.tensor([1.0, -2.0]), torch.tensor([1.0, 0.0]),
                           torch.tensor([0.5, 0.0]), torch.tensor([2.0, 1.0]), torch.tensor([0.2, 0.4]),
                           clip_coef=0.2, clip_vloss=True, vf_coef=0.5, ent_coef=0.01)
    pg = -(1.2 + -2.0 * math.exp(-0.1)) / 2
    assert stats["policy_loss"].item() == pytest.approx(pg, abs=1e-6)
    assert stats["value_loss"].item() == pytest.approx(0.6725, abs=1e-6)
    assert stats["entropy"].item() == pytest.approx(0.3, abs=1e-6)
    assert loss.item() == pytest.approx(pg - 0.003 + 0.33625, abs=1e-6)
    assert stats["clipfrac"].item() == 0.5
    kl = ((math.exp(0.5) - 1 - 0.5) + (math.exp(-0.1) - 1 + 0.1)) / 2
    assert stats["approx_kl"].item() == pytest.approx(kl, abs=1e-6)


def test_ppo_loss_unclipped_value_and_gradient_is_zero_when_clipped():
    new_lp = torch.tensor([0.5], requires_grad=True)
    loss, stats = ppo_loss(new_lp, torch.zeros(1), torch.ones(1), torch.tensor([1.0]), torch.tensor([0.5]),
                           torch.tensor([2.0]), torch.zeros(1), clip_coef=0.2, clip_vloss=False, vf_coef=1.0, ent_coef=0.0)
    assert stats["value_loss"].item() == pytest.approx(0.5)
    loss.backward()
    # Past the clip with a positive advantage, the surrogate is flat in the policy.
    assert new_lp.grad.item() == 0.0


def decoupled_reference(new_lp, behav_lp, prox_lp, adv, clip):
    """Hilton et al. 2021's decoupled clipped objective, one sample at a time, as the paper writes it."""
    total = 0.0
    for lp, b, p, a in zip(new_lp.tolist(), behav_lp.tolist(), prox_lp.tolist(), adv.tolist()):
        r = math.exp(lp - p)
        total += math.exp(p - b) * min(r * a, min(max(r, 1 - clip), 1 + clip) * a)
    return -total / len(adv)


@pytest.mark.parametrize("seed", [0, 1, 2])
def test_decoupled_ppo_loss_matches_the_per_sample_objective_and_is_ppo_at_lag_0(seed):
    g = torch.Generator().manual_seed(seed)
    n = 64
    behav, prox, new = (-0.7 + 0.3 * torch.randn(n, generator=g) for _ in range(3))
    adv = torch.randn(n, generator=g)
    zeros, ones = torch.zeros(n), torch.ones(n)
    common = dict(clip_coef=0.2, clip_vloss=False, vf_coef=0.5, ent_coef=0.0)
    new = new.requires_grad_()
    loss, stats = ppo_loss(new, behav, adv, zeros, zeros, ones, zeros, prox_logprob=prox, **common)
    assert stats["policy_loss"].item() == pytest.approx(decoupled_reference(new, behav, prox, adv, 0.2), abs=1e-6)
    # The clip is around the proximal policy: its diagnostics are too.
    assert stats["clipfrac"].item() == ((new - prox).exp().sub(1).abs() > 0.2).float().mean().item()
    # The importance weight pi_prox / pi_behav is a constant: the gradient is the weighted PPO gradient.
    loss.backward()
    r = (new.detach() - prox).exp()
    unclipped = ((adv > 0) & (r < 1 + 0.2)) | ((adv < 0) & (r > 1 - 0.2))  # where min() takes r A
    want = -(prox - behav).exp() * r * adv * unclipped / n
    torch.testing.assert_close(new.grad, want, rtol=1e-5, atol=1e-7)
    # With the proximal policy the behaviour's (a lag of 0), it is PPO's Eq. 7 exactly.
    plain, plain_stats = ppo_loss(new.detach(), behav, adv, zeros, zeros, ones, zeros, **common)
    same, same_stats = ppo_loss(new.detach(), behav, adv, zeros, zeros, ones, zeros, prox_logprob=behav, **common)
    assert same.item() == plain.item() and same_stats["approx_kl"].item() == plain_stats["approx_kl"].item()
