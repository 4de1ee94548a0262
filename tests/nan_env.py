"""A Gymnasium env that turns its reward into NaN partway through each episode, to inject a
non-finite loss through the real pipeline: `--env tests.nan_env:NanReward-v0`."""

import gymnasium as gym
import numpy as np


class NanRewardEnv(gym.Env):
    """NaN rewards from step 21 of every episode, or with `after` from the env's `after`-th step in all."""

    observation_space = gym.spaces.Box(-1.0, 1.0, (4,), np.float32)
    action_space = gym.spaces.Discrete(2)

    def __init__(self, after: int | None = None):
        self.after, self.lifetime = after, 0

    def reset(self, *, seed=None, options=None):
        super().reset(seed=seed)
        self.t = 0
        return self.np_random.uniform(-0.1, 0.1, 4).astype(np.float32), {}

    def step(self, action):
        self.t += 1
        self.lifetime += 1
        bad = self.lifetime > self.after if self.after is not None else self.t > 20
        reward = float("nan") if bad else 1.0
        obs = self.np_random.uniform(-0.1, 0.1, 4).astype(np.float32)
        return obs, reward, False, self.t >= 50, {}


gym.register(id="NanReward-v0", entry_point=NanRewardEnv)
gym.register(id="NanRewardLate-v0", entry_point=NanRewardEnv, kwargs={"after": 200})  # --num-steps 64: NaN in the 4th iteration


class CrashingEnv(NanRewardEnv):
    """Raises from inside step(), as a buggy env would; its message must reach the user."""

    def step(self, action):
        if self.t >= 30:
            raise RuntimeError("boom: the env broke at step 30")
        return super().step(action)


gym.register(id="Crash-v0", entry_point=CrashingEnv)
