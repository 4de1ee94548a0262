"""Multi-agent environments: the PettingZoo Parallel protocol at the edge, batched arrays inside.

`make_env(id, agents)` gives a PettingZoo-Parallel env (dicts keyed by agent) for users and
tests; `make_batched(id, agents, copies)` gives the array form the actors step.
"""

from envs.protocol import ParallelEnv
from envs.registry import EnvInfo, describe, make_batched, make_env

__all__ = ["EnvInfo", "ParallelEnv", "describe", "make_batched", "make_env"]
