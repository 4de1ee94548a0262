import dataclasses

import pytest
from marl.config import Config, UsageError, load_toml, parse_args, to_toml, validate


def test_defaults_toml_and_flags_layer_in_that_order(tmp_path):
    path = tmp_path / "exp.toml"
    path.write_text('agents = 4\nlearning_rate = 0.001\nenv = "Acrobot-v1"\nhidden_sizes = [32, 16]\n')
    cfg = parse_args(["--config", str(path), "--agents", "3", "--no-anneal-lr"])
    assert cfg.agents == 3  # flag beats file
    assert cfg.learning_rate == 0.001 and cfg.env == "Acrobot-v1" and cfg.hidden_sizes == (32, 16)
    assert cfg.anneal_lr is False
    assert cfg.actors == Config().actors  # untouched default


def test_resolved_config_round_trips_through_toml(tmp_path):
    cfg = validate(parse_args(["--agents", "5", "--target-return", "100", "--run-name", "x"]), gpus=0)
    path = tmp_path / "config.toml"
    path.write_text(to_toml(cfg))
    assert Config(**load_toml(str(path))) == cfg


def test_validate_fills_machine_dependent_defaults():
    cfg = validate(Config(), gpus=0)
    assert cfg.learners == 1 and cfg.run_name.startswith("CartPole-v1__1__")
    assert validate(Config(), gpus=4).learners == 4


@pytest.mark.parametrize("argv, message", [
    (["--agents", "-3"], "--agents must be at least 1 \\(or 0 for the env's own count\\), got -3"),
    (["--agents", "two"], "--agents expects int"),
    (["--actors", "0"], "--actors must be at least 1"),
    (["--envs-per-actor", "1.5"], "--envs-per-actor expects int"),
    (["--learning-rate", "-1"], "--learning-rate must be in"),
    (["--clip-coef", "2"], "--clip-coef must be in"),
    (["--agents", "8", "--num-minibatches", "7"], "does not split into 7 minibatches"),
    (["--precision", "fp8"], "invalid choice"),
    (["--bogus"], "unknown flag --bogus"),
    (["--seed", "-1"], "--seed must be at least 0"),
    (["--agents", "8", "--num-steps", "1", "--num-minibatches", "64"], "too small for 64 minibatches"),
    (["--agents", "8", "--rollout", "episodes", "--num-minibatches", "1000"], "too small for 1000 minibatches"),
    (["--agents", "8", "--policies", "per-agent", "--num-steps", "4", "--num-minibatches", "32"],
     "at most 32 agent-steps per policy is too small"),
    (["--policies", "each"], "--policies must be shared, per-agent, or a JSON mapping"),
    (["--policies", "{'a': 1}"], "--policies is not valid JSON"),
    (["--env-kwargs", "[1, 2]"], "--env-kwargs expects a JSON object"),
    (["--env-kwargs", '{"render_mode": null}'], "'render_mode' is null, which a TOML config cannot hold"),
    (["--critic", "global"], "invalid choice"),
    (["--core", "rnn"], "invalid choice"),
    (["--core-size", "0"], "--core-size must be at least 1"),
    (["--seq-len", "-4"], "--seq-len must be at least 1 \\(or 0 for the whole rollout\\)"),
    (["--core", "gru", "--model", "my_nets:Net"], "--core gru is the built-in network's"),
    (["--agents", "2", "--core", "lstm", "--actors", "1", "--envs-per-actor", "1", "--num-minibatches", "4"],
     "a recurrent network trains on whole sequences .*: 2 per learner are fewer than --num-minibatches 4"),
])
def test_bad_values_are_one_line_usage_errors(argv, message):
    with pytest.raises(UsageError, match=message) as err:
        validate(parse_args(argv), gpus=0)
    assert "\n" not in str(err.value)


def test_more_learners_than_gpus_is_refused():
    with pytest.raises(UsageError, match="more than the 2 visible GPU"):
        validate(Config(learners=3), gpus=2)


def test_config_file_errors(tmp_path):
    with pytest.raises(UsageError, match="does not exist"):
        parse_args(["--config", str(tmp_path / "missing.toml")])
    bad = tmp_path / "bad.toml"
    bad.write_text("agents = = 3\n")
    with pytest.raises(UsageError, match="not valid TOML"):
        parse_args(["--config", str(bad)])
    typo = tmp_path / "typo.toml"
    typo.write_text("agnets = 3\n")
    with pytest.raises(UsageError, match="did you mean 'agents'"):
        parse_args(["--config", str(typo)])


def test_shipped_configs_parse_and_validate():
    from pathlib import Path

    files = sorted((Path(__file__).parent.parent / "configs").glob("*.toml"))
    assert files
    for f in files:
        validate(parse_args(["--config", str(f)]), gpus=0)


def test_choices_set_in_a_toml_file_are_checked_too(tmp_path):
    path = tmp_path / "typo.toml"
    path.write_text('mode = "asynk"\n')
    with pytest.raises(UsageError, match="--mode must be one of sync, async, got 'asynk' \\(did you mean 'async'\\?\\)"):
        validate(parse_args(["--config", str(path)]), gpus=0)


def test_mappings_come_from_json_flags_or_toml_tables_and_round_trip(tmp_path):
    cfg = parse_args(["--env-kwargs", '{"max_cycles": 25, "continuous_actions": false}',
                      "--policies", '{"speaker_*": "speaker", "*": "listener"}'])
    assert cfg.env_kwargs == {"max_cycles": 25, "continuous_actions": False}
    assert list(cfg.policies.items()) == [("speaker_*", "speaker"), ("*", "listener")]  # order kept: first match wins
    path = tmp_path / "c.toml"
    path.write_text(to_toml(cfg))
    assert Config(**load_toml(str(path))) == cfg
    path.write_text('policies = "per-agent"\n[env_kwargs]\nN = 3\n')
    cfg = parse_args(["--config", str(path)])
    assert cfg.policies == "per-agent" and cfg.env_kwargs == {"N": 3}
    assert Config().env_kwargs == {} and Config().env_kwargs is not Config().env_kwargs


def test_help_is_grouped_by_section():
    from marl.config import SECTIONS, build_parser

    text = build_parser().format_help()
    positions = [text.index(f"\n{title}:\n") for title in SECTIONS.values()]
    assert positions == sorted(positions)  # every section, in the order of the fields
    assert text.index("\n  --algo ") > text.index("\nalgorithm:\n") > text.index("\n  --total-steps ")


def test_env_copies_must_split_over_the_learner_ranks():
    from marl.config import UsageError, check_batch

    with pytest.raises(UsageError, match="3 env copies do not split evenly over 2 learner"):
        check_batch(dataclasses.replace(Config(), agents=8, actors=3, envs_per_actor=1, num_steps=64), 2)


def test_config_from_toml_reads_a_preset_as_config_does_with_fields_on_top():
    from tests.conftest import ROOT

    cfg = Config.from_toml(str(ROOT / "configs" / "coop_nav.toml"), critic="local", seed=3)
    assert cfg == parse_args(["--config", str(ROOT / "configs" / "coop_nav.toml"), "--critic", "local", "--seed", "3"])
    assert cfg.env == "pettingzoo:envs.coop_nav" and cfg.critic == "local"
    with pytest.raises(UsageError, match="does not exist"):
        Config.from_toml("configs/nope.toml")
