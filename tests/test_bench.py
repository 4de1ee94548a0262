"""Every bench script runs, at tiny sizes, so that none can rot. No timing is asserted here:
the figures are the scripts' job, on a quiet machine (see the README's table)."""

from __future__ import annotations

import os
import subprocess
import sys

import pytest

from tests.conftest import ROOT, kill_all, processes_with_token


@pytest.mark.parametrize("cmd, expect", [
    (["bench/collect_throughput.py", "--envs-per-actor", "2", "--requests", "2", "--roofline-seconds", "0.2"],
     "ratio marl / roofline"),
    (["bench/train_throughput.py", "--steps", "1000", "--repeats", "1", "--", "--num-steps", "16"], "ratio async / sync"),
    (["bench/startup.py", "--runs", "1"], "command -> first rollout"),
    (["bench/learner_memory.py", "--smoke"], "ratio"),
    (["bench/fault_soak.py", "--minutes", "0.05", "--kill-every", "2", "--actors", "2", "--agents", "2", "--envs-per-actor",
      "2", "--modes", "degraded,healing"], "reported healed"),
    (["bench/multiagent.py", "--smoke"], "cartpole_per_agent PPO per-agent: solved"),
    (["bench/algorithms.py", "--smoke"], "ratio after / before"),
    (["bench/recurrent.py", "--smoke", "--parts", "speed"], "--core gru: collect"),
    (["bench/continuous.py", "--smoke"], "pendulum: goal met on"),
    (["bench/selfplay.py", "--smoke"], "tictactoe self seed 1: "),
    (["bench/off_policy.py", "--smoke", "--cases", "dqn_cartpole,sac_halfcheetah"], "halfcheetah seed 1 marl: "),
    (["bench/off_policy_speed.py", "--smoke"], "SAC (configs/pendulum_sac.toml"),
    (["bench/vmas_speed.py", "--envs-per-actor", "8", "--requests", "2", "--num-steps", "20", "--one-process-seconds",
      "0.5"], "ratio marl / one process"),
    (["bench/benchmarl.py", "--tasks", "balance", "--seeds", "1", "--frames", "1200", "--frames-per-batch", "1200",
      "--envs", "12", "--minibatch-iters", "3", "--eval-episodes", "1"], "balance seed 1: marl return"),
], ids=["collect", "train", "startup", "learner_memory", "fault_soak", "multiagent", "algorithms",
        "recurrent", "continuous", "selfplay", "off_policy", "off_policy_speed", "vmas_speed", "benchmarl"])
def test_bench_runs(cmd, expect, tmp_path):
    token = f"bench-{os.getpid()}-{cmd[0]}"
    env = {**os.environ, "MARL_TEST_TOKEN": token}
    try:
        r = subprocess.run([sys.executable, *cmd], capture_output=True, text=True, timeout=300, cwd=ROOT, env=env)
        assert r.returncode == 0, r.stdout[-2000:] + r.stderr[-3000:]
        assert expect in r.stdout
        assert not processes_with_token(token)
    finally:
        kill_all(processes_with_token(token))


def test_gpu_check_runs_on_cpu_when_allowed():
    r = subprocess.run(["bash", "bench/gpu_check.sh", "--allow-cpu"], capture_output=True, text=True, timeout=300,
                       cwd=ROOT, env={**os.environ, "PYTHON": sys.executable})
    assert r.returncode == 0, r.stdout[-3000:] + r.stderr[-3000:]
    assert "gpu_check: PASS" in r.stdout
    # The VMAS steps (the test extra brings vmas): what a GPU machine checks on cuda, here on the CPU.
    summary = r.stdout[r.stdout.index("=== summary"):]
    assert "VMAS on the actor: env, policy and recorder on cpu" in summary, summary
    assert "VMAS speed: ratio marl / one process:" in summary and "env and policy on cpu" in summary, summary
    assert "train.py vmas: step budget" in summary, summary


def test_plot_draws_the_runs_a_bench_kept(tmp_path):
    """bench/plot.py reads real runs' event files (time_to_solve.py --logdir keeps them) and writes the figure.
    The runs are time_to_solve.py's smoke as well (two seeds of two iterations each): it runs without matplotlib."""
    keep = tmp_path / "runs"
    token = f"bench-{os.getpid()}-bench/time_to_solve.py"
    try:
        r = subprocess.run([sys.executable, "bench/time_to_solve.py", "--seeds", "2", "--logdir", str(keep), "--",
                            "--agents", "2", "--total-steps", "2000"], capture_output=True, text=True, timeout=300, cwd=ROOT,
                           env={**os.environ, "MARL_TEST_TOKEN": token})
        assert r.returncode == 0, r.stdout[-2000:] + r.stderr[-3000:]
        assert "agent-steps median" in r.stdout and "ratio median wall / 10s target" in r.stdout, r.stdout
        assert not processes_with_token(token)
    finally:
        kill_all(processes_with_token(token))
    assert sorted(p.name for p in keep.iterdir()) == ["seed1", "seed2"]
    pytest.importorskip("matplotlib")
    from PIL import Image

    out = tmp_path / "fig.png"
    plot = [sys.executable, "bench/plot.py", "--out", str(out), "--title", "CartPole", "--target", "475"]
    r = subprocess.run([*plot, f"two seeds={keep}/seed*"], capture_output=True, text=True, timeout=120, cwd=ROOT)
    assert r.returncode == 0, r.stderr[-3000:]
    assert "two seeds: 2 runs" in r.stdout
    with Image.open(out) as im:
        assert im.format == "PNG" and im.size == (770, 440)
    bad = subprocess.run([*plot, f"none={tmp_path}/nothing*"], capture_output=True, text=True, timeout=120, cwd=ROOT)
    assert bad.returncode == 2 and "matches no run directory" in bad.stderr
