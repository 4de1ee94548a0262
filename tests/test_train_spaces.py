"""Real environments of every space, trained end to end: real processes, real RPC, a real learner.
Budgets are CI-short; bench/ holds the longer runs."""

from __future__ import annotations

import re

import pytest
import torch

from tests.conftest import ROOT, evaluate_cli

pytest.importorskip("minigrid")


def solved_step(out: str) -> int:
    m = re.search(r"^solved: .* at step ([\d,]+) ", out, re.M)
    assert m, out[-2000:]
    return int(m.group(1).replace(",", ""))



def steps_done(run) -> int:
    """The agent-steps of a run's newest checkpoint: a resume to one more than that trains one iteration."""
    newest = sorted((run / "checkpoints").iterdir())[-1]
    return int(torch.load(newest / "trainer.pt", weights_only=True)["global_step"])

def test_minigrid_empty_reaches_0_9_with_the_cnn_and_evaluates(train):
    # Seed 2 solves at 43k agent-steps (seeds 1-3: 123k, 43k, 74k; bench/time_to_solve.py has all three).
    r = train("--env", "MiniGrid-Empty-5x5-v0", "--seed", "2", "--total-steps", "150000", "--target-return", "0.9",
              "--run-name", "grid", "--checkpoint-every", "0")
    assert r.returncode == 0, r.stderr[-3000:]
    solved_step(r.stdout)
    assert "observation keys mission are left out" in r.stdout  # the text key, said once
    payload = torch.load(train.logdir / "grid" / "policy.pt", weights_only=True)
    assert [leaf["name"] for leaf in payload["policies"][0]["obs"]] == ["direction", "image"]
    assert payload["policies"][0]["obs"][1]["dtype"] == "uint8"
    assert any(".cnns.image." in k for k in payload["state_dict"])
    e = evaluate_cli([str(train.logdir / "grid"), "--episodes", "3"], timeout=120)
    assert e.returncode == 0 and "all agents: mean" in e.stdout, e.stderr
    # The CNN resumes from its checkpoint, one more iteration.
    r = train("--resume", str(train.logdir / "grid"), "--total-steps", str(steps_done(train.logdir / "grid") + 1),
              "--target-return", "2")
    assert r.returncode == 0 and "resumed from" in r.stdout, r.stderr[-3000:]


def test_frozenlake_discrete_observations_reach_0_95(train):
    r = train("--env", "FrozenLake-v1", "--env-kwargs", '{"is_slippery": false}', "--target-return", "0.95",
              "--total-steps", "200000")
    assert r.returncode == 0, r.stderr[-3000:]
    solved_step(r.stdout)


@pytest.mark.parametrize("env, kwargs, target", [
    ("envs.masked:MaskedChoice-v0", '{"mask_in": "obs"}', 15.5),
    ("envs.masked:MaskedChoice-v0", '{"mask_in": "info"}', 15.5),
    ("envs.targets:MatchDigits-v0", "{}", 7.5),
    ("envs.targets:MatchBits-v0", "{}", 7.5),
], ids=["mask-in-obs", "mask-in-info", "multidiscrete", "multibinary"])
def test_first_party_envs_train_to_their_optimum(train, env, kwargs, target):
    """Optimum 16 (masked: random legal play gets 5.25) and 8 (digits: random 2.09, bits: random 4)."""
    r = train("--env", env, "--env-kwargs", kwargs, "--target-return", str(target), "--total-steps", "400000")
    assert r.returncode == 0, r.stderr[-3000:]
    solved_step(r.stdout)


def test_atari_trains_with_the_nature_cnn_on_uint8_frames(train):
    pytest.importorskip("ale_py")
    from marl.policy_file import load_policy
    from marl.specs import trajectory_fields
    from tests.test_train_algos import assert_every_weight_moved

    r = train("--env", "ALE/Pong-v5", "--wrappers", "atari", "--agents", "1", "--envs-per-actor", "2",
              "--num-steps", "32", "--total-steps", "256", "--hidden-sizes", "64", "--seed", "1", "--run-name", "pong")
    assert r.returncode == 0, r.stderr[-3000:]
    _, (spec,), payload = load_policy(train.logdir / "pong" / "policy.pt")
    leaf = payload["policies"][0]["obs"][0]
    assert (tuple(leaf["shape"]), leaf["dtype"]) == ((4, 84, 84), "uint8")  # from ale_py's own vector env
    # What actors send and the learner ranks scatter for this spec: the frames stay bytes all the way.
    shape, dtype = trajectory_fields(spec)["obs"]["obs"]
    assert (tuple(shape), dtype) == ((4, 84, 84), torch.uint8)
    convs = {k: v.shape for k, v in payload["state_dict"].items() if ".cnns.obs.convs." in k and k.endswith("weight")}
    # The Nature-DQN CNN (Mnih et al. 2015): 32 8x8 /4, 64 4x4 /2, 64 3x3 /1.
    assert sorted(convs.values()) == sorted([(32, 4, 8, 8), (64, 32, 4, 4), (64, 64, 3, 3)]), convs
    assert_every_weight_moved(train.logdir / "pong", 1, ".cnns.obs.convs.")


def docs_network_example(recurrent: bool = False) -> str:
    """The docs' custom network example (or its recurrent one), as code."""
    text = (ROOT / "docs" / "guides" / "spaces-and-networks.md").read_text()
    blocks = re.findall(r"```python\n(.*?)```", text[text.index("## Your own network"):], re.S)
    assert len(blocks) >= 2, "docs/guides/spaces-and-networks.md has no custom network examples"
    return blocks[1 if recurrent else 0]


def test_the_readme_custom_network_trains_resumes_and_evaluates(train, tmp_path):
    (tmp_path / "my_nets.py").write_text(docs_network_example())
    train.extra_env = {"PYTHONPATH": str(tmp_path)}
    r = train("--agents", "8", "--model", "my_nets:TwoTowers", "--model-kwargs", '{"hidden": 64}',
              "--run-name", "mine", "--total-steps", "400000")
    assert r.returncode == 0, r.stderr[-3000:]
    solved_step(r.stdout)
    payload = torch.load(train.logdir / "mine" / "policy.pt", weights_only=True)
    assert payload["network"] == {"model": "my_nets:TwoTowers", "model_kwargs": {"hidden": 64}}
    env = {**train.env()}
    e = evaluate_cli([str(train.logdir / "mine"), "--episodes", "2"], timeout=120, env=env)
    assert e.returncode == 0 and "all agents: mean" in e.stdout, e.stderr
    r = train("--resume", str(train.logdir / "mine"), "--total-steps", str(steps_done(train.logdir / "mine") + 1),
              "--target-return", "1000")
    assert r.returncode == 0 and "resumed from" in r.stdout, r.stderr[-3000:]
    # The module is gone: evaluation says so in one line.
    (tmp_path / "my_nets.py").unlink()
    e = evaluate_cli([str(train.logdir / "mine")], timeout=120, env=env)
    assert e.returncode == 2 and "module 'my_nets' does not import" in e.stderr and e.stderr.count("\n") == 1, e.stderr


@pytest.mark.parametrize("args, message", [
    (("--model", "no_such_module:Net"), "module 'no_such_module' does not import"),
    (("--model", "torch.nn:Linear"), "Linear(obs_space, action_space, num_outputs, **model_kwargs) failed"),
    (("--encoder", "cnn"), "--encoder cnn: observation obs: box[4] float32 is not image-shaped"),
    (("--obs-keys", "image"), "--obs-keys 'image' is not a usable key"),
    (("--env", "envs.masked:MaskedChoice-v0", "--wrappers", "NoSuchWrapper"), "no wrapper 'NoSuchWrapper'"),
], ids=["no-module", "breaks-protocol", "cnn-on-vector", "unknown-key", "unknown-wrapper"])
def test_bad_networks_and_spaces_get_one_line_and_exit_2(train, args, message):
    r = train(*args, timeout=120)
    assert r.returncode == 2 and message in r.stderr and r.stderr.count("\n") == 1, r.stderr
    assert not train.survivors() and not (train.logdir).exists() or not any(train.logdir.iterdir())


def test_the_reported_pong_crash_is_gone(train):
    """`ale_py:ALE/Pong-v5` once crashed every actor: its spaces were read from gym.make (210x160x3)
    while the actors stepped ale_py's vector env (4x84x84). Both now come from the object stepped."""
    pytest.importorskip("ale_py")
    r = train("--env", "ale_py:ALE/Pong-v5", "--agents", "1", "--envs-per-actor", "2", "--num-steps", "16",
              "--total-steps", "64", "--hidden-sizes", "32")
    assert r.returncode == 0 and "failed and is dropped" not in r.stdout, r.stdout[-2000:] + r.stderr[-2000:]


@pytest.mark.parametrize("env, kwargs", [("MiniGrid-Empty-5x5-v0", "{}"), ("FrozenLake-v1", "{}"),
                                         ("envs.targets:MatchBits-v0", "{}")], ids=["cnn", "one-hot", "multibinary"])
def test_bf16_learners_take_every_observation_and_the_run_evaluates_and_resumes(train, env, kwargs):
    """FSDP casts only float inputs to bf16: features the model makes itself (scaled bytes, one-hots)
    must follow the weights' dtype. The specs saved with the run are plain data (MultiBinary's shape)."""
    r = train("--env", env, "--env-kwargs", kwargs, "--precision", "bf16", "--total-steps", "3000", "--run-name", "bf")
    assert r.returncode == 0, r.stderr[-3000:]
    e = evaluate_cli([str(train.logdir / "bf"), "--episodes", "1"], timeout=120)
    assert e.returncode == 0 and "all agents: mean" in e.stdout, e.stderr
    if env.startswith("MiniGrid"):  # how a bf16 checkpoint resumes does not depend on the observations: once is enough
        r = train("--resume", str(train.logdir / "bf"), "--total-steps", "6000")
        assert r.returncode == 0 and "resumed from" in r.stdout, r.stderr[-3000:]
