"""Policy mapping: agent -> policy, space checks, clear errors, and the networks' inputs."""

import pytest
import torch

from envs import describe
from envs.spaces import Leaf
from marl.models.encoders import Encoder
from marl.policies import PolicyError, agent_ids, assign, critic_state, policy_specs

SPEAKER_LISTENER = ("speaker_0", "listener_0")


def test_shared_per_agent_and_pattern_groups():
    ids = ("red_0", "red_1", "blue_0", "blue_1")
    assert assign(ids, "shared") == [("shared", [0, 1, 2, 3])]
    assert assign(ids, "per-agent") == [("red_0", [0]), ("red_1", [1]), ("blue_0", [2]), ("blue_1", [3])]
    # First matching pattern wins, in the mapping's order; policies in order of first appearance.
    assert assign(ids, {"blue_1": "solo", "blue_*": "blue", "*": "red"}) == [("red", [0, 1]), ("blue", [2]), ("solo", [3])]


@pytest.mark.parametrize("mapping, message", [
    ({"red_*": "red"}, "agent 'blue_0' matches none of the patterns"),
    ({"*": "all", "green_*": "green"}, "pattern 'green_\\*' takes no agent"),
    ({}, "--policies must be shared, per-agent, or a mapping"),
    ({"red_*": "red", "red_0": "solo", "*": "blue"}, "pattern 'red_0' takes no agent"),  # red_* always wins
    ({"*": "v1.0"}, "policy name 'v1.0' cannot name a policy"),
])
def test_a_mapping_that_cannot_work_says_why(mapping, message):
    with pytest.raises(PolicyError, match=message) as err:
        assign(("red_0", "blue_0"), mapping)
    assert "\n" not in str(err.value)


def test_agents_of_one_policy_must_share_their_spaces():
    info = describe("pettingzoo:mpe2.simple_speaker_listener_v4", None, {"continuous_actions": False})
    assert info.agent_ids == SPEAKER_LISTENER
    with pytest.raises(PolicyError, match="policy 'shared' acts for speaker_0 and listener_0, whose spaces differ "
                                          "\\(obs \\{obs: box\\[3\\] float32\\}, actions Discrete\\[3\\] vs "
                                          "obs \\{obs: box\\[11\\] float32\\}, actions Discrete\\[5\\]\\)"):
        policy_specs(info, "shared", False, "local")
    speaker, listener = policy_specs(info, {"speaker_*": "speaker", "listener_*": "listener"}, False, "central")
    size = lambda leaves: sum(leaf.size for leaf in leaves)  # noqa: E731
    assert (speaker.name, speaker.agents, size(speaker.obs), speaker.action.nvec) == ("speaker", (0,), 3, (3,))
    assert (listener.name, listener.agents, size(listener.obs), listener.action.nvec) == ("listener", (1,), 11, (5,))
    assert speaker.action.kind == listener.action.kind == "categorical"
    assert (speaker.action.num_outputs, listener.action.num_outputs) == (3, 5)
    # MAPPO: both critics see env.state(), then the agent's own observation.
    assert speaker.state_dim == listener.state_dim == info.state_dim
    assert [leaf.name for leaf in speaker.critic_obs] == [leaf.name for leaf in listener.critic_obs] == ["state", "obs"]
    assert (size(speaker.critic_obs), size(listener.critic_obs)) == (info.state_dim + 3, info.state_dim + 11)


def test_agent_one_hot_and_central_critic_inputs():
    info = describe("CartPole-v1", 3)
    (spec,) = policy_specs(info, "shared", True, "central")
    obs_leaf = Leaf("obs", (), "box", (4,), "float32")
    assert info.spec.obs == (obs_leaf,)
    assert spec.obs == (obs_leaf, Leaf("agent_id", None, "discrete", (), "int64", (3,), (0,)))
    assert spec.critic_obs == (Leaf("state", None, "box", (3 * 4 + 3,), "float32"), *spec.obs)
    size = lambda leaves: sum(leaf.size for leaf in leaves)  # noqa: E731
    assert (size(info.spec.obs), size(spec.obs), size(spec.critic_obs)) == (4, 4 + 3, (3 * 4 + 3) + (4 + 3))
    obs = torch.arange(2 * 3 * 4, dtype=torch.float32).reshape(2, 3, 4)  # [copies, agents, obs]
    ids = agent_ids(spec, (2,))
    assert ids.shape == (2, 3) and ids.dtype == torch.int64 and torch.equal(ids, torch.arange(3).expand(2, 3))
    # The actor's input: its observation, then the one-hot of its agent id (made by the encoder).
    flat = {"obs": obs.reshape(6, 4), "agent_id": ids.reshape(6)}
    x = Encoder(spec.obs)(flat).reshape(2, 3, 7)
    assert torch.equal(x[..., :4], obs) and torch.equal(x[..., 4:], torch.eye(3).expand(2, 3, 3))
    state = torch.randn(2, 15)
    s = critic_state(spec, state)
    assert s.shape == (2, 3, 15)
    c = Encoder(spec.critic_obs)({**flat, "state": s.reshape(6, 15)}).reshape(2, 3, 22)
    assert c.shape == (2, 3, 22)
    for n in range(3):  # every agent of a copy sees that copy's state, then its own input (one-hot included)
        assert torch.equal(s[:, n], state)
        assert torch.equal(c[:, n, :15], state) and torch.equal(c[:, n, 15:], x[:, n])
    (local,) = policy_specs(info, "shared", False, "local")
    assert local.obs == (obs_leaf,) and critic_state(local, state) is None
    assert local.critic_obs == local.obs and size(local.critic_obs) == 4 and local.state_dim == 0
    assert torch.equal(Encoder(local.obs)({"obs": obs.reshape(6, 4)}), obs.reshape(6, 4))  # the observation as it is
    # A policy of one agent needs no one-hot.
    assert all(s.obs == (obs_leaf,) and size(s.obs) == 4 for s in policy_specs(info, "per-agent", True, "local"))


@pytest.mark.parametrize("dist", ["tanh_gaussian", "beta"])
def test_action_dist_picks_a_box_distribution_and_refuses_what_does_not_fit(dist):
    import dataclasses

    info = describe("Pendulum-v1", 2)
    (spec,) = policy_specs(info, "shared", False, "local", dist)
    assert spec.action.kind == dist and spec.action.low == (-2.0,) and spec.action.continuous
    assert policy_specs(info, "shared", False, "local")[0].action.kind == "gaussian"
    assert policy_specs(describe("CartPole-v1", 2), "shared", False, "local")[0].action.kind == "categorical"
    with pytest.raises(PolicyError, match=f"--action-dist {dist}: policy 'shared' acts in Discrete\\[2\\], and {dist} "
                                          f"acts in Box actions: use --action-dist auto$"):
        policy_specs(describe("CartPole-v1", 2), "shared", False, "local", dist)
    unbounded = dataclasses.replace(info.specs[0], action=dataclasses.replace(info.specs[0].action, high=(float("inf"),)))
    info = dataclasses.replace(info, specs=(unbounded, unbounded))
    with pytest.raises(PolicyError, match=f"--action-dist {dist}: policy 'shared' acts in Box\\[1\\], and {dist} maps "
                                          "into finite bounds only.*: use --action-dist gaussian$"):
        policy_specs(info, "shared", False, "local", dist)
    with pytest.raises(PolicyError, match="--action-dist must be auto or one of .*beta.*, got 'tanh'"):
        policy_specs(info, "shared", False, "local", "tanh")
