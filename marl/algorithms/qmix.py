"""QMIX (Rashid et al. 2018, "QMIX: Monotonic Value Function Factorisation for Deep Multi-Agent
Reinforcement Learning"): VDN's training with a mixer that hypernetworks of the global state make,
monotonic in every agent's Q (marl.models.mixers.QMixer). It reads the env's global state, which
the actors record with --critic central."""

from __future__ import annotations

from torch import nn

from marl.algorithms.vdn import VDN
from marl.models.mixers import QMixer


class QMIX(VDN):
    name = "qmix"
    needs_state = True  # marl.run refuses a run without --critic central's state

    def mixer(self, specs) -> nn.Module:
        agents = sum(len(s.agents) for s in specs)
        return QMixer(agents, specs[0].state_dim, self.cfg.mixing_embed_dim, self.cfg.hypernet_embed)
