"""Spaces at every edge: leaves and their dtypes, dropped and chosen keys, refused spaces, and
action masks from both conventions, through the real env backends and the real actor."""

from __future__ import annotations

import dataclasses

import gymnasium as gym
import numpy as np
import pytest
import torch

from envs import describe, make_agent_batch
from envs.registry import EnvError
from envs.spaces import Leaf, SpaceError, action_spec, agent_spec, observation_leaves
from marl.actor import RolloutWorker
from marl.config import Config
from marl.policies import specs_of

MASKED = "envs.masked:MaskedChoice-v0"


def test_nested_observations_become_leaves_in_their_own_dtypes():
    space = gym.spaces.Dict({
        "image": gym.spaces.Box(0, 255, (7, 7, 3), np.uint8),
        "direction": gym.spaces.Discrete(4),
        "pos": gym.spaces.Tuple((gym.spaces.MultiDiscrete([3, 5], start=[1, 0]), gym.spaces.MultiBinary(2))),
        "mission": gym.spaces.Text(10),
    })
    leaves, dropped = observation_leaves("test", space)
    # In the space's own key order (gymnasium's Dict sorts the keys of a dict it is given).
    assert [(l.name, l.kind, l.shape, l.dtype) for l in leaves] == [
        ("direction", "discrete", (), "int64"), ("image", "box", (7, 7, 3), "uint8"),
        ("pos.0", "multidiscrete", (2,), "int64"), ("pos.1", "multibinary", (2,), "uint8")]
    assert dropped == ("mission",)
    assert leaves[1].is_image and not leaves[0].is_image and leaves[2].size == 8 and leaves[2].start == (1, 0)
    chosen, dropped = observation_leaves("test", space, ("image", "pos"))
    assert [l.name for l in chosen] == ["image", "pos.0", "pos.1"] and set(dropped) == {"mission", "direction"}
    with pytest.raises(SpaceError, match="--obs-keys 'imag' is not a usable key"):
        observation_leaves("test", space, ("imag",))


def test_unsupported_spaces_are_refused_with_what_is_supported():
    with pytest.raises(SpaceError, match="Dict and Tuple action spaces are not"):
        action_spec("env", gym.spaces.Dict({"a": gym.spaces.Discrete(2)}))
    with pytest.raises(SpaceError, match="observation space Text.* is not supported .*MultiBinary"):
        observation_leaves("env", gym.spaces.Text(5))
    box_obs = gym.spaces.Dict({"observation": gym.spaces.Box(0, 1, (3,)), "action_mask": gym.spaces.Box(0, 1, (2,), np.int8)})
    with pytest.raises(SpaceError, match="take none"):
        agent_spec("env", box_obs, gym.spaces.Box(-1, 1, (2,)))


def test_discrete_observations_keep_their_index_and_offsets_are_removed():
    info = describe("FrozenLake-v1", 2, {"is_slippery": False})
    assert info.spec.obs == (Leaf("obs", (), "discrete", (), "int64", (16,), (0,)),)
    env = make_agent_batch(info, 3, [[0, 1]])
    obs = env.reset(seed=0)
    assert obs[0]["obs"].shape == (3, 2) and obs[0]["obs"].dtype == np.int64 and (obs[0]["obs"] == 0).all()
    spec = agent_spec("x", gym.spaces.Discrete(3, start=-1), gym.spaces.Discrete(2, start=5))
    assert spec.obs[0].start == (-1,) and spec.action.start == (5,)


@pytest.mark.parametrize("mask_in", ["obs", "info"])
def test_action_masks_come_from_the_observation_or_the_info(mask_in):
    info = describe(MASKED, 2, {"mask_in": mask_in})
    assert info.spec.mask == mask_in and info.spec.action.mask_size == 6
    assert [l.name for l in info.spec.obs] == (["observation"] if mask_in == "obs" else ["obs"])
    env = make_agent_batch(info, 4, [[0, 1]])
    obs = env.reset(seed=1)
    leaf = info.spec.obs[0].name
    for _ in range(50):
        mask = env.masks[0]
        assert mask.shape == (4, 2, 6) and mask.dtype == bool
        target = obs[0][leaf].argmax(-1)
        assert np.take_along_axis(mask, target[..., None], -1).all()  # the target is always legal
        obs, *_ = env.step([target])  # legal by construction: the env would raise otherwise


def test_pettingzoo_envs_pack_leaves_and_masks():
    info = describe("pettingzoo:envs.masked", None, {"num_actions": 4})
    assert info.agent_ids == ("agent_0", "agent_1") and info.spec.mask == "obs"
    env = make_agent_batch(info, 3, [[0], [1]])
    obs = env.reset(seed=0)
    assert len(obs) == 2 and obs[1]["observation"].shape == (3, 1, 4) and env.masks[1].shape == (3, 1, 4)
    assert env.state().shape == (3, info.state_dim)


def _masked_cfg(**kw) -> Config:
    return dataclasses.replace(Config(), envs_per_actor=16, num_steps=128, agents=4, **kw)


@pytest.mark.parametrize("env_id, mask_in", [(MASKED, "obs"), (MASKED, "info"), ("pettingzoo:envs.masked", "obs")])
def test_an_actor_never_sends_an_illegal_action_in_30k_steps(env_id, mask_in):
    """The env raises on an illegal action: 30k+ agent-steps of a fresh (near-uniform) policy
    through the real actor, with the masks it records equal to what the env published."""
    cfg = _masked_cfg(env=env_id, env_kwargs={"mask_in": mask_in, "num_actions": 8})
    agents = 2 if env_id.startswith("pettingzoo:") else 4
    cfg = dataclasses.replace(cfg, agents=agents)
    info = describe(env_id, agents, cfg.env_kwargs)
    worker = RolloutWorker(cfg, info, 0)
    from marl.models import build_model, network_of

    weights = build_model(specs_of(cfg, info), network_of(cfg)).state_dict()
    steps = 0
    version = 0
    while steps < 30_000:
        ro = worker.collect(version, weights if version == 0 else None)
        tr = ro.trajectories["shared"]
        chosen = torch.nn.functional.one_hot(tr["actions"], 8).bool()
        assert (tr["action_mask"] & chosen).any(-1).all()  # every recorded action was legal under its mask
        assert not tr["action_mask"].all()  # and the masks do forbid something
        steps += ro.steps
        version = 0
    assert steps >= 30_000


def test_an_id_whose_package_is_missing_names_the_extra(monkeypatch):
    import envs.registry as registry

    monkeypatch.setitem(registry.REGISTER_ON_IMPORT, "Fake-", ("no_such_package_here", "fake"))
    with pytest.raises(EnvError, match=r"'Fake-v0' needs the no_such_package_here package: pip install -e '\.\[fake\]'"):
        describe("Fake-v0", 1)


def test_ids_that_register_on_import_work_by_their_plain_id():
    pytest.importorskip("minigrid")
    info = describe("MiniGrid-Empty-5x5-v0", 1)
    assert info.dropped == ("mission",) and [l.name for l in info.spec.obs] == ["direction", "image"]


def test_every_kind_of_spec_survives_a_weights_only_round_trip(tmp_path):
    """Specs land in trainer.pt and policy.pt: plain values only (a numpy integer would make them unreadable)."""
    obs = gym.spaces.Dict({"img": gym.spaces.Box(0, 255, (8, 8, 3), np.uint8), "d": gym.spaces.Discrete(3, start=1),
                           "m": gym.spaces.MultiDiscrete([[2, 3], [4, 5]]), "b": gym.spaces.MultiBinary([2, 3])})
    actions = [gym.spaces.Discrete(4), gym.spaces.MultiDiscrete([[2, 3], [4, 5]]), gym.spaces.MultiBinary([2, 3]),
               gym.spaces.Box(-1, 1, (2, 2))]
    for act in actions:
        spec = agent_spec("x", obs, act)
        torch.save({"obs": [dataclasses.asdict(l) for l in spec.obs], "action": dataclasses.asdict(spec.action)},
                   tmp_path / "s.pt")
        back = torch.load(tmp_path / "s.pt", weights_only=True)
        assert tuple(Leaf(**d) for d in back["obs"]) == spec.obs
        assert type(spec.action)(**back["action"]) == spec.action
