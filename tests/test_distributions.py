"""Each action distribution against torch.distributions, masks included: the slow, obviously
correct reference is torch's own, over the legal actions only."""

from __future__ import annotations

import math

import pytest
import torch
from torch import distributions as td

from envs.spaces import ActionSpec
from marl import distributions

CAT = ActionSpec("categorical", (), (), (5,), (0,))
MULTI = ActionSpec("multicategorical", (3,), (3,), (3, 4, 2), (0, 0, 0))
BITS = ActionSpec("bernoulli", (4,), (4,))
BOX = ActionSpec("gaussian", (2,), (2,), low=(-1.0, -1.0), high=(1.0, 1.0))
TANH = ActionSpec("tanh_gaussian", (3,), (3,), low=(-2.0, 0.0, -1.0), high=(2.0, 1.0, 3.0))
BETA = ActionSpec("beta", (3,), (3,), low=(-2.0, 0.0, -1.0), high=(2.0, 1.0, 3.0))


def random_mask(g: torch.Generator, batch: int, n: int) -> torch.Tensor:
    mask = torch.rand(batch, n, generator=g) < 0.5
    mask[torch.arange(batch), torch.randint(n, (batch,), generator=g)] = True  # never all illegal
    return mask


def test_masked_categorical_equals_categorical_over_the_legal_actions_only():
    g = torch.Generator().manual_seed(0)
    logits, mask = torch.randn(256, 5, generator=g) * 3, random_mask(g, 256, 5)
    pi = distributions.make(CAT, logits, mask)
    action, logprob = pi.sample(g)
    assert mask[torch.arange(256), action].all()  # an illegal action is never drawn
    for b in range(256):
        legal = mask[b].nonzero().squeeze(-1)
        ref = td.Categorical(logits=logits[b, legal])
        pos = (legal == action[b]).nonzero().item()
        assert logprob[b] == pytest.approx(ref.log_prob(torch.tensor(pos)).item(), abs=1e-5)
        assert pi.entropy()[b] == pytest.approx(ref.entropy().item(), abs=1e-5)
        row = distributions.make(CAT, logits[b].expand(5, 5), mask[b].expand(5, 5))
        probs = row.log_prob(torch.arange(5)).exp()
        assert torch.all(probs[~mask[b]] == 0)  # zero probability, not merely a small one
        assert probs.sum().item() == pytest.approx(1.0, abs=1e-5)
    assert torch.isfinite(pi.entropy()).all()


def test_masked_sampling_follows_the_legal_probabilities():
    g = torch.Generator().manual_seed(1)
    logits = torch.tensor([[0.0, 1.0, 2.0, -1.0, 0.5]]).expand(40_000, 5)
    mask = torch.tensor([[True, False, True, True, False]]).expand(40_000, 5)
    action, _ = distributions.make(CAT, logits, mask).sample(g)
    freq = torch.bincount(action, minlength=5).double() / 40_000
    want = torch.zeros(5, dtype=torch.float64)
    want[[0, 2, 3]] = torch.softmax(torch.tensor([0.0, 2.0, -1.0], dtype=torch.float64), 0)
    assert torch.allclose(freq, want, atol=0.01)


def test_unmasked_categorical_matches_torch():
    g = torch.Generator().manual_seed(2)
    logits = torch.randn(64, 5, generator=g)
    pi = distributions.make(CAT, logits)
    a, lp = pi.sample(g)
    ref = td.Categorical(logits=logits)
    torch.testing.assert_close(lp, ref.log_prob(a))
    torch.testing.assert_close(pi.entropy(), ref.entropy())
    assert torch.equal(pi.mode(), logits.argmax(-1))


def test_multicategorical_is_independent_categoricals_with_split_masks():
    g = torch.Generator().manual_seed(3)
    logits, mask = torch.randn(128, 9, generator=g), torch.cat([random_mask(g, 128, n) for n in MULTI.nvec], dim=1)
    pi = distributions.make(MULTI, logits, mask)
    a, lp = pi.sample(g)
    assert a.shape == (128, 3) and a.dtype == torch.int64
    ref_lp, ref_ent = torch.zeros(128), torch.zeros(128)
    for i, (part, m) in enumerate(zip(logits.split(MULTI.nvec, -1), mask.split(MULTI.nvec, -1))):
        assert m[torch.arange(128), a[:, i]].all()
        for b in range(128):
            legal = m[b].nonzero().squeeze(-1)
            ref = td.Categorical(logits=part[b, legal])
            ref_lp[b] += ref.log_prob((legal == a[b, i]).nonzero().squeeze()).item()
            ref_ent[b] += ref.entropy().item()
    torch.testing.assert_close(lp, ref_lp, atol=1e-5, rtol=0)
    torch.testing.assert_close(pi.entropy(), ref_ent, atol=1e-5, rtol=0)


def test_bernoulli_matches_torch():
    g = torch.Generator().manual_seed(4)
    logits = torch.randn(64, 4, generator=g) * 2
    pi = distributions.make(BITS, logits)
    a, lp = pi.sample(g)
    ref = td.Independent(td.Bernoulli(logits=logits), 1)
    torch.testing.assert_close(lp, ref.log_prob(a.float()))
    torch.testing.assert_close(pi.entropy(), ref.entropy())
    freq = distributions.make(BITS, torch.full((50_000, 4), 1.0)).sample(g)[0].float().mean()
    assert freq.item() == pytest.approx(1 / (1 + math.exp(-1.0)), abs=0.01)


def test_gaussian_matches_torch():
    g = torch.Generator().manual_seed(5)
    mean, log_std = torch.randn(64, 2, generator=g), torch.randn(64, 2, generator=g) * 0.3
    pi = distributions.make(BOX, torch.cat([mean, log_std], -1))
    a, lp = pi.sample(g)
    ref = td.Independent(td.Normal(mean, log_std.exp()), 1)
    torch.testing.assert_close(lp, ref.log_prob(a))
    torch.testing.assert_close(pi.entropy(), ref.entropy())
    assert torch.equal(pi.mode(), mean)


def test_tanh_gaussian_is_the_density_of_the_env_action_as_torch_computes_it():
    """u ~ N(mean, std) is stored; the env acts with low + (tanh(u) + 1)(high - low)/2. Its
    log-probability must be torch's TransformedDistribution's for that env action."""
    g = torch.Generator().manual_seed(6)
    mean, raw = torch.randn(256, 3, generator=g), torch.randn(256, 3, generator=g) * 0.5
    pi = distributions.make(TANH, torch.cat([mean, raw], -1))
    u, lp = pi.sample(g)
    acted = pi.to_env(u)
    low, high = torch.tensor(TANH.low), torch.tensor(TANH.high)
    assert bool(((acted >= low) & (acted <= high)).all())
    std = pi.log_std.exp().double()
    ref = td.TransformedDistribution(td.Normal(mean.double(), std),
                                     [td.TanhTransform(), td.AffineTransform((high + low).double() / 2,
                                                                             (high - low).double() / 2)])
    # The reference inverts the squash: in float64, where atanh of an action near a bound still gives u back.
    exact = low.double() + (torch.tanh(u.double()) + 1) * (high - low).double() / 2
    torch.testing.assert_close(acted.double(), exact, rtol=1e-5, atol=1e-6)
    torch.testing.assert_close(lp.double(), ref.log_prob(exact).sum(-1), rtol=1e-4, atol=1e-4)
    torch.testing.assert_close(lp, pi.log_prob(u))  # what the learner recomputes from the stored u
    # Far in the tails the squash saturates; the log-probability stays finite (no log(0)).
    assert torch.isfinite(pi.log_prob(torch.full((256, 3), 30.0))).all()
    torch.testing.assert_close(pi.to_env(pi.mode()), low + (torch.tanh(mean) + 1) * (high - low) / 2)
    assert torch.equal(distributions.make(BOX, torch.zeros(2, 4)).to_env(u[:2, :2]), u[:2, :2])


def test_tanh_gaussian_bounds_its_log_std_smoothly_and_starts_at_0():
    spec = ActionSpec("tanh_gaussian", (1,), (1,), low=(-1.0,), high=(1.0,))
    raw = torch.tensor([[0.0, -40.0], [0.0, 40.0], [0.0, 0.0]], requires_grad=True)
    log_std = distributions.make(spec, raw).log_std.squeeze(-1)
    torch.testing.assert_close(log_std.detach(), torch.tensor([*distributions.LOG_STD_BOUNDS, 0.0]))
    log_std[2].backward()
    assert raw.grad[2, 1] > 0  # inside the bounds its gradient flows


def test_tanh_normal_takes_its_scale_from_the_head_as_torchrls_biased_softplus():
    """BenchMARL's continuous policy: loc and scale from the network, scale = softplus(x + b) + 0.01
    with softplus(b) + 0.01 = 1 (a zero output is a scale of 1), then tanh-squashed into the bounds."""
    spec = ActionSpec("tanh_normal", (3,), (3,), low=TANH.low, high=TANH.high)
    assert distributions.lookup("tanh_normal").head_size(spec) == 6
    assert distributions.lookup("tanh_normal").free_params(spec) is None
    g = torch.Generator().manual_seed(9)
    mean, raw = torch.randn(256, 3, generator=g), torch.randn(256, 3, generator=g) * 2
    pi = distributions.make(spec, torch.cat([mean, raw], -1))
    scale = torch.nn.functional.softplus(raw.double() + math.log(math.expm1(0.99))) + 0.01
    torch.testing.assert_close(pi.log_std.exp().double(), scale, rtol=1e-5, atol=1e-6)
    torch.testing.assert_close(distributions.make(spec, torch.zeros(1, 6)).log_std, torch.zeros(1, 3))
    u, lp = pi.sample(g)
    low, high = torch.tensor(TANH.low).double(), torch.tensor(TANH.high).double()
    ref = td.TransformedDistribution(td.Normal(mean.double(), scale),
                                     [td.TanhTransform(), td.AffineTransform((high + low) / 2, (high - low) / 2)])
    exact = low + (torch.tanh(u.double()) + 1) * (high - low) / 2
    torch.testing.assert_close(lp.double(), ref.log_prob(exact).sum(-1), rtol=1e-4, atol=1e-4)


def test_beta_is_torchs_beta_scaled_to_the_bounds():
    """x ~ Beta(softplus(a) + 1, softplus(b) + 1) is stored; the env acts with low + x (high - low).
    Its log-probability and entropy are the env action's: torch's Beta's less / plus log(high - low)."""
    g = torch.Generator().manual_seed(8)
    raw = torch.randn(20_000, 6, generator=g) * 2
    pi = distributions.make(BETA, raw)
    x, lp = pi.sample(g)
    a, b = torch.nn.functional.softplus(raw[:, :3]) + 1, torch.nn.functional.softplus(raw[:, 3:]) + 1
    ref = td.Independent(td.Beta(a, b), 1)
    low, high = torch.tensor(BETA.low), torch.tensor(BETA.high)
    log_range = torch.log(high - low).sum()
    torch.testing.assert_close(lp, ref.log_prob(x) - log_range)
    torch.testing.assert_close(pi.entropy(), ref.entropy() + log_range)
    assert bool(((x > 0) & (x < 1)).all()) and torch.isfinite(pi.log_prob(torch.tensor([[0.0, 1.0, 0.5]]).clamp(1e-6, 1 - 1e-6))).all()
    # Moments of the sampler (Marsaglia-Tsang gamma ratios) against the Beta's, per sample's own (a, b):
    # the standardised residuals (x - mean) / std average 0 with variance 1.
    mean, var = a / (a + b), a * b / ((a + b) ** 2 * (a + b + 1))
    z = (x - mean) / var.sqrt()
    assert z.mean().abs() < 0.03 and (z.var() - 1).abs() < 0.05
    acted = pi.to_env(x)
    torch.testing.assert_close(acted, low + x * (high - low))
    assert bool(((acted >= low) & (acted <= high)).all())
    torch.testing.assert_close(pi.mode(), ((a - 1) / (a + b - 2)).clamp(1e-6, 1 - 1e-6))


def test_a_generator_makes_beta_samples_repeat():
    params = torch.randn(64, 6, generator=torch.Generator().manual_seed(0))
    one, two = (distributions.make(BETA, params).sample(torch.Generator().manual_seed(3))[0] for _ in range(2))
    assert torch.equal(one, two)


def test_uniform_params_give_the_random_baseline():
    """What `uniform_params` gives is the random player: uniform choices (uniform over the legal
    ones under a mask), fair bits, a standard normal (clipped by the env adapter), tanh of one
    scaled to the bounds, and Beta(1, 1): uniform over the bounds."""
    n, g = 40_000, torch.Generator().manual_seed(0)
    mask = torch.tensor([[True, False, True, True, False]]).expand(n, 5)
    for spec, m, legal in [(CAT, None, (1,) * 5), (CAT, mask, (1, 0, 1, 1, 0)), (MULTI, None, (1,) * 9)]:
        pi = distributions.make(spec, distributions.uniform_params(spec, n), m)
        a, _ = pi.sample(g)
        counts = torch.cat([torch.bincount(c, minlength=k).float() for c, k in zip(a.reshape(n, -1).T, spec.nvec)])
        want = torch.cat([torch.tensor(legal[sum(spec.nvec[:i]):][:k], dtype=torch.float) for i, k in enumerate(spec.nvec)])
        want = torch.cat([w / w.sum() for w in want.split(list(spec.nvec))])
        torch.testing.assert_close(counts / n, want, atol=0.01, rtol=0)
    bits, _ = distributions.make(BITS, distributions.uniform_params(BITS, n)).sample(g)
    torch.testing.assert_close(bits.float().mean(0), torch.full((4,), 0.5), atol=0.01, rtol=0)

    gauss = distributions.make(BOX, distributions.uniform_params(BOX, n))
    z = gauss.to_env(gauss.sample(g)[0])
    torch.testing.assert_close(torch.stack([z.mean(0), z.std(0)]), torch.tensor([[0.0, 0.0], [1.0, 1.0]]), atol=0.02, rtol=0)
    low, high = torch.tensor(TANH.low), torch.tensor(TANH.high)
    tanh = distributions.make(TANH, distributions.uniform_params(TANH, n))
    u = tanh.sample(g)[0]
    torch.testing.assert_close(u.std(0), torch.ones(3), atol=0.02, rtol=0)
    torch.testing.assert_close(tanh.to_env(u), low + (torch.tanh(u) + 1) * (high - low) / 2)
    beta = distributions.make(BETA, distributions.uniform_params(BETA, n))
    acted = beta.to_env(beta.sample(g)[0])
    # Uniform over [low, high]: every decile of every dimension holds a tenth of the actions.
    deciles = ((acted - low) / (high - low) * 10).long().clamp(0, 9)
    for d in range(3):
        torch.testing.assert_close(torch.bincount(deciles[:, d], minlength=10).float() / n, torch.full((10,), 0.1),
                                   atol=0.01, rtol=0)
