"""Train agents with PPO on RPC actors and an FSDP2 learner: `python train.py --agents 8`."""

from __future__ import annotations

import dataclasses
import os
import sys
from pathlib import Path


def default_agents(env_id: str) -> int | None:
    """--agents 0: eight independent copies of a single-agent env; a PettingZoo env's own agents (None)."""
    from envs.registry import PETTINGZOO_PREFIX

    return None if env_id.startswith(PETTINGZOO_PREFIX) else 8


def resumed_config(values: dict):
    """`--resume`: the checkpoint's own config, with the flags given now on top. The run goes on in
    the checkpoint's run directory."""
    from marl import checkpoint
    from marl.config import Config, UsageError, load_toml

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
    from marl.config import Config

    run_dir = Path(values.get("logdir", Config.logdir)) / values["run_name"]
    newest = checkpoint.latest(run_dir)
    if os.environ.get("RANK", "0") == "0":
        print(f"marl: torchrun restart {restart}: " + (f"resuming from {newest}" if newest else
              "no checkpoint was written yet, starting the run over"), flush=True)
    if newest is None:
        return {**values, "overwrite": True}
    return {k: v for k, v in values.items() if k != "overwrite"} | {"resume": str(run_dir)}


def check_run_dir(cfg) -> None:
    """Before any process starts: the log directory must be writable, and an earlier run of the same
    name is never written over unless --overwrite says so (or --resume continues it)."""
    import shutil

    from marl.config import UsageError

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
        shutil.rmtree(cfg.run_dir)


def main(argv: list[str] | None = None) -> int:
    from marl.config import Config, UsageError, check_batch, parse_values, validate

    try:
        values = torchrun_restart(parse_values(argv))
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
            if not cfg.agents:
                cfg = dataclasses.replace(cfg, agents=len(info.agent_ids))
                check_batch(cfg, cfg.learners)
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
        if info.dropped:
            print(f"marl: observation keys {', '.join(info.dropped)} are left out (no network reads them); "
                  f"choose keys with --obs-keys", flush=True)
        if not cfg.resume and not {"learning_rate", "norm_obs", "norm_reward"} & values.keys() and any(
                s.action.continuous for s in specs):
            print("marl: Box actions with CartPole's defaults (learning rate 5e-3, no normalisation) learn poorly; "
                  "start from a preset: --config configs/pendulum.toml or configs/mujoco.toml", flush=True)
        if cfg.target_return is None and info.reward_threshold is not None:
            cfg = dataclasses.replace(cfg, target_return=float(info.reward_threshold))
        check_run_dir(cfg)
        from marl.launch import launch

        return launch(cfg, info)
    except UsageError as e:
        print(f"error: {e}", file=sys.stderr)
        return 2


if __name__ == "__main__":
    code = main()
    # Every process has been joined and every log flushed by now: leave as marl.launch.exit_now
    # does, without importing it (a usage error must not wait for torch's import).
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(code)
