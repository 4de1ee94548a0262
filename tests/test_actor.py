"""The actor's rollout logic, in-process (the RPC around it is exercised by the end-to-end tests)."""

import dataclasses

import torch

from envs import describe, make_agent_batch
from marl.actor import RolloutWorker
from marl.config import Config
from marl.models import build_model, network_of
from marl.policies import specs_of


def make_worker(**overrides) -> RolloutWorker:
    cfg = dataclasses.replace(Config(), **{**dict(agents=3, envs_per_actor=2, num_steps=200), **overrides})
    return RolloutWorker(cfg, describe(cfg.env, cfg.agents), index=0)


def weights(**overrides):
    torch.manual_seed(0)
    cfg = dataclasses.replace(Config(), **overrides)
    return build_model(specs_of(cfg, describe("CartPole-v1", 3)), network_of(cfg)).state_dict()


def collect(w: RolloutWorker, sd):
    """The rollout of the worker's one policy."""
    rollout = w.collect(0, sd)
    (tr,) = rollout.trajectories.values()
    return rollout, tr


def test_rollout_shapes_masks_and_episode_statistics():
    w = make_worker()
    ro, tr = collect(w, weights())
    T, E, N = 200, 2, 3
    assert set(tr["obs"]) == {"obs"} and tr["obs"]["obs"].shape == (T, E, N, 4) and tr["obs"]["obs"].dtype == torch.float32
    assert tr["actions"].shape == (T, E, N) and tr["next_value"].shape == (E, N)
    assert ro.policy_version == 0 and ro.actor == 0 and "state" not in tr and "action_mask" not in tr
    done = tr["terminated"] | tr["truncated"]
    # The step after a done is an autoreset step: invalid, and only those are.
    assert torch.equal(tr["valid"][1:], ~done[:-1])
    assert tr["valid"][0].all()
    assert ro.episode_returns.numel() == int(done.sum()) > 0
    # CartPole pays 1 per step, so each finished episode's return is its length.
    assert torch.equal(ro.episode_returns, ro.episode_lengths.double())
    assert ro.steps == int(tr["valid"].sum())
    # Agent ids of finished episodes index the agent axis.
    assert ro.episode_agents.numel() == ro.episode_returns.numel() and set(ro.episode_agents.tolist()) <= {0, 1, 2}


def test_agent_ids_and_a_central_critic_reach_the_networks_inputs():
    overrides = dict(agent_id_input=True, critic="central")
    w = make_worker(num_steps=5, **overrides)
    ro, tr = collect(w, weights(**overrides))
    # The actor records its observation and its agent id (a leaf the encoder one-hots); the critic
    # the state (every agent's observation, then the alive mask), and reads the actor's input after it.
    obs, ids, state = tr["obs"]["obs"], tr["obs"]["agent_id"], tr["state"]
    assert set(tr["obs"]) == {"obs", "agent_id"}
    assert obs.shape == (5, 2, 3, 4) and ids.shape == (5, 2, 3) and ids.dtype == torch.int64
    assert state.shape == (5, 2, 3, 3 * 4 + 3)
    assert torch.equal(ids, torch.arange(3).expand(5, 2, 3))
    for n in range(3):
        # Every agent's critic input holds every agent's observation, in the env's agent order.
        assert torch.equal(state[:, :, n, 4 * n:4 * n + 4], obs[:, :, n])
        assert torch.equal(state[:, :, n], state[:, :, 0])
    # What the networks read: the actor its observation, then its one-hot; the critic the state,
    # then the actor's input.
    net = w.policy.policies["shared"]
    flat = {k: v.reshape(30, *v.shape[3:]) for k, v in tr["obs"].items()}
    with torch.inference_mode():
        x = net.encoder(flat)
        c = net.critic_encoder({**flat, "state": state.reshape(30, 15)})
        _, value, _ = net(flat, state.reshape(30, 15))
    assert x.shape == (30, 4 + 3) and c.shape == (30, (3 * 4 + 3) + (4 + 3))
    assert torch.equal(x[:, :4], flat["obs"]) and torch.equal(x[:, 4:], torch.eye(3).repeat(10, 1))
    assert torch.equal(c[:, :15], state.reshape(30, 15)) and torch.equal(c[:, 15:], x)
    # And the values recorded are the critic's on exactly those inputs.
    assert torch.allclose(value.reshape(5, 2, 3), tr["values"], atol=1e-6)


def test_episodes_continue_across_requests():
    w = make_worker(num_steps=5)
    sd = weights()
    _, a = collect(w, sd)
    ended_on = w.obs[0]["obs"].clone()  # the observation after the first rollout's last step
    _, b = collect(w, None)  # same version: no weights sent
    # The second rollout starts exactly where the first stopped, not at a reset.
    assert torch.equal(b["obs"]["obs"][0], ended_on)
    assert not torch.equal(a["obs"]["obs"][-1], ended_on)  # and that observation is a new one


def test_truncation_bootstraps_from_the_value_of_the_final_observation():
    # A 10-step time limit truncates every episode that survives it.
    w = make_worker(num_steps=40)
    w.runner.env = make_agent_batch(describe("CartPole-v1", 3, {"max_episode_steps": 10}), 2, [[0, 1, 2]])
    w._reset(0)
    _, tr = collect(w, weights())
    assert tr["truncated"].any()
    obs = tr["obs"]["obs"]
    with torch.inference_mode():
        for t, e, n in tr["truncated"].nonzero().tolist():
            final_obs = obs[t + 1, e, n] if t + 1 < obs.shape[0] else w.obs[0]["obs"][e, n]
            _, v, _ = w.policy.policies["shared"]({"obs": final_obs.unsqueeze(0)})
            assert torch.allclose(tr["bootstrap_value"][t, e, n], v[0], atol=1e-6)
    assert torch.all(tr["bootstrap_value"][~tr["truncated"]] == 0)


def test_episode_rollouts_return_whole_episodes_per_slot():
    w = make_worker(rollout="episodes", episodes_per_request=2)
    ro, tr = collect(w, weights())
    done = (tr["terminated"] | tr["truncated"]) & tr["valid"]
    assert torch.equal(done.sum(0), torch.full((2, 3), 2))  # exactly K=2 finished episodes per slot
    # After each slot's second episode ends, nothing of it is valid any more.
    for e in range(2):
        for n in range(3):
            last_end = done[:, e, n].nonzero().max()
            assert not tr["valid"][last_end + 1:, e, n].any()
    assert ro.episode_lengths.sum() == tr["valid"].sum()


def test_a_stale_version_without_weights_is_a_bug_not_silence():
    w = make_worker()
    w.collect(0, weights())
    try:
        w.collect(1, None)
    except RuntimeError as e:
        assert "version" in str(e)
    else:
        raise AssertionError("acting with weights it does not hold must fail")


def test_a_tanh_squashed_policy_sends_the_env_its_squashed_action_and_stores_u():
    w = make_worker(env="Pendulum-v1", agents=2, num_steps=20, action_dist="tanh_gaussian")
    sent = []
    step = w.env.step
    w.env.step = lambda actions: (sent.append(actions[0].copy()), step(actions))[1]
    sd = build_model(w.specs, network_of(w.cfg)).state_dict()
    sd["policies.shared.actor.head.bias"] += 3.0  # means far past the bound: clipping and squashing differ
    _, tr = collect(w, sd)
    want = -2.0 + (torch.tanh(tr["actions"]) + 1) * 2.0  # Pendulum's torque is in [-2, 2]
    torch.testing.assert_close(torch.from_numpy(sent[0]).float(), want[0])
    assert float(tr["actions"].max()) > 2.5 and float(torch.from_numpy(sent[0]).max()) < 2.0
