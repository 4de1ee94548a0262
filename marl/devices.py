"""Where each role computes: the one place that decides, for learners and for actors.

Learners: NCCL on cuda:<local_rank> where CUDA is there, else gloo on the CPU. Actors: the CPU, as
their NumPy envs want (a GPU would only slow a policy's forward over a few dozen rows); an env
that steps on a torch device as one batch (VMAS: `envs.registry.on_device`) runs on the actor's GPU where
the machine has one, its policy beside it, so that nothing crosses between the two.
"""

from __future__ import annotations

import os

import torch

from envs import EnvInfo
from envs.registry import on_device


def device_and_backend(local_rank: int) -> tuple[torch.device, str]:
    """Where a learner computes and its process group's backend: NCCL on cuda:<local_rank>, else gloo on CPU."""
    if torch.cuda.is_available():
        return torch.device(f"cuda:{local_rank}"), "nccl"
    return torch.device("cpu"), "gloo"


def actor_device(info: EnvInfo, local_rank: int | None = None) -> torch.device:
    """Where an actor steps its envs and runs its policy: a GPU where the env steps on one and CUDA
    is there (the local rank's, modulo the node's GPUs), else the CPU. `local_rank` None: the
    process's LOCAL_RANK (torchrun sets it; marl.launch.run_rank sets it for local spawn), 0 without
    one. Not the current CUDA device: a RolloutWorker is built in an RPC thread, whose current device
    is cuda:0 whatever the process's main thread set."""
    if not (torch.cuda.is_available() and on_device(info.env_id)):
        return torch.device("cpu")
    if local_rank is None:
        local_rank = int(os.environ.get("LOCAL_RANK", 0))
    return torch.device("cuda", local_rank % torch.cuda.device_count())
