"""PettingZoo Parallel envs: describe(), the grouped PettingZooBatch, and an actor stepping one."""

import dataclasses
import sys
import warnings

import gymnasium as gym
import numpy as np
import pytest
import torch
from pettingzoo.test import parallel_api_test

from envs import ActionSpec, AgentSpec, Leaf, describe, make_agent_batch, make_env
from envs.pettingzoo_batch import PettingZooBatch
from envs.registry import EnvError
from tests import pz_envs
from tests.conftest import evaluate_cli

PZ = "pettingzoo:tests.pz_envs"


def box(*shape: int) -> tuple[Leaf, ...]:
    """A plain Box observation: one float32 leaf named "obs", kept in its own shape."""
    return (Leaf("obs", (), "box", tuple(shape), "float32"),)


def discrete(n: int) -> ActionSpec:
    return ActionSpec("categorical", (), (), (n,), (0,))


def test_the_test_env_follows_the_parallel_api():
    for kwargs in ({}, {"hetero": True, "with_state": False}):
        with warnings.catch_warnings():
            warnings.simplefilter("error")
            parallel_api_test(pz_envs.parallel_env(**kwargs), num_cycles=20)  # raises on any violation
    # And it does what the tests below rely on: agents leave one by one, at the documented steps.
    env = pz_envs.parallel_env()
    env.reset(seed=0)
    present = []
    while env.agents:
        env.step({a: env.action_space(a).sample() for a in env.agents})
        present.append(tuple(env.agents))
    assert present == [("a", "b", "c"), ("a", "c"), ("a", "c"), ("a",), ()]


def test_describe_reads_per_agent_specs_and_state():
    info = describe(PZ, None, {"hetero": True})
    assert info.agent_ids == ("a", "b", "c")
    disc = AgentSpec(box(3), discrete(3))
    assert info.specs == (disc, AgentSpec(box(2, 2), ActionSpec("gaussian", (2,), (2,), low=(-1.0,) * 2, high=(1.0,) * 2)), disc)
    assert info.specs[1].action.num_outputs == 2 and sum(leaf.size for leaf in info.specs[1].obs) == 4
    assert info.has_state and info.state_dim == 3 and info.reward_threshold is None
    assert info.env_kwargs == (("hetero", True),) and info.kwargs == {"hetero": True}
    with pytest.raises(ValueError, match="agents have different spaces"):
        info.spec
    # Without state(): every agent's observation plus an alive mask.
    no_state = describe(PZ, 3, {"hetero": True, "with_state": False})
    assert not no_state.has_state and no_state.state_dim == 3 + 4 + 3 + 3
    # Homogeneous agents have one spec that they all share.
    same = describe(PZ).spec
    assert same == disc and same.action.num_outputs == 3 and sum(leaf.size for leaf in same.obs) == 3
    assert getattr(torch, same.action.dtype) == torch.int64
    # MultiDiscrete actions are supported now: one categorical per entry.
    multi = describe(PZ, None, {"bad_space": "action"}).specs
    assert multi[:2] == (disc, disc) and multi[2] == AgentSpec(box(3), ActionSpec("multicategorical", (2,), (2,), (2, 2), (0, 0)))


def _batch(copies=2, groups=([0, 1, 2],), **kwargs):
    info = describe(PZ, None, kwargs)
    return make_agent_batch(info, copies, [list(g) for g in groups])


def test_agents_leave_are_padded_and_the_copy_autoresets_on_the_step_after_the_last_leaves():
    env = _batch(copies=2, with_state=False)
    assert isinstance(env, PettingZooBatch)
    obs = env.reset(seed=10)[0]
    assert set(obs) == {"obs"} and env.masks == [None]
    obs = obs["obs"]
    assert obs.shape == (2, 3, 3) and obs.dtype == np.float32
    assert np.array_equal(obs[1], [[11, 0, 0], [11, 0, 10], [11, 0, 20]])  # copy c is seeded with seed + c
    assert env.active[0].all()
    ones = np.ones((2, 3), np.int64)
    seen = []
    for t in range(1, 6):
        obs, rew, term, trunc, active = (x[0] for x in env.step([ones]))
        assert set(obs) == {"obs"} and env.masks == [None]
        seen.append((obs["obs"], rew, term, trunc, active, env.state()))
    # Step 2: "b" terminates; the observation that comes with the flag is its (real) final one.
    obs, rew, term, trunc, active, state = seen[1]
    assert term[:, 1].all() and not term[:, [0, 2]].any() and not trunc.any()
    assert np.array_equal(obs[0, 1], [10, 2, 11]) and rew[0, 1] == 200 + 2 + 1
    assert np.array_equal(active, [[True, False, True]] * 2)
    assert np.array_equal(state[:, -3:], np.ones((2, 3)))  # "b"'s final observation is still real
    # Step 3: "b" is padding: zero observation and reward, no flags, inactive, masked out of the state.
    obs, rew, term, trunc, active, state = seen[2]
    assert not obs[:, 1].any() and not rew[:, 1].any() and not (term | trunc).any()
    assert np.array_equal(active, [[True, False, True]] * 2)
    assert np.array_equal(state[0], [10, 3, 1, 0, 0, 0, 10, 3, 21, 1, 0, 1])
    # Step 5: "a" truncates, the last agent: nothing is active any more.
    obs, rew, term, trunc, active, state = seen[4]
    assert trunc[:, 0].all() and not term[:, 0].any() and np.array_equal(obs[1, 0], [11, 5, 1])
    assert not active.any()
    assert np.array_equal(state[:, -3:], [[1, 0, 0]] * 2)
    # Step 6: the autoreset. Actions are ignored, no reward, no flags, a fresh (unseeded) episode.
    obs, rew, term, trunc, active = (x[0] for x in env.step([np.full((2, 3), 2)]))
    obs = obs["obs"]
    assert np.array_equal(obs[0], [[1010, 0, 0], [1010, 0, 10], [1010, 0, 20]])
    assert not rew.any() and not (term | trunc).any() and active.all()
    assert np.array_equal(env.state()[:, -3:], np.ones((2, 3)))


def _reference(kwargs, copies, seed, actions_per_step):
    """The slow path: the per-agent dict API, packed by hand in possible_agents order."""
    envs = [pz_envs.parallel_env(**kwargs) for _ in range(copies)]
    ids = envs[0].possible_agents
    dims = [int(np.prod(envs[0].observation_space(a).shape)) for a in ids]
    out = []
    last = [env.reset(seed=seed + c)[0] for c, env in enumerate(envs)]
    for step_actions in actions_per_step:
        rows = []
        for c, env in enumerate(envs):
            if not env.agents:
                last[c], _ = env.reset()
                r = te = tr = {}
            else:
                last[c], r, te, tr, _ = env.step({a: step_actions[c][a] for a in env.agents})
            obs = [np.asarray(last[c][a], np.float32).ravel() if a in last[c] else np.zeros(d, np.float32)
                   for a, d in zip(ids, dims)]
            mask = np.array([a in last[c] for a in ids], np.float32)
            rows.append(dict(obs=obs, state=np.concatenate(obs + [mask]),
                             rew=[r.get(a, 0.0) for a in ids], term=[te.get(a, False) for a in ids],
                             trunc=[tr.get(a, False) for a in ids], active=[a in env.agents for a in ids]))
        out.append(rows)
    return out


def test_grouped_heterogeneous_batch_matches_the_dict_api_reference():
    kwargs = {"hetero": True, "with_state": False}
    groups = [[2, 0], [1]]  # "c" and "a" share a policy (out of order on purpose), "b" has its own
    copies, steps = 3, 14
    env = make_agent_batch(describe(PZ, 3, kwargs), copies, groups)
    rng = np.random.default_rng(0)
    disc = rng.integers(0, 3, (steps, copies, 2))
    box = rng.uniform(-2, 2, (steps, copies, 1, 2)).astype(np.float32)  # out of bounds half the time: clipped
    acts = [[{"c": int(disc[t, c, 0]), "a": int(disc[t, c, 1]), "b": np.clip(box[t, c, 0], -1, 1)}
             for c in range(copies)] for t in range(steps)]
    ref = _reference(kwargs, copies, 5, acts)
    obs = env.reset(seed=5)
    # "b"'s 2x2 grid keeps its shape (the reference packs it flat, as the central critic's state does).
    assert [set(o) for o in obs] == [{"obs"}, {"obs"}] and env.masks == [None, None]
    assert [o["obs"].shape for o in obs] == [(copies, 2, 3), (copies, 1, 2, 2)]
    for t in range(steps):
        obs, rew, term, trunc, active = env.step([disc[t], box[t]])
        assert [o["obs"].shape for o in obs] == [(copies, 2, 3), (copies, 1, 2, 2)]
        state = env.state()
        assert state.shape == (copies, 13)
        for c in range(copies):
            r = ref[t][c]
            for g, members in enumerate(groups):
                for k, j in enumerate(members):
                    assert np.allclose(obs[g]["obs"][c, k].reshape(-1), r["obs"][j]), (t, c, j)
                    assert rew[g][c, k] == pytest.approx(r["rew"][j])
                    assert term[g][c, k] == r["term"][j] and trunc[g][c, k] == r["trunc"][j]
                    assert active[g][c, k] == r["active"][j], (t, c, j)
            assert np.allclose(state[c], r["state"]), (t, c)
    # The schedule walked through leaving agents and two autoresets.
    assert sum(not any(ref[t][0]["active"]) for t in range(steps)) == 2


def test_env_state_is_used_when_the_env_has_it():
    env = _batch(copies=2)
    env.reset(seed=0)
    assert np.array_equal(env.state(), [[0, 0, 3], [1, 0, 3]])
    env.step([np.zeros((2, 3), np.int64)])
    env.step([np.zeros((2, 3), np.int64)])
    assert np.array_equal(env.state(), [[0, 2, 2], [1, 2, 2]])


def test_groups_must_split_the_agents_and_share_a_spec():
    info = describe(PZ, None, {"hetero": True})
    with pytest.raises(ValueError, match="different spaces"):
        make_agent_batch(info, 1, [[0, 1, 2]])
    with pytest.raises(ValueError, match="disjoint"):
        make_agent_batch(info, 1, [[0, 2]])


class _Unusable(pz_envs.LeavingAgents):
    """The test env with agent "c" given a Text observation or Dict actions, which no policy can handle."""

    def __init__(self, bad_space: str, **kwargs):
        super().__init__(**kwargs)
        if bad_space == "obs":
            self._obs_spaces["c"] = gym.spaces.Text(5)
        else:
            self._act_spaces["c"] = gym.spaces.Dict({"move": gym.spaces.Discrete(3)})

    def _obs(self, agent):
        space = self._obs_spaces[agent]
        return space.sample() if isinstance(space, gym.spaces.Text) else super()._obs(agent)


@pytest.mark.parametrize("env_id, agents, kwargs, message", [
    ("pettingzoo:no_such_pkg_xyz.env", None, {}, r"pip install -e '\.\[pettingzoo\]'"),
    ("pettingzoo:json", None, {}, r"has neither parallel_env\(\) nor env\(\)"),
    ("pettingzoo:", None, {}, "expected pettingzoo:<module>.<env>"),
    (PZ, 5, {}, r"has 3 agents \(a, b, c\), not 5: pass --agents 3"),
    (PZ, None, {"colour": "red"}, "colour"),
    # Agent "c" with a space no policy handles (Discrete observations and MultiDiscrete actions,
    # pz_envs' own bad spaces, are supported now: see _Unusable).
    (PZ, None, {"bad_space": "obs"}, "agent 'c': observation space Text"),
    (PZ, None, {"bad_space": "action"}, "agent 'c': action space Dict"),
])
def test_describe_rejects_unusable_pettingzoo_envs_with_one_line(env_id, agents, kwargs, message, monkeypatch):
    if "bad_space" in kwargs:
        monkeypatch.setattr(pz_envs, "parallel_env", lambda bad_space=None, **kw: _Unusable(bad_space, **kw))
    with pytest.raises(EnvError, match=message) as err:
        describe(env_id, agents, kwargs)
    assert "\n" not in str(err.value)


def test_missing_pettingzoo_or_mpe2_is_one_line_naming_the_extra(monkeypatch):
    for name in [m for m in sys.modules if m == "mpe2" or m.startswith(("mpe2.", "pettingzoo"))]:
        monkeypatch.delitem(sys.modules, name)
    monkeypatch.setitem(sys.modules, "pettingzoo", None)  # "not installed"
    monkeypatch.setitem(sys.modules, "mpe2", None)
    with pytest.raises(EnvError, match=r"need pettingzoo and mpe2: pip install -e '\.\[pettingzoo\]'") as err:
        describe("pettingzoo:mpe2.simple_spread_v3", 3)
    assert "\n" not in str(err.value)


def test_make_env_gives_the_pettingzoo_env_itself():
    env = make_env(PZ, 3, hetero=True)
    assert isinstance(env, pz_envs.LeavingAgents) and env.possible_agents == ["a", "b", "c"]
    with pytest.raises(EnvError, match="has 3 agents"):
        make_env(PZ, 2)


# --- mpe2 (the `pettingzoo` extra) -------------------------------------------------------------

SPREAD = "pettingzoo:mpe2.simple_spread_v3"
SPREAD_KWARGS = {"N": 3, "max_cycles": 25, "continuous_actions": False}
LISTENER = "pettingzoo:mpe2.simple_speaker_listener_v4"


def test_mpe2_simple_spread_describes_and_runs_whole_episodes():
    pytest.importorskip("mpe2")
    info = describe(SPREAD, 3, SPREAD_KWARGS)
    assert info.agent_ids == ("agent_0", "agent_1", "agent_2")
    assert info.specs == (AgentSpec(box(18), discrete(5)),) * 3
    assert info.has_state and info.state_dim == 54
    with pytest.raises(EnvError, match="pass --agents 3.*N"):
        describe(SPREAD, 4, SPREAD_KWARGS)
    with pytest.raises(EnvError, match="no_such_kwarg"):
        describe(SPREAD, 3, {"no_such_kwarg": 1})
    env = make_agent_batch(info, 2, [[0, 1, 2]])
    rng = np.random.default_rng(0)
    obs = env.reset(seed=0)
    assert set(obs[0]) == {"obs"} and obs[0]["obs"].shape == (2, 3, 18) and env.state().shape == (2, 54)
    for episode in range(3):
        for t in range(25):
            obs, rew, term, trunc, active = (x[0] for x in env.step([rng.integers(0, 5, (2, 3))]))
            assert rew.any() and not term.any()
            assert trunc.all() == (t == 24) and active.all() == (t < 24)
        assert np.allclose(env.state(), np.stack([e.state() for e in env.envs]))
        obs, rew, term, trunc, active = (x[0] for x in env.step([rng.integers(0, 5, (2, 3))]))
        assert not rew.any() and not (term | trunc).any() and active.all()  # the autoreset step
    env.close()


@pytest.mark.parametrize("continuous", [False, True])
def test_mpe2_speaker_listener_runs_as_two_heterogeneous_groups(continuous):
    pytest.importorskip("mpe2")
    info = describe(LISTENER, None, {"continuous_actions": continuous})
    assert info.agent_ids == ("speaker_0", "listener_0") and info.has_state and info.state_dim == 14
    def action(n):  # mpe2's continuous actions are Box(0, 1, (n,))
        return ActionSpec("gaussian", (n,), (n,), low=(0.0,) * n, high=(1.0,) * n) if continuous else discrete(n)

    assert info.specs == (AgentSpec(box(3), action(3)), AgentSpec(box(11), action(5)))
    assert [s.action.num_outputs for s in info.specs] == [3, 5]
    env = make_agent_batch(info, 3, [[0], [1]])
    obs = env.reset(seed=1)
    assert [o["obs"].shape for o in obs] == [(3, 1, 3), (3, 1, 11)]
    rng = np.random.default_rng(1)
    dones = 0
    for _ in range(2 * 26):
        if continuous:
            acts = [rng.normal(size=(3, 1, 3)).astype(np.float32), rng.normal(size=(3, 1, 5)).astype(np.float32)]
        else:
            acts = [rng.integers(0, 3, (3, 1)), rng.integers(0, 5, (3, 1))]
        obs, rew, term, trunc, active = env.step(acts)
        assert [o["obs"].shape for o in obs] == [(3, 1, 3), (3, 1, 11)] and env.state().shape == (3, 14)
        # Both agents share the team reward and leave together.
        assert np.array_equal(rew[0], rew[1]) and np.array_equal(trunc[0], trunc[1])
        dones += int(trunc[1].sum())
    assert dones == 2 * 3
    env.close()


def test_an_actor_steps_a_pettingzoo_env_and_masks_departed_agents():
    from marl.actor import RolloutWorker
    from marl.config import Config

    info = describe(PZ)
    cfg = dataclasses.replace(Config(), agents=3, envs_per_actor=2, num_steps=12)
    w = RolloutWorker(cfg, info, index=0)
    ro = w.collect(0, w.policy.state_dict())
    tr = ro.trajectories["shared"]
    assert set(tr["obs"]) == {"obs"} and tr["obs"]["obs"].shape == (12, 2, 3, 3)
    # One episode is 5 steps and 1 autoreset step; "b" is live for 2 steps, "c" for 4, "a" for 5.
    live = torch.tensor([5, 2, 4])
    for start in (0, 6):
        assert torch.equal(tr["valid"][start:start + 6].sum(0), live.expand(2, 3))
    assert torch.equal(tr["truncated"].nonzero()[:, [0, 2]].unique(dim=0), torch.tensor([[4, 0], [10, 0]]))
    assert torch.equal(ro.episode_lengths.sort().values, torch.tensor([2, 2, 2, 2, 4, 4, 4, 4, 5, 5, 5, 5]))
    # Episodes mode: exactly K whole episodes per slot, departed agents included.
    w = RolloutWorker(dataclasses.replace(cfg, rollout="episodes", episodes_per_request=2), info, index=0)
    ro = w.collect(0, w.policy.state_dict())
    tr = ro.trajectories["shared"]
    done = (tr["terminated"] | tr["truncated"]) & tr["valid"]
    assert torch.equal(done.sum(0), torch.full((2, 3), 2))
    assert ro.episode_lengths.sum() == tr["valid"].sum()


# --- a pool of frozen opponents in a Parallel team game (--opponents pool) -------------------------

TAG = "pettingzoo:mpe2.simple_tag_v3"
TEAMS = {"adversary_*": "adversary", "*": "runner"}


def test_a_frozen_snapshot_plays_a_whole_team_in_a_parallel_game():
    pytest.importorskip("mpe2")
    from marl.actor import RolloutWorker
    from marl.config import Config

    info = describe(TAG, None, {"max_cycles": 10})
    cfg = dataclasses.replace(Config(), env=TAG, env_kwargs={"max_cycles": 10}, agents=4, envs_per_actor=8,
                              num_steps=33, policies=TEAMS, opponents="pool", pool_prob=1.0)
    w = RolloutWorker(cfg, info, index=0)
    snapshot = {k: v.clone() for k, v in w.policy.state_dict().items()}
    w.collect(0, w.policy.state_dict(), (3, snapshot, [3]))  # the games under way began before any opponent was drawn
    tr = w.collect(0, None, (3, None, [3])).trajectories
    hunters, runner = tr["adversary"]["valid"], tr["runner"]["valid"][..., 0]  # [T, copies, 3], [T, copies]
    # At every step of every copy one side learns, the whole of it (all three hunters, or the runner),
    # and the other side is the snapshot's; only the autoreset steps have no valid row.
    assert bool((hunters.all(-1) | ~hunters.any(-1)).all())
    assert not bool((hunters.any(-1) & runner).any())
    assert int((hunters.any(-1) | runner).sum()) == 30 * 8
    assert 0 < int(runner.sum()) < 30 * 8  # both sides were drawn
    # The whole episode keeps its side: the side that learns changes only across an autoreset step.
    side = torch.where(runner, 1, torch.where(hunters.any(-1), 0, -1))
    for c in range(8):
        for start in (0, 11, 22):
            assert len(set(side[start:start + 10, c].tolist())) == 1


def test_self_play_with_a_pool_in_a_parallel_team_game_evaluates_per_team(train):
    pytest.importorskip("mpe2")
    import json

    r = train("--env", TAG, "--env-kwargs", '{"max_cycles": 25}', "--policies", json.dumps(TEAMS), "--opponents", "pool",
              "--snapshot-every", "2", "--pool-size", "2", "--num-steps", "50", "--total-steps", "4000",
              "--target-return", "1e9", "--run-name", "tag")
    assert r.returncode == 0, r.stderr[-3000:]
    e = evaluate_cli([str(train.logdir / "tag"), "--opponent", "pool",
                        "--episodes", "4", "--json"], timeout=300)
    assert e.returncode == 0, e.stderr[-2000:]
    sides = json.loads(e.stdout)["seats"]
    # One row per team, each played against the snapshots: a mean return, and no win rates (not a turn-based game).
    assert set(sides) == {"adversary", "runner"} and all(set(s) == {"mean_return", "games"} for s in sides.values())
    assert sides["adversary"]["games"] == sides["runner"]["games"] == 4
    e = evaluate_cli([str(train.logdir / "tag"), "--opponent", "lookahead"], timeout=300)
    assert e.returncode == 2 and "plays tictactoe_v3 and connect_four_v3 only" in e.stderr and "Traceback" not in e.stderr


RPS = "pettingzoo:pettingzoo.classic.rps_v2"


def test_an_env_whose_state_is_not_callable_has_no_state_and_trains(train):
    """rps_v2 keeps `state` as a dict, and PettingZoo's wrappers call `self.env.state()` on it: a probe
    of an optional feature, which must mean "no state" (the central critic then reads every agent's
    observation and the alive mask), never a crash at start-up."""
    import json

    info = describe(RPS)
    assert not info.has_state and info.state_dim == 1 + 1 + 2  # two scalar Discrete(4) observations, the alive mask
    batch = make_agent_batch(info, 2, [[0, 1]])
    batch.reset(seed=0)
    assert batch.state().shape == (2, 4)
    batch.close()
    probed = PettingZooBatch(lambda: make_env(RPS), 1, [[0, 1]], info.specs)  # has_state not given: probed at reset
    probed.reset(0)
    assert probed.has_state is False
    r = train("--env", RPS, "--critic", "central", "--total-steps", "3000", "--run-name", "rps")
    assert r.returncode == 0, r.stderr[-3000:]
    assert json.loads((train.logdir / "rps" / "result.json").read_text())["global_step"] >= 3000
