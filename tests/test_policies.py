"""Policy mapping: agent -> policy, space checks, clear errors, and the networks' inputs."""

import pytest
import torch

from envs import describe
from marl.policies import PolicyError, actor_input, assign, critic_input, policy_specs

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
                                          "\\(obs 3, actions Discrete\\(3\\) vs obs 11, actions Discrete\\(5\\)\\)"):
        policy_specs(info, "shared", False, "local")
    speaker, listener = policy_specs(info, {"speaker_*": "speaker", "listener_*": "listener"}, False, "central")
    assert (speaker.name, speaker.agents, speaker.obs_dim, speaker.num_actions) == ("speaker", (0,), 3, 3)
    assert (listener.name, listener.agents, listener.obs_dim, listener.num_actions) == ("listener", (1,), 11, 5)
    # MAPPO: both critics see env.state(), then the agent's own observation.
    assert (speaker.critic_dim, listener.critic_dim) == (info.state_dim + 3, info.state_dim + 11)


def test_agent_one_hot_and_central_critic_inputs():
    info = describe("CartPole-v1", 3)
    (spec,) = policy_specs(info, "shared", True, "central")
    assert (spec.env_obs_dim, spec.obs_dim, spec.critic_dim) == (4, 4 + 3, (3 * 4 + 3) + (4 + 3))
    obs = torch.arange(2 * 3 * 4, dtype=torch.float32).reshape(2, 3, 4)  # [copies, agents, obs]
    x = actor_input(spec, obs)
    assert torch.equal(x[..., :4], obs) and torch.equal(x[..., 4:], torch.eye(3).expand(2, 3, 3))
    state = torch.randn(2, 15)
    c = critic_input(spec, x, state)
    assert c.shape == (2, 3, 22)
    for n in range(3):  # every agent of a copy sees that copy's state, then its own input (one-hot included)
        assert torch.equal(c[:, n, :15], state) and torch.equal(c[:, n, 15:], x[:, n])
    (local,) = policy_specs(info, "shared", False, "local")
    assert actor_input(local, obs) is obs and critic_input(local, obs, None) is None and local.critic_dim == 4
    # A policy of one agent needs no one-hot.
    assert all(s.obs_dim == 4 for s in policy_specs(info, "per-agent", True, "local"))
