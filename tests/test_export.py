"""`python -m marl.export`: every network marl builds or loads, written as ONNX and TorchScript, run
in onnxruntime and torch.jit beside marl's own evaluation step (the greedy PolicySource and the env
adapters' numpy action conversion) on the same random observations; and the CLI's refusals."""

from __future__ import annotations

import dataclasses
import json
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
import torch
from torch import nn

from envs import describe
from envs.spaces import ActionSpec, Leaf
from marl.config import Config
from marl.export import Acting, main
from marl.models import build_model, network_of
from marl.policies import PolicySpec, specs_of
from marl.policy_file import export_policy as write_policy_file
from marl.sources import PolicySource

pytest.importorskip("onnxruntime")
ROOT = Path(__file__).resolve().parent.parent

VEC = Leaf("obs", (), "box", (5,), "float32")
FRAMES = Leaf("obs", (), "box", (4, 84, 84), "uint8")
GRID = Leaf("image", ("image",), "box", (7, 7, 3), "uint8")
DIR = Leaf("direction", ("direction",), "discrete", (), "int64", (4,), (2,))  # Discrete(4, start=2): the env's values
DISCRETE = ActionSpec("categorical", (), (), (3,), (1,))  # Discrete(3, start=1): the offset is added back
MULTI = ActionSpec("multicategorical", (2,), (2,), (3, 2), (1, -1))
BITS = ActionSpec("bernoulli", (4,), (4,))
BOX = dict(shape=(2,), env_shape=(2,), low=(-1.0, -2.0), high=(1.0, 0.5))
MLP = {"model": "", "encoder": "auto", "hidden_sizes": [16, 16]}


class TwoHeads(nn.Module):
    """A user's --model (the custom-network protocol of marl.models.custom)."""

    def __init__(self, obs_space, action_space, num_outputs, hidden: int = 8):
        super().__init__()
        self.body = nn.Sequential(nn.Linear(obs_space.shape[0], hidden), nn.ELU())
        self.pi, self.v = nn.Linear(hidden, num_outputs), nn.Linear(hidden, 1)

    def forward(self, obs):
        x = self.body(obs)
        return self.pi(x), self.v(x).squeeze(-1)


class Remembers(TwoHeads):
    """A user's recurrent --model: time-major sequences, its state zeroed where `starts` says."""

    def __init__(self, obs_space, action_space, num_outputs, hidden: int = 8):
        super().__init__(obs_space, action_space, num_outputs, hidden)
        self.cell, self.state_size = nn.GRUCell(hidden, hidden), hidden

    def forward(self, obs, state, starts):
        h, out = state, []
        for t in range(obs.shape[0]):
            h = self.cell(self.body(obs[t]), h * (~starts[t]).float().unsqueeze(-1))
            out.append(h)
        x = torch.stack(out)
        return self.pi(x), self.v(x).sum(-1), h


class GammaNet(TwoHeads):
    """A user's network with an op ONNX has no operator for (aten::lgamma at opset 17)."""

    def forward(self, obs):
        x = self.body(obs)
        return self.pi(torch.lgamma(x.abs() + 1)), self.v(x).squeeze(-1)


class Branches(TwoHeads):
    """A user's network that branches on its input in Python: a traced graph keeps the branch it saw."""

    def forward(self, obs):
        x = self.body(obs)
        head = self.pi(x) if float(obs[0, 0]) > 0 else -self.pi(x)
        return head, self.v(x).squeeze(-1)


def spec(leaves, action, mask: bool = False) -> PolicySpec:
    return PolicySpec("p", (0,), tuple(leaves), action, "obs" if mask else "", False, 0)


CASES = {
    "mlp-discrete": (spec([VEC], DISCRETE), MLP),
    "cnn-uint8-frames": (spec([FRAMES], DISCRETE), MLP),
    "dict-image-direction-masked": (spec([DIR, GRID], DISCRETE, mask=True), MLP),
    "gru": (spec([VEC], DISCRETE), {**MLP, "core": "gru", "core_size": 8}),
    "lstm-multidiscrete-masked": (spec([VEC], MULTI, mask=True), {**MLP, "core": "lstm", "core_size": 8}),
    "multibinary": (spec([VEC], BITS), MLP),
    "gaussian-norm-obs": (spec([VEC], ActionSpec("gaussian", **BOX)), {**MLP, "norm_obs": 5.0}),
    "tanh-gaussian-norm-obs": (spec([VEC], ActionSpec("tanh_gaussian", **BOX)), {**MLP, "norm_obs": 5.0}),
    "beta": (spec([VEC], ActionSpec("beta", **BOX)), MLP),
    "dqn-dueling-masked": (spec([VEC], ActionSpec("epsilon_greedy", (), (), (3,), (0,)), mask=True),
                           {**MLP, "q": "dueling"}),
    "drqn-gru": (spec([VEC], ActionSpec("epsilon_greedy", (), (), (3,), (0,))), {**MLP, "q": "plain", "core": "gru",
                                                                                  "core_size": 8}),
    "sac-actor": (spec([VEC], ActionSpec("tanh_gaussian", **BOX)), {**MLP, "actor": "sac"}),
    "custom-model": (spec([VEC], DISCRETE), {"model": "tests.test_export:TwoHeads", "model_kwargs": {"hidden": 8}}),
    "custom-recurrent-model": (spec([VEC], ActionSpec("gaussian", **BOX)), {"model": "tests.test_export:Remembers",
                                                                           "model_kwargs": {}}),
}


def trained_looking(policy: nn.Module) -> nn.Module:
    """Random weights and normaliser statistics far from their init, so that outputs differ per input and
    Box actions reach past their bounds (clipping is exercised)."""
    g = torch.Generator().manual_seed(1)
    with torch.no_grad():
        for p in policy.parameters():
            p.copy_(torch.randn(p.shape, generator=g) * 0.5)
        for name, b in policy.named_buffers():
            if name.endswith("mean"):
                b.copy_(torch.randn(b.shape, generator=g))
            elif name.endswith("var"):
                b.copy_(torch.rand(b.shape, generator=g) * 3 + 0.1)
            elif name.endswith("epsilon"):
                b.fill_(0.05)
    return policy.eval()


def marl_step(model, spec: PolicySpec, inputs: tuple[torch.Tensor, ...]) -> tuple[np.ndarray, torch.Tensor | None]:
    """What marl's evaluation does for one step of these inputs (the env's values): the env adapter's numpy
    reading of each leaf, the greedy PolicySource on B env copies of one agent, then the adapter's numpy
    action conversion -> (the env's actions [B, *env_shape], the state after)."""
    n = len(spec.obs)
    B = inputs[0].shape[0]
    obs = {leaf.name: torch.from_numpy(leaf.kind_class.read(leaf, x.numpy(), (B,))).unsqueeze(1)
           for leaf, x in zip(spec.obs, inputs)}
    rest = list(inputs[n:])
    mask = rest.pop(0).unsqueeze(1) if spec.mask else None
    source = PolicySource(model, (spec,), B, torch.Generator().manual_seed(0), greedy=True, critic=False)
    if rest:
        source.core[0] = rest.pop(0).reshape(B, 1, -1)
    with torch.no_grad():
        act = source.act(0, obs, mask, torch.zeros(B, 1, dtype=torch.bool), None)
    env = spec.action.space.to_env(spec.action, act.env.numpy(), (B, 1))
    return env.reshape(B, *spec.action.env_shape), source.core[0].reshape(B, -1) if model.state_size("p") else None


@pytest.mark.parametrize("fmt", ["onnx", "torchscript"])
@pytest.mark.parametrize("case", list(CASES))
def test_the_exported_file_acts_as_marl_does(case, fmt, tmp_path):
    from marl.export import export_file, run_exported

    spec_, network = CASES[case]
    torch.manual_seed(0)
    model = build_model((spec_,), network)
    policy = trained_looking(model.policies["p"])
    out = tmp_path / f"p.{fmt}"
    diff, _ = export_file(policy, spec_, fmt, out)
    assert diff < 1e-5, diff

    acting = Acting(policy, spec_)
    inputs = acting.example(9, torch.Generator().manual_seed(7))  # a batch size the export never saw
    got = run_exported(out, fmt, inputs, acting.input_names)
    assert len(got) == len(acting.output_names)
    action, state = marl_step(model, spec_, inputs)
    assert got[0].shape == action.shape and got[0].numpy().dtype == action.dtype
    if spec_.action.continuous:
        np.testing.assert_allclose(got[0].numpy(), action, atol=1e-5, rtol=0)
        low, high = np.array(spec_.action.low), np.array(spec_.action.high)
        assert (got[0].numpy() >= low).all() and (got[0].numpy() <= high).all()
        if spec_.action.kind == "gaussian":  # unbounded means: some reach past the bounds, and are clipped
            assert ((got[0].numpy() == low) | (got[0].numpy() == high)).any()
    else:
        assert (got[0].numpy() == action).all(), (got[0], action)
        assert got[0].numpy().min() >= min(spec_.action.start or (0,))
    with torch.no_grad():
        recurrent = state is not None
        stored = {leaf.name: torch.from_numpy(leaf.kind_class.read(leaf, x.numpy(), (9,))) for leaf, x in zip(spec_.obs, inputs)}
        params = policy.act(stored, inputs[-1] if recurrent else None,
                            torch.zeros(9, dtype=torch.bool) if recurrent else None)[0].float()
    if spec_.mask:
        illegal = ~inputs[len(spec_.obs)]
        assert (got[1][..., :illegal.shape[-1]][illegal] == torch.finfo(torch.float32).min).all()
        params = torch.where(torch.cat([illegal, torch.zeros_like(params[:, illegal.shape[-1]:], dtype=torch.bool)], -1),
                             torch.finfo(torch.float32).min, params)
        action_legal = torch.as_tensor(np.asarray(action)).reshape(9, -1) - torch.tensor(spec_.action.start or (0,))
        groups = torch.split(inputs[len(spec_.obs)], list(spec_.action.nvec), -1)
        assert all(g.gather(-1, action_legal[:, i:i + 1]).all() for i, g in enumerate(groups))  # only legal moves
    torch.testing.assert_close(got[1], params, atol=1e-5, rtol=0)
    if state is not None:
        torch.testing.assert_close(got[2], state, atol=1e-5, rtol=0)
        assert not torch.equal(got[2], inputs[-1])  # the state moved


def run_with(tmp_path: Path, **config) -> Path:
    """A run directory holding policy.pt, as train.py writes it, for a config (untrained weights)."""
    cfg = dataclasses.replace(Config(), **config)
    info = describe(cfg.env, cfg.agents)
    specs = specs_of(cfg, info)
    torch.manual_seed(0)
    run = tmp_path / "run"
    run.mkdir()
    write_policy_file(run / "policy.pt", build_model(specs, network_of(cfg)).state_dict(), info, cfg, specs)
    return run


def test_the_cli_writes_each_policy_with_its_metadata(tmp_path, capsys):
    import onnx

    run = run_with(tmp_path, env="pettingzoo:mpe2.simple_speaker_listener_v4", agents=2,
                   policies={"speaker_*": "speaker", "listener_*": "listener"})
    assert main([str(run), "--out", str(tmp_path / "out" / "pi.onnx")]) == 0
    printed = capsys.readouterr().out
    for name in ("speaker", "listener"):
        path = tmp_path / "out" / f"pi-{name}.onnx"
        meta = {p.key: p.value for p in onnx.load(str(path)).metadata_props}
        assert meta["marl.policy"] == name and json.loads(meta["marl.inputs"]) == ["obs"]
        assert f"{path}: policy {name!r} as onnx" in printed
    assert main([str(run), "--format", "torchscript", "--policy", "listener"]) == 0
    assert (run / "policy.ts.pt").is_file() and "max |diff| to marl's forward" in capsys.readouterr().out


def test_the_cli_refuses_in_one_line_with_exit_2(tmp_path, capsys):
    run = run_with(tmp_path, env="CartPole-v1", agents=2, model="tests.test_export:GammaNet")
    assert main([str(run), "--format", "onnx"]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "aten::lgamma" in err and "--format torchscript" in err, err
    assert main([str(run), "--format", "torchscript"]) == 0  # TorchScript holds it
    capsys.readouterr()
    for argv, says in (([str(run), "--policy", "nope"], "the run's policies are shared"),
                       ([str(run), "--formt", "onnx"], "did you mean --format?"),
                       ([str(tmp_path)], "has no policy.pt"),
                       ([str(run), "--format", "tflite"], "invalid choice")):
        assert main(argv) == 2
        err = capsys.readouterr().err
        assert err.count("\n") == 1 and says in err, err


def test_a_graph_that_differs_from_marl_or_a_clashing_name_is_refused(tmp_path, capsys):
    from marl.export import ExportError

    run = run_with(tmp_path, env="CartPole-v1", agents=2, model="tests.test_export:Branches")
    assert main([str(run), "--format", "torchscript", "--out", str(tmp_path / "b.ts.pt")]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "differs from marl's own forward" in err, err
    assert not (tmp_path / "b.ts.pt").exists()  # not kept
    clash = spec([Leaf("params", ("params",), "box", (5,), "float32")], DISCRETE)
    with pytest.raises(ExportError, match="named 'params'"):
        Acting(build_model((clash,), MLP).policies["p"], clash)


def test_the_serving_example_plays_a_trained_policy_as_marl_evaluate_does(train, tmp_path):
    """docs/examples/serve_onnx.py (no marl import) plays the exported file in a Gymnasium loop and
    scores what `python -m marl.evaluate` scores, episode for episode, on the same seeds."""
    from marl.evaluate import evaluate

    # One agent: marl.evaluate's one env copy is then Gymnasium's CartPole vector env of one, whose episodes
    # from a seed are gym.make's, step for step.
    done = train("--agents", "1", "--total-steps", "30000", "--run-name", "served", "--checkpoint-every", "0")
    assert done.returncode == 0, done.stderr[-2000:]
    run = train.logdir / "served"
    assert main([str(run), "--out", str(tmp_path / "cartpole.onnx")]) == 0
    example = ROOT / "docs" / "examples" / "serve_onnx.py"
    assert "import marl" not in example.read_text() and "from marl" not in example.read_text()
    served = subprocess.run([sys.executable, str(example), str(tmp_path / "cartpole.onnx"), "--env", "CartPole-v1",
                             "--episodes", "3", "--seed", "100", "--json"], capture_output=True, text=True, timeout=120)
    assert served.returncode == 0, served.stderr[-2000:]
    returns = json.loads(served.stdout)["returns"]
    ours = evaluate(run, 3, seed=100, sample=False)[0]["agent_0"]
    assert returns == ours and max(returns) > 30, (returns, ours)  # 30k steps of PPO: past random play's ~22
