import warnings

import gymnasium as gym
import numpy as np
import pytest
from pettingzoo.test import parallel_api_test

from envs import ActionSpec, AgentSpec, Leaf, ParallelEnv, describe, make_agent_batch, make_env
from envs.registry import EnvError

CARTPOLE = AgentSpec((Leaf("obs", (), "box", (4,), "float32"),), ActionSpec("categorical", (), (), (2,), (0,)))


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
    assert len(obs) == 1 and set(obs[0]) == {"obs"}
    assert obs[0]["obs"].shape == (3, 2, 4) and obs[0]["obs"].dtype == np.float32
    assert env.active[0].all() and env.masks == [None]
    pending = np.zeros((3, 2), dtype=bool)
    seen_done = 0
    for _ in range(300):
        obs, rew, term, trunc, active = (x[0] for x in env.step([np.zeros((3, 2), dtype=np.int64)]))  # push left: short episodes
        assert set(obs) == {"obs"} and env.masks == [None]
        obs = obs["obs"]
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
    assert set(obs[0]) == {"obs"} and obs[0]["obs"].shape == (2, 2, 3) and rew[0].shape == (2, 2)
    # 100 is clipped to the box's high end, 2.
    obs_ref, rew_ref, *_ = ref.step([np.full((2, 2, 1), 2.0, dtype=np.float32)])
    assert np.array_equal(obs[0]["obs"], obs_ref[0]["obs"]) and np.array_equal(rew[0], rew_ref[0])


def test_groups_are_slices_of_the_one_vector_env_in_agent_order():
    whole = batch("CartPole-v1", agents=4, copies=3)
    split = batch("CartPole-v1", agents=4, copies=3, groups=[[0, 2], [1, 3]])  # interleaved groups
    runs = batch("CartPole-v1", agents=4, copies=3, groups=[[0, 1], [2], [3]])  # contiguous: views
    full = whole.reset(seed=4)[0]["obs"]
    s, r = split.reset(seed=4), runs.reset(seed=4)
    assert all(set(x) == {"obs"} for x in s + r)
    assert np.array_equal(s[0]["obs"], full[:, [0, 2]]) and np.array_equal(s[1]["obs"], full[:, [1, 3]])
    assert [x["obs"].shape for x in r] == [(3, 2, 4), (3, 1, 4), (3, 1, 4)]
    assert all(np.shares_memory(x["obs"], runs._obs["obs"]) for x in r)  # one vector env array, viewed per group
    assert split.masks == [None, None] and runs.masks == [None, None, None]
    rng = np.random.default_rng(0)
    for _ in range(40):
        a = rng.integers(0, 2, (3, 4))
        out = [x[0] for x in whole.step([a])]
        out_s = list(split.step([a[:, [0, 2]], a[:, [1, 3]]]))
        out_r = list(runs.step([a[:, :2], a[:, 2:3], a[:, 3:]]))
        # Observations come per group as {leaf: array}; the other fields as arrays.
        out[0], out_s[0], out_r[0] = out[0]["obs"], [x["obs"] for x in out_s[0]], [x["obs"] for x in out_r[0]]
        for full_x, sx, rx in zip(out, out_s, out_r):
            assert np.array_equal(np.concatenate(sx, axis=1), full_x[:, [0, 2, 1, 3]])
            assert np.array_equal(np.concatenate(rx, axis=1), full_x)
        assert np.array_equal(split.state(), whole.state())


class _Unusable(gym.Env):
    """An env whose spaces no policy can handle: a Text observation, or one with only a Text key, or Dict actions."""

    def __init__(self, obs: str = "text", act: str = "discrete"):
        text = gym.spaces.Text(5)
        self.observation_space = {"text": text, "text_only_dict": gym.spaces.Dict({"mission": text})}[obs]
        self.action_space = {"discrete": gym.spaces.Discrete(2), "dict": gym.spaces.Dict({"a": gym.spaces.Discrete(2)})}[act]

    def reset(self, *, seed=None, options=None):
        super().reset(seed=seed)
        return self.observation_space.sample(), {}

    def step(self, action):
        return self.observation_space.sample(), 0.0, False, False, {}


gym.register(id="TestTextObs-v0", entry_point=_Unusable, kwargs={"obs": "text"})
gym.register(id="TestTextOnlyDict-v0", entry_point=_Unusable, kwargs={"obs": "text_only_dict"})
gym.register(id="TestDictAction-v0", entry_point=_Unusable, kwargs={"act": "dict"})


@pytest.mark.parametrize("env_id, message", [
    ("CartPol-v1", "did you mean 'CartPole-v1'"),
    ("no_such_module_xyz:Foo-v0", "does not import"),
    # Taxi's Discrete and Blackjack's Tuple observations are supported now (see the next test); a Text
    # observation is not, nor a Dict with nothing but text in it, nor Dict actions.
    ("TestTextObs-v0", "observation space Text.* is not supported"),
    ("TestTextOnlyDict-v0", "observation space Dict.* has nothing a network can read"),
    ("TestDictAction-v0", "action space Dict.* is not supported"),
])
def test_describe_rejects_unusable_envs_with_one_line(env_id, message):
    with pytest.raises(EnvError, match=message) as err:
        describe(env_id, agents=2)
    assert "\n" not in str(err.value)


def test_discrete_and_tuple_observations_describe_as_leaves():
    # Taxi: a Discrete observation (one leaf, one-hot in the model) and its action mask in info.
    taxi = describe("Taxi-v4", agents=2).spec
    assert taxi.obs == (Leaf("obs", (), "discrete", (), "int64", (500,), (0,)),)
    assert taxi.action == ActionSpec("categorical", (), (), (6,), (0,)) and taxi.mask == "info"
    # Blackjack: a Tuple of Discretes, one leaf per entry, found by index.
    jack = describe("Blackjack-v1", agents=2).spec
    assert jack.obs == tuple(Leaf(str(i), (i,), "discrete", (), "int64", (n,), (0,)) for i, n in enumerate((32, 11, 2)))
    assert jack.mask == "" and jack.dropped == ()


def test_describe_reads_spaces_and_threshold():
    info = describe("CartPole-v1", agents=8)
    assert info.spec == CARTPOLE and info.spec.action.num_outputs == 2 and info.spec.mask == ""
    assert info.reward_threshold == 475.0 and len(info.agent_ids) == 8
    box = describe("Pendulum-v1", agents=1)
    assert box.spec.action == ActionSpec("gaussian", (1,), (1,), low=(-2.0,), high=(2.0,))
    assert box.spec.obs == (Leaf("obs", (), "box", (3,), "float32"),)
    assert info.specs == (CARTPOLE,) * 8 and not info.has_state
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
    assert describe(env_id, agents=2).spec == CARTPOLE
    assert batch(env_id, agents=2, copies=2).reset(seed=0)[0]["obs"].shape == (2, 2, 4)
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
    # The observation keeps its shape in the batch (the encoder flattens it: 6 features); the action
    # is flat for the policy and takes the env's own shape at the edge (Grid.step asserts it).
    assert info.spec.obs == (Leaf("obs", (), "box", (2, 3), "float32"),)
    assert info.spec.action == ActionSpec("gaussian", (4,), (2, 2), low=(-1.0,) * 4, high=(1.0,) * 4)
    assert info.spec.action.num_outputs == 4 and sum(leaf.size for leaf in info.spec.obs) == 6
    from marl.models.encoders import Encoder

    assert Encoder(info.spec.obs).out_dim == 6
    env = batch("TestGrid-v0", agents=2, copies=1)
    first = env.reset(seed=0)[0]["obs"]
    assert first.shape == (1, 2, 2, 3) and not first.any()
    obs, *_ = env.step([np.zeros((1, 2, 4), np.float32)])
    assert obs[0]["obs"].shape == (1, 2, 2, 3) and (obs[0]["obs"] == 1).all()
    assert env.state().shape == (1, 2 * 6 + 2)  # the central critic's fallback state reads it flat


def test_each_kind_of_id_goes_to_its_own_backend():
    from envs.gymnasium_backend import Gymnasium
    from envs.pettingzoo_backend import PettingZooParallel, PettingZooTurnBased
    from envs.registry import backend, decides_agents

    assert type(backend("CartPole-v1")) is Gymnasium and type(backend("envs.targets:MatchDigits-v0")) is Gymnasium
    assert type(backend("pettingzoo:envs.coop_nav")) is PettingZooParallel
    assert type(backend("pettingzoo:pettingzoo.classic.tictactoe_v3")) is PettingZooTurnBased
    assert not decides_agents("CartPole-v1") and decides_agents("pettingzoo:envs.coop_nav")
    info = describe("pettingzoo:pettingzoo.classic.tictactoe_v3")
    assert info.turn_based and info.own_agents and not describe("CartPole-v1", 2).own_agents
    with pytest.raises(EnvError, match="expected pettingzoo:<module>.<env>"):
        backend("pettingzoo:")  # a backend that knows the prefix refuses the rest in one line
