"""Copy-the-target games on MultiDiscrete and MultiBinary spaces, for observations and actions alike.

Why they exist: CartPole and friends only exercise Box observations and Discrete actions. These
two envs make a framework encode integer-vector observations and emit integer-vector actions,
with a known optimum and a known random baseline, and they reject a malformed action (wrong
shape, non-integer dtype, out of range) with ValueError rather than clipping it, so an encoding
bug crashes instead of costing reward.

`MatchDigitsEnv`, id `MatchDigits-v0` (`--env envs.targets:MatchDigits-v0`), kwargs nvec=(3, 4, 5),
episode_length=8
    Every step a target is drawn uniformly from MultiDiscrete(nvec) and is the observation; the
    action is a MultiDiscrete(nvec) guess, rewarded with the fraction of positions it gets right.
    optimum = episode_length (8); uniformly random = episode_length * mean(1 / n_i) (8 * 47/180,
    about 2.089, for the defaults).

`MatchBitsEnv`, id `MatchBits-v0` (`--env envs.targets:MatchBits-v0`), kwargs n=6, episode_length=8
    The same on MultiBinary(n): reward is the fraction of bits matched. optimum = episode_length
    (8), uniformly random = episode_length / 2 (4).

Both terminate (their length is part of the game; no TimeLimit) after `episode_length` steps. The
class attributes `optimum` and `random_return` hold the default kwargs' values, and each instance
shadows them with its own.
"""

from __future__ import annotations

import gymnasium as gym
import numpy as np
from gymnasium import spaces

from envs import draw

DIGITS_ID = "MatchDigits-v0"
BITS_ID = "MatchBits-v0"


def _check_length(name: str, episode_length) -> int:
    if int(episode_length) != episode_length or episode_length < 1:
        raise ValueError(f"{name}: episode_length must be an integer >= 1, got {episode_length!r}")
    return int(episode_length)


class _MatchTargetEnv(gym.Env):
    """Shared loop: draw a target, show it, score the next action against it by the fraction matched."""

    metadata = {"render_modes": ["rgb_array"], "render_fps": 4}
    name = "MatchTarget"

    def __init__(self, episode_length: int, render_mode: str | None):
        if render_mode not in (None, "rgb_array"):
            raise ValueError(f"{self.name}: render_mode must be None or 'rgb_array', got {render_mode!r}")
        self.episode_length = _check_length(self.name, episode_length)
        self.render_mode = render_mode
        self._high = np.ones(1, dtype=np.int64)  # exclusive upper bound per position; set by subclasses
        self._target = np.zeros(1, dtype=np.int64)
        self._t = 0
        self._done = True

    def reset(self, *, seed: int | None = None, options: dict | None = None):
        super().reset(seed=seed)
        self._t = 0
        self._done = False
        self._draw()
        return self._target.copy(), {}

    def step(self, action):
        if self._done:
            raise RuntimeError(f"{self.name}: step() after the episode ended; call reset() first")
        a = self._validate(action)
        reward = float(np.mean(a == self._target))
        self._t += 1
        terminated = self._t >= self.episode_length
        self._done = terminated
        self._draw()  # the terminal observation too: it must lie in the space
        return self._target.copy(), reward, terminated, False, {}

    def _draw(self) -> None:
        self._target = self.np_random.integers(0, self._high).astype(self.observation_space.dtype)

    def _validate(self, action) -> np.ndarray:
        a = np.asarray(action)
        if a.shape != self._high.shape:
            raise ValueError(f"{self.name}: action must have shape {self._high.shape}, got {a.shape} ({action!r})")
        # Not cast: a float action means the caller's encoding is wrong, and rounding would hide it.
        if not (np.issubdtype(a.dtype, np.integer) or a.dtype == np.bool_):
            raise ValueError(f"{self.name}: action must be integers, got dtype {a.dtype} ({action!r})")
        a = a.astype(np.int64)
        if np.any((a < 0) | (a >= self._high)):
            raise ValueError(f"{self.name}: action {a.tolist()} out of range: position i must be in "
                             f"0..high_i - 1 with high = {self._high.tolist()}")
        return a

    def render(self) -> np.ndarray | None:
        """render_mode="rgb_array": the target shown, one cell per position, from black (0) to white (high - 1)."""
        if self.render_mode != "rgb_array":
            return None
        level = (255.0 * self._target.astype(np.float64) / np.maximum(self._high - 1, 1)).astype(np.uint8)
        return draw.cells(np.repeat(level[:, None], 3, axis=1))


class MatchDigitsEnv(_MatchTargetEnv):
    """Guess a MultiDiscrete(nvec) target shown one step ahead; see the module docstring."""

    name = "MatchDigits"
    optimum = 8.0
    random_return = 8.0 * float(np.mean(1.0 / np.array([3, 4, 5])))

    def __init__(self, nvec=(3, 4, 5), episode_length: int = 8, render_mode: str | None = None):
        super().__init__(episode_length, render_mode)
        nv = np.asarray(nvec)
        if nv.ndim != 1 or nv.size == 0 or not np.issubdtype(nv.dtype, np.integer) or np.any(nv < 1):
            raise ValueError(f"MatchDigits: nvec must be a non-empty 1-D sequence of integers >= 1, got {nvec!r}")
        self.nvec = nv.astype(np.int64)
        self.observation_space = spaces.MultiDiscrete(self.nvec)
        self.action_space = spaces.MultiDiscrete(self.nvec)
        self._high = self.nvec.copy()
        self._target = np.zeros(len(self.nvec), dtype=np.int64)
        self.optimum = float(self.episode_length)
        self.random_return = self.episode_length * float(np.mean(1.0 / self.nvec))


class MatchBitsEnv(_MatchTargetEnv):
    """Guess a MultiBinary(n) target shown one step ahead; see the module docstring."""

    name = "MatchBits"
    optimum = 8.0
    random_return = 4.0

    def __init__(self, n: int = 6, episode_length: int = 8, render_mode: str | None = None):
        super().__init__(episode_length, render_mode)
        if int(n) != n or n < 1:
            raise ValueError(f"MatchBits: n must be an integer >= 1, got {n!r}")
        self.n = int(n)
        self.observation_space = spaces.MultiBinary(self.n)
        self.action_space = spaces.MultiBinary(self.n)
        self._high = np.full(self.n, 2, dtype=np.int64)
        self._target = np.zeros(self.n, dtype=np.int8)
        self.optimum = float(self.episode_length)
        self.random_return = self.episode_length / 2.0


# Registered on import so that `gym.make("envs.targets:MatchDigits-v0")` works; guarded because
# gymnasium warns when an id is registered twice (a reload, or a second import path).
for _env_id, _cls in ((DIGITS_ID, "MatchDigitsEnv"), (BITS_ID, "MatchBitsEnv")):
    if _env_id not in gym.registry:
        gym.register(id=_env_id, entry_point=f"{__name__}:{_cls}", max_episode_steps=None)
