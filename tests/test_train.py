"""train.py end to end: real processes, real RPC, real FSDP over gloo, real CartPole, real event files."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from marl.config import load_toml
from tests.conftest import ROOT, evaluate_cli, read_scalars

CLEANRL_TAGS = ["charts/episodic_return", "charts/episodic_length", "charts/SPS", "losses/value_loss",
                "losses/policy_loss", "losses/entropy", "losses/approx_kl", "losses/clipfrac",
                "losses/explained_variance", "perf/collect_seconds", "perf/learn_seconds", "perf/publish_seconds",
                "perf/idle_seconds", "perf/coordinator_overhead", "perf/policy_lag", "perf/startup_seconds"]


def comms(pids: list[int]) -> set[str]:
    names = set()
    for pid in pids:
        try:
            names.add(Path(f"/proc/{pid}/comm").read_text().strip())
        except OSError:
            pass
    return names


def test_default_run_solves_cartpole_with_eight_agents(train):
    proc = train.start("--agents", "8", "--run-name", "solve")
    try:
        # While it runs, every role is a separate process that ps/top can tell apart.
        expected = {"marl-learner0", "marl-actor0", "marl-actor1"}
        deadline = time.monotonic() + 60
        while not expected <= comms(train.survivors()) and time.monotonic() < deadline and proc.poll() is None:
            time.sleep(0.1)
        assert expected <= comms(train.survivors())
        out, err = proc.communicate(timeout=600)
    finally:
        proc.kill()
    assert proc.returncode == 0, err[-3000:]
    assert "solved: mean return" in out, out[-2000:]
    assert "Traceback" not in err
    assert "start-up:" in out and "first rollout" in out
    progress = [line for line in out.splitlines() if line.startswith("iter ")]
    assert len(progress) > 5 and "steps/s" in progress[0] and "return" in progress[0]

    run = train.logdir / "solve"
    scalars = read_scalars(run)
    for tag in CLEANRL_TAGS + [f"agents/agent_{i}/episodic_return" for i in range(8)]:
        assert scalars.get(tag), f"missing TensorBoard tag {tag}"
    steps = [s for s, _ in scalars["charts/SPS"]]
    assert steps == sorted(steps) and steps[-1] > 10_000  # x-axis is global agent-steps
    assert max(v for _, v in scalars["charts/episodic_return"]) >= 400
    # --mode pipelined (the default): the first rollout is the initial weights', every later one was
    # collected by the weights of one update before the update that trains on it.
    lags = [v for _, v in scalars["perf/policy_lag"]]
    assert lags[0] == 0 and set(lags[1:]) == {1.0}
    saved = load_toml(str(run / "config.toml"))
    assert saved["agents"] == 8 and saved["target_return"] == 475.0 and saved["learners"] == 1
    assert saved["mode"] == "pipelined"
    assert not train.survivors()


def test_two_learners_and_two_actors_complete_and_learn(train):
    r = train("--learners", "2", "--actors", "2", "--total-steps", "60000", "--seed", "3", "--run-name", "two")
    assert r.returncode == 0, r.stderr[-3000:]
    assert "step budget of 60,000 reached" in r.stdout or "solved:" in r.stdout
    returns = [v for _, v in read_scalars(train.logdir / "two")["charts/episodic_return"]]
    early, late = sum(returns[:3]) / 3, sum(returns[-3:]) / 3
    assert late > 3 * early, (early, late)  # random CartPole lasts ~20 steps
    assert not train.survivors()


def test_runs_under_torchrun(train, tmp_path):
    cmd = [sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc-per-node", "3",
           str(ROOT / "train.py"), "--learners", "1", "--actors", "2", "--total-steps", "6000",
           "--logdir", str(train.logdir), "--run-name", "trun"]
    r = subprocess.run(cmd, env=train.env(), capture_output=True, text=True, timeout=300, cwd=ROOT)
    assert r.returncode == 0, r.stderr[-3000:]
    assert "step budget of 6,000 reached" in r.stdout
    assert read_scalars(train.logdir / "trun")["charts/episodic_return"]
    assert not train.survivors()


def test_the_rough_edges_of_the_command_line(train):
    for args, message in [(("--agnets", "8"), "error: unknown flag --agnets; did you mean --agents?"),
                          (("--total-step", "100"), "error: unknown flag --total-step; did you mean --total-steps?"),
                          (("--env", "Taxi-v3"), "error: env id 'Taxi-v3' is deprecated in Gymnasium "),
                          (("8",), "error: unexpected argument '8': every value follows its flag")]:
        r = train(*args, "--run-name", "edges")
        assert r.returncode == 2 and r.stderr.startswith(message) and r.stderr.count("\n") == 1, r.stderr
    assert "use 'Taxi-v4'" in train("--env", "Taxi-v3").stderr
    help_text = train("--help", logdir=False).stdout
    assert "--mode {sync,pipelined,async}" in help_text and "--algo {ppo,appo,impala,dqn,iql,vdn,qmix,sac}" in help_text
    assert "(default: )" not in help_text and "(default: None)" not in help_text
    assert "default: the env's reward_threshold" in help_text
    # Options that are slow on this machine say so; a resumed run with nothing left to do says how to go on.
    r = train("--precision", "bf16", "--total-steps", "2000", "--run-name", "edges")
    assert r.returncode == 0 and "marl: --precision bf16 without a GPU computes in bf16 on the CPU" in r.stdout
    r = train("--resume", str(train.logdir / "edges"), logdir=False)
    assert r.returncode == 2 and "the run already spent its budget (step " in r.stderr
    assert "to train on, pass a larger --total-steps" in r.stderr
    r = train("--target-return", "10", "--run-name", "reached")  # random CartPole play lasts ~20 steps
    assert r.returncode == 0 and "solved:" in r.stdout, r.stderr[-2000:]
    r = train("--resume", str(train.logdir / "reached"), logdir=False)
    assert r.returncode == 2 and "the run already reached its target (mean return " in r.stderr
    assert "to train on, raise --target-return" in r.stderr
    assert not train.survivors()


def test_unknown_env_is_one_clear_line_and_exit_2(train):
    r = train("--env", "CartPol-v1", "--run-name", "bad")
    assert r.returncode == 2
    assert r.stderr.strip().count("\n") == 0 and "Traceback" not in r.stderr
    assert "unknown env id 'CartPol-v1'" in r.stderr and "did you mean 'CartPole-v1'" in r.stderr
    assert not (train.logdir / "bad").exists()
    assert not train.survivors()


def test_negative_agents_is_one_clear_line_and_exit_2(train):
    r = train("--agents", "-2")
    assert r.returncode == 2
    assert r.stderr.strip() == "error: --agents must be at least 1 (or 0 for the env's own count), got -2"
    assert not train.survivors()


def test_help_lists_every_flag(train):
    """(The docs' flag reference is generated from the same parser at each build: tests/test_docs.py.)"""
    r = train("--help", logdir=False)
    assert r.returncode == 0
    from marl.config import FIELDS

    for name in FIELDS:
        assert "--" + name.replace("_", "-") in r.stdout
    assert "--config" in r.stdout


def test_box_actions_and_episode_rollouts_run_end_to_end(train):
    r = train("--env", "Pendulum-v1", "--agents", "2", "--envs-per-actor", "2", "--rollout", "episodes",
              "--total-steps", "3000", "--num-minibatches", "2", "--run-name", "box")
    assert r.returncode == 0, r.stderr[-3000:]
    assert "step budget of 3,000 reached" in r.stdout
    scalars = read_scalars(train.logdir / "box")
    # Whole 200-step Pendulum episodes only: every finished episode is exactly 200 steps long.
    assert {v for _, v in scalars["charts/episodic_length"]} == {200.0}
    assert not train.survivors()


def test_sync_mode_solves_cartpole_with_no_policy_lag(train):
    r = train("--agents", "8", "--mode", "sync", "--run-name", "sync")
    assert r.returncode == 0, r.stderr[-3000:]
    assert "solved: mean return" in r.stdout
    assert {v for _, v in read_scalars(train.logdir / "sync")["perf/policy_lag"]} == {0.0}
    assert not train.survivors()


def test_async_mode_solves_cartpole_and_reports_policy_lag(train):
    r = train("--mode", "async", "--run-name", "async")
    assert r.returncode == 0, r.stderr[-3000:]
    assert "solved: mean return" in r.stdout
    scalars = read_scalars(train.logdir / "async")
    lags = [v for _, v in scalars["perf/policy_lag"]]
    # Actors keep collecting while the learner trains, so most batches were made by an older policy.
    assert max(lags) >= 1 and sum(lags) / len(lags) > 0.5
    assert not train.survivors()


def listening_sockets(pids: list[int]) -> list[tuple[str, int]]:
    """(address hex, port) of every listening TCP socket the given processes own."""
    inodes = set()
    for pid in pids:
        try:
            for fd in Path(f"/proc/{pid}/fd").iterdir():
                target = os.readlink(fd)
                if target.startswith("socket:["):
                    inodes.add(target[8:-1])
        except OSError:
            pass
    found = []
    for table in ("/proc/net/tcp", "/proc/net/tcp6"):
        for line in Path(table).read_text().splitlines()[1:]:
            cols = line.split()
            if cols[3] == "0A" and cols[9] in inodes:  # 0A: LISTEN
                addr, port = cols[1].split(":")
                found.append((addr, int(port, 16)))
    return found


def test_a_default_run_listens_on_loopback_only(train):
    loopback = {"0100007F", "00000000000000000000000001000000", "0000000000000000FFFF00000100007F"}
    proc = train.start("--total-steps", "100000000", "--target-return", "1e9", "--run-name", "ports",
                       "--checkpoint-every", "2")
    ckpts = train.logdir / "ports" / "checkpoints"
    try:
        # Sampled over the whole run (start-up, learner init, checkpoints, weights published to
        # actors), so that a listener opened late is caught too.
        deadline, sockets = time.monotonic() + 90, set()
        while time.monotonic() < deadline and proc.poll() is None:
            sockets |= set(listening_sockets(train.survivors()))
            if ckpts.is_dir() and len(list(ckpts.glob("iter_*"))) >= 2:
                break  # two checkpoints written, with an update and a publish between them
            time.sleep(0.05)
        assert proc.poll() is None and len(list(ckpts.glob("iter_*"))) >= 2, "the run ended or stalled"
        assert sockets, "the run never listened at all?"
        assert all(addr in loopback for addr, _ in sockets), sockets
    finally:
        proc.kill()
        proc.communicate()


def test_a_non_finite_loss_stops_the_run_with_a_clear_message(train):
    r = train("--env", "tests.nan_env:NanReward-v0", "--agents", "2", "--run-name", "nan")
    assert r.returncode == 1
    assert "Traceback" not in r.stderr
    assert "became NaN or Inf" in r.stderr and "iteration 1" in r.stderr, r.stderr[-2000:]
    assert not train.survivors()


def test_a_non_finite_loss_keeps_the_last_good_checkpoint(train):
    r = train("--env", "tests.nan_env:NanRewardLate-v0", "--agents", "2", "--num-steps", "64", "--checkpoint-every", "1",
              "--run-name", "late")
    assert r.returncode == 1 and "iteration 4" in r.stderr, r.stderr[-2000:]
    ckpts = sorted(p.name for p in (train.logdir / "late" / "checkpoints").iterdir())
    assert ckpts == ["iter_000002", "iter_000003"]  # nothing of the bad iteration, not even a temporary
    r = train("--resume", str(train.logdir / "late"), "--total-steps", "4000", logdir=False)  # one more iteration
    assert r.returncode == 0 and "resumed from" in r.stdout and "iteration 3" in r.stdout, r.stderr[-2000:]


def read_until(proc, text: str, timeout: float = 60) -> str:
    """The run's stdout up to and including the first line that holds `text`."""
    deadline, seen = time.monotonic() + timeout, []
    while time.monotonic() < deadline:
        line = proc.stdout.readline()
        seen.append(line)
        if text in line:
            return "".join(seen)
        assert line or proc.poll() is None, "the run ended before printing " + text
    raise AssertionError(f"no {text!r} within {timeout}s")


@pytest.mark.parametrize("sig, code", [(signal.SIGINT, 130), (signal.SIGTERM, 143)])
def test_a_signal_ends_every_process_and_flushes_the_logs(train, sig, code):
    proc = train.start("--total-steps", "100000000", "--target-return", "1e9", "--run-name", "sig")
    try:
        read_until(proc, "iter    5 ")
        proc.send_signal(sig)
        proc.wait(timeout=10)
        deadline = time.monotonic() + 10
        while train.survivors() and time.monotonic() < deadline:
            time.sleep(0.1)
        assert not train.survivors()
    finally:
        proc.kill()
        out, err = proc.communicate()
    assert proc.returncode == code, err[-2000:]
    assert "Traceback" not in err
    logged = len(read_scalars(train.logdir / "sig")["charts/SPS"])
    ckpt = train.logdir / "sig" / "checkpoints" / f"iter_{logged:06d}"
    assert f"checkpoint {ckpt}; go on with: python train.py --resume {train.logdir / 'sig'}" in out
    logged = read_scalars(train.logdir / "sig")["charts/SPS"]
    assert len(logged) >= 5  # flushed up to the signal
    # The final checkpoint holds the last iteration that finished.
    assert (train.logdir / "sig" / "checkpoints" / f"iter_{len(logged):06d}" / "trainer.pt").is_file()


def survivors_after(train, seconds: float) -> list[int]:
    """The run's processes still alive once they have had `seconds` to end."""
    deadline = time.monotonic() + seconds
    while train.survivors() and time.monotonic() < deadline:
        time.sleep(0.1)
    return train.survivors()


@pytest.mark.parametrize("sig, code", [(signal.SIGINT, 130), (signal.SIGTERM, 143)])
def test_a_signal_to_the_whole_process_group_stops_the_run_without_healing(train, sig, code):
    # As timeout(1), scancel, Kubernetes and systemd stop a job: every process of its group gets the signal.
    cmd = [sys.executable, str(ROOT / "train.py"), "--logdir", str(train.logdir), "--total-steps", "100000000",
           "--target-return", "1e9", "--run-name", "group"]
    proc = subprocess.Popen(cmd, env=train.env(), stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, cwd=ROOT,
                            start_new_session=True, preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL))
    try:
        read_until(proc, "iter    5 ")
        os.killpg(proc.pid, sig)
        out, err = proc.communicate(timeout=60)
        assert not survivors_after(train, 10.0)
    finally:
        proc.kill()
    assert proc.returncode == code, err[-2000:]
    assert "healing" not in out and "restart" not in err and "Traceback" not in err
    logged = len(read_scalars(train.logdir / "group")["charts/SPS"])
    ckpt = train.logdir / "group" / "checkpoints" / f"iter_{logged:06d}"
    assert (ckpt / "trainer.pt").is_file()
    assert f"checkpoint {ckpt}; go on with: python train.py --resume {train.logdir / 'group'}" in out


def test_an_actor_killed_mid_run_is_dropped_and_the_run_finishes(train):
    proc = train.start("--actors", "3", "--total-steps", "120000", "--target-return", "1e9", "--run-name", "kill",
                       "--max-restarts", "0")
    try:
        read_until(proc, "iter    5 ")
        victim = next(pid for pid in train.survivors() if comms([pid]) == {"marl-actor1"})
        os.kill(victim, signal.SIGKILL)
        out, err = proc.communicate(timeout=120)
    finally:
        proc.kill()
    assert proc.returncode == 0, err[-3000:]
    assert "actor 1 failed and is dropped (2 of 3 left, running degraded)" in out
    assert "step budget of 120,000 reached" in out and "ran degraded: 1 of 3 actors" in out
    live = [v for _, v in read_scalars(train.logdir / "kill")["perf/live_actors"]]
    assert live[0] == 3 and live[-1] == 2
    assert not train.survivors()


def test_an_actor_killed_mid_run_heals_the_world_from_a_fresh_checkpoint(train):
    proc = train.start("--actors", "3", "--total-steps", "150000", "--target-return", "1e9", "--run-name", "heal",
                       "--checkpoint-every", "0")
    try:
        read_until(proc, "iter    5 ")
        first_world = set(train.survivors()) - {proc.pid}
        victim = next(pid for pid in first_world if comms([pid]) == {"marl-actor1"})
        os.kill(victim, signal.SIGKILL)
        healing = read_until(proc, "resumed from ")
        # Every process of the first world has ended; the second one has all three actors again.
        assert not first_world & set(train.survivors())
        assert comms(train.survivors()) >= {"marl-actor0", "marl-actor1", "marl-actor2"}
        out, err = proc.communicate(timeout=120)
    finally:
        proc.kill()
    assert proc.returncode == 0, err[-3000:]
    assert "marl: healing (restart 1 of 3): actor 1 failed: " in healing and "starting every process again" in healing
    assert "marl: restart 1 of 3 in " in err
    assert "step budget of 150,000 reached" in out and "ran degraded" not in out and "Traceback" not in err
    assert "tensorpipe_agent.cpp" not in err  # TensorPipe's "pipe closed" warnings: marl's own lines say it
    scalars = read_scalars(train.logdir / "heal")
    assert all(v == 3 for _, v in scalars["perf/live_actors"])
    assert scalars["perf/restarts"][0][1] == 0 and scalars["perf/restarts"][-1][1] == 1
    assert scalars["perf/episodes_lost"][-1][1] == 3 * 4 * 8  # every agent slot of every actor, once
    steps = [s for s, _ in scalars["charts/SPS"]]
    assert steps == sorted(set(steps)) and steps[-1] >= 150000  # one curve, going on from the checkpoint
    assert not train.survivors()


def test_an_env_that_raises_reports_its_error_and_exits_nonzero(train):
    r = train("--env", "tests.nan_env:Crash-v0", "--agents", "2", "--run-name", "crash", "--max-restarts", "1")
    assert r.returncode == 1
    # It heals once (the restart budget), then the second world's actors fail for good.
    assert "marl: healing (restart 1 of 1): actor 0 failed: RuntimeError('boom: the env broke at step 30')" in r.stdout
    # The actor's own stderr shows the env's traceback (torch's RPC prints it there); marl's lines
    # name each actor and the env's error.
    assert "marl: actor 0 failed and is dropped (1 of 2 left, running degraded): RuntimeError('boom: the env broke at step 30')" in r.stdout
    assert "marl: error: all 2 actors failed; the last one: RuntimeError('boom: the env broke at step 30')" in r.stderr
    assert not train.survivors()


def test_an_existing_run_name_is_refused_unless_overwrite(train):
    (train.logdir / "taken").mkdir(parents=True)
    (train.logdir / "taken" / "keep.txt").write_text("an earlier run")
    r = train("--run-name", "taken", "--total-steps", "2000")
    assert r.returncode == 2
    assert r.stderr.strip().endswith("or pass --overwrite to replace it") and "\n" not in r.stderr.strip()
    assert (train.logdir / "taken" / "keep.txt").exists()  # nothing overwritten
    r = train("--run-name", "taken", "--total-steps", "2000", "--overwrite")
    assert r.returncode == 0, r.stderr[-2000:]
    assert not (train.logdir / "taken" / "keep.txt").exists()
    assert (train.logdir / "taken" / "config.toml").exists()
    assert not train.survivors()


def test_the_exported_policy_loads_safely_and_plays(train):
    import torch

    r = train("--agents", "2", "--total-steps", "30000", "--run-name", "export")
    assert r.returncode == 0, r.stderr[-2000:]
    payload = torch.load(train.logdir / "export" / "policy.pt", weights_only=True)
    assert payload["env"] == "CartPole-v1" and payload["agents"] == 2
    assert "policies.shared.actor.head.weight" in payload["state_dict"] and payload["policies"][0]["name"] == "shared"
    e = evaluate_cli([str(train.logdir / "export"), "--episodes", "3"], timeout=120)
    assert e.returncode == 0, e.stderr[-2000:]
    lines = e.stdout.splitlines()
    assert lines[0].startswith("agent_0: mean") and lines[1].startswith("agent_1: mean") and "3 episodes" in lines[0]
    # 30k steps of training: far better than a random CartPole policy (about 22).
    assert float(lines[-1].split("mean ")[1].split()[0]) > 60
    bad = evaluate_cli([str(train.logdir)], timeout=60)
    assert bad.returncode == 2 and "has no policy.pt" in bad.stderr and "Traceback" not in bad.stderr


def test_resume_continues_the_run_on_another_learner_count(train):
    import torch

    run = train.logdir / "res"
    r = train("--agents", "2", "--total-steps", "20000", "--target-return", "1e9", "--checkpoint-every", "2",
              "--run-name", "res")
    assert r.returncode == 0, r.stderr[-2000:]
    first = read_scalars(run)["charts/SPS"]
    ckpt = sorted((run / "checkpoints").iterdir())
    assert [p.name for p in ckpt][-1] == f"iter_{len(first):06d}" and len(ckpt) == 2  # the final one, 2 kept
    saved = torch.load(ckpt[-1] / "trainer.pt", weights_only=True)
    assert saved["global_step"] == first[-1][0] and saved["learners"] == 1

    r = train("--resume", str(run), "--learners", "2", "--total-steps", "30000", logdir=False)
    assert r.returncode == 0, r.stderr[-2000:]
    assert f"resumed from {ckpt[-1]}: iteration {len(first)}, step {first[-1][0]:,}, saved by 1 learner(s)" in r.stdout
    progress = [line for line in r.stdout.splitlines() if line.startswith("iter ")]
    assert progress[0].startswith(f"iter {len(first) + 1:4d} | step ")
    steps = [s for s, _ in read_scalars(run)["charts/SPS"]]
    assert steps[:len(first)] == [s for s, _ in first]  # the curve goes on from where it stopped
    assert steps == sorted(set(steps)) and steps[-1] >= 30000
    # The HParams dashboard's wall time is the whole run's: the first process's, then this one's.
    second = json.loads((run / "result.json").read_text())["seconds"]
    wall = read_scalars(run)["hparams/wall_seconds"]
    assert len(wall) == 1 and wall[0][1] == pytest.approx(float(saved["seconds"]) + second, rel=1e-5)
    assert load_toml(str(run / "config.toml"))["learners"] == 2
    newest = sorted((run / "checkpoints").iterdir())[-1]
    assert torch.load(newest / "trainer.pt", weights_only=True)["learners"] == 2
    assert not train.survivors()

    for args, message in [(("--env", "Acrobot-v1"), "trained on CartPole-v1, not Acrobot-v1"),
                          (("--hidden-sizes", "32,32"), "network.hidden_sizes [64, 64], now [32, 32]"),
                          (("--run-name", "other"), "drop --run-name")]:
        bad = train("--resume", str(run), *args, logdir=False)
        assert bad.returncode == 2 and message in bad.stderr and "\n" not in bad.stderr.strip(), bad.stderr
    bad = train("--resume", str(train.logdir), logdir=False)
    assert bad.returncode == 2 and "is not a checkpoint" in bad.stderr


def test_simple_spread_trains_through_rpc_actors_and_a_sharded_learner(train):
    r = train("--config", str(ROOT / "configs" / "simple_spread.toml"), "--learners", "2", "--envs-per-actor", "4",
              "--total-steps", "3000", "--run-name", "spread")
    assert r.returncode == 0, r.stderr[-3000:]
    assert "x 3 agents | policies shared (3), central critic" in r.stdout
    run = train.logdir / "spread"
    scalars = read_scalars(run)
    for tag in ["losses/shared/policy_loss", "losses/shared/value_loss", "losses/shared/explained_variance",
                *(f"agents/agent_{i}/episodic_return" for i in range(3))]:
        assert scalars.get(tag), f"missing TensorBoard tag {tag}"
    saved = load_toml(str(run / "config.toml"))
    assert saved["env_kwargs"] == {"N": 3, "max_cycles": 25, "continuous_actions": False} and saved["agents"] == 3
    assert not train.survivors()


def test_agents_with_different_spaces_get_a_network_each(train):
    bad = train("--config", str(ROOT / "configs" / "speaker_listener.toml"), "--policies", "shared", "--run-name", "x")
    assert bad.returncode == 2 and "whose spaces differ" in bad.stderr and "\n" not in bad.stderr.strip(), bad.stderr
    r = train("--config", str(ROOT / "configs" / "speaker_listener.toml"), "--envs-per-actor", "4",
              "--policies", '{"speaker_*": "speaker", "*": "listener"}', "--total-steps", "2000", "--run-name", "sl")
    assert r.returncode == 0, r.stderr[-3000:]
    scalars = read_scalars(train.logdir / "sl")
    for tag in ["losses/speaker/policy_loss", "losses/listener/policy_loss", "agents/speaker_0/episodic_return",
                "agents/listener_0/episodic_return"]:
        assert scalars.get(tag), f"missing TensorBoard tag {tag}"
    e = evaluate_cli([str(train.logdir / "sl"), "--episodes", "2"], timeout=120)
    assert e.returncode == 0 and e.stdout.startswith("speaker_0: mean"), e.stderr[-2000:]
    assert not train.survivors()


def test_a_policy_with_too_few_samples_sits_the_update_out(train):
    # Agent "b" leaves every 5-step episode after 2 steps: 4 valid steps an iteration, fewer than
    # the 5 minibatches; "a" and "c" train, "b" waits for a bigger batch instead of failing the run.
    r = train("--env", "pettingzoo:tests.pz_envs", "--policies", "per-agent", "--actors", "1", "--envs-per-actor", "1",
              "--num-steps", "10", "--num-minibatches", "5", "--total-steps", "100", "--run-name", "few")
    assert r.returncode == 0, r.stderr[-3000:]
    tags = read_scalars(train.logdir / "few")
    assert tags.get("losses/a/policy_loss") and tags.get("losses/c/policy_loss") and "losses/b/policy_loss" not in tags
    assert not train.survivors()
