"""Evaluating a trained policy, one job a module: `play` (playing and scoring), `versus` (against
random play, the lookahead player, a run's pool or another run), `filming` (rendering envs), `cli`
(`python -m marl.evaluate runs/<run>`). Every loop is marl.runner's EnvRunner."""

from marl.evaluate.cli import main
from marl.evaluate.filming import check_filmable, rendering_batch
from marl.evaluate.play import evaluate, load_run, play, policy_actor, random_actor, random_returns
from marl.evaluate.versus import outcomes, pool_ids, pool_of, versus, versus_snapshots, versus_table
from marl.recorders import FrameRecorder, RenderError

__all__ = ["main", "check_filmable", "rendering_batch", "evaluate", "load_run", "play", "policy_actor", "random_actor",
           "random_returns", "outcomes", "pool_ids", "pool_of", "versus", "versus_snapshots", "versus_table",
           "FrameRecorder", "RenderError"]
