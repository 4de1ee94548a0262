"""Algorithms: pure tensor functions (GAE, V-trace, the losses) and, one module each, the
algorithms the learner runs through the seam of `marl.algorithms.base`. No processes, RPC or FSDP."""

from marl.algorithms.appo import APPO
from marl.algorithms.dqn import DQN, td_loss, td_target
from marl.algorithms.gae import gae
from marl.algorithms.impala import IMPALA, impala_loss
from marl.algorithms.ppo import PPO, ppo_loss
from marl.algorithms.vtrace import vtrace

ALGORITHMS = {"ppo": PPO, "appo": APPO, "impala": IMPALA, "dqn": DQN}


def make_algorithm(cfg):
    return ALGORITHMS[cfg.algo](cfg)


__all__ = ["ALGORITHMS", "APPO", "DQN", "IMPALA", "PPO", "gae", "impala_loss", "make_algorithm", "ppo_loss", "td_loss", "td_target", "vtrace"]
