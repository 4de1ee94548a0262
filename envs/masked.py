"""A one-step-lookahead guessing game whose only difficulty is obeying an action mask.

Why it exists: PettingZoo's classic envs (chess, go, connect four) publish a legal-action mask and
treat an illegal move as a bug. This env makes that contract impossible to miss: `step` raises
ValueError on any action the last published mask forbids, so a framework that ever samples an
illegal action, or reads the mask from the wrong step, crashes instead of quietly learning less.

Game (`MaskedChoiceEnv`, Gymnasium id `MaskedChoice-v0`; `--env envs.masked:MaskedChoice-v0`)
    Every step a target is drawn uniformly from range(num_actions) with the env's own `np_random`,
    and the legal actions are the target plus each other action independently with probability 0.5.
    The observation is the one-hot of the target; reward is 1.0 for playing the target, else 0.0.
    The episode terminates (not truncates: its length is part of the game, so the registration has
    no TimeLimit) after `episode_length` steps.

Where the mask lives (`mask_in`)
    "obs"  (default): observation is Dict({"observation": Box(0, 1, (K,), float32),
           "action_mask": Box(0, 1, (K,), int8)}), the PettingZoo classic convention.
    "info": observation is that Box alone; the mask is `info["action_mask"]` (int8, (K,)), in the
           info of both reset and step.

Returns, K = num_actions, T = episode_length (defaults K = 6, T = 16)
    optimum (play the target): T = 16.
    uniformly random legal action: the target is one of 1 + B legal actions, B ~ Binomial(K-1, 1/2),
    so a step pays E[1/(1+B)] = sum_k C(K-1, k) 2^-(K-1) / (k+1) = (2^K - 1) / (K 2^(K-1)), which is
    63/192 = 0.328125 for K = 6; the episode pays T times that, 5.25.
    These are the class attributes `optimum` and `random_legal_return` (default kwargs) and the same
    names on each instance (its own kwargs).

Multi-agent: `parallel_env(agents=2, **kwargs)` is N independent copies as a PettingZoo Parallel
env (`--env pettingzoo:envs.masked`), with the Dict-obs mask convention that PettingZoo's
`parallel_api_test` samples by.
"""

from __future__ import annotations

import gymnasium as gym
import numpy as np
from gymnasium import spaces

from envs import draw
from envs.independent import IndependentAgents

ENV_ID = "MaskedChoice-v0"
MASK_IN = ("obs", "info")


def expected_random_legal_return(num_actions: int, episode_length: int) -> float:
    """Exact expected return of a uniformly random legal policy (closed form; see the module docstring)."""
    k = int(num_actions)
    return episode_length * (2.0**k - 1.0) / (k * 2.0 ** (k - 1))


class MaskedChoiceEnv(gym.Env):
    """Play the target among the legal actions; an illegal action raises. See the module docstring."""

    metadata = {"render_modes": ["rgb_array"], "render_fps": 4}
    optimum = 16.0
    random_legal_return = expected_random_legal_return(6, 16)

    def __init__(self, num_actions: int = 6, episode_length: int = 16, mask_in: str = "obs",
                 render_mode: str | None = None):
        if mask_in not in MASK_IN:
            raise ValueError(f"MaskedChoice: mask_in must be one of {MASK_IN}, got {mask_in!r}")
        if int(num_actions) != num_actions or num_actions < 1:
            raise ValueError(f"MaskedChoice: num_actions must be an integer >= 1, got {num_actions!r}")
        if int(episode_length) != episode_length or episode_length < 1:
            raise ValueError(f"MaskedChoice: episode_length must be an integer >= 1, got {episode_length!r}")
        if render_mode not in (None, "rgb_array"):
            raise ValueError(f"MaskedChoice: render_mode must be None or 'rgb_array', got {render_mode!r}")
        self.num_actions = k = int(num_actions)
        self.episode_length = int(episode_length)
        self.mask_in = mask_in
        self.render_mode = render_mode
        # Instance values shadow the class ones, which only describe the default kwargs.
        self.optimum = float(self.episode_length)
        self.random_legal_return = expected_random_legal_return(k, self.episode_length)

        target_space = spaces.Box(0.0, 1.0, (k,), np.float32)
        if mask_in == "obs":
            self.observation_space = spaces.Dict({"observation": target_space,
                                                  "action_mask": spaces.Box(0, 1, (k,), np.int8)})
        else:
            self.observation_space = target_space
        self.action_space = spaces.Discrete(k)

        self._t = 0
        self._target = 0
        self._mask = np.zeros(k, dtype=np.int8)
        self._done = True

    def reset(self, *, seed: int | None = None, options: dict | None = None):
        super().reset(seed=seed)
        self._t = 0
        self._done = False
        self._draw()
        return self._obs(), self._info()

    def step(self, action):
        if self._done:
            raise RuntimeError("MaskedChoice: step() after the episode ended; call reset() first")
        # Checked before anything changes, so a caller that catches the error can still play on.
        if not self.action_space.contains(action) or not self._mask[int(action)]:
            raise ValueError(f"illegal action {action}: legal actions are {np.flatnonzero(self._mask).tolist()}")
        reward = 1.0 if int(action) == self._target else 0.0
        self._t += 1
        terminated = self._t >= self.episode_length
        self._done = terminated
        # The terminal observation still carries a fresh draw: it must lie in the space, and an
        # all-zero mask would claim that no action is legal.
        self._draw()
        return self._obs(), reward, terminated, False, self._info()

    def _draw(self) -> None:
        rng = self.np_random
        self._target = int(rng.integers(self.num_actions))
        mask = (rng.random(self.num_actions) < 0.5).astype(np.int8)
        mask[self._target] = 1
        self._mask = mask

    def _obs(self):
        one_hot = np.zeros(self.num_actions, dtype=np.float32)
        one_hot[self._target] = 1.0
        if self.mask_in == "obs":
            return {"observation": one_hot, "action_mask": self._mask.copy()}  # copies: callers keep them
        return one_hot

    def _info(self) -> dict:
        return {"action_mask": self._mask.copy()} if self.mask_in == "info" else {}

    def render(self) -> np.ndarray | None:
        """render_mode="rgb_array": one cell per action: the target green, other legal ones grey, illegal ones black."""
        if self.render_mode != "rgb_array":
            return None
        colors = np.where(self._mask[:, None] == 1, np.array([150, 150, 150]), np.array([0, 0, 0]))
        colors[self._target] = (52, 168, 83)
        return draw.cells(colors.astype(np.uint8))


def parallel_env(agents: int = 2, **kwargs) -> IndependentAgents:
    """PettingZoo Parallel env: `agents` independent copies of MaskedChoice-v0 (`--env pettingzoo:envs.masked`)."""
    return IndependentAgents(ENV_ID, agents, **kwargs)


# Registered on import so that `gym.make("envs.masked:MaskedChoice-v0")` works; guarded because
# gymnasium warns when an id is registered twice (a reload, or a second import path).
if ENV_ID not in gym.registry:
    gym.register(id=ENV_ID, entry_point=f"{__name__}:MaskedChoiceEnv", max_episode_steps=None)
