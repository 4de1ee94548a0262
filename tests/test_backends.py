"""One conformance test that every env backend runs: the grouped array protocol of envs.batched
(leaves in their spec's shapes and dtypes, masks, flags, state) over Gymnasium vector envs and
PettingZoo Parallel envs, with flat, image, discrete, dict and masked observations."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from envs import describe, make_agent_batch
from marl import distributions

CASES = [
    ("CartPole-v1", 3, {}, [[0, 1, 2]]),
    ("CartPole-v1", 3, {}, [[0, 2], [1]]),
    ("FrozenLake-v1", 2, {"is_slippery": False}, [[0, 1]]),
    ("envs.masked:MaskedChoice-v0", 2, {"mask_in": "info"}, [[0, 1]]),
    ("envs.targets:MatchDigits-v0", 2, {}, [[0, 1]]),
    ("envs.targets:MatchBits-v0", 2, {}, [[0], [1]]),
    ("Pendulum-v1", 2, {}, [[0, 1]]),
    ("pettingzoo:envs.masked", None, {"mask_in": "obs"}, [[0], [1]]),
    ("pettingzoo:envs.coop_nav", None, {}, [[0, 1, 2]]),
    ("pettingzoo:mpe2.simple_speaker_listener_v4", None, {"max_cycles": 10}, [[0], [1]]),
]
MINIGRID = [("MiniGrid-Empty-5x5-v0", 2, {}, [[0, 1]])]


def _check_obs(obs, specs, copies):
    assert len(obs) == len(specs)
    for o, (spec, n) in zip(obs, specs):
        assert set(o) == {leaf.name for leaf in spec.obs}
        for leaf in spec.obs:
            assert o[leaf.name].shape == (copies, n, *leaf.shape), leaf
            assert o[leaf.name].dtype == np.dtype(leaf.dtype), leaf


@pytest.mark.parametrize("env_id, agents, kwargs, groups", CASES + MINIGRID,
                         ids=[f"{c[0]}-{len(c[3])}groups" for c in CASES + MINIGRID])
def test_every_backend_speaks_the_grouped_array_protocol(env_id, agents, kwargs, groups):
    if env_id.startswith("MiniGrid"):
        pytest.importorskip("minigrid")
    info = describe(env_id, agents, kwargs)
    copies = 3
    env = make_agent_batch(info, copies, groups)
    specs = [(info.specs[g[0]], len(g)) for g in groups]
    _check_obs(env.reset(seed=0), specs, copies)
    g = torch.Generator().manual_seed(0)
    for _ in range(30):
        actions = []
        for (spec, n), mask in zip(specs, env.masks):
            if spec.mask:
                assert mask.shape == (copies, n, spec.action.mask_size) and mask.dtype == bool and mask.any(-1).all()
            else:
                assert mask is None
            params = distributions.uniform_params(spec.action, copies * n)
            m = None if mask is None else torch.from_numpy(mask).reshape(copies * n, -1)
            a, _ = distributions.make(spec.action, params, m).sample(g)
            actions.append(a.reshape(copies, n, *spec.action.shape).numpy())
        obs, rew, term, trunc, active = env.step(actions)
        _check_obs(obs, specs, copies)
        for x, (_, n) in zip(rew, specs):
            assert x.shape == (copies, n) and x.dtype == np.float32
        for flags in (term, trunc, active):
            assert all(f.shape == (copies, n) and f.dtype == bool for f, (_, n) in zip(flags, specs))
        assert env.active is active
        state = env.state()
        assert state.shape == (copies, info.state_dim) and state.dtype == np.float32
    env.close()
