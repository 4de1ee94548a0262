"""Checkpoints: sharded learner state written with torch.distributed.checkpoint (DCP), plus the
coordinator's own state, so that `train.py --resume runs/<run>` continues a run where it stopped.

Layout of `runs/<run>/checkpoints/iter_000042/`:
- DCP files (`__<rank>_0.distcp`, `.metadata`): the model and optimizer state, each learner rank
  writing its own shard, and each rank's sampling generator under a key of its own. DCP stores
  global shapes, so a checkpoint written by L ranks loads on any other number (it reshards).
- `trainer.pt`: what rank 0 alone holds (iteration, global step, policy version, the running
  episode window, the batch-shuffling generator) and the network's shape, in plain tensors and
  values that `torch.load(..., weights_only=True)` reads.
- `config.toml`: the run's resolved config, the base of a resumed run's config.

A checkpoint is written under a hidden temporary name and renamed when complete, so a crash while
writing never leaves a directory that looks like a checkpoint. Only rank 0 renames; with several
nodes, the run directory must be on a filesystem that every learner rank sees (as DCP requires).
"""

from __future__ import annotations

import os
import re
import shutil
from pathlib import Path
from typing import TYPE_CHECKING

import torch
import torch.distributed as dist

from marl.config import Config, to_toml

if TYPE_CHECKING:
    from marl.learner import Learner

class CheckpointError(ValueError):
    """A `--resume` path that cannot be resumed; the message is one line naming the fix."""


_NAME = re.compile(r"^iter_(\d{6,})$")
TRAINER_FILE = "trainer.pt"


def checkpoint_dir(run_dir: Path, iteration: int) -> Path:
    return Path(run_dir) / "checkpoints" / f"iter_{iteration:06d}"


def is_checkpoint(path: Path) -> bool:
    """A complete checkpoint: renamed into place, so its DCP metadata and trainer state are both there."""
    return bool(_NAME.match(path.name)) and (path / ".metadata").is_file() and (path / TRAINER_FILE).is_file()


def latest(run_dir: Path) -> Path | None:
    """The newest complete checkpoint of a run, or None."""
    found = complete(run_dir)
    return found[-1] if found else None


def model_shape(specs, hidden_sizes) -> dict:
    """What must match for weights to load: each policy's agents, input and output sizes, and the hidden widths."""
    return {"policies": {s.name: s.shape() for s in specs}, "hidden_sizes": list(hidden_sizes)}


def _rng_key(rank: int) -> str:
    return f"rng.learner{rank}"


def save(learner: Learner, run_dir: Path, iteration: int, trainer: dict | None = None, keep: int = 3) -> Path:
    """Write the checkpoint of `iteration`. A collective: every learner rank calls it; rank 0 passes
    the coordinator's `trainer` state and makes the checkpoint visible once every shard is written."""
    from torch.distributed.checkpoint import save as dcp_save
    from torch.distributed.checkpoint.state_dict import get_state_dict

    final = checkpoint_dir(run_dir, iteration)
    tmp = final.with_name(f".{final.name}.tmp")
    if learner.rank == 0:
        shutil.rmtree(tmp, ignore_errors=True)  # the leftover of a crash while writing
    model_sd, optim_sd = get_state_dict(learner.model, learner.optimizer)
    state = {"model": model_sd, "optim": optim_sd, _rng_key(learner.rank): learner.generator.get_state()}
    # DCP's planning is a collective over the group: no rank writes before rank 0 has cleared `tmp`.
    dcp_save(state, checkpoint_id=tmp, process_group=learner.group)
    dist.barrier(group=learner.group)  # every shard is on disk before the rename makes it a checkpoint
    if learner.rank == 0:
        payload = {**trainer, "learners": learner.world,
                   "model_shape": model_shape(learner.specs, learner.cfg.hidden_sizes), "env": learner.cfg.env}
        torch.save(payload, tmp / TRAINER_FILE)
        (tmp / "config.toml").write_text(to_toml(learner.cfg))
        shutil.rmtree(final, ignore_errors=True)
        os.replace(tmp, final)
        _prune(Path(run_dir), keep)
    return final


def _iteration(path: Path) -> int:
    return int(_NAME.match(path.name).group(1))


def complete(run_dir: Path) -> list[Path]:
    """A run's complete checkpoints, oldest first."""
    root = Path(run_dir) / "checkpoints"
    return sorted((p for p in root.iterdir() if is_checkpoint(p)), key=_iteration) if root.is_dir() else []


def _prune(run_dir: Path, keep: int) -> None:
    for old in complete(run_dir)[:-keep]:
        shutil.rmtree(old, ignore_errors=True)


def drop_newer(checkpoint: Path) -> list[Path]:
    """On resume from an older checkpoint: the run's newer ones belong to the history being replaced
    (its TensorBoard events past the checkpoint are dropped too); remove them, so that they are
    neither resumed by mistake nor kept in place of the new ones. Returns what was removed."""
    newer = [p for p in complete(run_dir_of(checkpoint)) if _iteration(p) > _iteration(checkpoint)]
    for p in newer:
        shutil.rmtree(p, ignore_errors=True)
    return newer


def load(learner: Learner, path: Path) -> None:
    """Restore the model, the optimizer and this rank's generator from a checkpoint written by any
    number of learner ranks. A collective: every learner rank calls it."""
    from torch.distributed.checkpoint import FileSystemReader
    from torch.distributed.checkpoint import load as dcp_load
    from torch.distributed.checkpoint.state_dict import get_state_dict, set_state_dict

    # get_state_dict creates the optimizer's state (zeros) so that DCP has tensors to load into.
    model_sd, optim_sd = get_state_dict(learner.model, learner.optimizer)
    state = {"model": model_sd, "optim": optim_sd}
    key = _rng_key(learner.rank)
    saved_keys = FileSystemReader(path).read_metadata().state_dict_metadata
    if key in saved_keys:
        state[key] = learner.generator.get_state()
    dcp_load(state, checkpoint_id=path, process_group=learner.group)
    set_state_dict(learner.model, learner.optimizer, model_state_dict=state["model"], optim_state_dict=state["optim"])
    if key in state:
        learner.generator.set_state(state[key])
    # else: a rank the saving run did not have; its generator keeps the fresh seed it was given.


def read_trainer(path: Path) -> dict:
    return torch.load(Path(path) / TRAINER_FILE, weights_only=True)


def resolve(path: str) -> Path:
    """`--resume` takes a run directory (its newest checkpoint) or one checkpoint directory.
    Raises CheckpointError with a one-line reason if neither holds a complete checkpoint."""
    p = Path(path)
    if not p.exists():
        raise CheckpointError(f"--resume {path}: no such directory; pass runs/<run> or runs/<run>/checkpoints/iter_N")
    if is_checkpoint(p):
        return p
    if p.is_dir() and (p / "checkpoints").is_dir():
        found = latest(p)
        if found is not None:
            return found
        raise CheckpointError(f"--resume {path}: the run has no complete checkpoint yet (checkpoints/ is empty "
                         f"or holds only an interrupted write); start a new run instead")
    raise CheckpointError(f"--resume {path} is not a checkpoint: expected a run directory with checkpoints/ in it, "
                     f"or a checkpoints/iter_N directory")


def run_dir_of(checkpoint: Path) -> Path:
    return checkpoint.parent.parent


def check_compatible(checkpoint: Path, cfg: Config, info) -> None:
    """The resumed run's env and network must be the checkpoint's; CheckpointError naming the difference."""
    try:
        trainer = read_trainer(checkpoint)
    except Exception as e:  # noqa: BLE001 - any unreadable file is the same answer to the user
        raise CheckpointError(f"--resume {checkpoint}: {TRAINER_FILE} cannot be read ({type(e).__name__}); "
                         f"the checkpoint is damaged, resume from an older one") from None
    if trainer["env"] != cfg.env:
        raise CheckpointError(f"--resume {checkpoint}: the checkpoint was trained on {trainer['env']}, not {cfg.env}; "
                         f"drop --env, or start a new run")
    from marl.policies import specs_of

    want = model_shape(specs_of(cfg, info), cfg.hidden_sizes)
    if trainer["model_shape"] != want:
        diff = ", ".join(f"{k} {trainer['model_shape'].get(k)} (now {v})" for k, v in want.items()
                         if trainer["model_shape"].get(k) != v)
        raise CheckpointError(f"--resume {checkpoint}: the checkpoint's network has {diff}; resume with the same "
                         f"--agents, --hidden-sizes, --policies, --agent-id-input and --critic, or start a new run")
