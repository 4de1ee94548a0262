"""The grouped array form the actors step, for a single-agent Gymnasium id x N agents x M copies.

Every batch (this one, `envs.pettingzoo_batch.PettingZooBatch` and `envs.vmas_backend.VmasBatch`) speaks the same protocol
(typed as `envs.protocol.AgentBatch`; tests/test_backends.py checks each backend's against its raw env).
Agents are split into groups (indices in agent order; one group per policy; a group's agents
share one AgentSpec), and every array comes as a list with one entry per group (NumPy arrays; a
torch batch's tensors on its `device`, envs.protocol.AgentBatch):

    reset(seed) -> obs                                 obs[g]: {leaf name: (copies, n_g, *leaf.shape)}
                                                       in each leaf's dtype (envs.spaces.Leaf)
    step(actions) -> obs, rewards, terminated, truncated, active
                                                       actions[g]: (copies, n_g, *action.shape)
                                                       rewards[g]: (copies, n_g) float32, flags: bool
    masks                                              masks[g]: (copies, n_g, mask_size) bool for
                                                       the current observations, or None (no mask)
    state() -> (copies, state_dim) float32             the central critic's input for the current obs
    active                                             the latest `active` list (after reset: all True
                                                       for the agents present)
    render() -> (H, W, 3) uint8                        the frame of the rendered env (copy 0's first
                                                       agent's env here, copy 0 for PettingZoo); the
                                                       env kwargs must hold render_mode="rgb_array"
    rendered_episode_over                              after step(): the rendered env's episode has
                                                       just ended (its next step is a reset)
    close()

`active[g][c, j]` says whether the NEXT step of that slot is a real transition of a live agent:
False when the slot is padding (an agent that left its episode) or its next step is an autoreset.
A slot without a real observation has an all-True mask: its action is never used.

Autoreset follows Gymnasium 1.x's default (NEXT_STEP): after a slot (one agent of one copy)
reports terminated or truncated, its next step is a reset step. That step's action is ignored,
its reward is 0 and its flags are False, and the observation it returns opens a new episode.
So the observation returned with a done flag is the episode's final observation, which is what
a truncated episode bootstraps from. Reset steps are not transitions: the actor masks them out
(here active = not (terminated or truncated)).
"""

from __future__ import annotations

import gymnasium as gym
import numpy as np
from gymnasium.vector import AutoresetMode

from envs.spaces import AgentSpec, env_action, leaf_array, mask_array
from envs.wrappers import ALE_VECTOR, ATARI, needs_frameskip_1, wrapper_fns


def _index(group: list[int]):
    """A basic slice when the group is a contiguous run of agents (views, no copies), else the index list."""
    if list(group) == list(range(group[0], group[0] + len(group))):
        return slice(group[0], group[0] + len(group))
    return np.asarray(group)


def make_vector(env_id: str, num_envs: int, env_kwargs: dict | None = None, wrappers: tuple[str, ...] = ()) -> gym.vector.VectorEnv:
    """`num_envs` copies of a Gymnasium env in one vector env, wrapped as `wrappers` say.

    The env's own vectorised implementation (`vector_entry_point`, e.g. CartPole's: thousands of
    envs per numpy call, or ale_py's C++ Atari env) where it ships one and no wrapper is asked
    for, or `atari` alone for an ALE id; else Gymnasium's SyncVectorEnv over wrapped copies, which
    is also what a `render_mode` gets (its copies are seeded one by one: other episodes than the
    vectorised env's for the same seed).
    """
    kwargs = dict(env_kwargs or {})
    spec = gym.spec(env_id)
    # Filming wants one copy's frames, and a vectorised env renders every copy at each call (CartPole's: 16.8 ms a frame
    # with 8 agents, against 8.5 ms for the one copy SyncVectorEnv renders).
    filming = kwargs.get("render_mode") is not None
    if spec.vector_entry_point is not None and not filming and (not wrappers or (tuple(wrappers) == (ATARI,) and env_id.startswith("ALE/"))):
        if wrappers:
            kwargs = {**ALE_VECTOR, **kwargs}
        return gym.make_vec(env_id, num_envs=num_envs, vectorization_mode="vector_entry_point", **kwargs)
    if wrappers and needs_frameskip_1(wrappers):
        kwargs.setdefault("frameskip", 1)
    return gym.make_vec(env_id, num_envs=num_envs, vectorization_mode="sync",
                        vector_kwargs={"autoreset_mode": AutoresetMode.NEXT_STEP},
                        wrappers=wrapper_fns(wrappers) or None, **kwargs)


class GymAgentsBatch:
    """`copies` x `agents` independent copies of a single-agent Gymnasium env in one vector env.

    The vector env's arrays are [copies * agents] copy-major; a group's arrays are views of them
    when the group is a contiguous run of agents (one group of all agents: plain reshapes, no copies).

    state() is every agent's current observation (each leaf flattened) in agent order followed by
    an alive mask of ones: every slot always holds a real observation (the final one of an episode
    included, which is what a truncation bootstraps from), so nothing is ever padding here.
    """

    def __init__(self, env_id: str, agents: int, copies: int, spec: AgentSpec, groups: list[list[int]] | None = None,
                 env_kwargs: dict | None = None, wrappers: tuple[str, ...] = ()):
        self.copies, self.agents, self.spec = copies, agents, spec
        self.groups = [list(g) for g in groups] if groups is not None else [list(range(agents))]
        self._whole = len(self.groups) == 1 and self.groups[0] == list(range(agents))
        self._idx = [_index(g) for g in self.groups]
        self.vec = make_vector(env_id, copies * agents, env_kwargs, wrappers)
        autoreset = self.vec.metadata.get("autoreset_mode", AutoresetMode.NEXT_STEP)
        if autoreset != AutoresetMode.NEXT_STEP:
            raise NotImplementedError(f"{env_id}: vector env autoreset mode {autoreset} is not supported")
        act = spec.action
        self._actions = None if self._whole else np.empty((copies, agents, *act.shape), dtype=np.dtype(act.dtype))
        self._obs: dict[str, np.ndarray] = {}  # leaf -> (copies, agents, *shape): the current observations
        self.active: list[np.ndarray] = []
        self.masks: list[np.ndarray | None] = []

    def _split(self, x):
        if self._whole:
            return [x]
        if isinstance(x, dict):
            return [{k: v[:, i] for k, v in x.items()} for i in self._idx]
        return [x[:, i] for i in self._idx]

    def _observe(self, obs, infos) -> list[dict[str, np.ndarray]]:
        lead = (self.copies, self.agents)
        self._obs = {leaf.name: leaf_array(leaf, obs, lead) for leaf in self.spec.obs}
        mask = mask_array(self.spec, obs, infos, lead)
        self.masks = self._split(mask) if mask is not None else [None] * len(self.groups)
        return self._split(self._obs)

    def reset(self, seed: int | None) -> list[dict[str, np.ndarray]]:
        obs, infos = self.vec.reset(seed=seed)
        self.active = self._split(np.ones((self.copies, self.agents), dtype=bool))
        self.rendered_episode_over = False
        return self._observe(obs, infos)

    def step(self, actions: list[np.ndarray]):
        """actions per group -> obs, rewards, terminated, truncated, active per group (see the module doc)."""
        if self._whole:
            a = actions[0]
        else:
            a = self._actions
            for i, x in zip(self._idx, actions):
                a[:, i] = x
        a = env_action(self.spec.action, a.reshape(self.copies * self.agents, *self.spec.action.shape),
                       (self.copies * self.agents,))
        obs, rew, term, trunc, infos = self.vec.step(a)
        shape = (self.copies, self.agents)
        term, trunc = term.reshape(shape), trunc.reshape(shape)
        active = ~(term | trunc)
        self.active = self._split(active)
        self.rendered_episode_over = not active[0, 0]
        return (self._observe(obs, infos), self._split(rew.reshape(shape).astype(np.float32, copy=False)),
                self._split(term), self._split(trunc), self.active)

    def render(self) -> np.ndarray:
        """Slot 0's frame (copy 0's agent 0); only its env renders where the vector env has one env per slot."""
        envs = getattr(self.vec, "envs", None)
        return np.asarray(envs[0].render() if envs is not None else self.vec.render()[0])

    @property
    def state_dim(self) -> int:
        return self.agents * self.spec.stored_width + self.agents

    def state(self) -> np.ndarray:
        """(copies, state_dim): the current observations in agent order, then the alive mask (ones)."""
        flat = [v.reshape(self.copies, self.agents, -1).astype(np.float32, copy=False) for v in self._obs.values()]
        flat = flat[0] if len(flat) == 1 else np.concatenate(flat, axis=-1)
        return np.concatenate([flat.reshape(self.copies, -1), np.ones((self.copies, self.agents), dtype=np.float32)], axis=1)

    def close(self):
        self.vec.close()
