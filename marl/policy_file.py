"""The exported policy: `runs/<run>/policy.pt`, plain tensors and plain values only, so that
`torch.load(path, weights_only=True)` reads it without trusting any pickled code."""

from __future__ import annotations

import os
from pathlib import Path

import torch

from envs import EnvInfo
from marl.config import Config
from marl.models import ActorCritic


def export_policy(path: Path, weights: dict[str, torch.Tensor], info: EnvInfo, cfg: Config) -> None:
    """Write the full weights and what it takes to rebuild the network; atomically (temp + rename),
    so that a crash while writing never leaves a half file under the real name."""
    payload = {
        "state_dict": weights,
        "model": {"obs_dim": info.obs_dim, "action_kind": info.action_kind, "num_actions": info.num_actions,
                  "hidden_sizes": list(cfg.hidden_sizes)},
        "env": cfg.env,
        "agents": cfg.agents,
        "agent_ids": list(info.agent_ids),
    }
    tmp = path.with_name(path.name + ".tmp")
    torch.save(payload, tmp)
    os.replace(tmp, path)


def load_policy(path: Path) -> tuple[ActorCritic, dict]:
    """The exported network, ready to act, and the payload's metadata."""
    payload = torch.load(path, weights_only=True)
    m = payload["model"]
    model = ActorCritic(m["obs_dim"], m["action_kind"], m["num_actions"], tuple(m["hidden_sizes"]))
    model.load_state_dict(payload["state_dict"])
    return model.eval(), payload
