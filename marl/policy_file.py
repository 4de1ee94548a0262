"""The exported policy: `runs/<run>/policy.pt`, plain tensors and plain values only, so that
`torch.load(path, weights_only=True)` reads it without trusting any pickled code. It records how
to rebuild the network (the built-in's settings, or a custom module's import path and kwargs)."""

from __future__ import annotations

import os
from pathlib import Path

import torch

from envs import EnvInfo
from marl.config import Config
from marl.models import ModelError, PolicySet, build_model, network_of
from marl.policies import PolicySpec


def export_policy(path: Path, weights: dict[str, torch.Tensor], info: EnvInfo, cfg: Config,
                  specs: tuple[PolicySpec, ...]) -> None:
    """Write the full weights and what it takes to rebuild the networks and feed them; atomically
    (temp + rename), so that a crash while writing never leaves a half file under the real name."""
    payload = {
        "state_dict": weights,
        "policies": [s.to_dict() for s in specs],
        "network": network_of(cfg),
        "env": cfg.env,
        "env_kwargs": dict(cfg.env_kwargs),
        "obs_keys": list(cfg.obs_keys),
        "wrappers": list(cfg.wrappers),
        "agents": len(info.agent_ids),
        "agent_ids": list(info.agent_ids),
    }
    tmp = path.with_name(path.name + ".tmp")
    torch.save(payload, tmp)
    os.replace(tmp, path)


def load_policy(path: Path) -> tuple[PolicySet, tuple[PolicySpec, ...], dict]:
    """The exported networks, ready to act, their specs, and the payload's metadata. A custom
    network whose module no longer imports raises marl.models.ModelError (one line)."""
    payload = torch.load(path, weights_only=True)
    if "network" not in payload:
        raise ModelError(f"{path} was written by an older marl (before observation leaves and the network description "
                         f"were saved); train it again")
    specs = tuple(PolicySpec.from_dict(p) for p in payload["policies"])
    model = build_model(specs, payload["network"])
    model.load_state_dict(payload["state_dict"])
    return model.eval(), specs, payload
