import warnings

import numpy as np
import pytest
from pettingzoo.test import parallel_api_test

from envs import ParallelEnv, describe, make_agent_batch, make_env
from envs.registry import EnvError


def test_independent_cartpole_passes_pettingzoo_parallel_api_test():
    env = make_env("CartPole-v1", agents=3)
    with warnings.catch_warnings():
        # parallel_api_test reports some API violations only as warnings: make them fail the test.
        warnings.simplefilter("error")
        parallel_api_test(env, num_cycles=600)
    assert env.possible_agents == ["agent_0", "agent_1", "agent_2"]
    assert isinstance(env, ParallelEnv)


def test_independent_agents_get_distinct_episodes_and_a_global_state():
    env = make_env("CartPole-v1", agents=4)
    obs, _ = env.reset(seed=3)
    assert len({tuple(o) for o in obs.values()}) == 4
    assert env.state().shape == (16,)


def batch(env_id, agents, copies, groups=None, **kwargs):
    return make_agent_batch(describe(env_id, agents, kwargs), copies, groups or [list(range(agents))])


def test_batched_env_autoresets_on_the_step_after_done():
    env = batch("CartPole-v1", agents=2, copies=3)
    obs = env.reset(seed=0)
    assert len(obs) == 1 and obs[0].shape == (3, 2, 4) and obs[0].dtype == np.float32
    assert env.active[0].all()
    pending = np.zeros((3, 2), dtype=bool)
    seen_done = 0
    for _ in range(300):
        obs, rew, term, trunc, active = (x[0] for x in env.step([np.zeros((3, 2), dtype=np.int64)]))  # push left: short episodes
        # The step after a done is a reset: no reward, no flags, and a fresh observation near 0.
        assert np.all(rew[pending] == 0) and not np.any(term[pending] | trunc[pending])
        assert np.all(np.abs(obs[pending]) <= 0.05)
        assert np.all(rew[~pending] == 1) and rew.dtype == np.float32
        pending = term | trunc
        # active: the slot's next step is a real transition, i.e. not an autoreset step.
        assert np.array_equal(active, ~pending)
        seen_done += int(pending.sum())
        # The central critic's fallback input: every agent's observation, then an alive mask of ones.
        state = env.state()
        assert np.array_equal(state, np.concatenate([obs.reshape(3, 8), np.ones((3, 2))], axis=1))
    assert seen_done > 6
    assert describe("CartPole-v1", 2).state_dim == env.state_dim == 10


def test_box_actions_are_batched_and_clipped():
    env = batch("Pendulum-v1", agents=2, copies=2)
    ref = batch("Pendulum-v1", agents=2, copies=2)
    env.reset(seed=0), ref.reset(seed=0)
    obs, rew, term, trunc, active = env.step([np.full((2, 2, 1), 100.0, dtype=np.float32)])
    assert obs[0].shape == (2, 2, 3) and rew[0].shape == (2, 2)
    # 100 is clipped to the box's high end, 2.
    obs_ref, rew_ref, *_ = ref.step([np.full((2, 2, 1), 2.0, dtype=np.float32)])
    assert np.array_equal(obs[0], obs_ref[0]) and np.array_equal(rew[0], rew_ref[0])


def test_groups_are_slices_of_the_one_vector_env_in_agent_order():
    whole = batch("CartPole-v1", agents=4, copies=3)
    split = batch("CartPole-v1", agents=4, copies=3, groups=[[0, 2], [1, 3]])  # interleaved groups
    runs = batch("CartPole-v1", agents=4, copies=3, groups=[[0, 1], [2], [3]])  # contiguous: views
    full = whole.reset(seed=4)[0]
    s, r = split.reset(seed=4), runs.reset(seed=4)
    assert np.array_equal(s[0], full[:, [0, 2]]) and np.array_equal(s[1], full[:, [1, 3]])
    assert [x.shape for x in r] == [(3, 2, 4), (3, 1, 4), (3, 1, 4)]
    assert all(np.shares_memory(x, runs._obs) for x in r)  # one vector env array, viewed per group
    rng = np.random.default_rng(0)
    for _ in range(40):
        a = rng.integers(0, 2, (3, 4))
        out = [x[0] for x in whole.step([a])]
        out_s = split.step([a[:, [0, 2]], a[:, [1, 3]]])
        out_r = runs.step([a[:, :2], a[:, 2:3], a[:, 3:]])
        for full_x, sx, rx in zip(out, out_s, out_r):
            assert np.array_equal(np.concatenate(sx, axis=1), full_x[:, [0, 2, 1, 3]])
            assert np.array_equal(np.concatenate(rx, axis=1), full_x)
        assert np.array_equal(split.state(), whole.state())


@pytest.mark.parametrize("env_id, message", [
    ("CartPol-v1", "did you mean 'CartPole-v1'"),
    ("no_such_module_xyz:Foo-v0", "does not import"),
    ("Taxi-v4", "observation space"),
    ("Blackjack-v1", "observation space"),
])
def test_describe_rejects_unusable_envs_with_one_line(env_id, message):
    with pytest.raises(EnvError, match=message) as err:
        describe(env_id, agents=2)
    assert "\n" not in str(err.value)


def test_describe_reads_spaces_and_threshold():
    info = describe("CartPole-v1", agents=8)
    assert info.spec.obs_shape == (4,) and info.spec.action_kind == "discrete" and info.spec.num_actions == 2
    assert info.reward_threshold == 475.0 and len(info.agent_ids) == 8
    box = describe("Pendulum-v1", agents=1)
    assert box.spec.action_kind == "box" and box.spec.action_shape == (1,)
    assert len(info.specs) == 8 and info.specs[0].obs_shape == (4,) and not info.has_state
    assert info.state_dim == 8 * 4 + 8 and info.env_kwargs == ()


def test_gymnasium_env_kwargs_reach_the_env_and_bad_ones_are_one_line():
    info = describe("CartPole-v1", 1, {"max_episode_steps": 3})
    assert info.kwargs == {"max_episode_steps": 3}
    env = make_agent_batch(info, 2, [[0]])
    env.reset(seed=0)
    for _ in range(2):
        env.step([np.array([[0], [1]])])
    *_, trunc, active = env.step([np.array([[0], [1]])])
    assert trunc[0].all() and not active[0].any()
    with pytest.raises(EnvError, match="no_such_kwarg") as err:
        describe("CartPole-v1", 1, {"no_such_kwarg": 1})
    assert "\n" not in str(err.value)


def test_module_colon_id_imports_the_module_and_works_in_both_forms():
    env_id = "gymnasium.envs.classic_control:CartPole-v1"
    assert describe(env_id, agents=2).spec.obs_shape == (4,)
    assert batch(env_id, agents=2, copies=2).reset(seed=0)[0].shape == (2, 2, 4)
    assert set(make_env(env_id, agents=2).reset(seed=0)[0]) == {"agent_0", "agent_1"}


def test_multi_dimensional_spaces_are_flattened_at_the_edge():
    # CarRacing-style image observations are out of reach without box2d; a 2-D Box obs is not.
    import gymnasium as gym

    class Grid(gym.Env):
        observation_space = gym.spaces.Box(0, 1, (2, 3), np.float32)
        action_space = gym.spaces.Box(-1, 1, (2, 2), np.float32)

        def reset(self, *, seed=None, options=None):
            super().reset(seed=seed)
            return np.zeros((2, 3), np.float32), {}

        def step(self, action):
            assert action.shape == (2, 2)
            return np.ones((2, 3), np.float32), 0.0, False, False, {}

    gym.register(id="TestGrid-v0", entry_point=Grid)
    info = describe("TestGrid-v0", agents=2)
    assert info.spec.obs_shape == (6,) and info.spec.action_shape == (4,)
    env = batch("TestGrid-v0", agents=2, copies=1)
    assert env.reset(seed=0)[0].shape == (1, 2, 6)
    obs, *_ = env.step([np.zeros((1, 2, 4), np.float32)])
    assert obs[0].shape == (1, 2, 6)
