"""Actor: env copies plus a CPU copy of the policy, turning "collect" requests into Trajectories.

A `RolloutWorker` lives in an actor process; the coordinator creates it there with `rpc.remote`
and calls `collect` on it. One call steps all E env copies x N agents together, with one batched
policy forward per step, and returns torch tensors. It knows nothing of FSDP or the learner.
"""

from __future__ import annotations

import time

import torch

from envs import EnvInfo, make_batched
from marl.config import Config
from marl.models import build_model, sample
from marl.trajectory import Trajectory

# A slot in --rollout episodes mode may not need more than this many steps per episode; past
# it, something (an env that never ends) is wrong and the request fails instead of hanging.
_MAX_EPISODE_STEPS = 100_000


class RolloutWorker:
    def __init__(self, cfg: Config, info: EnvInfo, index: int, seed_offset: int = 0):
        """`seed_offset`: a resumed run passes the iteration it resumes at, so that its envs do not
        replay the episodes the run began with."""
        self.cfg, self.info, self.index = cfg, info, index
        self.copies, self.agents = cfg.envs_per_actor, cfg.agents
        self.env = make_batched(info.env_id, cfg.agents, cfg.envs_per_actor)
        self.policy = build_model(info, cfg.hidden_sizes).eval()
        self.version = -1
        # Each actor's envs and sampling get their own stream, all derived from the run's seed.
        seed = cfg.seed * 100_003 + 7_919 * (index + 1) + 1_000_003 * seed_offset
        self.generator = torch.Generator().manual_seed(seed)
        self.obs = torch.from_numpy(self.env.reset(seed=seed)).float()
        shape = (self.copies, self.agents)
        self.reset_next = torch.zeros(shape, dtype=torch.bool)  # slot's next step is an autoreset step
        self.ep_return = torch.zeros(shape, dtype=torch.float64)
        self.ep_length = torch.zeros(shape, dtype=torch.int64)
        self._buffers: dict[str, torch.Tensor] = {}
        self._capacity = 0

    def _grow(self, steps: int) -> None:
        """(Re)allocate the per-step buffers for at least `steps` steps, keeping what they hold."""
        if steps <= self._capacity:
            return
        cap = max(steps, 2 * self._capacity)
        lead = (cap, self.copies, self.agents)
        specs = {
            "obs": ((*lead, *self.info.obs_shape), torch.float32),
            "actions": ((*lead, *self.info.action_shape), self.info.action_dtype),
            "logprobs": (lead, torch.float32), "values": (lead, torch.float32),
            "rewards": (lead, torch.float32), "terminated": (lead, torch.bool),
            "truncated": (lead, torch.bool), "valid": (lead, torch.bool),
        }
        new = {k: torch.empty(shape, dtype=dt) for k, (shape, dt) in specs.items()}
        for k, old in self._buffers.items():
            new[k][: self._capacity] = old
        self._buffers, self._capacity = new, cap

    def collect(self, version: int, state_dict: dict[str, torch.Tensor] | None) -> Trajectory:
        """One rollout with policy `version` (its weights come along only when this actor lacks them)."""
        start = time.perf_counter()
        if state_dict is not None:
            self.policy.load_state_dict(state_dict)
            self.version = version
        if self.version != version:
            raise RuntimeError(f"actor {self.index} holds policy version {self.version}, was asked to act with {version}")
        with torch.inference_mode():
            if self.cfg.rollout == "steps":
                steps, episodes = self._run(self.cfg.num_steps, quota=None)
            else:
                # A fresh start, so that every slot's K episodes are whole.
                self.obs = torch.from_numpy(self.env.reset(seed=None)).float()
                self.reset_next.zero_(), self.ep_return.zero_(), self.ep_length.zero_()
                steps, episodes = self._run(None, quota=self.cfg.episodes_per_request)
            b = {k: v[:steps].clone() for k, v in self._buffers.items()}
            _, next_value = self.policy(self.obs.reshape(-1, self.info.obs_dim))
            next_value = next_value.reshape(self.copies, self.agents)
            # With NEXT_STEP autoreset the value computed on the step after a truncation is V(final obs).
            later = torch.cat([b["values"][1:], next_value.unsqueeze(0)])
            bootstrap = torch.where(b["truncated"], later, 0.0)
        return Trajectory(
            **b, bootstrap_value=bootstrap, next_value=next_value,
            episode_returns=torch.tensor([e[1] for e in episodes], dtype=torch.float64),
            episode_lengths=torch.tensor([e[2] for e in episodes], dtype=torch.int64),
            episode_agents=torch.tensor([e[0] for e in episodes], dtype=torch.int64),
            policy_version=self.version, actor=self.index, collect_seconds=time.perf_counter() - start)

    def _run(self, num_steps: int | None, quota: int | None) -> tuple[int, list[tuple[int, float, int]]]:
        """Step all slots for `num_steps` steps, or until every slot has finished `quota` episodes.

        Returns the number of steps taken and the finished episodes as (agent, return, length).
        """
        buf_steps = num_steps or 256
        self._grow(buf_steps)
        finished: list[tuple[int, float, int]] = []
        done_count = torch.zeros((self.copies, self.agents), dtype=torch.int64)
        n, kind = self.copies * self.agents, self.info.action_kind
        t = 0
        while True:
            if num_steps is not None and t == num_steps:
                return t, finished
            if quota is not None:
                if bool((done_count >= quota).all()):
                    return t, finished
                if t >= _MAX_EPISODE_STEPS * quota:
                    raise RuntimeError(f"{self.info.env_id}: episodes did not end within {_MAX_EPISODE_STEPS} steps")
            self._grow(t + 1)
            B = self._buffers
            pd, value = self.policy(self.obs.reshape(n, self.info.obs_dim))
            action, logprob = sample(pd, kind, self.generator)
            action = action.reshape(self.copies, self.agents, *self.info.action_shape)
            obs, rew, term, trunc = self.env.step(action.numpy())
            valid = ~self.reset_next
            if quota is not None:
                valid &= done_count < quota
            B["obs"][t] = self.obs
            B["actions"][t] = action
            B["logprobs"][t] = logprob.reshape(self.copies, self.agents)
            B["values"][t] = value.reshape(self.copies, self.agents)
            B["rewards"][t] = torch.from_numpy(rew)
            term, trunc = torch.from_numpy(term) & valid, torch.from_numpy(trunc) & valid
            B["terminated"][t], B["truncated"][t], B["valid"][t] = term, trunc, valid
            self.ep_return += B["rewards"][t] * valid
            self.ep_length += valid
            done = term | trunc
            if bool(done.any()):
                idx = done.nonzero()
                for (c, a), ret, length in zip(idx.tolist(), self.ep_return[done].tolist(), self.ep_length[done].tolist()):
                    finished.append((a, ret, length))
                self.ep_return[done] = 0.0
                self.ep_length[done] = 0
                done_count += done
            # A slot's env resets on the step after it reports done (Gymnasium's NEXT_STEP autoreset).
            # (Masking by `valid` changes nothing that matters: a reset step reports no flags, and a
            # slot past its episode quota stays invalid until the next request resets every env.)
            self.reset_next = done
            self.obs = torch.from_numpy(obs).float()
            t += 1
