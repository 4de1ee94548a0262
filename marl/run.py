"""One training run from the fields a user set, for `train.py` and for Python: every check that can
fail before a process starts, then the launch. `marl.train(Config(...))` runs what the command line
runs and returns its result."""

from __future__ import annotations

import dataclasses
import os
import time
from pathlib import Path

from marl import result
from marl.config import Config, UsageError, _suggest, check_batch, validate
from marl.result import WINDOW

TrainResult = result.Result  # the public name of how a run ended (marl.TrainResult)


class RunFailed(RuntimeError):
    """The run stopped without finishing (a signal, a NaN, every actor lost): its output says why."""


def train(cfg: Config | None = None, **overrides) -> TrainResult:
    """Run `cfg` (with `overrides`, field names as keywords) as `python train.py` would, and return
    how it ended. Raises UsageError with train.py's one-line message for input it refuses, and
    RunFailed if the run stops without finishing. Can be called again in the same process."""
    called_at = time.time()  # the start-up line counts from here: the process may be far older
    base = cfg if cfg is not None else Config()
    unknown = set(overrides) - {f.name for f in dataclasses.fields(Config)}
    if unknown:
        name = sorted(unknown)[0]
        raise UsageError(f"train() got unknown field {name!r}{_suggest(name, [f.name for f in dataclasses.fields(Config)])}; "
                         f"the fields are marl.config.Config's")
    defaults = Config()
    values = {f.name: getattr(base, f.name) for f in dataclasses.fields(Config)
              if getattr(base, f.name) != getattr(defaults, f.name)}
    cfg, info = prepare({**values, **overrides})
    from marl.launch import launch

    code = launch(cfg, info, called_at=called_at)
    if code != 0:
        raise RunFailed(f"the run in {cfg.run_dir} stopped with exit code {code} (its output says why)")
    return result.load(cfg.run_dir)


def default_agents(env_id: str) -> int | None:
    """--agents 0: eight independent copies of a single-agent env; the env's own agents (None) where its backend names them."""
    from envs.registry import decides_agents

    return None if decides_agents(env_id) else 8


def resumed_config(values: dict):
    """`--resume`: the checkpoint's own config, with the flags given now on top. The run goes on in
    the checkpoint's run directory."""
    from marl import checkpoint
    from marl.config import load_toml

    try:
        ckpt = checkpoint.resolve(values["resume"])
    except checkpoint.CheckpointError as e:
        raise UsageError(str(e)) from None
    run_dir = checkpoint.run_dir_of(ckpt)
    elsewhere = []
    if "logdir" in values and Path(values["logdir"]).resolve() != run_dir.parent.resolve():
        elsewhere.append("--logdir")
    if "run_name" in values and values["run_name"] != run_dir.name:
        elsewhere.append("--run-name")
    if elsewhere or values.get("overwrite"):
        flags = ", ".join(elsewhere + (["--overwrite"] if values.get("overwrite") else []))
        raise UsageError(f"--resume continues {run_dir} in place; drop {flags}")
    base = load_toml(str(ckpt / "config.toml"))
    return Config(**{**base, **values, "resume": str(ckpt), "run_name": run_dir.name, "logdir": str(run_dir.parent)})


def torchrun_restart(values: dict) -> dict:
    """A group that torchrun started again (its --max-restarts) goes on from the run's newest
    complete checkpoint by itself, or starts the run over if it failed before writing one."""
    restart = int(os.environ.get("TORCHELASTIC_RESTART_COUNT", "0"))
    if not restart or values.get("resume") or not values.get("run_name"):
        return values
    from marl import checkpoint

    run_dir = Path(values.get("logdir", Config.logdir)) / values["run_name"]
    newest = checkpoint.latest(run_dir)
    if os.environ.get("RANK", "0") == "0":
        print(f"marl: torchrun restart {restart}: " + (f"resuming from {newest}" if newest else
              "no checkpoint was written yet, starting the run over"), flush=True)
    if newest is None:
        return {**values, "overwrite": True}
    return {k: v for k, v in values.items() if k != "overwrite"} | {"resume": str(run_dir)}


def slow_here(cfg, gpu: bool) -> list[str]:
    """One line for each option that makes this run slower on this machine (docs/guides/fault-tolerance.md)."""
    lines = []
    if cfg.precision == "bf16" and not gpu:
        lines.append("marl: --precision bf16 without a GPU computes in bf16 on the CPU, slower than fp32 (1.8x on "
                     "the default run); it saves learner memory, not time")
    cores = len(os.sched_getaffinity(0))
    if "TORCHELASTIC_RUN_ID" not in os.environ and cfg.learners > 1 and cfg.learners + cfg.actors > cores:
        lines.append(f"marl: {cfg.learners} learner ranks + {cfg.actors} actors on {cores} cores: the ranks wait for "
                     f"each other at every step, and one that loses its core stalls the rest; --learners 1 is "
                     f"likely faster here")
    return lines


def resolve_rollout(cfg, turn_based: bool) -> Config:
    """`--rollout auto`: whole games for a turn-based game (a move's outcome comes at the other
    player's move, maybe in another request), steps otherwise; everything after sees which."""
    if cfg.rollout != "auto":
        return cfg
    return dataclasses.replace(cfg, rollout="episodes" if turn_based else "steps")


def check_turn_based(cfg, recurrent: bool) -> None:
    """A turn-based game (PettingZoo AEC, envs.aec): an agent's transition spans the other agents'
    moves, so a request must hold whole games, and what learns from it must skip the waits: the
    algorithm says whether it does (`Algorithm.turn_based`)."""
    from marl.algorithms import ALGORITHMS

    why = f"{cfg.env} is a turn-based game (PettingZoo AEC): "
    if cfg.rollout != "episodes":
        raise UsageError(why + "a move's outcome can come in another request, so requests collect whole games: "
                         "pass --rollout episodes or auto (or start from configs/tictactoe.toml)")
    if not ALGORITHMS[cfg.algo].turn_based:
        able = [name for name, algo in ALGORITHMS.items() if algo.turn_based]
        raise UsageError(why + f"--algo {cfg.algo} does not skip a waiting agent's steps yet; use --algo {' or '.join(able)}")
    if recurrent:
        raise UsageError(why + "recurrent policies do not skip a waiting agent's steps yet; drop --core (or the "
                         "recurrent --model)")


def check_algorithm(cfg, info) -> None:
    """What an off-policy algorithm declares it cannot do (`marl.algorithms.base`) refuses the run in
    one line, before any network is built (its networks are its own, so --core alone says whether
    they are recurrent)."""
    from marl.algorithms import ALGORITHMS

    algo = ALGORITHMS[cfg.algo]
    if not algo.off_policy:
        return
    if cfg.model:
        raise UsageError(f"--algo {cfg.algo} builds its own networks (Q-networks, or SAC's actor and critics); a --model "
                         f"plays the on-policy algorithms' actor-critic: drop --model, or use --algo ppo")
    if cfg.core != "none" and not algo.recurrent:
        able = [name for name, a in ALGORITHMS.items() if a.off_policy and a.recurrent]
        raise UsageError(f"--algo {cfg.algo} trains feed-forward networks only; drop --core"
                         + (f" (recurrent off-policy: --algo {', '.join(able)})" if able else ""))
    if algo.needs_state and cfg.critic != "central":
        raise UsageError(f"--algo {cfg.algo} mixes the agents' Q-values with the env's global state: add --critic central")
    if algo.team and not info.own_agents:
        raise UsageError(f"--algo {cfg.algo} learns a cooperative team's joint value, and {cfg.env}'s agents are "
                         f"independent copies: use --algo iql (or dqn) here, {cfg.algo} on a PettingZoo team")


def check_extras(cfg, info) -> None:
    """Options that need an optional extra say which, before any process starts; --video-every needs
    an env that renders, too."""
    from marl import video
    from marl.evaluate import check_filmable

    if cfg.video_every:
        video.require("--video-every")
        check_filmable(info, "--video-every")
    if cfg.track:
        try:
            import wandb  # noqa: F401
        except ImportError:
            raise UsageError("--track needs wandb: pip install -e '.[wandb]'") from None


def check_left_to_do(cfg) -> None:
    """A resumed run that has already reached its target, or spent its budget, would stop after
    one more iteration: say so, and how to train on."""
    from marl import checkpoint

    state = checkpoint.read_trainer(Path(cfg.resume))
    recent, step = state["recent"].tolist(), int(state["global_step"])
    if cfg.target_return is not None and len(recent) == WINDOW and sum(recent) / WINDOW >= cfg.target_return:
        raise UsageError(f"the run already reached its target (mean return {sum(recent) / WINDOW:.1f} over the last "
                         f"{WINDOW} episodes >= {cfg.target_return:g} at step {step:,}); to train on, raise "
                         f"--target-return (1e9: train to --total-steps)")
    if step >= cfg.total_steps:
        raise UsageError(f"the run already spent its budget (step {step:,} of --total-steps {cfg.total_steps:,}); "
                         f"to train on, pass a larger --total-steps")


def check_run_dir(cfg) -> None:
    """Before any process starts: the log directory must be writable, and an earlier run of the same
    name is never written over unless --overwrite says so (or --resume continues it)."""
    try:
        os.makedirs(cfg.logdir, exist_ok=True)
    except OSError as e:
        raise UsageError(f"--logdir {cfg.logdir} cannot be created ({e.strerror}); pass a writable directory") from None
    if not os.access(cfg.logdir, os.W_OK):
        raise UsageError(f"--logdir {cfg.logdir} is not writable; pass a writable directory")
    if os.environ.get("RANK", "0") != "0":
        return  # under torchrun rank 0 checks (and creates) the run directory; the others would race it
    if cfg.run_dir.exists() and not cfg.resume:
        if not cfg.overwrite:
            raise UsageError(f"run directory {cfg.run_dir} already exists; choose another --run-name, "
                             f"or pass --overwrite to replace it")
        import shutil

        shutil.rmtree(cfg.run_dir)


def prepare(values: dict):
    """(Config, EnvInfo) of a run from the fields the user set, after every check that can refuse it."""
    # torch's C++ warnings are TensorPipe's "pipe closed" / "EOF" at every normal stop and dropped
    # actor, which say nothing a user can act on; marl reports those events itself. Read when torch
    # loads, so set before anything here imports it; TORCH_CPP_LOG_LEVEL=WARNING shows them again.
    os.environ.setdefault("TORCH_CPP_LOG_LEVEL", "ERROR")
    values = torchrun_restart(values)
    cfg = resumed_config(values) if values.get("resume") else Config(**values)
    import torch

    from envs.registry import EnvError, describe
    from marl.checkpoint import CheckpointError
    from marl.models import ModelError, check_network, network_of
    from marl.policies import PolicyError, specs_of

    if "TORCHELASTIC_RUN_ID" in os.environ and cfg.learners == 0:
        # Each process would count its own node's GPUs, and nodes that differ would disagree.
        raise UsageError("under torchrun, give --learners explicitly (every process must agree on the layout)")
    if "TORCHELASTIC_RUN_ID" in os.environ and not cfg.run_name:
        # The default name has the start time in it, which each process reads for itself: learner
        # ranks would write their checkpoint shards into different run directories.
        raise UsageError("under torchrun, give --run-name explicitly (every process must write to the same run directory)")
    try:
        cfg = validate(cfg, gpus=torch.cuda.device_count())
        info = describe(cfg.env, cfg.agents or default_agents(cfg.env), cfg.env_kwargs, cfg.obs_keys, cfg.wrappers)
        cfg = resolve_rollout(dataclasses.replace(cfg, agents=cfg.agents or len(info.agent_ids)), info.turn_based)
        check_batch(cfg, cfg.learners)  # validate could not: the agents or the rollout unit were the env's to say
        check_algorithm(cfg, info)
        # A mapping or a network that cannot work fails here, before any process starts.
        specs = specs_of(cfg, info)
        recurrent = check_network(specs, network_of(cfg))
        if cfg.model:
            check_batch(cfg, cfg.learners, recurrent)  # now that the network says whether it is recurrent
        if cfg.resume:
            from marl.checkpoint import check_compatible

            check_compatible(Path(cfg.resume), cfg, info)
    except (EnvError, CheckpointError, PolicyError, ModelError) as e:
        raise UsageError(str(e)) from None
    if info.turn_based:
        check_turn_based(cfg, recurrent)
    if cfg.opponents == "pool" and not info.own_agents:
        raise UsageError(f"--opponents pool plays seats of a PettingZoo game; {cfg.env}'s agents are independent copies")
    if cfg.opponents == "pool" and recurrent:
        raise UsageError("--opponents pool: frozen snapshots play feed-forward networks only for now; drop --core "
                         "(or the recurrent --model)")
    if cfg.critic == "central" and info.own_agents and not info.has_state:
        print(f"marl: {cfg.env} has no state(); --critic central reads every agent's observation (and which are "
              f"alive) as the global state instead", flush=True)
    if info.dropped:
        print(f"marl: observation keys {', '.join(info.dropped)} are left out (no network reads them); "
              f"choose keys with --obs-keys", flush=True)
    if not cfg.resume and not {"learning_rate", "norm_obs", "norm_reward"} & values.keys() and any(
            s.action.continuous for s in specs):
        print("marl: Box actions with CartPole's defaults (learning rate 1e-2, raw observations) learn poorly; "
              "start from a preset: --config configs/pendulum.toml or configs/mujoco.toml", flush=True)
    if not cfg.resume and not cfg.wrappers and cfg.env.startswith("ALE/"):
        print(f"marl: {cfg.env} without --wrappers trains on raw 210x160x3 frames with CartPole's defaults; start "
              f"from the preset: --config configs/atari.toml (or --wrappers atari)", flush=True)
    if cfg.target_return is None and info.reward_threshold is not None:
        cfg = dataclasses.replace(cfg, target_return=float(info.reward_threshold))
    for line in slow_here(cfg, torch.cuda.is_available()):
        print(line, flush=True)
    check_extras(cfg, info)
    if cfg.resume:
        check_left_to_do(cfg)
    check_run_dir(cfg)
    return cfg, info
