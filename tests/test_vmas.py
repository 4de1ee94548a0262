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
