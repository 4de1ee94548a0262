"""Actor: env copies plus a CPU copy of the policies, turning "collect" requests into Rollouts.

A `RolloutWorker` lives in an actor process; the coordinator creates it there with `rpc.remote`
and calls `collect` on it. One call steps all E env copies x N agents together (marl.runner's
EnvRunner), with one batched forward per policy per step, and returns torch tensors. It knows
nothing of FSDP or the learner.
"""

from __future__ import annotations

import time

import torch

from envs import EnvInfo, make_agent_batch
from marl.algorithms import ALGORITHMS
from marl.config import Config
from marl.devices import actor_device
from marl.models import build_model, network_of
from marl.policies import sides, specs_of
from marl.recorders import ReturnsRecorder, TrajectoryRecorder
from marl.runner import EnvRunner
from marl.sources import PolicySource, SeatSource, SnapshotSource
from marl.specs import tree_map
from marl.trajectory import Rollout


class RolloutWorker:
    def __init__(self, cfg: Config, info: EnvInfo, index: int, seed_offset: int = 0):
        """`seed_offset`: a resumed run passes the iteration it resumes at, so that its envs do not
        replay the episodes the run began with."""
        self.cfg, self.info, self.index = cfg, info, index
        self.copies = cfg.envs_per_actor
        self.specs = specs_of(cfg, info)
        # The CPU, or where a batched torch env steps on this actor's GPU: env, policy and buffers together.
        self.device = actor_device(info)
        # The env packs each policy's agents into arrays of their own: one forward per policy per step.
        env = make_agent_batch(info, cfg.envs_per_actor, [list(s.agents) for s in self.specs], self.device)
        self.runner = EnvRunner(env, self.specs, self.copies, any(s.central for s in self.specs), info.env_id,
                                 info.turn_based)
        self.policy = build_model(self.specs, network_of(cfg)).eval().to(self.device)
        self.after = ALGORITHMS[cfg.algo].wants_after(cfg)
        self.version = -1
        # Each actor's envs and sampling get their own stream, all derived from the run's seed.
        seed = cfg.seed * 100_003 + 7_919 * (index + 1) + 1_000_003 * seed_offset
        self.generator = torch.Generator(self.device).manual_seed(seed)
        self.source = PolicySource(self.policy, self.specs, self.copies, self.generator)
        self.recorder = TrajectoryRecorder(self.specs, self.copies, self.source.state_sizes, cfg.seq_len,
                                           cfg.norm_reward, cfg.gamma, self.device)
        # --opponents pool: the frozen snapshots this actor holds, the one it plays this request, and
        # per env copy the side (marl.policies.sides) that snapshot plays in the current game (-1: none).
        self.snapshots: dict[int, dict] = {}
        self.opponent_id: int | None = None
        if cfg.opponents == "pool":
            with torch.random.fork_rng(devices=[]):  # its weights come from the pool: leave the global stream alone
                frozen = build_model(self.specs, network_of(cfg)).eval().to(self.device)
            self.frozen = SnapshotSource(frozen, self.specs, self.copies, self.generator)
            self.versus = SeatSource(self.source, self.frozen, self._frozen)
        self.frozen_side = torch.full((self.copies,), -1, dtype=torch.int64, device=self.device)
        # Per policy, [sides + 1, its agents]: which of them each side holds; the last row (side -1) holds
        # none. Sliced per policy once here, since _frozen reads it twice a step.
        teams = sides(self.specs, info.agent_ids)
        members = torch.zeros((len(teams) + 1, len(info.agent_ids)), dtype=torch.bool, device=self.device)
        for k, (_, agents) in enumerate(teams):
            members[k, list(agents)] = True
        self._members = [members[:, list(s.agents)] for s in self.specs]
        self._sides = len(teams)
        self._reset(seed)

    @property
    def env(self):
        return self.runner.env

    @property
    def obs(self) -> list[dict[str, torch.Tensor]]:
        return self.runner.obs

    def _draw_opponents(self, copies: torch.Tensor) -> None:
        """For each env copy in `copies` (bool [copies]) starting a game: with probability --pool-prob,
        the side the snapshot plays in it, uniformly among the sides; else none."""
        if self.opponent_id is None:
            self.frozen_side[copies] = -1
            return
        draw = torch.rand(self.copies, generator=self.generator, device=self.device) < self.cfg.pool_prob
        side = torch.randint(self._sides, (self.copies,), generator=self.generator, device=self.device)
        self.frozen_side = torch.where(copies, torch.where(draw, side, -1), self.frozen_side)

    def _frozen(self, g: int) -> torch.Tensor:
        """[copies, agents of policy g]: the slots a snapshot plays in the current games."""
        return self._members[g][self.frozen_side]

    def _reset(self, seed: int | None) -> None:
        """Every env copy starts a new episode: no recurrent state, no discounted return carried over.
        (New weights keep the states, as Sample Factory and CleanRL do.)"""
        self.runner.reset(seed)
        self._draw_opponents(torch.ones(self.copies, dtype=torch.bool, device=self.device))
        self.source.reset()
        self.recorder.reset()

    def collect(self, version: int, state_dict: dict[str, torch.Tensor] | None,
                opponent: tuple[int, dict | None, list[int]] | None = None) -> Rollout:
        """One rollout with policy `version` (its weights come along only when this actor lacks them).
        `opponent` (--opponents pool): (snapshot id, its weights unless this actor holds them, the
        ids the pool still has) of the snapshot that plays a seat in some of this request's games."""
        start = time.perf_counter()
        if state_dict is not None:
            self.policy.load_state_dict(state_dict)
            self.version = version
        if self.version != version:
            raise RuntimeError(f"actor {self.index} holds policy version {self.version}, was asked to act with {version}")
        self.opponent_id = None
        if opponent is not None:
            snap, weights, keep = opponent
            if weights is not None:
                self.snapshots[snap] = weights
            self.snapshots = {k: v for k, v in self.snapshots.items() if k in keep}
            self.frozen.load(self.snapshots[snap])
            self.opponent_id = snap
        # A request without an opponent plays no frozen seat: the plain policy, no seat lookups.
        source, foreign, new_games = ((self.versus, self._frozen, self._draw_opponents) if self.opponent_id is not None
                                      else (self.source, None, None))
        returns = ReturnsRecorder(self.specs)
        recorders = [self.recorder, returns]
        run = self.runner
        with torch.inference_mode():
            if self.cfg.rollout != "episodes":  # "auto" resolves in run.prepare; a Config built by hand means steps
                self.recorder.begin(self.cfg.num_steps)
                steps = run.run(source, recorders, num_steps=self.cfg.num_steps, foreign=foreign, new_games=new_games)
            else:
                self._reset(None)  # a fresh start, so that every slot's K episodes are whole
                self.recorder.begin(256)
                steps = run.run(source, recorders, quota=self.cfg.episodes_per_request, foreign=foreign,
                                new_games=new_games)
            state = run.state()
            trajectories = {}
            for g, spec in enumerate(self.specs):
                # The state after it is not kept: the next request redoes this step.
                _, next_value, critic, _ = self.source.forward(g, run.obs[g], run.masks[g], run.fresh[g], state)
                trajectories[spec.name] = traj = self.recorder.trajectory(g, steps, next_value)
                if self.after:  # the learner bootstraps from the observations after the last step
                    traj["after"] = {"obs": {k: v.clone() for k, v in run.obs[g].items()}}
                    if spec.mask:
                        traj["after"]["action_mask"] = run.masks[g].clone()
                    if spec.central:
                        traj["after"]["state"] = critic.clone()
        if self.device.type != "cpu":  # RPC carries CPU tensors; the learner moves them to its own device
            trajectories = tree_map(lambda v: v.cpu(), trajectories)
        episodes = returns.finished
        return Rollout(
            trajectories,
            episode_returns=torch.tensor([e[1] for e in episodes], dtype=torch.float64),
            episode_lengths=torch.tensor([e[2] for e in episodes], dtype=torch.int64),
            episode_agents=torch.tensor([e[0] for e in episodes], dtype=torch.int64),
            policy_version=self.version, actor=self.index, collect_seconds=time.perf_counter() - start)
