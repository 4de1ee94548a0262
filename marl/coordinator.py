"""Coordinator: the synchronous PPO loop (collect -> learn -> publish), run in learner rank 0.

It is the only code that talks to actors. Each iteration it asks every actor for a rollout at
once (`rpc_async`), gathers them with the RPC timeout, computes advantages, hands the batch to
the learner group, and publishes the new weights with the next request, to the actors that
don't hold them yet.
"""

from __future__ import annotations

import collections
import time
from dataclasses import dataclass

import torch
import torch.distributed.rpc as rpc

from envs import EnvInfo
from marl.actor import RolloutWorker
from marl.algorithms import gae
from marl.config import Config
from marl.learner import LearnerGroup
from marl.logging import RunLogger
from marl.trajectory import Trajectory, flatten_valid

WINDOW = 100  # episodes in the "mean return" that decides when a run is solved (Gymnasium's convention)


@dataclass
class Result:
    reason: str  # "target" or "budget"
    global_step: int
    iterations: int
    seconds: float
    mean_return: float | None


def build_batch(trajs: list[Trajectory], cfg: Config) -> dict[str, torch.Tensor]:
    """GAE per trajectory, then the valid samples of all of them, advantages normalised over the batch.

    Normalising over the whole batch (not per minibatch, as CleanRL does) keeps the update the
    same however many learner ranks the batch is split over.
    """
    parts = []
    for tr in trajs:
        adv, ret = gae(tr.rewards, tr.values, tr.next_value, tr.terminated, tr.truncated,
                       tr.bootstrap_value, cfg.gamma, cfg.gae_lambda)
        parts.append(flatten_valid(tr, adv, ret))
    batch = {k: torch.cat([p[k] for p in parts]) for k in parts[0]}
    if cfg.norm_adv:
        a = batch["advantages"]
        batch["advantages"] = (a - a.mean()) / (a.std() + 1e-8)
    return batch


def explained_variance(values: torch.Tensor, returns: torch.Tensor) -> float:
    var = returns.var()
    return float("nan") if var == 0 else float(1 - (returns - values).var() / var)


class ActorPool:
    """The actors as the coordinator sees them: RRefs to RolloutWorkers and the policy version each holds."""

    def __init__(self, cfg: Config, info: EnvInfo):
        self.cfg = cfg
        self.actors = [rpc.remote(f"actor{i}", RolloutWorker, args=(cfg, info, i)) for i in range(cfg.actors)]
        self.held = [-1] * cfg.actors

    def collect(self, version: int, weights: dict[str, torch.Tensor]) -> list[Trajectory]:
        """One rollout from every actor, all requested at once; weights go only to actors that lack `version`."""
        futures = [a.rpc_async(timeout=self.cfg.rpc_timeout).collect(version, weights if self.held[i] != version else None)
                   for i, a in enumerate(self.actors)]
        trajs = torch.futures.wait_all(futures)
        self.held = [version] * len(self.actors)
        return trajs


class Coordinator:
    def __init__(self, cfg: Config, info: EnvInfo, learners: LearnerGroup, logger: RunLogger):
        self.cfg, self.info, self.learners, self.log = cfg, info, learners, logger

    def run(self) -> Result:
        cfg, log = self.cfg, self.log
        start = time.perf_counter()
        actors = ActorPool(cfg, self.info)
        weights, version = self.learners.gather(), 0
        recent: collections.deque[float] = collections.deque(maxlen=WINDOW)
        global_step, iteration = 0, 0
        log.print(f"marl: {cfg.env} x {cfg.agents} agents | {cfg.actors} actors x {cfg.envs_per_actor} env copies | "
                  f"{cfg.learners} learner(s) | seed {cfg.seed} | logs in {log.run_dir}")
        while True:
            iteration += 1
            t0 = time.perf_counter()
            trajs = actors.collect(version, weights)
            t1 = time.perf_counter()
            batch = build_batch(trajs, cfg)
            steps = sum(tr.steps for tr in trajs)
            frac = max(1.0 - global_step / cfg.total_steps, 0.0) if cfg.anneal_lr else 1.0
            lr = cfg.learning_rate * max(frac, 1e-3)
            metrics, used = self.learners.update(batch, lr)
            t2 = time.perf_counter()
            weights, version = self.learners.gather(), version + 1
            t3 = time.perf_counter()
            global_step += steps

            returns = torch.cat([tr.episode_returns for tr in trajs])
            recent.extend(returns.tolist())
            log.episodes(returns, torch.cat([tr.episode_lengths for tr in trajs]),
                         torch.cat([tr.episode_agents for tr in trajs]), global_step)
            elapsed = t3 - start
            sps = global_step / elapsed
            log.scalars({
                **{f"losses/{k}": v for k, v in metrics.items() if k != "grad_norm"},
                "losses/explained_variance": explained_variance(batch["values"], batch["returns"]),
                "losses/grad_norm": metrics["grad_norm"],
                "charts/learning_rate": lr,
                "charts/SPS": sps,
                "perf/collect_seconds": t1 - t0,
                "perf/actor_busy_seconds": max(tr.collect_seconds for tr in trajs),
                "perf/learn_seconds": t2 - t1,
                "perf/publish_seconds": t3 - t2,
                "perf/samples_per_update": used,
            }, global_step)
            mean = sum(recent) / len(recent) if recent else None
            mean_text = f"{mean:7.1f}" if mean is not None else "    n/a"
            log.print(f"iter {iteration:4d} | step {global_step:>10,} | {sps:>9,.0f} steps/s | "
                      f"return {mean_text} (last {len(recent)}) | {elapsed:6.1f}s")
            reason = None
            if cfg.target_return is not None and len(recent) == WINDOW and mean >= cfg.target_return:
                reason = "target"
            elif global_step >= cfg.total_steps:
                reason = "budget"
            if reason:
                return Result(reason, global_step, iteration, time.perf_counter() - start, mean)
