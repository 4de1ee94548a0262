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
    (["--agents", "-3"], "--agents must be at least 1, got -3"),
    (["--agents", "two"], "--agents expects int"),
    (["--actors", "0"], "--actors must be at least 1"),
    (["--envs-per-actor", "1.5"], "--envs-per-actor expects int"),
    (["--learning-rate", "-1"], "--learning-rate must be in"),
    (["--clip-coef", "2"], "--clip-coef must be in"),
    (["--num-minibatches", "7"], "does not split into 7 minibatches"),
    (["--precision", "fp8"], "invalid choice"),
    (["--bogus"], "unrecognized arguments"),
    (["--seed", "-1"], "--seed must be at least 0"),
    (["--num-steps", "1", "--num-minibatches", "64"], "too small for 64 minibatches"),
    (["--rollout", "episodes", "--num-minibatches", "1000"], "too small for 1000 minibatches"),
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
