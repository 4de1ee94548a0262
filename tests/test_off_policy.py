"""The off-policy pieces against slow, obviously-correct references: n-step windows and transitions,
the replay ring, the TD targets of DQN, SAC's three losses, the VDN and QMIX mixers (and QMIX's
monotonicity), epsilon-greedy action selection and the update-to-data schedule."""

from __future__ import annotations

import math
from types import SimpleNamespace

import pytest
import torch

from marl.algorithms.base import gradient_steps
from marl.algorithms.dqn import td_target
from marl.algorithms.sac import actor_loss, alpha_loss, soft_target
from marl.distributions.epsilon_greedy import EpsilonGreedy
from marl.models.mixers import QMixer, VDNMixer
from marl.replay import ReplayShard, agent_transitions, nstep_windows, team_transitions


def episode_flags(T: int, S: int, g: torch.Generator):
    u = torch.rand(T, S, generator=g)
    return u < 0.15, (u >= 0.15) & (u < 0.25)


def windows_reference(rewards, terminated, truncated, n, gamma):
    """Per (t, s), walking forward one step at a time."""
    T, S = rewards.shape
    ret, disc, nxt = torch.zeros(T, S, dtype=torch.float64), torch.zeros(T, S, dtype=torch.float64), torch.zeros(T, S, dtype=torch.long)
    for s in range(S):
        for t in range(T):
            g, d, m, terminal = 0.0, 1.0, 0, False
            while m < n and t + m < T:
                g += d * float(rewards[t + m, s])
                d *= gamma
                m += 1
                if terminated[t + m - 1, s]:
                    terminal = True
                    break
                if truncated[t + m - 1, s]:
                    break
            ret[t, s], disc[t, s], nxt[t, s] = g, 0.0 if terminal else d, t + m
    return ret, disc, nxt


@pytest.mark.parametrize("n", [1, 3, 5])
def test_nstep_windows_match_a_step_by_step_walk(n):
    g = torch.Generator().manual_seed(n)
    T, S = 23, 7
    rewards = torch.randn(T, S, generator=g)
    terminated, truncated = episode_flags(T, S, g)
    terminated[-2, 0] = truncated[-1, 1] = True  # ends right at the trajectory's end, too
    ret, disc, nxt = nstep_windows(rewards, terminated, truncated, n, 0.9)
    ref_ret, ref_disc, ref_nxt = windows_reference(rewards, terminated, truncated, n, 0.9)
    torch.testing.assert_close(ret.double(), ref_ret, rtol=1e-5, atol=1e-5)
    torch.testing.assert_close(disc.double(), ref_disc, rtol=1e-6, atol=1e-6)
    assert torch.equal(nxt, ref_nxt)
    assert (disc == 0).any() and (disc > 0).any() and (nxt == T).any()


def trajectory(T: int, S: int, k: int, g: torch.Generator, state_dim: int = 0) -> dict:
    """A trajectory of one policy [T, S, k]: obs are the step index * 100 + slot * 10 + agent, so a row's origin is readable."""
    t = torch.arange(T).view(T, 1, 1)
    ids = (t * 100 + torch.arange(S).view(1, S, 1) * 10 + torch.arange(k).view(1, 1, k)).float()
    terminated, truncated = (f.unsqueeze(-1).expand(T, S, k).clone() for f in episode_flags(T, S, g))
    valid = torch.rand(T, S, k, generator=g) < 0.9
    out = {"obs": {"obs": ids.unsqueeze(-1)}, "actions": torch.randint(0, 3, (T, S, k), generator=g),
           "rewards": torch.randn(T, S, k, generator=g), "terminated": terminated & valid, "truncated": truncated & valid,
           "valid": valid, "after": {"obs": {"obs": (T * 100 + torch.arange(S).view(S, 1) * 10 + torch.arange(k)).float().unsqueeze(-1)}}}
    if state_dim:
        state = torch.randn(T, S, state_dim, generator=g)
        out["state"] = state.unsqueeze(2).expand(T, S, k, state_dim).clone()
        out["after"]["state"] = torch.randn(S, state_dim, generator=g).unsqueeze(1).expand(S, k, state_dim).clone()
    return out


def test_agent_transitions_are_the_valid_steps_bootstrapping_from_the_right_rows():
    g = torch.Generator().manual_seed(3)
    T, S, k, n = 12, 3, 2, 3
    traj = trajectory(T, S, k, g)
    rows = agent_transitions(traj, n, 0.99)
    assert rows["returns"].shape[0] == int(traj["valid"].sum())
    # Each row, found again by its observation's id: the next observation is row t + m's (or `after`).
    ret, disc, nxt = windows_reference(traj["rewards"].flatten(1), traj["terminated"].flatten(1),
                                       traj["truncated"].flatten(1), n, 0.99)
    for i, obs_id in enumerate(rows["obs"]["obs"][:, 0].long().tolist()):
        t, s, j = obs_id // 100, obs_id // 10 % 10, obs_id % 10
        col = s * k + j
        assert traj["valid"][t, s, j]
        assert float(rows["returns"][i]) == pytest.approx(float(ret[t, col]), abs=1e-5)
        assert float(rows["discounts"][i]) == pytest.approx(float(disc[t, col]), abs=1e-6)
        assert int(rows["next_obs"]["obs"][i, 0]) == int(nxt[t, col]) * 100 + s * 10 + j
        assert int(rows["actions"][i]) == int(traj["actions"][t, s, j])


def test_team_transitions_join_every_agent_of_every_policy():
    g = torch.Generator().manual_seed(4)
    T, S = 10, 2
    a, b = trajectory(T, S, 2, g, state_dim=3), trajectory(T, S, 1, g, state_dim=3)
    b["state"], b["after"]["state"] = a["state"][:, :, :1].clone(), a["after"]["state"][:, :1].clone()
    for key in ("terminated", "truncated"):  # a team's episode ends for everyone at once
        a[key] = a[key][:, :, :1].expand(T, S, 2).clone()
        b[key] = a[key][:, :, :1].clone()
    rows = team_transitions({"a": a, "b": b}, 2, 0.9)
    joint = torch.cat([a["valid"], b["valid"]], dim=2).all(-1)
    assert rows["returns"].shape == (int(joint.sum()),)
    assert rows["policies"]["a"]["actions"].shape == (int(joint.sum()), 2)
    assert rows["policies"]["b"]["obs"]["obs"].shape == (int(joint.sum()), 1, 1)
    reward = (a["rewards"].sum(-1) + b["rewards"].sum(-1)) / 3  # the mean of the team's three agents
    ret, disc, nxt = windows_reference(reward, a["terminated"][..., 0], a["truncated"][..., 0], 2, 0.9)
    for i, obs_id in enumerate(rows["policies"]["a"]["obs"]["obs"][:, 0, 0].long().tolist()):
        t, s = obs_id // 100, obs_id // 10 % 10
        assert joint[t, s]
        assert int(rows["policies"]["b"]["obs"]["obs"][i, 0, 0]) == t * 100 + s * 10  # the same step, the other policy
        assert float(rows["returns"][i]) == pytest.approx(float(ret[t, s]), abs=1e-5)
        assert float(rows["discounts"][i]) == pytest.approx(float(disc[t, s]), abs=1e-6)
        t_next = int(nxt[t, s])
        assert int(rows["policies"]["a"]["next_obs"]["obs"][i, 1, 0]) == t_next * 100 + s * 10 + 1
        want = a["after"]["state"][s, 0] if t_next == T else a["state"][t_next, s, 0]
        torch.testing.assert_close(rows["next_state"][i], want)
        torch.testing.assert_close(rows["state"][i], a["state"][t, s, 0])


def test_the_replay_ring_keeps_the_newest_rows_and_samples_them_uniformly():
    shard = ReplayShard(10, 0, torch.device("cpu"))
    for start in (0, 4, 8, 12):  # 16 rows into room for 10
        shard.add({"x": torch.arange(start, start + 4), "obs": {"img": torch.full((4, 2, 2), start, dtype=torch.uint8)}})
    assert len(shard) == 10 and shard.storage["obs"]["img"].dtype == torch.uint8
    assert sorted(shard.storage["x"].tolist()) == list(range(6, 16))
    g = torch.Generator().manual_seed(0)
    seen = shard.sample(20_000, g)["x"]
    counts = torch.bincount(seen - 6, minlength=10).double()
    assert counts.min() > 0 and (counts / counts.mean() - 1).abs().max() < 0.1
    again = ReplayShard(10, 0, torch.device("cpu"))
    again.load_state_dict(shard.state_dict())
    assert torch.equal(again.sample(50, torch.Generator().manual_seed(1))["x"], shard.sample(50, torch.Generator().manual_seed(1))["x"])
    shard.add({"x": torch.arange(100, 125), "obs": {"img": torch.zeros(25, 2, 2, dtype=torch.uint8)}})  # more than fit
    assert sorted(shard.storage["x"].tolist()) == list(range(115, 125))


@pytest.mark.parametrize("double", [False, True])
def test_td_target_is_the_double_or_plain_q_learning_target(double):
    g = torch.Generator().manual_seed(5)
    B, A = 9, 4
    returns, discounts = torch.randn(B, generator=g), torch.rand(B, generator=g)
    q_target, q_online = torch.randn(B, A, generator=g), torch.randn(B, A, generator=g)
    mask = torch.rand(B, A, generator=g) < 0.6
    mask[:, 2] = True
    y = td_target(returns, discounts, q_target, q_online if double else None, mask)
    for i in range(B):
        legal = [a for a in range(A) if mask[i, a]]
        chooser = q_online if double else q_target
        best = max(legal, key=lambda a: float(chooser[i, a]))
        assert float(y[i]) == pytest.approx(float(returns[i] + discounts[i] * q_target[i, best]), abs=1e-6)


def test_sac_losses_match_their_definitions():
    g = torch.Generator().manual_seed(6)
    B, A = 7, 3
    returns, discounts = torch.randn(B, generator=g), torch.rand(B, generator=g)
    alpha, log_alpha = torch.tensor(0.3), torch.tensor(math.log(0.3), requires_grad=True)
    # Box: one sampled next action.
    q1, q2, logp = torch.randn(B, generator=g), torch.randn(B, generator=g), torch.randn(B, generator=g)
    y = soft_target(returns, discounts, q1, q2, logp, alpha)
    for i in range(B):
        assert float(y[i]) == pytest.approx(float(returns[i] + discounts[i] * (min(q1[i], q2[i]) - 0.3 * logp[i])), abs=1e-5)
    assert float(actor_loss(logp, torch.min(q1, q2), alpha)) == pytest.approx(
        sum(0.3 * float(logp[i]) - min(float(q1[i]), float(q2[i])) for i in range(B)) / B, abs=1e-5)
    loss = alpha_loss(log_alpha, logp, -2.0)
    assert float(loss.detach()) == pytest.approx(sum(-0.3 * (float(logp[i]) - 2.0) for i in range(B)) / B, abs=1e-5)
    loss.backward()  # d/d log alpha of -alpha (log pi + H): -alpha (log pi + H), averaged
    assert float(log_alpha.grad) == pytest.approx(float(loss.detach()), abs=1e-5)
    # Discrete: exact expectations over the actions.
    Q1, Q2 = torch.randn(B, A, generator=g), torch.randn(B, A, generator=g)
    logits = torch.randn(B, A, generator=g)
    logp_all = torch.log_softmax(logits, -1)
    probs = logp_all.exp()
    y = soft_target(returns, discounts, Q1, Q2, logp_all, alpha, probs)
    a_loss = actor_loss(logp_all, torch.min(Q1, Q2), alpha, probs)
    t_loss = alpha_loss(torch.tensor(math.log(0.3)), logp_all, 0.5, probs)
    ref_a = ref_t = 0.0
    for i in range(B):
        v = sum(float(probs[i, a]) * (min(float(Q1[i, a]), float(Q2[i, a])) - 0.3 * float(logp_all[i, a])) for a in range(A))
        assert float(y[i]) == pytest.approx(float(returns[i]) + float(discounts[i]) * v, abs=1e-5)
        ref_a += sum(float(probs[i, a]) * (0.3 * float(logp_all[i, a]) - min(float(Q1[i, a]), float(Q2[i, a]))) for a in range(A))
        ref_t += sum(float(probs[i, a]) * (-0.3 * (float(logp_all[i, a]) + 0.5)) for a in range(A))
    assert float(a_loss) == pytest.approx(ref_a / B, abs=1e-5)
    assert float(t_loss) == pytest.approx(ref_t / B, abs=1e-5)


def test_the_vdn_mixer_sums_and_the_qmix_mixer_is_its_definition_and_monotonic():
    g = torch.Generator().manual_seed(7)
    qs = torch.randn(5, 3, generator=g)
    assert torch.allclose(VDNMixer()(qs), qs.sum(-1))
    torch.manual_seed(0)
    mixer = QMixer(3, 4, embed=6, hypernet_embed=8)
    state = torch.randn(5, 4, generator=g)
    with torch.no_grad():
        got = mixer(qs, state)
    for i in range(5):  # Rashid et al. 2018, Sec. 4.2, one sample at a time
        s = state[i]
        w1 = mixer.hyper_w1(s).abs().view(3, 6)
        hidden = torch.nn.functional.elu(qs[i] @ w1 + mixer.hyper_b1(s))
        w2 = mixer.hyper_w2(s).abs().view(6)
        want = hidden @ w2 + mixer.hyper_b2(s)[0]
        assert float(got[i]) == pytest.approx(float(want.detach()), abs=1e-5)
    # Monotonic in every agent's Q, whatever the state and the weights: dQ_tot / dQ_i >= 0 (Eq. 5).
    for seed in range(5):
        torch.manual_seed(seed)
        mixer = QMixer(3, 4, embed=6, hypernet_embed=8)
        q = torch.randn(64, 3, requires_grad=True)
        (grad,) = torch.autograd.grad(mixer(q, torch.randn(64, 4) * 3).sum(), q)
        assert (grad >= 0).all() and (grad > 0).any()
    # Without the absolute values it would not be: the check can fail.
    unconstrained = (mixer.hyper_w1(torch.randn(64, 4)).view(64, 3, 6) < 0).any()
    assert unconstrained


def test_epsilon_greedy_explores_uniformly_over_legal_actions_and_is_greedy_otherwise():
    B, A = 4, 5
    q = torch.tensor([[0.0, 3.0, 1.0, 2.0, -1.0]]).expand(B, A)
    mask = torch.tensor([[True, False, True, True, True]]).expand(B, A)
    eps = torch.tensor([0.0, 1.0, 0.2, 0.5])
    pi = EpsilonGreedy(q, eps, mask)
    assert pi.mode().tolist() == [3] * B  # the best legal one (action 1 is masked)
    want = torch.tensor([[e / 4 if m else 0.0 for m in mask[0].tolist()] for e in eps.tolist()])
    want[torch.arange(B), 3] += 1 - eps
    torch.testing.assert_close(pi.probs(), want)
    g = torch.Generator().manual_seed(0)
    counts = torch.zeros(B, A)
    for _ in range(4_000):
        a, logp = pi.sample(g)
        counts[torch.arange(B), a] += 1
        torch.testing.assert_close(logp, want.gather(-1, a.unsqueeze(-1)).squeeze(-1).log())
    assert counts[:, 1].sum() == 0
    torch.testing.assert_close(counts / 4_000, want, atol=0.03, rtol=0)


def test_gradient_steps_depend_on_the_global_counts_only():
    cfg = SimpleNamespace(learning_starts=1_000, train_frequency=2.0)
    # However the steps are cut into iterations, the total is one per two agent-steps past learning_starts.
    for cuts in ([0, 100_000], [0, 999, 1_000, 1_001, 50_000, 100_000], list(range(0, 100_001, 256)) + [100_000]):
        assert sum(gradient_steps(cfg, a, b) for a, b in zip(cuts, cuts[1:])) == 49_500
    cfg = SimpleNamespace(learning_starts=0, train_frequency=0.25)  # four steps per agent-step
    assert gradient_steps(cfg, 10, 20) == 40


def test_discrete_sac_gives_illegal_actions_no_probability_and_finite_terms():
    from marl.algorithms.sac import SAC

    class Net:
        def act(self, obs):
            return obs["obs"], None

    nets = SimpleNamespace(policy=SimpleNamespace(policies={"p": Net()}))
    algo = SAC.__new__(SAC)
    algo.specs = {"p": SimpleNamespace(action=SimpleNamespace(continuous=False))}
    logits = torch.tensor([[2.0, 1.0, 0.0, -1.0], [0.0, 0.0, 0.0, 0.0]])
    mask = torch.tensor([[True, False, True, False], [False, False, False, True]])
    logp, probs = algo._pi(nets, "p", {"obs": logits}, mask)
    torch.testing.assert_close(probs.sum(-1), torch.ones(2))
    assert (probs[~mask] == 0).all() and torch.isfinite(logp).all()
    torch.testing.assert_close(probs[0, [0, 2]], torch.softmax(torch.tensor([2.0, 0.0]), -1))
    # The soft value of such a state weighs only the legal actions, however large the temperature.
    q = torch.full((2, 4), 1e30)
    q[mask] = 1.0
    v = soft_target(torch.zeros(2), torch.ones(2), q, q, logp, torch.tensor(1e6), probs)
    assert torch.isfinite(v).all()


def test_sequences_carry_one_more_observation_and_the_state_each_chunk_started_from():
    from marl.replay import agent_sequences, team_sequences

    g = torch.Generator().manual_seed(8)
    T, S, k, L = 10, 2, 2, 4  # chunks of 4, 4, 2 (the last padded)
    traj = trajectory(T, S, k, g)
    traj["core_state"] = torch.randn(3, S, k, 5, generator=g)
    rows = agent_sequences(traj, L)
    assert rows["obs"]["obs"].shape[1:] == (L + 1, 1) and rows["actions"].shape[1:] == (L,)
    for i in range(rows["actions"].shape[0]):
        first = int(rows["obs"]["obs"][i, 0, 0])
        t0, s, j = first // 100, first // 10 % 10, first % 10
        c = t0 // L
        torch.testing.assert_close(rows["core_state"][i], traj["core_state"][c, s, j])
        for m in range(L + 1):  # the chunk's steps, then the step after it (`after` past the end), then padding
            t = t0 + m
            want = t * 100 + s * 10 + j if t <= T else 0
            assert int(rows["obs"]["obs"][i, m, 0]) == want
            if m < L:
                assert bool(rows["valid"][i, m]) == (t < T and bool(traj["valid"][t, s, j]))
    # Team chunks: every policy's agents side by side, one row per chunk and slot.
    team = team_sequences({"a": traj, "b": traj}, L)
    assert team["policies"]["a"]["obs"]["obs"].shape[1:] == (L + 1, k, 1)
    assert team["policies"]["b"]["core_state"].shape[1:] == (k, 5) and team["rewards"].shape[1:] == (L,)


def test_the_recurrent_q_loss_is_a_step_by_step_replay_from_the_stored_state():
    """DQN's loss on stored-state sequences against the same network run one step at a time from the
    stored state, its episode starts zeroing the state, and the n-step targets written out."""
    from marl.algorithms.dqn import DQN
    from marl.models.q_network import QNetwork
    from marl.policies import specs_of
    from envs import describe
    from marl.config import Config

    cfg = Config(algo="dqn", core="gru", core_size=8, hidden_sizes=(16,), n_step=2, gamma=0.9, seq_len=5)
    (spec,) = specs_of(cfg, describe("CartPole-v1", 1))
    torch.manual_seed(0)
    online, target = QNetwork(spec, (16,), core="gru", core_size=8), QNetwork(spec, (16,), core="gru", core_size=8)
    g = torch.Generator().manual_seed(9)
    N, L = 3, 5
    b = {"obs": {"obs": torch.randn(N, L + 1, 4, generator=g)}, "actions": torch.randint(0, 2, (N, L), generator=g),
         "rewards": torch.randn(N, L, generator=g), "terminated": torch.rand(N, L, generator=g) < 0.2,
         "truncated": torch.zeros(N, L, dtype=torch.bool), "valid": torch.rand(N, L, generator=g) < 0.9,
         "starts": torch.rand(N, L + 1, generator=g) < 0.2, "core_state": torch.randn(N, 8, generator=g)}
    algo = DQN(cfg)
    loss, _ = algo.sequence_loss(online, target, b)

    def replay(net, i):
        h, out = b["core_state"][i:i + 1], []
        for t in range(L + 1):
            params, h = net.act({"obs": b["obs"]["obs"][i, t:t + 1]}, torch.where(b["starts"][i, t], 0.0, h),
                                torch.zeros(1, dtype=torch.bool))
            out.append(params[0, :-1])
        return torch.stack(out)

    errors = []
    for i in range(N):
        with torch.no_grad():
            q, qt = replay(online, i), replay(target, i)
        for t in range(L):
            if not b["valid"][i, t]:
                continue
            y, d, m = 0.0, 1.0, 0
            while m < 2 and t + m < L:
                y += d * float(b["rewards"][i, t + m])
                d *= 0.9
                m += 1
                if b["terminated"][i, t + m - 1]:
                    d = 0.0
                    break
            nxt = t + m
            y += d * float(qt[nxt, int(q[nxt].argmax())])  # double Q: the online network picks
            errors.append(float(q[t, int(b["actions"][i, t])]) - y)
    e = torch.tensor(errors).abs()
    want = torch.where(e < 1, 0.5 * e ** 2, e - 0.5).mean()  # Huber, delta 1
    assert float(loss.detach()) == pytest.approx(float(want), rel=1e-5, abs=1e-6)
