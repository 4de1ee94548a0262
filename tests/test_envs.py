import warnings

import numpy as np
import pytest
from pettingzoo.test import parallel_api_test

from envs import ParallelEnv, describe, make_batched, make_env
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


def test_batched_env_autoresets_on_the_step_after_done():
    env = make_batched("CartPole-v1", agents=2, copies=3)
    obs = env.reset(seed=0)
    assert obs.shape == (3, 2, 4)
    pending = np.zeros((3, 2), dtype=bool)
    seen_done = 0
    for _ in range(300):
        obs, rew, term, trunc = env.step(np.zeros((3, 2), dtype=np.int64))  # always push left: short episodes
        # The step after a done is a reset: no reward, no flags, and a fresh observation near 0.
        assert np.all(rew[pending] == 0) and not np.any(term[pending] | trunc[pending])
        assert np.all(np.abs(obs[pending]) <= 0.05)
        assert np.all(rew[~pending] == 1)
        pending = term | trunc
        seen_done += int(pending.sum())
    assert seen_done > 6


def test_box_actions_are_batched_and_clipped():
    env = make_batched("Pendulum-v1", agents=2, copies=2)
    env.reset(seed=0)
    obs, rew, term, trunc = env.step(np.full((2, 2, 1), 100.0, dtype=np.float32))
    assert obs.shape == (2, 2, 3) and rew.shape == (2, 2)


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
    assert info.obs_shape == (4,) and info.action_kind == "discrete" and info.num_actions == 2
    assert info.reward_threshold == 475.0 and len(info.agent_ids) == 8
    box = describe("Pendulum-v1", agents=1)
    assert box.action_kind == "box" and box.action_shape == (1,)


def test_module_colon_id_imports_the_module_and_works_in_both_forms():
    env_id = "gymnasium.envs.classic_control:CartPole-v1"
    assert describe(env_id, agents=2).obs_shape == (4,)
    assert make_batched(env_id, agents=2, copies=2).reset(seed=0).shape == (2, 2, 4)
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
    assert info.obs_shape == (6,) and info.action_shape == (4,)
    env = make_batched("TestGrid-v0", agents=2, copies=1)
    assert env.reset(seed=0).shape == (1, 2, 6)
    obs, *_ = env.step(np.zeros((1, 2, 4), np.float32))
    assert obs.shape == (1, 2, 6)
