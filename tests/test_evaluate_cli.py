"""`python -m marl.evaluate`: its flags behave as train.py's (no abbreviations, one line for a typo,
exit 2), and its output labels what it printed. The runs are exported untrained policies: what is
read here is the CLI, not how well a policy plays."""

import dataclasses
import json
from pathlib import Path

import pytest
import torch

from envs import describe
from marl.config import Config
from marl.evaluate.cli import main
from marl.models import build_model, network_of
from marl.policies import specs_of
from marl.policy_file import export_policy
from tests.conftest import evaluate_cli

ROOT = Path(__file__).resolve().parent.parent
TICTACTOE = "pettingzoo:pettingzoo.classic.tictactoe_v3"


def exported(tmp_path: Path, env: str, agents: int) -> Path:
    cfg = dataclasses.replace(Config(), env=env, agents=agents)
    info = describe(cfg.env, cfg.agents)
    specs = specs_of(cfg, info)
    torch.manual_seed(0)
    run = tmp_path / env.replace(":", "_")
    run.mkdir()
    export_policy(run / "policy.pt", build_model(specs, network_of(cfg)).state_dict(), info, cfg, specs)
    return run


def test_a_mistyped_flag_is_one_line_naming_the_closest_and_exit_2(tmp_path, capsys):
    run = exported(tmp_path, "CartPole-v1", 2)
    assert main([str(run), "--epi", "1"]) == 2  # a prefix is not taken for --episodes
    err = capsys.readouterr().err
    assert err.strip() == "error: unknown flag --epi; did you mean --episodes?"
    assert main([str(run), "--episodes", "1", "--smaple"]) == 2
    assert "did you mean --sample?" in capsys.readouterr().err
    assert main([str(run), "extra"]) == 2
    assert capsys.readouterr().err.count("\n") == 1
    assert main([]) == 2  # no run directory
    assert "run_dir" in capsys.readouterr().err
    assert main([str(run), "--episodes", "0"]) == 2
    assert "--episodes must be at least 1" in capsys.readouterr().err
    assert main([str(tmp_path), "--episodes", "1"]) == 2
    assert "has no policy.pt" in capsys.readouterr().err


def test_the_module_runs_and_a_typo_has_no_usage_block(tmp_path):
    run = exported(tmp_path, "CartPole-v1", 2)
    ok = evaluate_cli([str(run), "--episodes", "2", "--json"], timeout=300)
    assert ok.returncode == 0, ok.stderr[-2000:]
    agents = json.loads(ok.stdout)["agents"]
    assert set(agents) == {"agent_0", "agent_1"} and all(a["episodes"] == 2 for a in agents.values())
    bad = evaluate_cli([str(run), "--epi", "1"], timeout=300)
    assert bad.returncode == 2 and bad.stderr.count("\n") == 1 and "usage:" not in bad.stderr


@pytest.mark.parametrize("opponent", ["random", "lookahead"])
def test_with_an_opponent_the_self_play_block_is_labelled(tmp_path, capsys, opponent):
    run = exported(tmp_path, TICTACTOE, 2)
    assert main([str(run), "--opponent", opponent, "--episodes", "4"]) == 0
    lines = capsys.readouterr().out.splitlines()
    assert lines[0] == "this policy on every agent (self-play):"
    assert all(line.startswith("  ") for line in lines[1:4])  # player_1, player_2, all agents
    assert [line.split()[0] for line in lines[4:]] == ["player_1", "player_2"]
    assert all(f"(this policy) vs {opponent}: win" in line and "over 4 games" in line for line in lines[4:])


def test_without_an_opponent_the_per_agent_block_stands_alone(tmp_path, capsys):
    run = exported(tmp_path, "CartPole-v1", 2)
    assert main([str(run), "--episodes", "2"]) == 0
    lines = capsys.readouterr().out.splitlines()
    assert [line.split(":")[0] for line in lines] == ["agent_0", "agent_1", "all agents"]
