"""`--env vmas:<scenario>`: VMAS's batched scenarios through train.py, resume, marl.evaluate and its videos.
The backend's semantics (autoreset, flags, rewards, state) are tests/test_backends.py's conformance test."""

from __future__ import annotations

import json

import pytest

from tests.conftest import evaluate_cli, read_scalars

NAV = ["--env", "vmas:navigation", "--env-kwargs", '{"n_agents": 2, "max_steps": 50}']


def test_mappo_on_two_learners_with_a_policy_each_resumes_evaluates_and_films(train, tmp_path):
    pytest.importorskip("vmas")
    av = pytest.importorskip("av")
    args = [*NAV, "--critic", "central", "--policies", "per-agent", "--learners", "2", "--envs-per-actor", "4",
            "--num-steps", "50", "--checkpoint-every", "2", "--run-name", "nav"]
    first = train(*args, "--total-steps", "3200")
    assert first.returncode == 0, first.stderr[-3000:]
    assert "vmas:navigation x 2 agents" in first.stdout and "central critic" in first.stdout, first.stdout[:400]
    run = train.logdir / "nav"
    scalars = read_scalars(run)
    # 2 actors x 4 copies x 50 steps x 2 agents an iteration; every 50-step episode ends inside one.
    assert {v for _, v in scalars["charts/episodic_length"]} == {50.0}
    assert {"agents/agent_0/episodic_return", "agents/agent_1/episodic_return"} <= set(scalars)
    again = train(*args, "--total-steps", "4800", "--resume", str(run))
    assert again.returncode == 0, again.stderr[-3000:]
    assert "resumed from" in again.stdout
    steps = [s for s, _ in read_scalars(run)["charts/SPS"]]
    assert steps == sorted(set(steps)) and steps[-1] >= 4800

    e = evaluate_cli([str(run), "--episodes", "2", "--json", "--video", str(tmp_path / "v")], timeout=300)
    assert e.returncode == 0, e.stderr[-2000:]
    agents = json.loads(e.stdout.splitlines()[-1])["agents"]
    assert set(agents) == {"agent_0", "agent_1"} and all(a["episodes"] == 2 for a in agents.values())
    with av.open(str(tmp_path / "v" / "episode_000.mp4")) as video:
        frames = [f.to_ndarray(format="rgb24") for f in video.decode(video=0)]
    assert len(frames) == 51 and frames[0].ndim == 3 and frames[0].std() > 0  # the reset's frame, then one a step
    assert not train.survivors()


def test_discrete_actions_with_a_recurrent_core_in_async_mode(train):
    pytest.importorskip("vmas")
    r = train("--env", "vmas:balance", "--env-kwargs", '{"n_agents": 2, "max_steps": 30, "continuous_actions": false}',
              "--core", "gru", "--mode", "async", "--num-steps", "30", "--total-steps", "3000", "--run-name", "bal")
    assert r.returncode == 0, r.stderr[-3000:]
    assert "vmas:balance x 2 agents" in r.stdout
    lengths = {v for _, v in read_scalars(train.logdir / "bal")["charts/episodic_length"]}
    assert lengths and max(lengths) <= 30  # balance ends early when the package falls, else at 30 steps


def test_a_missing_scenario_and_a_wrong_agent_count_are_one_line(train):
    pytest.importorskip("vmas")
    for args, says in ((["--env", "vmas:nowhere"], "VMAS has no scenario 'nowhere'"),
                       ([*NAV, "--agents", "3"], "has 2 agents, not 3")):
        r = train(*args, "--total-steps", "100")
        assert r.returncode == 2 and says in r.stderr and r.stderr.strip().count("\n") == 0, r.stderr


def test_without_vmas_installed_the_error_names_the_extra(monkeypatch):
    import sys

    from envs import EnvError, describe

    monkeypatch.setitem(sys.modules, "vmas", None)  # `import vmas` raises ImportError, as where it is not installed
    with pytest.raises(EnvError, match=r"pip install -e '\.\[vmas\]'"):
        describe("vmas:navigation")


def _actor(device_expected: str):
    import dataclasses

    import torch

    from envs import describe
    from marl.actor import RolloutWorker
    from marl.config import Config

    cfg = dataclasses.replace(Config(), env="vmas:balance", env_kwargs={"n_agents": 2, "max_steps": 20},
                              critic="central", envs_per_actor=3, num_steps=25)
    w = RolloutWorker(cfg, describe(cfg.env, None, cfg.env_kwargs), index=0)
    assert w.device.type == device_expected and w.runner.env.device == w.device
    assert all(p.device == w.device for p in w.policy.parameters())
    rollout = w.collect(0, {k: v.cpu() for k, v in w.policy.state_dict().items()})
    traj = rollout.trajectories["shared"]
    # 25 steps of 3 copies x 2 agents, one episode ending at 20: every tensor on the CPU for RPC.
    assert traj["obs"]["obs"].shape[:3] == (25, 3, 2) and traj["state"].shape[:3] == (25, 3, 2)
    assert all(v.device.type == "cpu" for v in [*traj["obs"].values(), *(x for x in traj.values() if isinstance(x, torch.Tensor))])
    assert bool(traj["valid"][:20].all()) and not bool(traj["valid"][20].any())  # the autoreset step
    return w


def test_an_actor_steps_vmas_as_tensors_beside_its_policy():
    pytest.importorskip("vmas")
    w = _actor("cpu")
    assert w.runner.device == w.device  # actions go to VMAS as tensors, observations come back as tensors
    assert w.recorder.buffers[0]["values"].device == w.device


@pytest.mark.skipif("not __import__('torch').cuda.is_available()")
def test_on_a_gpu_machine_the_actor_puts_vmas_and_its_policy_on_the_gpu():
    pytest.importorskip("vmas")
    w = _actor("cuda")  # (its checks: env, policy and recorder on the GPU, the rollout's tensors on the CPU)
    assert w.runner.device == w.device and w.recorder.buffers[0]["values"].device == w.device


def test_an_actor_takes_the_gpu_of_its_local_rank_only_for_a_torch_env(monkeypatch):
    # The decision alone, with CUDA pretended: a RolloutWorker is built in an RPC thread, whose current
    # CUDA device is cuda:0, so the local rank (LOCAL_RANK, set by run_rank) must decide.
    import types

    import torch

    from marl.devices import actor_device

    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    monkeypatch.setattr(torch.cuda, "device_count", lambda: 2)
    monkeypatch.setenv("LOCAL_RANK", "3")
    vmas, gym = types.SimpleNamespace(env_id="vmas:navigation"), types.SimpleNamespace(env_id="CartPole-v1")
    assert actor_device(vmas) == torch.device("cuda", 1)  # local rank 3 on a node of 2 GPUs
    assert actor_device(vmas, local_rank=2) == torch.device("cuda", 0)
    assert actor_device(gym) == torch.device("cpu")  # NumPy envs keep their actors on the CPU
