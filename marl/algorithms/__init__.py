"""Pure tensor functions of RL algorithms: no processes, no RPC, no FSDP."""

from marl.algorithms.gae import gae
from marl.algorithms.ppo import ppo_loss

__all__ = ["gae", "ppo_loss"]
