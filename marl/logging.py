"""TensorBoard event files and the console progress line, both keyed by global agent-steps."""

from __future__ import annotations

import dataclasses
import sys
from pathlib import Path

import torch
from torch.utils.tensorboard import SummaryWriter

from marl.config import Config, to_toml


class RunLogger:
    """Writes runs/<run>/ : TensorBoard events (CleanRL's tag names) and config.toml, the resolved config."""

    def __init__(self, cfg: Config, agent_ids: tuple[str, ...], out=sys.stdout, purge_step: int | None = None):
        """`purge_step`: on resume, events at this step or later are dropped from the existing files."""
        self.run_dir = Path(cfg.run_dir)
        self.run_dir.mkdir(parents=True, exist_ok=True)
        (self.run_dir / "config.toml").write_text(to_toml(cfg))
        self.writer = SummaryWriter(str(self.run_dir), purge_step=purge_step)
        rows = "\n".join(f"|{f.name}|{getattr(cfg, f.name)}|" for f in dataclasses.fields(cfg))
        self.writer.add_text("hyperparameters", f"|param|value|\n|-|-|\n{rows}")
        self.agent_ids = agent_ids
        self.out = out

    def scalars(self, values: dict[str, float], step: int) -> None:
        for tag, value in values.items():
            self.writer.add_scalar(tag, value, step)

    def episodes(self, returns: torch.Tensor, lengths: torch.Tensor, agents: torch.Tensor, step: int) -> None:
        """Mean return and length of the episodes that finished this iteration, overall and per agent."""
        if returns.numel() == 0:
            return
        self.writer.add_scalar("charts/episodic_return", returns.mean().item(), step)
        self.writer.add_scalar("charts/episodic_length", lengths.double().mean().item(), step)
        for i, agent in enumerate(self.agent_ids):
            mine = returns[agents == i]
            if mine.numel():
                self.writer.add_scalar(f"agents/{agent}/episodic_return", mine.mean().item(), step)

    def print(self, line: str) -> None:
        print(line, file=self.out, flush=True)

    def close(self) -> None:
        self.writer.flush()
        self.writer.close()
