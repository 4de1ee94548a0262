"""One conformance test that every env backend runs: the grouped array protocol of envs.batched,
its shapes and dtypes and its semantics, over Gymnasium vector envs, PettingZoo Parallel envs and
PettingZoo AEC games, with flat, image, discrete, dict and masked observations.

The semantics are checked against the raw env stepped beside the batch with the same seeds and
actions (no marl code in between): every step's observations (padding included), rewards,
terminated and truncated flags, and which agents act next; the step after an episode ends is a
reset step (reward 0, no flags, not a transition) that returns the next episode's first
observation; the observation returned with a truncation is the episode's final one, and the
central critic's state counts that agent alive; and each agent's rewards, summed from its episode's
start to its done flag, are the episode returns the env itself counts.
"""

from __future__ import annotations

import contextlib
from collections import defaultdict

import gymnasium as gym
import numpy as np
import pytest
import torch

from envs import describe, make_agent_batch
from envs.batched import make_vector
from envs.registry import pettingzoo_module, resolve
from envs.spaces import env_action, leaf_array, zeros
from marl import distributions

# env id, agents, env kwargs, groups. Short episodes, so that every case ends episodes (and truncates
# where its env can) inside STEPS.
CASES = [
    ("CartPole-v1", 3, {"max_episode_steps": 12}, [[0, 1, 2]]),
    ("CartPole-v1", 3, {"max_episode_steps": 12}, [[0, 2], [1]]),
    ("FrozenLake-v1", 2, {"is_slippery": False, "max_episode_steps": 6}, [[0, 1]]),
    ("envs.masked:MaskedChoice-v0", 2, {"mask_in": "info", "episode_length": 5}, [[0, 1]]),
    ("envs.targets:MatchDigits-v0", 2, {}, [[0, 1]]),
    ("envs.targets:MatchBits-v0", 2, {}, [[0], [1]]),
    ("Pendulum-v1", 2, {"max_episode_steps": 9}, [[0, 1]]),
    ("pettingzoo:tests.pz_envs", None, {}, [[0, 2], [1]]),
    ("pettingzoo:tests.pz_envs", None, {"hetero": True, "with_state": False}, [[0], [1], [2]]),
    ("pettingzoo:envs.masked", None, {"mask_in": "obs", "episode_length": 5}, [[0], [1]]),
    ("pettingzoo:envs.coop_nav", None, {"max_cycles": 7}, [[0, 1, 2]]),
    ("pettingzoo:mpe2.simple_speaker_listener_v4", None, {"max_cycles": 10}, [[0], [1]]),
    ("pettingzoo:pettingzoo.classic.rps_v2", None, {"max_cycles": 5}, [[0, 1]]),  # its `state` is not callable
    ("pettingzoo:pettingzoo.classic.tictactoe_v3", None, {}, [[0], [1]]),
    ("pettingzoo:pettingzoo.classic.connect_four_v3", None, {}, [[0, 1]]),
]
MINIGRID = [("MiniGrid-Empty-5x5-v0", 2, {"max_steps": 8}, [[0, 1]])]
# VMAS: one batched env of COPIES copies; Box and Discrete actions, truncation at max_steps (every copy at
# once), and balance's termination (the package falls: copies one by one) before it.
VMAS = [("vmas:navigation", None, {"n_agents": 3, "max_steps": 7}, [[0, 2], [1]]),
        ("vmas:balance", None, {"n_agents": 2, "max_steps": 40, "continuous_actions": False}, [[0, 1]])]
TRUNCATES = {"CartPole-v1", "FrozenLake-v1", "Pendulum-v1", "pettingzoo:tests.pz_envs", "pettingzoo:envs.coop_nav",
             "pettingzoo:mpe2.simple_speaker_listener_v4", "pettingzoo:pettingzoo.classic.rps_v2", "MiniGrid-Empty-5x5-v0",
             "vmas:navigation", "vmas:balance"}
TERMINATES = {"vmas:balance"}  # (and others, not asserted)
COPIES, STEPS, SEED = 3, 60, 5


def _env_value(action, x: np.ndarray):
    """One agent's action as its env takes it; a scalar choice as the Python int PettingZoo's envs check for."""
    x = env_action(action, np.asarray(x)[None], (1,))[0]
    return x.item() if x.ndim == 0 and x.dtype.kind in "iu" else x


def _per_agent(groups, arrays, n):
    """Per-group arrays (copies, n_g, ...) or leaf dicts -> one entry per agent, in agent order."""
    out = [None] * n
    for g, x in zip(groups, arrays):
        for k, j in enumerate(g):
            out[j] = {name: v[:, k] for name, v in x.items()} if isinstance(x, dict) else x[:, k]
    return out


class GymReference:
    """The raw vector env of copies x agents slots (copy-major), with Gymnasium's own episode statistics."""

    def __init__(self, info):
        self.n, self.spec = len(info.agent_ids), info.specs[0]
        self.vec = gym.wrappers.vector.RecordEpisodeStatistics(
            make_vector(resolve(info.env_id), COPIES * self.n, info.kwargs, info.wrappers))
        self.episodes = defaultdict(list)  # (copy, agent index) -> [episode return]
        self.states = None

    def _obs(self, obs):
        leaves = {leaf.name: leaf_array(leaf, obs, (COPIES, self.n)) for leaf in self.spec.obs}
        return [{k: v[:, j] for k, v in leaves.items()} for j in range(self.n)], np.ones((COPIES, self.n), bool)

    def reset(self, seed):
        obs, _ = self.vec.reset(seed=seed)
        return self._obs(obs)

    def step(self, actions):
        a = np.stack(actions, axis=1).reshape(COPIES * self.n, *self.spec.action.shape)
        obs, rew, term, trunc, infos = self.vec.step(env_action(self.spec.action, a, (COPIES * self.n,)))
        for i in np.flatnonzero(infos.get("_episode", ())):
            self.episodes[divmod(i, self.n)].append(float(infos["episode"]["r"][i]))
        shape = (COPIES, self.n)
        term, trunc = term.reshape(shape), trunc.reshape(shape)
        return (*self._obs(obs), rew.reshape(shape), term, trunc, ~(term | trunc))

    def close(self):
        self.vec.close()


class ParallelReference:
    """COPIES raw PettingZoo Parallel envs, each reset when its `agents` is empty, as the protocol says."""

    def __init__(self, info):
        make = pettingzoo_module(info.env_id).parallel_env
        self.envs = [make(**info.kwargs) for _ in range(COPIES)]
        self.ids, self.specs = list(info.agent_ids), info.specs
        self.returns = defaultdict(float)
        self.episodes = defaultdict(list)
        self.states = (lambda: np.stack([np.asarray(e.state(), np.float32).reshape(-1) for e in self.envs])) \
            if info.has_state else None

    def _blank(self):
        obs = [{leaf.name: zeros(leaf, (COPIES,)) for leaf in s.obs} for s in self.specs]
        return obs, np.zeros((COPIES, len(self.ids)), bool)

    def _fill(self, c, o, obs, real):
        for a, x in o.items():
            j = self.ids.index(a)
            for leaf in self.specs[j].obs:
                obs[j][leaf.name][c] = leaf_array(leaf, x, (1,))[0]
            real[c, j] = True

    def reset(self, seed):
        obs, real = self._blank()
        for c, env in enumerate(self.envs):
            self._fill(c, env.reset(seed=seed + c)[0], obs, real)
        return obs, real

    def step(self, actions):
        obs, real = self._blank()
        rew = np.zeros((COPIES, len(self.ids)), np.float32)
        term, trunc, active = np.zeros_like(real), np.zeros_like(real), np.zeros_like(real)
        for c, env in enumerate(self.envs):
            if not env.agents:
                self._fill(c, env.reset()[0], obs, real)
            else:
                acts = {a: _env_value(self.specs[j].action, actions[j][c])
                        for j, a in enumerate(self.ids) if a in env.agents}
                o, r, te, tr, _ = env.step(acts)
                self._fill(c, o, obs, real)
                for a, x in r.items():
                    j = self.ids.index(a)
                    rew[c, j] = x
                    self.returns[c, j] += x
                    term[c, j], trunc[c, j] = te[a], tr[a]
                    if te[a] or tr[a]:
                        self.episodes[c, j].append(self.returns.pop((c, j)))
            active[c] = [a in env.agents for a in self.ids]
        return obs, real, rew, term, trunc, active

    def close(self):
        for env in self.envs:
            env.close()


class VmasReference:
    """The raw VMAS env of COPIES copies, seeded as the batch and stepped with the same actions, reset by
    hand as the protocol says: the step after a copy's episode ended resets it, and that step's outcome
    for the copy is the reset's observation, reward 0 and no flags (every copy at once by VMAS's
    reset() where all ended together, as the backend does, else each by its `reset_at`). VMAS keeps one set of
    generators per process, shared by its envs (`Environment.vmas_random_state`): the reference swaps in
    a set of its own, so that the batch beside it draws what it would draw alone."""

    def __init__(self, info):
        import vmas

        from envs.vmas_backend import MAX_STEPS, VMAS_PREFIX

        self.env = vmas.make_env(info.env_id[len(VMAS_PREFIX):], num_envs=COPIES, terminated_truncated=True,
                                 **{"max_steps": MAX_STEPS, **info.kwargs})
        self.n, self.specs = len(info.agent_ids), info.specs
        self.pending = np.zeros(COPIES, bool)
        self.returns, self.episodes, self.states = np.zeros((COPIES, self.n)), defaultdict(list), None
        self.rng = list(self.env.vmas_random_state)

    @contextlib.contextmanager
    def _own_rng(self):
        shared = self.env.vmas_random_state  # the list VMAS's methods read and write in place
        theirs, shared[:] = list(shared), self.rng
        try:
            yield
        finally:
            self.rng, shared[:] = list(shared), theirs

    def _obs(self, obs):
        return [{leaf.name: leaf_array(leaf, o.numpy(), (COPIES,)) for leaf in s.obs} for o, s in zip(obs, self.specs)]

    def reset(self, seed):
        with self._own_rng():
            return self._obs(self.env.reset(seed=seed)), np.ones((COPIES, self.n), bool)

    def step(self, actions):
        acts = [torch.from_numpy(env_action(s.action, a, (COPIES,))) for s, a in zip(self.specs, actions)]
        with self._own_rng():
            obs, rews, te, tr, _ = self.env.step(acts)
            obs = [o.clone() for o in obs]
            if self.pending.all():
                obs = self.env.reset()
            for c in np.flatnonzero(self.pending) if not self.pending.all() else ():
                fresh = self.env.reset_at(int(c))
                for j in range(self.n):
                    obs[j][c] = fresh[j][c]
        rew = np.stack([r.numpy() for r in rews], axis=1).astype(np.float32)
        te = np.repeat(te.numpy()[:, None], self.n, axis=1)
        tr = np.repeat(tr.numpy()[:, None], self.n, axis=1) & ~te
        rew[self.pending], te[self.pending], tr[self.pending] = 0.0, False, False
        self.returns += rew
        for c, j in zip(*np.nonzero(te | tr)):
            self.episodes[c, j].append(self.returns[c, j])
            self.returns[c, j] = 0.0
        self.pending = (te | tr).any(axis=1)
        return self._obs(obs), np.ones((COPIES, self.n), bool), rew, te, tr, ~(te | tr)

    def close(self):
        pass


def _aec_episodes(info, moves: list[list[tuple[int, np.ndarray]]]):
    """Each copy's raw AEC game played PettingZoo's own way (agent_iter / last()) with the moves the batch
    made, in order: -> ({(copy, agent index): [episode return]}, the agents that moved, per copy)."""
    make = pettingzoo_module(info.env_id).env
    ids = list(info.agent_ids)
    episodes, movers = defaultdict(list), []
    for c, played in enumerate(moves):
        env, left, seen = make(**info.kwargs), list(played), []
        env.reset(seed=SEED + c)
        returns = defaultdict(float)
        while left:
            for agent in env.agent_iter():
                _, r, term, trunc, _ = env.last()
                j = ids.index(agent)
                returns[j] += r
                if term or trunc:
                    episodes[c, j].append(returns.pop(j))
                    env.step(None)
                    continue
                if not left:
                    break
                mover, action = left.pop(0)
                seen.append(j)
                assert mover == j, f"copy {c}: the batch moved {ids[mover]}, the game waits for {agent}"
                env.step(_env_value(info.specs[j].action, action))
            else:
                env.reset()
        movers.append(seen)
        env.close()
    return episodes, movers


def _check_obs(obs, specs):
    assert len(obs) == len(specs)
    for o, (spec, n) in zip(obs, specs):
        assert set(o) == {leaf.name for leaf in spec.obs}
        for leaf in spec.obs:
            assert o[leaf.name].shape == (COPIES, n, *leaf.shape), leaf
            assert o[leaf.name].dtype == np.dtype(leaf.dtype), leaf


def _same_obs(got, want, where):
    for j, (g, w) in enumerate(zip(got, want)):
        for name in w:
            np.testing.assert_allclose(g[name], w[name], rtol=1e-6, err_msg=f"{where}: agent {j} leaf {name!r}")


def _arrays(env, x):
    """What a batch gave, as NumPy for the comparisons. A torch batch (`device`, envs.protocol.AgentBatch)
    must give tensors on its device, none of them NumPy: no round trip between a torch env and the policy."""
    if not hasattr(env, "device") or x is None:
        return x
    if isinstance(x, dict):
        return {k: _arrays(env, v) for k, v in x.items()}
    if isinstance(x, (list, tuple)):
        return type(x)(_arrays(env, v) for v in x)
    assert isinstance(x, torch.Tensor) and x.device == env.device, f"a torch batch on {env.device} gave {x!r:.80}"
    return x.cpu().numpy()


def _sample(specs, masks, gen):
    actions = []
    for (spec, n), mask in zip(specs, masks):
        if spec.mask:
            assert mask.shape == (COPIES, n, spec.action.mask_size) and mask.dtype == bool and mask.any(-1).all()
        else:
            assert mask is None
        params = distributions.uniform_params(spec.action, COPIES * n)
        m = None if mask is None else torch.from_numpy(mask).reshape(COPIES * n, -1)
        a, _ = distributions.make(spec.action, params, m).sample(gen)
        actions.append(a.reshape(COPIES, n, *spec.action.shape).numpy())
    return actions


@pytest.mark.parametrize("env_id, agents, kwargs, groups", CASES + MINIGRID + VMAS,
                         ids=[f"{c[0]}-{len(c[3])}groups" for c in CASES + MINIGRID + VMAS])
def test_every_backend_speaks_the_grouped_array_protocol(env_id, agents, kwargs, groups):
    if env_id.startswith("MiniGrid"):
        pytest.importorskip("minigrid")
    if env_id.startswith("vmas:"):
        pytest.importorskip("vmas")
    info = describe(env_id, agents, kwargs)
    n = len(info.agent_ids)
    specs = [(info.specs[g[0]], len(g)) for g in groups]
    env = make_agent_batch(info, COPIES, groups)
    ref = None if info.turn_based else VmasReference(info) if env_id.startswith("vmas:") else \
        ParallelReference(info) if info.own_agents else GymReference(info)
    gen = torch.Generator().manual_seed(0)

    obs = _arrays(env, env.reset(seed=SEED))
    _check_obs(obs, specs)
    if ref is not None:
        want, real = ref.reset(SEED)
        _same_obs(_per_agent(groups, obs, n), want, "reset")
    returns, episodes = np.zeros((COPIES, n)), defaultdict(list)  # the batch's own bookkeeping
    moves = [[] for _ in range(COPIES)]  # turn-based: (agent, action) of each move, per copy
    truncated = terminated = False
    for t in range(STEPS):
        masks = _arrays(env, env.masks)
        acting = np.stack(_per_agent(groups, _arrays(env, env.active), n), axis=1)
        if info.turn_based:
            assert (acting.sum(1) <= 1).all(), f"step {t}: more than one agent to move in one copy"
        for m, a in zip(masks, _arrays(env, env.active)):
            if m is not None and info.own_agents:
                assert m[~a].all(), "an agent that does not act has an all-True mask"
        actions = _sample(specs, masks, gen)
        by_agent = _per_agent(groups, actions, n)
        for c, j in zip(*np.nonzero(acting)):
            moves[c].append((j, by_agent[j][c]))
        out = env.step([torch.from_numpy(a) for a in actions] if hasattr(env, "device") else actions)
        assert env.active is out[4]
        obs, rew, term, trunc, active = _arrays(env, out)

        _check_obs(obs, specs)
        for x, (_, k) in zip(rew, specs):
            assert x.shape == (COPIES, k) and x.dtype == np.float32
        for flags in (term, trunc, active):
            assert all(f.shape == (COPIES, k) and f.dtype == bool for f, (_, k) in zip(flags, specs))
        state = _arrays(env, env.state())
        assert state.shape == (COPIES, info.state_dim) and state.dtype == np.float32

        rew, term, trunc, active = (np.stack(_per_agent(groups, x, n), axis=1) for x in (rew, term, trunc, active))
        done = term | trunc
        assert not (done & active).any(), f"step {t}: an agent acts again on the step after its done flag"
        if not info.turn_based:  # a game's end flags and pays its waiting players too; nobody else that did not act
            assert not (done & ~acting).any(), f"step {t}: a reset step or a departed agent reported a done flag"
            assert not rew[~acting].any(), f"step {t}: a reset step or a departed agent got a reward"
        if ref is not None:
            want, real, r, te, tr, act = ref.step(by_agent)
            _same_obs(_per_agent(groups, obs, n), want, f"step {t}")
            np.testing.assert_allclose(rew, r, rtol=1e-6, err_msg=f"step {t}: rewards")
            assert (term == te).all() and (trunc == tr).all(), f"step {t}: terminated/truncated differ from the env's"
            assert (active == act).all(), f"step {t}: the agents to act next differ from the env's"
            if ref.states is not None:
                np.testing.assert_allclose(state, ref.states(), rtol=1e-6, err_msg=f"step {t}: env.state()")
            elif not info.turn_based:  # every real observation counts alive, a truncated agent's final one too
                assert (state[:, -n:] == real).all(), f"step {t}: the state's alive mask"
        truncated |= bool(trunc.any())
        terminated |= bool(term.any())
        returns += rew
        for c, j in zip(*np.nonzero(done)):
            episodes[c, j].append(returns[c, j])
            returns[c, j] = 0.0
    env.close()

    assert episodes, f"no episode ended in {STEPS} steps: shorten the case's episodes"
    assert truncated == (env_id in TRUNCATES), "the case truncates where its env can"
    assert terminated or env_id not in TERMINATES, "the case terminates episodes"
    if ref is not None:
        ref.close()
        own = ref.episodes
    else:
        own, movers = _aec_episodes(info, moves)
        assert movers == [[j for j, _ in m] for m in moves]
    assert set(episodes) == set(own)
    for slot, got in episodes.items():
        np.testing.assert_allclose(got, own[slot], rtol=1e-5, err_msg=f"copy, agent {slot}: episode returns")
