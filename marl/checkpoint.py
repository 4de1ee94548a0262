"""Checkpoints: sharded learner state written with torch.distributed.checkpoint (DCP), plus the
coordinator's own state, so that `train.py --resume runs/<run>` continues a run where it stopped.

Layout of `runs/<run>/checkpoints/iter_000042/`:
- DCP files (`__<rank>_0.distcp`, `.metadata`): each learner rank's `TrainState`, the model and
  optimizer shards it holds and its sampling generators under keys of their own (and the reward
  scalers' statistics). DCP stores global shapes, so a checkpoint written by L ranks loads on any
  other number (it reshards).
- or, from a single learner rank that nothing shards (one fp32 CPU learner, the default run),
  `learner.pt`: the same state dict, whole, in one `torch.save` file. Importing DCP costs 1.6-3.6 s
  on a 2-core machine (it imports DTensor and sympy), a quarter of a CartPole run; this file loads
  on any number of ranks too (each takes its shards of the whole tensors).
- `trainer.pt`: what rank 0 alone holds (iteration, global step, policy version, the running
  episode window, wall seconds, the opponent pool) and the network's shape, in plain tensors and
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
import sys
from pathlib import Path
from typing import Protocol

import torch
import torch.distributed as dist
from torch import nn

from marl.config import Config, to_toml


class Stateful(Protocol):
    """What the checkpointer sees of a learner rank (torch.distributed.checkpoint's Stateful)."""

    whole: bool  # unsharded: `save` may write it as one plain file, and `load` pass it one (whole=True)

    def state_dict(self) -> dict: ...

    def load_state_dict(self, state: dict, whole: bool = False) -> None: ...


class TrainState:
    """What a learner rank checkpoints, as a `Stateful`: the model's and the optimizer's (sharded)
    state, this rank's sampling generators under keys of their own, and any `extra` Statefuls. The
    checkpointer sees only `state_dict` / `load_state_dict` (TorchTitan's rule), never a learner's
    attributes."""

    def __init__(self, model: nn.Module, optimizer: torch.optim.Optimizer, generators: tuple[torch.Generator, ...],
                 rank: int, extra: dict | None = None):
        """`extra`: more Statefuls by key, the same on every rank (the reward scalers)."""
        self.model, self.optimizer, self.generators = model, optimizer, generators
        self.rng_keys = [f"rng{i}.learner{rank}" for i in range(len(generators))]
        self.extra = extra or {}

    def state_dict(self) -> dict:
        if self._sharded():
            from torch.distributed.checkpoint.state_dict import get_state_dict

            # get_state_dict creates the optimizer's state (zeros) so that a load has tensors to load into.
            model_sd, optim_sd = get_state_dict(self.model, self.optimizer)
        else:
            model_sd, optim_sd = self.model.state_dict(), plain_optim_state_dict(self.model, self.optimizer)
        return {"model": model_sd, "optim": optim_sd, **{k: g.get_state() for k, g in zip(self.rng_keys, self.generators)},
                **{k: v.state_dict() for k, v in self.extra.items()}}

    def load_state_dict(self, state: dict, whole: bool = False) -> None:
        """`whole`: the model and optimizer state are unsharded tensors (a `learner.pt`), which a
        sharded rank cuts into its shards."""
        if self._sharded():
            from torch.distributed.checkpoint.state_dict import StateDictOptions, set_state_dict

            set_state_dict(self.model, self.optimizer, model_state_dict=state["model"], optim_state_dict=state["optim"],
                           options=StateDictOptions(full_state_dict=whole))
        else:
            self.model.load_state_dict(state["model"])
            load_plain_optim_state_dict(self.model, self.optimizer, state["optim"])
        # A rank the saving run did not have keeps the fresh seed it was given (checkpoint.load).
        for key, g in zip(self.rng_keys, self.generators):
            g.set_state(state[key])
        for key, v in self.extra.items():  # a checkpoint without them (--norm-reward turned on) keeps their start
            v.load_state_dict(state[key])

    def _sharded(self) -> bool:
        return any(_is_dtensor(p) for p in self.model.parameters())

    @property
    def whole(self) -> bool:
        """Whether this rank's state is unsharded (then `save` may write it as one plain file)."""
        return not self._sharded()


def _is_dtensor(t) -> bool:
    # Nothing is a DTensor before torch.distributed.tensor is imported, and importing it to ask costs 1-3 s.
    module = sys.modules.get("torch.distributed.tensor")
    return module is not None and isinstance(t, module.DTensor)


# A model nothing shards (one fp32 learner rank) gets the state dicts DCP's get_state_dict makes, in
# the same layout (so its checkpoints load on any other number of ranks, and theirs on it), made here:
# get_state_dict imports torch._dynamo (1-2 s) to ask whether the model was compiled, which a run
# of one learner would otherwise import for nothing at its first checkpoint.

def _param_names(model: nn.Module, optimizers: tuple[torch.optim.Optimizer, ...]) -> list[list[str]]:
    """Per optimizer, the fully qualified name of each parameter in its state_dict's numbering, as DCP
    names it: a shared parameter by its first name, without activation checkpointing's wrapper."""
    names: dict[int, str] = {}
    for n, p in model.named_parameters():
        names.setdefault(id(p), n.replace("_checkpoint_wrapped_module.", ""))
    return [[names[id(p)] for g in opt.param_groups for p in g["params"]] for opt in optimizers]


def _init_optim_state(opt: torch.optim.Optimizer) -> None:
    """As DCP's: a step of zero gradients at learning rate 0, so that a fresh optimizer has state tensors."""
    if opt.state or any(p.grad is not None for g in opt.param_groups for p in g["params"]):
        return
    for g in opt.param_groups:
        for p in g["params"]:
            if p.requires_grad:
                p.grad = torch.zeros_like(p)
    lrs = [g["lr"] for g in opt.param_groups]
    for g in opt.param_groups:
        g["lr"] = 0.0
    opt.step()
    for g, lr in zip(opt.param_groups, lrs):
        g["lr"] = lr
    opt.zero_grad(set_to_none=True)


def plain_optim_state_dict(model: nn.Module, optimizers: tuple[torch.optim.Optimizer, ...]) -> dict:
    """Every optimizer's state by parameter name, and their parameter groups with names for indices."""
    state, groups = {}, []
    for opt, names in zip(optimizers, _param_names(model, optimizers)):
        _init_optim_state(opt)
        sd = opt.state_dict()
        state.update({names[i]: v for i, v in sd["state"].items()})
        groups += [{**g, "params": [names[i] for i in g["params"]]} for g in sd["param_groups"]]
    return {"state": state, "param_groups": groups}


def load_plain_optim_state_dict(model: nn.Module, optimizers: tuple[torch.optim.Optimizer, ...], sd: dict) -> None:
    """The inverse: each optimizer takes its parameters' state and the saved groups of the same names."""
    saved = {tuple(g["params"]): g for g in sd["param_groups"]}
    for opt, names in zip(optimizers, _param_names(model, optimizers)):
        index = {n: i for i, n in enumerate(names)}
        groups, k = [], 0
        for g in opt.param_groups:
            own = tuple(names[k:k + len(g["params"])])
            k += len(own)
            groups.append({**saved[own], "params": [index[n] for n in own]})
        opt.load_state_dict({"state": {index[n]: v for n, v in sd["state"].items() if n in index}, "param_groups": groups})


class CheckpointError(ValueError):
    """A `--resume` path that cannot be resumed; the message is one line naming the fix."""


_NAME = re.compile(r"^iter_(\d{6,})$")
TRAINER_FILE = "trainer.pt"
LEARNER_FILE = "learner.pt"  # a single unsharded rank's state, in place of DCP's files


def checkpoint_dir(run_dir: Path, iteration: int) -> Path:
    return Path(run_dir) / "checkpoints" / f"iter_{iteration:06d}"


def is_checkpoint(path: Path) -> bool:
    """A complete checkpoint: renamed into place, so its learner state (DCP's metadata, or one rank's
    file) and trainer state are both there."""
    return (bool(_NAME.match(path.name)) and ((path / ".metadata").is_file() or (path / LEARNER_FILE).is_file())
            and (path / TRAINER_FILE).is_file())


def latest(run_dir: Path) -> Path | None:
    """The newest complete checkpoint of a run, or None."""
    found = complete(run_dir)
    return found[-1] if found else None


def model_shape(specs, network: dict) -> dict:
    """What must match for weights to load: each policy's spec (agents, observation leaves, action)
    and how the network is built (marl.models.network_of)."""
    return {"policies": {s.name: s.to_dict() for s in specs}, "network": dict(network)}


def save(state: Stateful, group: dist.ProcessGroup, run_dir: Path, iteration: int, trainer: dict | None,
         cfg: Config, keep: int = 3, own: dict | None = None) -> Path:
    """Write the checkpoint of `iteration`. A collective: every learner rank calls it with its own
    state; rank 0 passes the coordinator's `trainer` state and makes the checkpoint visible once
    every shard is written. `own`: Statefuls that only this rank holds and reads back (replay
    shards, --save-buffer), written to a file of the rank's, outside DCP: their sizes differ by rank
    and a resume on another number of ranks starts them empty."""
    rank = dist.get_rank(group)
    final = checkpoint_dir(run_dir, iteration)
    tmp = final.with_name(f".{final.name}.tmp")
    if rank == 0:
        shutil.rmtree(tmp, ignore_errors=True)  # the leftover of a crash while writing
    if dist.get_world_size(group) == 1 and state.whole:
        tmp.mkdir(parents=True)
        torch.save(state.state_dict(), tmp / LEARNER_FILE)
    else:
        from torch.distributed.checkpoint import save as dcp_save

        # DCP's planning is a collective over the group: no rank writes before rank 0 has cleared `tmp`.
        dcp_save(state.state_dict(), checkpoint_id=tmp, process_group=group)
    if own:
        torch.save({k: v.state_dict() for k, v in own.items()}, tmp / f"own_rank{rank}.pt")
    dist.barrier(group=group)  # every shard is on disk before the rename makes it a checkpoint
    if rank == 0:
        torch.save(trainer, tmp / TRAINER_FILE)
        (tmp / "config.toml").write_text(to_toml(cfg))
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


def load(state: Stateful, path: Path, group: dist.ProcessGroup) -> None:
    """Restore a learner rank's state from a checkpoint written by any number of learner ranks. A
    collective: every learner rank calls it. A key the checkpoint lacks (the generator of a rank
    the saving run did not have) keeps its current value."""
    whole = Path(path) / LEARNER_FILE
    if whole.is_file():
        sd = state.state_dict()  # its keys the saving rank lacked keep their values, as DCP's partial load
        sd.update(torch.load(whole, weights_only=True))
        state.load_state_dict(sd, whole=True)
        return
    from torch.distributed.checkpoint import load as dcp_load
    from torch.distributed.checkpoint.default_planner import DefaultLoadPlanner

    sd = state.state_dict()
    dcp_load(sd, checkpoint_id=path, process_group=group, planner=DefaultLoadPlanner(allow_partial_load=True))
    state.load_state_dict(sd)


def load_own(own: dict, path: Path, rank: int) -> bool:
    """A rank's own Statefuls from its file in a checkpoint (see `save`); False, leaving them as they
    are, where the checkpoint has none for this rank."""
    f = Path(path) / f"own_rank{rank}.pt"
    if not f.is_file():
        return False
    saved = torch.load(f, weights_only=True)
    for k, v in own.items():
        if k in saved:
            v.load_state_dict(saved[k])
    return True


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
    from marl.models import network_of
    from marl.policies import specs_of

    want = model_shape(specs_of(cfg, info), network_of(cfg))
    if "network" not in trainer["model_shape"]:
        raise CheckpointError(f"--resume {checkpoint}: written by an older marl (before observation leaves and the "
                              f"network description were saved); start a new run")
    diff = _first_difference(trainer["model_shape"], want)
    if diff is not None:
        raise CheckpointError(f"--resume {checkpoint}: the checkpoint's network differs ({diff}); resume with the same "
                         f"--algo, --agents, --model, --encoder, --hidden-sizes, --core, --obs-keys, --policies, --agent-id-input, "
                         f"--critic, --action-dist, --dueling, --norm-obs and --clip-obs, "
                         f"or start a new run")


def _first_difference(saved, now, path: str = "") -> str | None:
    """Where two nested dicts first differ, as `path: saved (now ...)`."""
    if isinstance(saved, (list, tuple)) and isinstance(now, (list, tuple)):
        saved, now = list(saved), list(now)  # plain data may come back as either
    if isinstance(saved, dict) and isinstance(now, dict):
        for key in {**saved, **now}:
            found = _first_difference(saved.get(key), now.get(key), f"{path}.{key}" if path else str(key))
            if found:
                return found
        return None
    return None if saved == now else f"{path} {saved!r}, now {now!r}"
