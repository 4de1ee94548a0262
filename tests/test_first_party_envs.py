"""The first-party Gymnasium envs: envs.masked (action masks) and envs.targets (MultiDiscrete, MultiBinary).

They are test fixtures for the framework as much as envs, so their own contract is pinned here: the
Gymnasium API, registration by `module:EnvId`, seeding, the documented optimum and random returns,
and that a move the mask forbids always raises while a legal one never does.
"""

import subprocess
import sys
import warnings

import gymnasium as gym
import numpy as np
import pytest
from gymnasium.utils.env_checker import check_env, data_equivalence
from gymnasium.utils.passive_env_checker import env_render_passive_checker
from pettingzoo.test import parallel_api_test

from envs.masked import MaskedChoiceEnv, parallel_env
from envs.targets import MatchBitsEnv, MatchDigitsEnv

from tests.conftest import ROOT

MASK_IN = ["obs", "info"]


def mask_of(env: MaskedChoiceEnv, obs, info) -> np.ndarray:
    return obs["action_mask"] if env.mask_in == "obs" else info["action_mask"]


def target_of(env, obs) -> int | np.ndarray:
    """The optimal action: the masked env shows the target one-hot, the others show it as is."""
    env = env.unwrapped
    if isinstance(env, MaskedChoiceEnv):
        return int(np.argmax(obs["observation"] if env.mask_in == "obs" else obs))
    return obs


def rollout(env, seed: int, policy) -> list:
    obs, info = env.reset(seed=seed)
    steps = [(obs, info)]
    while True:
        obs, reward, terminated, truncated, info = env.step(policy(env, obs, info))
        steps.append((obs, reward, terminated, truncated, info))
        if terminated or truncated:
            return steps


def optimal(env, obs, info):
    return target_of(env, obs)


# --- Gymnasium API ------------------------------------------------------------------------

@pytest.mark.parametrize("mask_in", MASK_IN)
def test_masked_choice_passes_gymnasium_env_checker(mask_in):
    env = MaskedChoiceEnv(mask_in=mask_in)
    # check_env steps with unmasked action_space.sample(). Its own steps are seeded (123) and happen
    # to be legal here; its first step samples the space unseeded, so seed it with a seed whose draw
    # is legal. That keeps check_env about the API; the mask is checked by the tests below.
    env.action_space.seed(0)
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # check_env reports some failures only as warnings
        check_env(env.unwrapped, skip_render_check=True)
        rendering = MaskedChoiceEnv(mask_in=mask_in, render_mode="rgb_array")
        rendering.reset(seed=0)
        env_render_passive_checker(rendering)


@pytest.mark.parametrize("cls", [MatchDigitsEnv, MatchBitsEnv])
def test_target_envs_pass_gymnasium_env_checker(cls):
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        check_env(cls().unwrapped, skip_render_check=True)
        env = cls(render_mode="rgb_array")
        env.reset(seed=0)
        env_render_passive_checker(env)
        assert env.render().shape == (32, 32 * len(env._high), 3)


@pytest.mark.parametrize("env_id, cls, kwargs", [
    ("envs.masked:MaskedChoice-v0", MaskedChoiceEnv, {"mask_in": "obs"}),
    ("envs.masked:MaskedChoice-v0", MaskedChoiceEnv, {"mask_in": "info"}),
    ("envs.targets:MatchDigits-v0", MatchDigitsEnv, {"nvec": (2, 7)}),
    ("envs.targets:MatchBits-v0", MatchBitsEnv, {"n": 3}),
])
def test_envs_make_by_module_id_without_a_time_limit(env_id, cls, kwargs):
    env = gym.make(env_id, **kwargs)
    assert isinstance(env.unwrapped, cls)
    assert env.spec.max_episode_steps is None  # the env terminates by itself
    steps = rollout(env, 0, optimal)
    assert len(steps) - 1 == env.unwrapped.episode_length
    assert all(not s[3] for s in steps[1:])   # never truncated
    assert [s[2] for s in steps[1:]] == [False] * (len(steps) - 2) + [True]
    env.close()


def test_registration_is_idempotent():
    # A second import (here: a reload) must neither re-register nor warn.
    code = ("import importlib, envs.masked, envs.targets; "
            "importlib.reload(envs.masked); importlib.reload(envs.targets); "
            "import gymnasium as gym; gym.make('MaskedChoice-v0'); gym.make('MatchBits-v0')")
    subprocess.run([sys.executable, "-W", "error", "-c", code], cwd=ROOT, check=True, timeout=60)


def test_bad_kwargs_raise():
    with pytest.raises(ValueError, match="mask_in"):
        MaskedChoiceEnv(mask_in="action")
    with pytest.raises(ValueError, match="mask_in"):
        gym.make("envs.masked:MaskedChoice-v0", mask_in="both")
    with pytest.raises(ValueError):
        MatchDigitsEnv(nvec=(3, 0))
    with pytest.raises(ValueError):
        MatchBitsEnv(n=0)


# --- spaces and seeding ---------------------------------------------------------------------

def test_masked_choice_spaces():
    env = MaskedChoiceEnv(num_actions=5, mask_in="obs")
    assert env.observation_space == gym.spaces.Dict({
        "observation": gym.spaces.Box(0, 1, (5,), np.float32),
        "action_mask": gym.spaces.Box(0, 1, (5,), np.int8)})
    assert env.action_space == gym.spaces.Discrete(5)
    obs, info = env.reset(seed=0)
    assert info == {}
    assert obs["action_mask"].dtype == np.int8 and obs["action_mask"][target_of(env, obs)] == 1

    env = MaskedChoiceEnv(num_actions=5, mask_in="info")
    assert env.observation_space == gym.spaces.Box(0, 1, (5,), np.float32)
    obs, info = env.reset(seed=0)
    assert info["action_mask"].dtype == np.int8 and info["action_mask"].shape == (5,)
    _, _, _, _, info = env.step(target_of(env, obs))
    assert info["action_mask"].dtype == np.int8 and info["action_mask"].shape == (5,)


@pytest.mark.parametrize("make", [lambda: MaskedChoiceEnv(mask_in="obs"), lambda: MaskedChoiceEnv(mask_in="info"),
                                  MatchDigitsEnv, MatchBitsEnv], ids=["masked-obs", "masked-info", "digits", "bits"])
def test_same_seed_same_episode(make):
    a, b = rollout(make(), 7, optimal), rollout(make(), 7, optimal)
    assert data_equivalence(a, b, exact=True)
    assert not data_equivalence(a, rollout(make(), 8, optimal))
    # Reseeding one env replays too: nothing outlives reset(seed=...).
    env = make()
    first = rollout(env, 7, optimal)
    rollout(env, 9, optimal)
    assert data_equivalence(first, rollout(env, 7, optimal), exact=True)


# --- the mask contract --------------------------------------------------------------------

@pytest.mark.parametrize("mask_in", MASK_IN)
def test_illegal_and_out_of_range_actions_raise(mask_in):
    env = MaskedChoiceEnv(mask_in=mask_in)
    for seed in range(20):
        obs, info = env.reset(seed=seed)
        mask = mask_of(env, obs, info)
        if mask.all():
            continue
        bad = int(np.flatnonzero(mask == 0)[0])
        with pytest.raises(ValueError, match=f"illegal action {bad}: legal actions are"):
            env.step(bad)
        break
    else:
        pytest.fail("no reset in 20 seeds had an illegal action")
    for bad in (-1, env.num_actions, 1.0, np.array([0])):
        with pytest.raises(ValueError, match="illegal action"):
            env.step(bad)
    # A rejected action changes nothing: the legal target still scores.
    assert env.step(target_of(env, obs))[1] == 1.0


def test_masked_choice_raises_after_the_episode():
    env = MaskedChoiceEnv(episode_length=2)
    rollout(env, 0, optimal)
    with pytest.raises(RuntimeError):
        env.step(0)


@pytest.mark.parametrize("mask_in", MASK_IN)
def test_many_random_legal_steps_never_raise_and_every_illegal_try_does(mask_in):
    env = MaskedChoiceEnv(mask_in=mask_in)
    rng = np.random.default_rng(0)
    u = rng.random(100_000)  # drawn at once: Generator.choice per step would dominate the run time
    obs, info = env.reset(seed=0)
    illegal_tries = 0
    for t in range(100_000):
        mask = mask_of(env, obs, info)
        if t % 250 == 0 and not mask.all():
            bad = int(rng.choice(np.flatnonzero(mask == 0)))
            with pytest.raises(ValueError, match="illegal action"):
                env.step(bad)
            illegal_tries += 1
        legal = np.flatnonzero(mask)
        obs, _, terminated, _, info = env.step(int(legal[int(u[t] * len(legal))]))
        if terminated:
            obs, info = env.reset()
    assert illegal_tries >= 300


@pytest.mark.parametrize("cls, bad", [
    (MatchDigitsEnv, [[0, 0]]), (MatchDigitsEnv, [[0, 0, 0, 0]]), (MatchDigitsEnv, [[0.0, 1.0, 2.0]]),
    (MatchDigitsEnv, [[3, 0, 0]]), (MatchDigitsEnv, [[0, 0, -1]]), (MatchDigitsEnv, [1]),
    (MatchBitsEnv, [[0] * 5]), (MatchBitsEnv, [[2, 0, 0, 0, 0, 0]]), (MatchBitsEnv, [np.full(6, 0.5)]),
    (MatchBitsEnv, [[-1, 0, 0, 0, 0, 0]]),
])
def test_target_envs_reject_bad_actions(cls, bad):
    env = cls()
    obs, _ = env.reset(seed=0)
    with pytest.raises(ValueError):
        env.step(np.asarray(bad[0]))
    assert env.step(obs)[1] == 1.0  # nothing changed


def test_target_envs_accept_lists_and_bools():
    env = MatchBitsEnv(n=3)
    obs, _ = env.reset(seed=0)
    assert env.step(obs.astype(bool))[1] == 1.0
    env = MatchDigitsEnv()
    obs, _ = env.reset(seed=0)
    assert env.step(obs.tolist())[1] == 1.0


# --- returns ----------------------------------------------------------------------------------

def test_documented_returns():
    assert MaskedChoiceEnv.optimum == 16 and MaskedChoiceEnv.random_legal_return == 5.25  # 16 * 63/192
    assert MatchDigitsEnv.optimum == 8 and MatchDigitsEnv.random_return == pytest.approx(8 * 47 / 180)
    assert MatchBitsEnv.optimum == 8 and MatchBitsEnv.random_return == 4
    # Instances follow their own kwargs: K = 3 pays (2^3 - 1) / (3 * 2^2) = 7/12 a step.
    env = MaskedChoiceEnv(num_actions=3, episode_length=4)
    assert env.optimum == 4 and env.random_legal_return == pytest.approx(4 * 7 / 12)
    assert MatchDigitsEnv(nvec=(2, 4), episode_length=3).random_return == pytest.approx(3 * (1 / 2 + 1 / 4) / 2)
    assert MatchBitsEnv(episode_length=5).random_return == 2.5


@pytest.mark.parametrize("make", [lambda: MaskedChoiceEnv(mask_in="obs"), lambda: MaskedChoiceEnv(mask_in="info"),
                                  MatchDigitsEnv, lambda: MatchDigitsEnv(nvec=(9,), episode_length=3),
                                  MatchBitsEnv], ids=["masked-obs", "masked-info", "digits", "digits-9", "bits"])
def test_optimal_policy_gets_exactly_the_optimum(make):
    env = make()
    for seed in range(5):
        assert sum(s[1] for s in rollout(env, seed, optimal)[1:]) == env.optimum


def random_returns(env, policy, episodes: int = 2_000) -> np.ndarray:
    returns = np.empty(episodes)
    env.reset(seed=0)
    for i in range(episodes):
        obs, info = env.reset()
        total, done = 0.0, False
        while not done:
            obs, reward, done, _, info = env.step(policy(obs, info))
            total += reward
        returns[i] = total
    return returns


def within_3_standard_errors(returns: np.ndarray, expected: float) -> bool:
    se = returns.std(ddof=1) / np.sqrt(len(returns))
    return abs(returns.mean() - expected) <= 3 * se


@pytest.mark.parametrize("mask_in", MASK_IN)
def test_random_legal_policy_matches_random_legal_return(mask_in):
    env = MaskedChoiceEnv(mask_in=mask_in)
    rng = np.random.default_rng(1)
    returns = random_returns(env, lambda obs, info: int(rng.choice(np.flatnonzero(mask_of(env, obs, info)))))
    assert within_3_standard_errors(returns, env.random_legal_return), (returns.mean(), env.random_legal_return)


@pytest.mark.parametrize("cls", [MatchDigitsEnv, MatchBitsEnv])
def test_random_policy_matches_random_return(cls):
    env = cls()
    env.action_space.seed(1)
    returns = random_returns(env, lambda obs, info: env.action_space.sample())
    assert within_3_standard_errors(returns, env.random_return), (returns.mean(), env.random_return)


# --- PettingZoo ---------------------------------------------------------------------------

def test_parallel_env_passes_pettingzoo_parallel_api_test():
    env = parallel_env(agents=2)
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # parallel_api_test reports some violations only as warnings
        # It samples each agent's action with obs["action_mask"], so an illegal move here would raise.
        parallel_api_test(env, num_cycles=100)
    assert env.possible_agents == ["agent_0", "agent_1"]
    obs, _ = env.reset(seed=0)
    assert set(obs["agent_0"]) == {"observation", "action_mask"}
    assert env.observation_space("agent_1") is env.observation_space("agent_1")


def test_cartpole_without_velocities_is_cartpole_with_two_zeros():
    """envs:CartPoleNoVel-v1: the same dynamics, limit and threshold as CartPole-v1, indices 1 and 3
    zeroed, in the single env and in the vector env that marl's actors step."""
    import envs  # noqa: F401 - registers the id

    spec = gym.spec("CartPoleNoVel-v1")
    assert spec.max_episode_steps == 500 and spec.reward_threshold == 475.0 and spec.vector_entry_point
    for make in (lambda i: gym.make(i), lambda i: gym.make_vec(i, num_envs=3, vectorization_mode="vector_entry_point")):
        full, hidden = make("CartPole-v1"), make("CartPoleNoVel-v1")
        a, _ = full.reset(seed=5)
        b, _ = hidden.reset(seed=5)
        for _ in range(30):
            assert np.array_equal(b[..., [0, 2]], a[..., [0, 2]]) and not b[..., [1, 3]].any()
            action = full.action_space.sample()
            a, ra, ta, _, _ = full.step(action)
            b, rb, tb, _, _ = hidden.step(action)
            assert np.array_equal(ra, rb) and np.array_equal(ta, tb)
