"""TensorBoard event files and the console progress line, both keyed by global agent-steps;
optionally mirrored to Weights & Biases (--track)."""

from __future__ import annotations

import dataclasses
import json
import math
import re
import sys
from pathlib import Path

import torch
from torch.utils.tensorboard import SummaryWriter
from tensorboard.compat.proto.summary_pb2 import Summary
from torch.utils.tensorboard.summary import hparams

from marl.config import Config, to_toml

# Fields that say where a run writes or how it is watched, not how it learns: not hyperparameters.
NOT_HPARAMS = {"logdir", "run_name", "overwrite", "resume", "rpc_timeout", "checkpoint_every", "keep_checkpoints",
               "eval_every", "eval_episodes", "video_every", "track", "wandb_project_name", "wandb_entity"}
# The HParams dashboard's metric columns (their values are also scalars of these tags).
FINAL_METRICS = ("hparams/final_mean_return", "hparams/steps_to_target", "hparams/wall_seconds", "hparams/SPS")


def hparam_values(cfg: Config) -> dict[str, bool | int | float | str]:
    """The config as the HParams dashboard takes it: numbers, strings and booleans only."""
    out: dict[str, bool | int | float | str] = {}
    for f in dataclasses.fields(cfg):
        if f.name in NOT_HPARAMS:
            continue
        v = getattr(cfg, f.name)
        if v is None:
            v = "none"
        elif isinstance(v, (dict, list, tuple)):
            v = json.dumps(v if not isinstance(v, tuple) else list(v), sort_keys=True)
        elif not isinstance(v, (bool, int, float, str)):
            v = str(v)
        out[f.name] = v
    return out


def wandb_id(run_name: str) -> str:
    """W&B run ids take letters, digits, - and _; one id per run directory, so that a resumed or healed
    run goes on in the same W&B run."""
    return re.sub(r"[^A-Za-z0-9_-]", "-", run_name)[:64]


def format_return(value: float | None, target: float | None = None) -> str:
    """A mean return with decimals enough for the scale of the target (else of the value itself):
    three below its order of magnitude, at least one. MiniGrid's 0.8895 against 0.9 reads 0.889, not
    0.9 (which looks solved); CartPole's 480.5 against 475 stays 480.5."""
    if value is None:
        return "n/a"
    scale = abs(target) if target else abs(value)
    decimals = 1 if scale == 0 or not math.isfinite(scale) else min(max(1, 3 - math.ceil(math.log10(scale))), 6)
    return f"{value:.{decimals}f}"


class RunLogger:
    """Writes runs/<run>/ : TensorBoard events (CleanRL's tag names) and config.toml, the resolved config."""

    def __init__(self, cfg: Config, agent_ids: tuple[str, ...], out=sys.stdout, purge_step: int | None = None):
        """`purge_step`: on resume, events at this step or later are dropped from the existing files."""
        self.cfg = cfg
        self.run_dir = Path(cfg.run_dir)
        self.run_dir.mkdir(parents=True, exist_ok=True)
        (self.run_dir / "config.toml").write_text(to_toml(cfg))
        self.wandb = None
        if cfg.track:
            import wandb

            # Before the SummaryWriter: sync_tensorboard patches it to copy every event to W&B (CleanRL's way).
            # W&B's folder goes beside the logdir (./wandb beside ./runs, W&B's own default): inside the
            # watched event folder its sync copied the copies again, 41 points a step.
            self.wandb = wandb.init(project=cfg.wandb_project_name, entity=cfg.wandb_entity or None, name=cfg.run_name,
                                    id=wandb_id(cfg.run_name), resume="allow", config=hparam_values(cfg),
                                    sync_tensorboard=True, dir=str(Path(cfg.logdir).resolve().parent), save_code=False)
        self.writer = SummaryWriter(str(self.run_dir), purge_step=purge_step)
        rows = "\n".join(f"|{f.name}|{getattr(cfg, f.name)}|" for f in dataclasses.fields(cfg))
        self.writer.add_text("hyperparameters", f"|param|value|\n|-|-|\n{rows}")
        self.agent_ids = agent_ids
        self.out = out

    def scalars(self, values: dict[str, float], step: int) -> None:
        """Scalars at `step`, as one event: TensorBoard reads each value as add_scalar's, and one
        record's checksum and framing (pure Python in tensorboard's writer) cost 0.3 ms for 40 values
        where 40 records cost 2.4 ms, each iteration, in the learner's process."""
        if values:
            summary = Summary(value=[Summary.Value(tag=tag, simple_value=float(v)) for tag, v in values.items()])
            self.writer._get_file_writer().add_summary(summary, step)

    def episodes(self, returns: torch.Tensor, lengths: torch.Tensor, agents: torch.Tensor, step: int) -> None:
        """Mean return and length of the episodes that finished this iteration, overall and per agent."""
        if returns.numel() == 0:
            return
        values = {"charts/episodic_return": returns.mean().item(), "charts/episodic_length": lengths.double().mean().item()}
        for i, agent in enumerate(self.agent_ids):
            mine = returns[agents == i]
            if mine.numel():
                values[f"agents/{agent}/episodic_return"] = mine.mean().item()
        self.scalars(values, step)

    def video(self, frames: list, iteration: int, step: int) -> Path:
        """One played episode: runs/<run>/videos/iter_N.mp4, and an animated GIF in TensorBoard's Images tab."""
        from marl import video

        folder = self.run_dir / "videos"
        folder.mkdir(exist_ok=True)
        path = folder / f"iter_{iteration}.mp4"
        video.write_mp4(path, frames)
        self.writer._get_file_writer().add_summary(video.tensorboard_summary("videos/episode", frames), step)
        return path

    def final(self, metrics: dict[str, float | None], step: int) -> None:
        """The HParams dashboard's row for this run: its hyperparameters and its final metrics; a metric
        that is None (no target reached) stays empty there."""
        values = {k: v for k, v in metrics.items() if v is not None}
        # Every column in every run's summary, empty or not: the dashboard takes its columns from one run's.
        experiment, start, end = hparams(hparam_values(self.cfg), dict.fromkeys(FINAL_METRICS, 0.0))
        # Written into the run's own directory (SummaryWriter.add_hparams would open a new subdirectory).
        for summary in (experiment, start, end):
            self.writer._get_file_writer().add_summary(summary, step)
        self.scalars(values, step)

    def progress(self, iteration: int, step: int, sps: float, mean: float | None, episodes: int, seconds: float) -> None:
        """The console's line for one iteration; `mean` is the return of the last `episodes` episodes."""
        self.print(f"iter {iteration:4d} | step {step:>10,} | {sps:>9,.0f} steps/s | "
                   f"return {format_return(mean, self.cfg.target_return):>7} (last {episodes}) | {seconds:6.1f}s")

    def print(self, line: str) -> None:
        print(line, file=self.out, flush=True)

    def close(self) -> None:
        self.writer.flush()
        self.writer.close()
        if self.wandb is not None:
            self.wandb.finish()
