"""Multi-agent environments: the PettingZoo Parallel protocol at the edge, batched arrays inside.

`describe(id, agents, env_kwargs)` says what an env's agents look like (EnvInfo, one AgentSpec per
agent); `make_env(id, agents)` gives a PettingZoo-Parallel env (dicts keyed by agent) for users and
tests; `make_agent_batch(info, copies, groups)` gives the grouped array form the actors step.
Each kind of id is a backend (envs.registry.BACKENDS, envs.protocol.Backend): any Gymnasium id (or
`module:EnvId`) x N independent agents (envs.gymnasium_backend), or `pettingzoo:<module>.<env>` for a
PettingZoo Parallel env or AEC game (envs.pettingzoo_backend; `pip install -e '.[pettingzoo]'` for
pettingzoo and mpe2), or `vmas:<scenario>` for VMAS's batched scenarios (envs.vmas_backend, `.[vmas]`;
batches only: `make_env` refuses them). First-party ids: `envs:CartPoleNoVel-v1` (envs/partially_observed.py),
`envs.targets:MatchDigits-v0`.
"""

from envs import partially_observed  # noqa: F401 - registers envs:CartPoleNoVel-v1
from envs.batched import GymAgentsBatch
from envs.pettingzoo_batch import PettingZooBatch
from envs.protocol import AgentBatch, Backend, ParallelEnv
from envs.registry import PETTINGZOO_PREFIX, EnvError, EnvInfo, check_groups, describe, make_agent_batch, make_env
from envs.spaces import ActionSpec, AgentSpec, Leaf

__all__ = ["ActionSpec", "AgentBatch", "AgentSpec", "Backend", "Leaf", "EnvError", "EnvInfo", "GymAgentsBatch", "ParallelEnv",
           "PETTINGZOO_PREFIX", "PettingZooBatch", "check_groups", "describe", "make_agent_batch", "make_env"]
