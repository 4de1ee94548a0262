"""A Gymnasium env that turns its reward into NaN partway through each episode, to inject a
non-finite loss through the real pipeline: `--env tests.nan_env:NanReward-v0`."""

import gymnasium as gym
import numpy as np


class NanRewardEnv(gym.Env):
    observation_space = gym.spaces.Box(-1.0, 1.0, (4,), np.float32)
    action_space = gym.spaces.Discrete(2)

    def reset(self, *, seed=None, options=None):
        super().reset(seed=seed)
        self.t = 0
        return self.np_random.uniform(-0.1, 0.1, 4).astype(np.float32), {}

    def step(self, action):
        self.t += 1
        reward = float("nan") if self.t > 20 else 1.0
        obs = self.np_random.uniform(-0.1, 0.1, 4).astype(np.float32)
        return obs, reward, False, self.t >= 50, {}


gym.register(id="NanReward-v0", entry_point=NanRewardEnv)


class CrashingEnv(NanRewardEnv):
    """Raises from inside step(), as a buggy env would; its message must reach the user."""

    def step(self, action):
        if self.t >= 30:
            raise RuntimeError("boom: the env broke at step 30")
        return super().step(action)


gym.register(id="Crash-v0", entry_point=CrashingEnv)
