import dataclasses

import pytest
from marl.config import AlgorithmSection, Config, UsageError, load_toml, parse_args, to_toml, validate


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


@pytest.mark.parametrize("algo", sorted(AlgorithmSection.OFF_POLICY | {"ppo", "appo", "impala"}))
def test_reward_scaling_defaults_to_the_algorithm_family_and_a_given_value_wins(algo):
    on_policy = algo not in AlgorithmSection.OFF_POLICY
    assert validate(parse_args(["--algo", algo]), gpus=0).norm_reward is on_policy
    assert validate(parse_args(["--algo", algo, "--norm-reward"]), gpus=0).norm_reward is True
    assert validate(parse_args(["--algo", algo, "--no-norm-reward"]), gpus=0).norm_reward is False


@pytest.mark.parametrize("argv, message", [
    (["--agents", "-3"], "--agents must be at least 1 \\(or 0 for the env's own count\\), got -3"),
    (["--agents", "two"], "--agents expects int"),
    (["--actors", "0"], "--actors must be at least 1"),
    (["--envs-per-actor", "1.5"], "--envs-per-actor expects int"),
    (["--learning-rate", "-1"], "--learning-rate must be in"),
    (["--clip-coef", "2"], "--clip-coef must be in"),
    (["--agents", "8", "--num-minibatches", "7", "--rollout", "steps"], "does not split into 7 minibatches"),
    (["--precision", "fp8"], "invalid choice"),
    (["--bogus"], "unknown flag --bogus"),
    (["--seed", "-1"], "--seed must be at least 0"),
    (["--agents", "8", "--num-steps", "1", "--num-minibatches", "64", "--rollout", "steps"], "too small for 64 minibatches"),
    (["--agents", "8", "--rollout", "episodes", "--num-minibatches", "1000"], "too small for 1000 minibatches"),
    (["--agents", "8", "--policies", "per-agent", "--num-steps", "4", "--num-minibatches", "32", "--rollout", "steps"],
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
    (["--agents", "2", "--core", "lstm", "--actors", "1", "--envs-per-actor", "1", "--num-minibatches", "4", "--rollout", "steps"],
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
    with pytest.raises(UsageError, match="--mode must be one of sync, pipelined, async, got 'asynk' \\(did you mean 'async'\\?\\)"):
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
    positions = [text.index(f"\n{section.title}:\n") for section in SECTIONS]
    assert positions == sorted(positions)  # every section, in the order of SECTIONS
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


def test_config_is_the_flat_view_of_its_sections():
    from marl.config import SECTIONS, Config, OptimSection

    assert [f.name for f in dataclasses.fields(Config)] == [f.name for s in SECTIONS for f in dataclasses.fields(s)]
    cfg = dataclasses.replace(Config(learning_rate=1e-3), gamma=0.9)
    ppo = cfg.section(OptimSection)
    assert isinstance(ppo, OptimSection) and (ppo.learning_rate, ppo.gamma) == (1e-3, 0.9)
    assert not hasattr(ppo, "env")  # a component sees its own section only
    with pytest.raises(UsageError, match="--gamma must be in \\[0, 1\\], got 2"):
        dataclasses.replace(ppo, gamma=2.0).check()


def test_toml_sections_flat_keys_and_a_field_in_the_wrong_table(tmp_path):
    path = tmp_path / "c.toml"
    path.write_text('seed = 3\n[ppo]\nlearning_rate = 0.001\n[env]\nenv = "Acrobot-v1"\nenv_kwargs = { a = 1 }\n')
    cfg = parse_args(["--config", str(path)])
    assert (cfg.seed, cfg.learning_rate, cfg.env, cfg.env_kwargs) == (3, 0.001, "Acrobot-v1", {"a": 1})
    path.write_text('[env]\nlearning_rate = 0.001\n')
    with pytest.raises(UsageError, match="'learning_rate' belongs to \\[ppo\\], not \\[env\\]"):
        parse_args(["--config", str(path)])


def test_saved_config_is_written_by_section_and_old_flat_runs_still_read(tmp_path):
    from marl.config import SECTIONS

    cfg = validate(parse_args(["--agents", "5", "--action-dist", "tanh_gaussian", "--run-name", "x"]), gpus=0)
    text = to_toml(cfg)
    assert [line for line in text.splitlines() if line.startswith("[")] == [f"[{s.key}]" for s in SECTIONS]
    (tmp_path / "new.toml").write_text(text)
    assert Config(**load_toml(str(tmp_path / "new.toml"))) == cfg
    # A run saved before the sections and before --action-dist: flat keys, action_squash.
    for squash, dist in (("tanh", "tanh_gaussian"), ("clip", "auto")):
        (tmp_path / "old.toml").write_text(f'env = "Pendulum-v1"\nlearning_rate = 0.001\naction_squash = "{squash}"\n')
        old = Config(**load_toml(str(tmp_path / "old.toml")))
        assert (old.env, old.learning_rate, old.action_dist) == ("Pendulum-v1", 0.001, dist)


def test_action_squash_is_renamed_on_the_command_line():
    with pytest.raises(UsageError, match="^--action-squash is renamed: use --action-dist tanh_gaussian$"):
        parse_args(["--action-squash", "tanh"])
    assert parse_args(["--action-dist", "beta"]).action_dist == "beta"  # the distribution registry judges it


def test_a_preset_builds_on_its_base_and_a_cycle_is_refused(tmp_path):
    (tmp_path / "a.toml").write_text('agents = 4\nseed = 2\n')
    (tmp_path / "sub").mkdir()
    (tmp_path / "sub" / "b.toml").write_text('base = "../a.toml"\nseed = 5\n')
    (tmp_path / "c.toml").write_text('base = "sub/b.toml"\nlearning_rate = 0.001\n')
    assert load_toml(str(tmp_path / "c.toml")) == {"agents": 4, "seed": 5, "learning_rate": 0.001}
    (tmp_path / "a.toml").write_text('base = "c.toml"\n')
    with pytest.raises(UsageError, match="come back to it \\(c.toml -> b.toml -> a.toml -> c.toml\\)") as err:
        load_toml(str(tmp_path / "c.toml"))
    assert "\n" not in str(err.value)


# The presets as they were before they named a base (and before --rollout auto made whole games of a
# turn-based game): what they resolve to must not change.
MPE_FLAT = """critic = "central"
envs_per_actor = 32
num_steps = 25
learning_rate = 3e-3
anneal_lr = false
gamma = 0.95
num_minibatches = 4
update_epochs = 10
max_grad_norm = 10.0
ent_coef = 0.0
norm_reward = false
mode = "sync"
"""
FLAT_PRESETS = {
    "simple_spread.toml": MPE_FLAT + """env = "pettingzoo:mpe2.simple_spread_v3"
agent_id_input = true
total_steps = 1_000_000
env_kwargs = { N = 3, max_cycles = 25, continuous_actions = false }""",
    "speaker_listener.toml": MPE_FLAT + """env = "pettingzoo:mpe2.simple_speaker_listener_v4"
env_kwargs = { max_cycles = 25, continuous_actions = false }
policies = "per-agent"
total_steps = 500_000""",
    "connect_four.toml": """env = "pettingzoo:pettingzoo.classic.connect_four_v3"
episodes_per_request = 4
envs_per_actor = 16
encoder = "auto"
hidden_sizes = [128, 128]
learning_rate = 1e-3
gamma = 0.99
num_minibatches = 4
update_epochs = 4
ent_coef = 0.05
opponents = "pool"
pool_keep = "history"
pool_size = 20
pool_prob = 0.5
total_steps = 1_000_000
target_return = 1e9
norm_reward = false
mode = "sync"
""",
}


@pytest.mark.parametrize("name", sorted(FLAT_PRESETS))
def test_presets_on_a_base_resolve_as_they_did_written_out(tmp_path, name):
    from tests.conftest import ROOT

    (tmp_path / name).write_text(FLAT_PRESETS[name])
    assert "base" in (ROOT / "configs" / name).read_text()
    assert Config.from_toml(str(ROOT / "configs" / name)) == Config.from_toml(str(tmp_path / name))


def test_algorithm_choices_are_the_algorithms_and_declare_capabilities():
    from marl.algorithms import ALGORITHMS
    from marl.config import FIELDS

    assert FIELDS["algo"].metadata["choices"] == tuple(ALGORITHMS)
    assert {name: a.turn_based for name, a in ALGORITHMS.items()} == {
        "ppo": True, "appo": False, "impala": False, "dqn": False, "iql": False, "vdn": False, "qmix": False, "sac": False}
    assert {name for name, a in ALGORITHMS.items() if a.off_policy} == AlgorithmSection.OFF_POLICY
    assert {name for name, a in ALGORITHMS.items() if a.team} == {"vdn", "qmix"}
    assert {name for name, a in ALGORITHMS.items() if not a.recurrent} == {"sac"}


def test_turn_based_games_take_whole_games_unless_steps_are_asked_for():
    from marl.run import check_turn_based, resolve_rollout

    assert resolve_rollout(Config(), turn_based=True).rollout == "episodes"
    assert resolve_rollout(Config(), turn_based=False).rollout == "steps"
    assert resolve_rollout(Config(rollout="steps"), turn_based=True).rollout == "steps"
    check_turn_based(resolve_rollout(Config(), turn_based=True), recurrent=False)
    with pytest.raises(UsageError, match="pass --rollout episodes or auto"):
        check_turn_based(Config(rollout="steps"), recurrent=False)
    with pytest.raises(UsageError, match="--algo impala does not skip a waiting agent's steps yet; use --algo ppo$"):
        check_turn_based(Config(rollout="episodes", algo="impala"), recurrent=False)


def test_prepare_starts_a_turn_based_game_on_whole_games_and_points_raw_atari_at_its_preset(tmp_path, capsys):
    from marl.run import prepare

    cfg, info = prepare({"env": "pettingzoo:pettingzoo.classic.tictactoe_v3", "logdir": str(tmp_path), "run_name": "t"})
    assert info.turn_based and cfg.rollout == "episodes"
    cfg, _ = prepare({"env": "CartPole-v1", "logdir": str(tmp_path), "run_name": "c"})
    assert cfg.rollout == "steps"
    assert "configs/atari.toml" not in capsys.readouterr().out
    prepare({"env": "ALE/Breakout-v5", "logdir": str(tmp_path), "run_name": "a"})
    assert "ALE/Breakout-v5 without --wrappers trains on raw 210x160x3 frames" in capsys.readouterr().out
    prepare({"env": "ALE/Breakout-v5", "wrappers": ("atari",), "logdir": str(tmp_path), "run_name": "b"})
    assert "raw 210x160x3" not in capsys.readouterr().out
