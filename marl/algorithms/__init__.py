"""Algorithms: pure tensor functions (GAE, V-trace, the losses) and, one module each, the
algorithms the learner runs through the seam of `marl.algorithms.base`. No processes, RPC or FSDP."""

from marl.algorithms.appo import APPO
from marl.algorithms.dqn import DQN, IQL, td_loss, td_target
from marl.algorithms.gae import gae
from marl.algorithms.impala import IMPALA, impala_loss
from marl.algorithms.ppo import PPO, ppo_loss
from marl.algorithms.vtrace import vtrace

from marl.algorithms.qmix import QMIX
from marl.algorithms.sac import SAC
from marl.algorithms.vdn import VDN

# A new algorithm is a module of this package and a line here (and its config section, if it has one).
ALGORITHMS = {"ppo": PPO, "appo": APPO, "impala": IMPALA, "dqn": DQN, "iql": IQL, "vdn": VDN, "qmix": QMIX, "sac": SAC}


def make_algorithm(cfg):
    return ALGORITHMS[cfg.algo](cfg)


__all__ = ["ALGORITHMS", "APPO", "DQN", "IMPALA", "IQL", "QMIX", "SAC", "VDN", "PPO", "gae", "impala_loss", "make_algorithm", "ppo_loss", "td_loss", "td_target", "vtrace"]
