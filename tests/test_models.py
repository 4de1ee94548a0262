"""Networks chosen by the spaces, the custom-module protocol and its one-line refusals."""

from __future__ import annotations

import sys

import pytest
import torch
from torch import nn

from envs.spaces import ActionSpec, Leaf
from marl.models import ModelError, build_model, check_network, example_inputs, size_based_units
from marl.models.encoders import CNN, Encoder
from marl.policies import PolicySpec

CAT = ActionSpec("categorical", (), (), (3,), (0,))


def spec(*leaves: Leaf, action: ActionSpec = CAT, central: bool = False) -> PolicySpec:
    return PolicySpec("p", (0,), tuple(leaves), action, "", central, 5 if central else 0)


VEC = Leaf("obs", (), "box", (4,), "float32")
GRID = Leaf("image", ("image",), "box", (7, 7, 3), "uint8")
FRAMES = Leaf("obs", (), "box", (4, 84, 84), "uint8")
DIR = Leaf("direction", ("direction",), "discrete", (), "int64", (4,), (0,))
BUILTIN = {"model": "", "encoder": "auto", "hidden_sizes": [16]}


def test_auto_encoder_picks_by_space():
    assert not Encoder((VEC,)).cnns and Encoder((VEC,)).out_dim == 4
    grid = Encoder((DIR, GRID))
    cnn = grid.cnns["image"]
    assert cnn.channels_last and not any(isinstance(m, nn.Conv2d) and m.kernel_size == (8, 8) for m in cnn.modules())
    assert grid.out_dim == 4 + 128  # one-hot direction, then the small CNN's features
    nature = Encoder((FRAMES,)).cnns["obs"]
    assert not nature.channels_last and [m.kernel_size for m in nature.modules() if isinstance(m, nn.Conv2d)] == \
        [(8, 8), (4, 4), (3, 3)]
    assert Encoder((GRID,), "mlp").out_dim == 7 * 7 * 3 and not Encoder((GRID,), "mlp").cnns


def test_images_stay_uint8_until_the_model_scales_them():
    enc = Encoder((GRID,))
    x = torch.full((2, 7, 7, 3), 255, dtype=torch.uint8)
    out = enc({"image": x})
    assert out.shape == (2, 128) and out.dtype == torch.float32
    ref = enc.cnns["image"].fc(enc.cnns["image"].convs(torch.ones(2, 3, 7, 7)))
    torch.testing.assert_close(out, ref)  # 255 -> 1.0, HWC -> CHW inside the model


def test_discrete_leaves_are_one_hot():
    enc = Encoder((DIR, Leaf("m", ("m",), "multidiscrete", (2,), "int64", (2, 3), (0, 0))))
    out = enc({"direction": torch.tensor([2]), "m": torch.tensor([[1, 2]])})
    assert out.tolist() == [[0, 0, 1, 0, 0, 1, 0, 0, 1]]


def test_every_leaf_kind_reads_encodes_and_shows_itself():
    """envs.leaves: a leaf's kind string finds its class, which owns its stored dtype, width, features and views."""
    import gymnasium as gym
    import numpy as np

    from envs.leaves import KINDS, Bits, Box, Image, Index, MultiIndex
    from envs.spaces import leaf_array
    from marl.models.custom import leaf_space

    bits = Leaf("b", (), "multibinary", (3,), "uint8")
    multi = Leaf("m", (), "multidiscrete", (2,), "int64", (2, 3), (1, 0))
    assert set(KINDS) == {"box", "discrete", "multidiscrete", "multibinary"}  # the strings saved specs hold
    assert [leaf.kind_class for leaf in (VEC, GRID, DIR, multi, bits)] == [Box, Image, Index, MultiIndex, Bits]
    assert [leaf.size for leaf in (VEC, GRID, DIR, multi, bits)] == [4, 147, 4, 5, 3]
    assert leaf_array(multi, np.array([[2, 2]]), (1,)).tolist() == [[1, 2]]  # the start taken off
    assert leaf_array(bits, np.array([1, 0, 1]), ()).dtype == np.uint8
    assert leaf_space(GRID) == gym.spaces.Box(0, 255, (7, 7, 3), np.uint8) and leaf_space(multi) == gym.spaces.MultiDiscrete([2, 3])
    assert Bits.features(bits, torch.tensor([[1, 0, 1]], dtype=torch.uint8)).tolist() == [[1.0, 0.0, 1.0]]
    assert Image.features(GRID, torch.full((1, 7, 7, 3), 255, dtype=torch.uint8)).max() == 1.0  # --encoder mlp scales bytes
    g = torch.Generator().manual_seed(0)
    assert Index.example(DIR, (500,), g).max() == 3 and Box.example(GRID, (2,), g).dtype == torch.uint8


def test_cnn_forced_on_a_vector_is_refused():
    with pytest.raises(ModelError, match="--encoder cnn: observation obs: box\\[4\\] float32 is not image-shaped"):
        check_network((spec(VEC),), {**BUILTIN, "encoder": "cnn"})


def test_central_critic_reads_the_state_then_the_observation():
    s = spec(VEC, central=True)
    model = build_model((s,), BUILTIN).policies["p"]
    params, value, core = model(*example_inputs(s, 0, 3))
    assert core is None
    assert params.shape == (3, 3) and value.shape == (3,) and model.critic.blocks[0][0].in_features == 5 + 4


def test_size_based_units_take_big_submodules_post_order():
    net = nn.Sequential(nn.Linear(100, 100), nn.Sequential(nn.Linear(10, 10), nn.Linear(100, 1000)), nn.Linear(2, 2))
    units = size_based_units(net, 10_000)
    assert units == [net[0], net[1][1]]  # 10,100 and 101,000 parameters; the small ones stay with the root
    assert size_based_units(net, 10**9) == []
    # A recurrent core is one unit or none: its RNN runs once per span, a count that differs between ranks.
    from marl.models.core import Core

    with_core = nn.Sequential(nn.Linear(4, 4), Core("gru", 4, 8))
    assert size_based_units(with_core, 0) == [with_core[0], with_core[1]]


MODULE = '''
import torch
from torch import nn

class Good(nn.Module):
    def __init__(self, obs_space, action_space, num_outputs, hidden=8):
        super().__init__()
        self.body = nn.Linear(obs_space.shape[0], hidden)
        self.pi, self.v = nn.Linear(hidden, num_outputs), nn.Linear(hidden, 1)
    def forward(self, obs):
        x = torch.tanh(self.body(obs))
        return self.pi(x), self.v(x).sum(-1)

class Memory(Good):
    def __init__(self, obs_space, action_space, num_outputs, hidden=8):
        super().__init__(obs_space, action_space, num_outputs, hidden)
        self.gru, self.state_size = nn.GRUCell(hidden, hidden), hidden
    def forward(self, obs, state, starts):
        h, out = state, []
        for t in range(obs.shape[0]):
            h = self.gru(torch.tanh(self.body(obs[t])), h * (~starts[t]).float().unsqueeze(-1))
            out.append(h)
        x = torch.stack(out)
        return self.pi(x), self.v(x).sum(-1), h

class MemoryForgetsItsState(Memory):
    def forward(self, obs, state, starts):
        return super().forward(obs, state, starts)[:2]

class MemoryOfTheWrongSize(Memory):
    def forward(self, obs, state, starts):
        head, value, h = super().forward(obs, state, starts)
        return head, value, h[:, :2]

class WrongShape(Good):
    def forward(self, obs):
        return self.pi(torch.tanh(self.body(obs)))[:, :1], torch.zeros(obs.shape[0])

class Raises(Good):
    def __init__(self, obs_space, action_space, num_outputs):
        raise RuntimeError("no GPU found")

NotAModule = 3
'''


@pytest.fixture
def user_module(tmp_path, monkeypatch):
    (tmp_path / "user_nets.py").write_text(MODULE)
    monkeypatch.syspath_prepend(str(tmp_path))
    yield "user_nets"
    sys.modules.pop("user_nets", None)


def custom(path: str, **kwargs) -> dict:
    return {"model": path, "model_kwargs": kwargs}


def test_a_custom_module_follows_the_protocol(user_module):
    s = spec(VEC)
    check_network((s,), custom(f"{user_module}:Good", hidden=8))
    model = build_model((s,), custom(f"{user_module}:Good", hidden=8))
    params, value, _ = model.policies["p"](*example_inputs(s, 0, 5))
    assert params.shape == (5, 3) and value.shape == (5,)
    box = spec(VEC, action=ActionSpec("gaussian", (3,), (3,), low=(-1.0,) * 3, high=(1.0,) * 3))
    params, _, _ = build_model((box,), custom(f"{user_module}:Good")).policies["p"](*example_inputs(box, 0, 2))
    assert params.shape == (2, 6)  # marl appends the learned log-std to the user's means
    beta = spec(VEC, action=ActionSpec("beta", (3,), (3,), low=(-1.0,) * 3, high=(1.0,) * 3))
    check_network((beta,), custom(f"{user_module}:Good"))  # num_outputs 6: the user's head gives alphas and betas
    policy = build_model((beta,), custom(f"{user_module}:Good")).policies["p"]
    assert policy.log_std is None and policy(*example_inputs(beta, 0, 2))[0].shape == (2, 6)


@pytest.mark.parametrize("kind, head, log_std", [("gaussian", 3, True), ("tanh_gaussian", 3, True), ("tanh_normal", 6, False),
                                                 ("beta", 6, False)])
def test_the_distribution_makes_the_head_and_checkpoint_keys_stay(kind, head, log_std):
    box = spec(VEC, action=ActionSpec(kind, (3,), (3,), low=(-1.0,) * 3, high=(1.0,) * 3))
    model = build_model((box,), BUILTIN)
    keys = list(model.state_dict())
    assert model.policies["p"].actor.head.out_features == head
    # The names checkpoints hold, so that old runs load.
    assert "policies.p.actor.head.weight" in keys and ("policies.p.log_std" in keys) == log_std
    params, _, _ = model.policies["p"](*example_inputs(box, 0, 2))
    assert params.shape == (2, 6)
    torch.testing.assert_close(params[:, 3:], torch.zeros(2, 3)) if log_std else None


@pytest.mark.parametrize("path, message", [
    ("nowhere_module:Net", "module 'nowhere_module' does not import"),
    ("{m}:Missing", "has no 'Missing'"),
    ("{m}:NotAModule", "is not a torch.nn.Module subclass"),
    ("{m}:WrongShape", r"returned head \[2, 1\] and value \[2\]; expected head \[2, 3\]"),
    ("{m}:Raises", "failed: RuntimeError: no GPU found"),
    ("no_colon", "expected module:Class"),
    ("{m}:MemoryForgetsItsState", r"forward must return \(head, value, state\) tensors \(it has state_size 8\), got tuple of 2"),
    ("{m}:MemoryOfTheWrongSize", r"returned a state of \[2, 2\]; expected \[2, 8\]"),
])
def test_a_broken_custom_module_gets_one_line(user_module, path, message):
    with pytest.raises(ModelError, match=message) as e:
        check_network((spec(VEC),), custom(path.format(m=user_module)))
    assert "\n" not in str(e.value)


def test_a_custom_module_with_a_central_critic_is_refused(user_module):
    with pytest.raises(ModelError, match="--critic central works with the built-in network only"):
        check_network((spec(VEC, central=True),), custom(f"{user_module}:Good"))


def test_small_cnn_fits_small_images():
    for side in (4, 5, 7, 11, 35):
        cnn = CNN(Leaf("obs", (), "box", (side, side, 3), "uint8"))
        assert cnn(torch.zeros(1, side, side, 3, dtype=torch.uint8)).shape == (1, 128)


def test_image_layout_takes_two_equal_axes_as_the_spatial_ones():
    from envs.spaces import image_layout

    assert image_layout((8, 8, 111)) == (True, (111, 8, 8))  # chess's planes, channels last
    assert image_layout((4, 84, 84)) == (False, (4, 84, 84))
    assert image_layout((7, 7, 3)) == (True, (3, 7, 7))
    assert image_layout((210, 160, 3)) == (True, (3, 210, 160))


@pytest.mark.parametrize("kind", ["gru", "lstm"])
def test_a_recurrent_core_goes_between_any_encoder_and_the_heads(kind):
    from marl.models.actor_critic import ActorCritic

    for leaves, central in (((VEC,), False), ((DIR, GRID), False), ((VEC,), True)):
        s = spec(*leaves, central=central)
        net = ActorCritic(s, (16,), core=kind, core_size=8)
        assert net.state_size == 2 * 8 * (2 if kind == "lstm" else 1)  # the actor's core, then the critic's
        obs, state, core, starts = example_inputs(s, net.state_size, batch=2, steps=3)
        params, value, after = net(obs, state, core, starts)
        assert params.shape == (6, 3) and value.shape == (6,) and after.shape == (2, net.state_size)
        # One step of act() is the first step of forward(): the same actor state and logits.
        first = {k: v[0] for k, v in obs.items()}
        logits, stepped = net.act(first, core, starts[0])
        torch.testing.assert_close(logits, params[:2])
        half = net.actor_core.state_size
        assert torch.equal(stepped[:, half:], core[:, half:])  # act() leaves the critic's state alone
    check_network((spec(DIR, GRID),), {**BUILTIN, "core": kind, "core_size": 8})


def test_a_custom_recurrent_module_follows_the_protocol(user_module):
    s = spec(VEC)
    check_network((s,), custom(f"{user_module}:Memory"))
    policy = build_model((s,), custom(f"{user_module}:Memory")).policies["p"]
    assert policy.state_size == 8
    params, value, core = policy(*example_inputs(s, 8, batch=2, steps=3))
    assert params.shape == (6, 3) and value.shape == (6,) and core.shape == (2, 8)


@pytest.mark.parametrize("via_sigmoid", [False, True])
def test_the_mlps_tanh_is_tanh_forward_and_backward_either_way(via_sigmoid):
    """Both ways of computing the MLPs' tanh (marl.models.activations) against torch.tanh in float64,
    values and gradients, over the range where tanh bends and where it saturates."""
    from marl.models.activations import Tanh

    act = Tanh()
    act.via_sigmoid = via_sigmoid
    x = torch.linspace(-12, 12, 4097).reshape(17, 241).requires_grad_()
    y = act(x)
    grad = torch.rand_like(y)
    y.backward(grad)
    ref_x = x.detach().double().requires_grad_()
    ref = torch.tanh(ref_x)
    ref.backward(grad.double())
    assert (y.double() - ref).abs().max().item() < 3e-7
    assert (x.grad.double() - ref_x.grad).abs().max().item() < 1e-6
    # Inference (the actors), bf16 and traced exports take torch's own tanh, bit for bit.
    with torch.no_grad():
        assert torch.equal(act(x), torch.tanh(x))
    assert torch.equal(act(x.detach().bfloat16()), torch.tanh(x.detach().bfloat16()))
