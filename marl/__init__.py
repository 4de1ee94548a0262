"""marl: multi-agent RL on torch.distributed. From Python: `from marl import Config, train`."""

from marl.config import Config, UsageError
from marl.run import RunFailed, TrainResult, train

__all__ = ["Config", "RunFailed", "TrainResult", "UsageError", "train"]
