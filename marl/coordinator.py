"""Coordinator: the training loop (collect -> learn -> publish, in turn or overlapped), run in learner rank 0.

It is the only code that talks to actors. Each iteration it asks every actor for a rollout at
once (`rpc_async`), gathers them with the RPC timeout, hands the raw trajectories to the learner
group (each learner rank computes its own targets), logs, and publishes the new weights with the
next request, to the actors that don't hold them yet. It computes no targets. With --mode
pipelined the next request goes out as soon as a rollout arrives, with the weights its update
starts from (one version behind, every time); with --mode async a RolloutStream keeps actors busy.
"""

from __future__ import annotations

import collections
import queue
import threading
import time
from pathlib import Path
from typing import Callable

import torch
import torch.distributed.rpc as rpc

from envs import EnvInfo
from marl import checkpoint, result
from marl.actor import RolloutWorker
from marl.config import Config
from marl.control import HEAL_EXIT, RunControl, StartupClock
from marl.errors import AllActorsLost, NonFiniteError
from marl.learner import Learner, LearnerGroup
from marl.logging import RunLogger, format_return
from marl.opponents import OpponentPool
from marl.policy_file import export_policy
from marl.result import WINDOW, Result
from marl.trajectory import Rollout


# Metrics that are a schedule's value, not a loss's: CleanRL's charts/ tags.
CHARTS = ("learning_rate", "epsilon", "replay_size")


class Heal(Exception):
    """An actor failed and the world may be started again: the message says which and why."""


class ActorPool:
    """The actors as the coordinator sees them: RRefs to RolloutWorkers, the policy version each
    holds, and which are still alive. An actor whose request fails (its process died, its env
    raised, or it did not answer within --rpc-timeout) raises Heal while `heal` is set; otherwise
    it is dropped and the run goes on degraded."""

    def __init__(self, cfg: Config, info: EnvInfo, log: Callable[[str], None] = print, seed_offset: int = 0,
                 heal: bool = False, opponents: OpponentPool | None = None):
        """`seed_offset` gives a resumed run's actors env seeds of their own (the iteration it resumes at).
        `opponents`: the pool each request draws a frozen snapshot from (--opponents pool)."""
        self.cfg, self.log, self.heal = cfg, log, heal
        self.actors = [rpc.remote(f"actor{i}", RolloutWorker, args=(cfg, info, i, seed_offset)) for i in range(cfg.actors)]
        self.held = [-1] * cfg.actors
        self.alive = [True] * cfg.actors
        self.opponents = opponents
        self.held_snapshots: list[set[int]] = [set() for _ in range(cfg.actors)]

    @property
    def live(self) -> int:
        return sum(self.alive)

    def lose(self, i: int, error: BaseException) -> None:
        """Drop actor i, say why, and fail the run if it was the last one."""
        self.alive[i] = False
        lines = [line for line in str(error).splitlines() if line.strip()] or [type(error).__name__]
        # An exception raised in the actor arrives as "On WorkerInfo(...):", its repr, its traceback.
        why = lines[1] if "On WorkerInfo" in lines[0] and len(lines) > 1 else lines[0]
        if self.heal:
            raise Heal(f"actor {i} failed: {why}")
        # No replacement within a world: torch RPC's world is fixed when it starts.
        self.log(f"marl: actor {i} failed and is dropped ({self.live} of {len(self.actors)} left, running degraded): {why}")
        if not self.live:
            raise AllActorsLost(f"all {len(self.actors)} actors failed; the last one: {why}")

    def request(self, i: int, version: int, weights: dict[str, torch.Tensor]) -> torch.futures.Future:
        """Ask actor i for a rollout with policy `version`; the weights travel only if it lacks that version.
        (A request that fails drops the actor, so counting it as holding the version is safe.)"""
        send = weights if self.held[i] != version else None
        self.held[i] = version
        opponent = None
        # --pool-prob 0 keeps the snapshots (to measure against later) but plays none: self-play as without a pool.
        if self.opponents is not None and self.opponents.snapshots and self.cfg.pool_prob > 0:
            snap, frozen = self.opponents.draw()
            keep = self.opponents.ids
            opponent = (snap, None if snap in self.held_snapshots[i] else frozen, keep)
            self.held_snapshots[i] = {k for k in self.held_snapshots[i] if k in keep} | {snap}
        return self.actors[i].rpc_async(timeout=self.cfg.rpc_timeout).collect(version, send, opponent)

    def collect(self, version: int, weights: dict[str, torch.Tensor]) -> list[Rollout]:
        """One rollout from every live actor, all requested at once."""
        return self.finish(self.start(version, weights))

    def start(self, version: int, weights: dict[str, torch.Tensor]) -> dict[int, torch.futures.Future]:
        """Ask every live actor for a rollout with policy `version`; `finish` gathers them."""
        return {i: self.request(i, version, weights) for i in range(len(self.actors)) if self.alive[i]}

    def finish(self, futures: dict[int, torch.futures.Future]) -> list[Rollout]:
        """The rollouts `start` asked for, in actor order; a failed actor is lost on the way (`lose`)."""
        rollouts = []
        for i, future in futures.items():
            try:
                rollouts.append(future.wait())
            except Exception as e:  # noqa: BLE001 - whatever the actor's failure, the run goes on without it
                self.lose(i, e)
        return rollouts


class RolloutStream:
    """Asynchronous collection: actors keep collecting while the learner trains.

    Each actor has at most one request in flight and `--async-ahead` (default 1) finished rollouts
    waiting for the learner: as soon as a rollout arrives and the actor has no more than that
    waiting, the actor is asked for the next one (from the RPC callback thread, with the newest
    weights published so far, sent only if it lacks them). The bound keeps policy lag at a version
    or two by default; without it, actors outrun the learner and the queue fills with ever staler
    data (raise it to study what V-trace corrects).
    """

    def __init__(self, pool: ActorPool, version: int, weights: dict[str, torch.Tensor]):
        self.pool, self.latest = pool, (version, weights)
        self.ahead = pool.cfg.async_ahead
        self.arrived: queue.Queue = queue.Queue()
        self.lock = threading.RLock()  # a callback may run inline in the thread that holds it
        n = len(pool.actors)
        self.waiting, self.in_flight = [0] * n, [False] * n
        self.stopping = False
        self.failed: set[int] = set()
        self.pending: dict[int, torch.futures.Future] = {}
        with self.lock:
            for i in range(n):
                self._request(i)

    def publish(self, version: int, weights: dict[str, torch.Tensor]) -> None:
        self.latest = (version, weights)  # one reference swap: callback threads see old or new, never half

    def _request(self, i: int) -> None:  # with self.lock held
        self.in_flight[i] = True
        future = self.pool.request(i, *self.latest)
        self.pending[i] = future
        future.add_done_callback(lambda f, i=i: self._arrived(i, f))

    def _arrived(self, i: int, future: torch.futures.Future) -> None:
        try:
            future.value()
            ok = True
        except Exception:
            ok = False  # next() reports it; a failed actor is not asked again
        with self.lock:
            if not ok:
                self.failed.add(i)
            self.in_flight[i] = False
            self.waiting[i] += 1
            self.arrived.put((i, future))
            if ok and not self.stopping and self.waiting[i] <= self.ahead:
                self._request(i)

    def next(self) -> Rollout:
        """The next rollout to arrive from any live actor; a failed actor is dropped on the way."""
        while True:
            i, future = self.arrived.get(timeout=self.pool.cfg.rpc_timeout + 30)
            with self.lock:
                self.waiting[i] -= 1
            try:
                traj = future.value()
            except Exception as e:  # noqa: BLE001 - as in ActorPool.collect
                self.pool.lose(i, e)
                continue
            with self.lock:
                if not self.in_flight[i] and not self.stopping and i not in self.failed:
                    self._request(i)
            return traj

    def close(self) -> None:
        """Stop asking, and let the requests in flight finish so that shutdown finds no RPC pending."""
        with self.lock:
            self.stopping = True
        drain(self.pending)


def drain(futures: dict[int, torch.futures.Future]) -> None:
    """Let requests in flight finish, so that shutdown finds no RPC pending."""
    for future in list(futures.values()):
        try:
            future.wait()
        except Exception:  # noqa: BLE001
            pass  # a failed request has already been reported, or the run is ending anyway


class Coordinator:
    def __init__(self, cfg: Config, info: EnvInfo, learners: LearnerGroup, logger: RunLogger, clock: StartupClock,
                 check_stop: Callable[[], None] = lambda: None, restarts: tuple[int, int] = (0, 0)):
        """`check_stop` raises if the run was asked to stop (a signal); it is called between iterations.
        `restarts`: (worlds started again so far, at most): while some are left, a failed actor heals the run."""
        self.cfg, self.info, self.learners, self.log, self.clock = cfg, info, learners, logger, clock
        self.check_stop = check_stop
        self.restarts, self.restarts_allowed = restarts
        self.weights: dict[str, torch.Tensor] | None = None
        self.playing = None  # --eval-every's and --video-every's copy of the policy, built on first use
        self.snapshot_model = None

    def run(self, resume: dict | None = None) -> Result:
        """Train until the target or the budget; `resume` is a checkpoint's trainer state to continue from."""
        cfg, log = self.cfg, self.log
        self.clock.mark("learner")
        start = time.perf_counter()
        self.opponents = OpponentPool(cfg.pool_size, cfg.seed, cfg.pool_keep) if cfg.opponents == "pool" else None
        actors = self.actors = ActorPool(cfg, self.info, self.log.print, seed_offset=resume["iteration"] if resume else 0,
                                         heal=self.restarts < self.restarts_allowed, opponents=self.opponents)
        self.weights = self.learners.gather()
        if self.opponents is not None:
            if resume is not None and "opponents" in resume:
                self.opponents.load_state_dict(resume["opponents"])
            elif resume is None:
                self.opponents.add(0, self.weights)  # the first opponent: the initial weights
        self.recent: collections.deque[float] = collections.deque(maxlen=WINDOW)
        self.iteration = self.global_step = self.version = self.saved = 0
        self.start, self.seconds_before = start, 0.0  # wall time of the run's earlier worlds, if any
        if resume is not None:
            self.iteration, self.global_step, self.version = resume["iteration"], resume["global_step"], resume["version"]
            self.seconds_before = float(resume.get("seconds", 0.0))  # checkpoints before marl 0.x have none
            self.recent.extend(resume["recent"].tolist())
            self.saved = self.iteration
        self.start_step = self.global_step
        policies = ", ".join(f"{s.name} ({len(s.agents)})" for s in self.learners.learner.specs)
        log.print(f"marl: {cfg.env} x {cfg.agents} agents | policies {policies}, {cfg.critic} critic | {cfg.actors} actors "
                  f"x {cfg.envs_per_actor} env copies | {cfg.learners} learner(s) | seed {cfg.seed} | logs in {log.run_dir}")
        if resume is not None:
            log.print(f"resumed from {cfg.resume}: iteration {self.iteration}, step {self.global_step:,}, "
                      f"saved by {resume['learners']} learner(s)")
        stream = RolloutStream(actors, self.version, self.weights) if cfg.mode == "async" else None
        pending = None  # --mode pipelined: the next rollout, asked for before this one's update
        try:
            while True:
                try:
                    self.check_stop()
                except BaseException:
                    self.save_final()  # Ctrl-C or SIGTERM at an iteration boundary
                    newest = checkpoint.latest(cfg.run_dir)
                    if newest is not None:
                        log.print(f"marl: stopped at iteration {self.iteration}; checkpoint {newest}; "
                                  f"go on with: python train.py --resume {cfg.run_dir}")
                    raise
                t0 = time.perf_counter()
                try:
                    if pending is not None:
                        rollouts = actors.finish(pending)
                        pending = None
                    elif stream is None:
                        rollouts = actors.collect(self.version, self.weights)
                    else:
                        rollouts = [stream.next() for _ in range(actors.live)]
                except Heal as e:
                    return self._heal(start, str(e))
                except AllActorsLost:
                    self.save_final()  # the learner is fine; a resume with working actors goes on from here
                    raise
                t1 = time.perf_counter()
                if self.global_step == self.start_step:
                    self._startup()
                self.iteration += 1
                lag = sum(self.version - r.policy_version for r in rollouts) / len(rollouts)
                steps = sum(r.steps for r in rollouts)
                if cfg.mode == "pipelined" and self.global_step + steps < cfg.total_steps:
                    # Collected with the weights this update starts from, while it runs: a lag of exactly one.
                    pending = actors.start(self.version, self.weights)
                try:
                    metrics, used = self.learners.update([r.trajectories for r in rollouts], self.global_step)
                except NonFiniteError as e:
                    # No checkpoint: the last one written holds the last good weights.
                    raise NonFiniteError(f"iteration {self.iteration} (step {self.global_step:,}): {e}") from None
                t2 = time.perf_counter()
                # The last good weights, whatever stops the run later (exported to policy.pt).
                self.weights, self.version = self.learners.gather(), self.version + 1
                if stream is not None:
                    stream.publish(self.version, self.weights)
                t3 = time.perf_counter()
                self.global_step += steps
                finished = self._log(start, rollouts, metrics, used, lag, (t0, t1, t2, t3))
                if self.opponents is not None and self.iteration % cfg.snapshot_every == 0:
                    self.opponents.add(self.iteration, self.weights)
                if cfg.eval_every and self.iteration % cfg.eval_every == 0:
                    self._evaluate()
                if cfg.video_every and self.iteration % cfg.video_every == 0:
                    self._video()
                if finished is not None or (cfg.checkpoint_every and self.iteration % cfg.checkpoint_every == 0):
                    self.save()
                if finished is not None:
                    return finished
        finally:
            if pending is not None:
                drain(pending)  # shutdown must find no RPC in flight
            if stream is not None:
                stream.close()

    def _newest_policy(self):
        """A copy of the policy with the newest weights, on rank 0, for --eval-every and --video-every."""
        from marl.models import build_model, network_of

        if self.playing is None:
            with torch.random.fork_rng(devices=[]):  # its initial weights are overwritten: leave the run's RNG as it was
                self.playing = build_model(self.learners.learner.specs, network_of(self.cfg)).eval()
        self.playing.load_state_dict(self.weights)
        return self.playing

    def _snapshot_model(self):
        """A second copy of the networks, for a frozen snapshot's weights (--opponents pool's eval)."""
        from marl.models import build_model, network_of

        if self.snapshot_model is None:
            with torch.random.fork_rng(devices=[]):
                self.snapshot_model = build_model(self.learners.learner.specs, network_of(self.cfg)).eval()
        return self.snapshot_model

    def _evaluate(self) -> None:
        """--eval-every: the newest weights' most likely actions, against random legal moves in a
        turn-based game (each seat in turn), else on their own."""
        from marl.evaluate import play, policy_actor, random_actor, versus_snapshots, versus_table

        t = time.perf_counter()
        model, specs, cfg = self._newest_policy(), self.learners.learner.specs, self.cfg
        seed = 1_000_003 + cfg.seed * 7_919 + self.iteration  # never the training envs' seeds
        if self.info.turn_based:
            table = versus_table(self.info, specs, lambda: policy_actor(model, specs, seed, False),
                                 random_actor(seed + 1, specs), cfg.eval_episodes, seed)
            values = rate_scalars(table, "random")
            if self.opponents is not None:
                table = versus_snapshots(self.info, specs, lambda: policy_actor(model, specs, seed, False),
                                         [w for _, _, w in self.opponents.snapshots], self._snapshot_model(),
                                         cfg.eval_episodes, seed)
                values.update(rate_scalars(table, "pool"))
        else:
            returns = play(self.info, specs, policy_actor(model, specs, seed, False), cfg.eval_episodes, seed)[0]
            everyone = [x for r in returns.values() for x in r]
            values = {"eval/episodic_return": sum(everyone) / len(everyone)}
        self.log.scalars({**values, "perf/eval_seconds": time.perf_counter() - t}, self.global_step)

    def _video(self) -> None:
        """--video-every: one episode with the newest weights (most likely actions), filmed on rank 0."""
        from marl.evaluate import play, policy_actor

        t = time.perf_counter()
        model, specs = self._newest_policy(), self.learners.learner.specs
        seed = self.cfg.seed + self.iteration
        _, episodes = play(self.info, specs, policy_actor(model, specs, seed, False), 1, seed, video=True,
                           film_only=True)
        self.log.video(episodes[0], self.iteration, self.global_step)
        self.log.scalars({"perf/video_seconds": time.perf_counter() - t}, self.global_step)

    def wall_seconds(self) -> float:
        """The run's wall time from its first start: every earlier world's (healed or resumed) and this one's."""
        return self.seconds_before + time.perf_counter() - self.start

    def _heal(self, start: float, why: str) -> Result:
        """Checkpoint the last finished iteration and end this world, to be started again at full
        strength from it; the iteration in flight is dropped with every episode it was playing."""
        wrote = self.iteration != self.saved
        self.save()
        self.restarts += 1
        self.log.scalars({"perf/restarts": self.restarts, "perf/episodes_lost": self.episodes_lost()}, self.global_step)
        where = (f"checkpoint of iteration {self.iteration} written" if wrote else
                 f"its checkpoint of iteration {self.iteration} is current" if self.iteration else "no iteration done yet")
        self.log.print(f"marl: healing (restart {self.restarts} of {self.restarts_allowed}): {why}; {where}; "
                       f"starting every process again")
        return self._result("heal", start, None)

    def episodes_lost(self) -> int:
        """Episodes cut short by this run's restarts: each one drops the iteration in flight, and with
        it the episode every agent slot of every actor was playing (with --rollout episodes, the
        --episodes-per-request episodes it was playing for that request)."""
        cfg = self.cfg
        per_slot = cfg.episodes_per_request if cfg.rollout == "episodes" else 1
        return self.restarts * cfg.actors * cfg.envs_per_actor * len(self.info.agent_ids) * per_slot

    def save_final(self) -> None:
        """The checkpoint of a run that is stopping for another reason: a failure to write it is
        reported, and the reason the run stops stays the one it exits with."""
        try:
            self.save()
        except Exception as e:  # noqa: BLE001 - whatever went wrong, the stop in progress goes on
            self.log.print(f"marl: the final checkpoint could not be written: {type(e).__name__}: {e}")

    def save(self) -> None:
        """Checkpoint the last finished iteration, unless it is already saved."""
        if self.iteration == self.saved:
            return
        t = time.perf_counter()
        self.learners.save(self.iteration, {
            "iteration": self.iteration, "global_step": self.global_step, "version": self.version,
            "recent": torch.tensor(list(self.recent), dtype=torch.float64), "seconds": self.wall_seconds(),
            **({"opponents": self.opponents.state_dict()} if self.opponents is not None else {})})
        self.saved = self.iteration
        self.log.scalars({"perf/checkpoint_seconds": time.perf_counter() - t}, self.global_step)

    def _startup(self) -> None:
        self.clock.mark("actors_and_first_rollout")
        parts = self.clock.parts()
        origin = self.clock.command if self.clock.command is not None else self.clock.launch
        total = self.clock.marks["actors_and_first_rollout"] - origin
        self.log.scalars({"perf/startup_seconds": total, **{f"perf/startup_{k}_seconds": v for k, v in parts.items()}},
                         self.global_step)  # step 0, or where a resumed run starts
        self.log.print(f"start-up: {total:.2f}s from the command to the first rollout ("
                       + " | ".join(f"{k.replace('_', ' ')} {v:.2f}s" for k, v in parts.items()) + ")")

    def _log(self, start, rollouts, metrics, used, lag, times) -> Result | None:
        """Log one iteration; return the Result if the run should stop."""
        cfg, log, recent = self.cfg, self.log, self.recent
        iteration, global_step = self.iteration, self.global_step
        t0, t1, t2, t3 = times
        returns = torch.cat([tr.episode_returns for tr in rollouts])
        recent.extend(returns.tolist())
        log.episodes(returns, torch.cat([tr.episode_lengths for tr in rollouts]),
                     torch.cat([tr.episode_agents for tr in rollouts]), global_step)
        elapsed = t3 - start
        sps = (global_step - self.start_step) / elapsed
        busy = max(tr.collect_seconds for tr in rollouts)
        # Sync: the learner waits while actors compute; what it waits beyond that is RPC, transfer
        # and dispatch. Pipelined and async: actors compute while the learner trains, so every wait is idle.
        idle = max(t1 - t0 - busy, 0.0) if cfg.mode == "sync" else t1 - t0
        log.scalars({
            **{f"{'charts' if k in CHARTS else 'losses'}/{k}": v for k, v in metrics.items()},
            "charts/SPS": sps,
            "perf/collect_seconds": t1 - t0,
            "perf/actor_busy_seconds": busy,
            "perf/learn_seconds": t2 - t1,
            "perf/publish_seconds": t3 - t2,
            "perf/idle_seconds": idle,
            "perf/coordinator_overhead": (idle + t3 - t2) / (t3 - t0),
            "perf/policy_lag": lag,
            "perf/live_actors": self.actors.live,
            "perf/restarts": self.restarts,
            "perf/episodes_lost": self.episodes_lost(),
            "perf/samples_per_update": used,
        }, global_step)
        mean = sum(recent) / len(recent) if recent else None
        log.progress(iteration, global_step, sps, mean, len(recent), elapsed)
        if cfg.target_return is not None and len(recent) == WINDOW and mean >= cfg.target_return:
            return self._result("target", start, mean)
        if global_step >= cfg.total_steps:
            return self._result("budget", start, mean)
        return None

    def _result(self, reason: str, start: float, mean: float | None) -> Result:
        return Result(reason=reason, global_step=self.global_step, steps=self.global_step - self.start_step,
                      seconds=time.perf_counter() - start, mean_return=mean,
                      lost_actors=len(self.actors.actors) - self.actors.live, iterations=self.iteration)


def rate_scalars(table: dict[str, dict[str, float]], against: str) -> dict[str, float]:
    """eval/ tags of a win / draw / loss table per seat: the mean win rate over seats, and each seat's rates."""
    values = {f"eval/win_rate_vs_{against}": sum(r["win"] for r in table.values()) / len(table)}
    for agent, rates in table.items():
        values.update({f"eval/{agent}/{k}_rate_vs_{against}": rates[k] for k in ("win", "draw", "loss")})
    return values


def main(cfg: Config, info: EnvInfo, learner_group, device: torch.device, control: RunControl) -> int:
    """Rank 0's part of a training run: build the learner's driver and the logger, train, report."""
    learners = LearnerGroup(Learner(cfg, info, learner_group, device))
    resume = checkpoint.read_trainer(Path(cfg.resume)) if cfg.resume else None
    if resume is not None:
        for dropped in checkpoint.drop_newer(Path(cfg.resume)):
            print(f"marl: removed {dropped}: newer than the checkpoint this run resumes from", flush=True)
    # A resumed run drops the events the earlier process logged after its checkpoint: the curve goes on from it.
    logger = RunLogger(cfg, info.agent_ids, purge_step=resume["global_step"] + 1 if resume else None)
    coordinator = Coordinator(cfg, info, learners, logger, control.clock, control.stop.check,
                              (control.restarts_done, control.restarts_allowed))
    try:
        outcome = coordinator.run(resume)
        control.peers_lost = outcome.lost_actors > 0 or outcome.reason == "heal"
        if outcome.reason != "heal":
            seconds = coordinator.seconds_before + outcome.seconds
            logger.final({"hparams/final_mean_return": outcome.mean_return,
                          "hparams/steps_to_target": outcome.global_step if outcome.reason == "target" else None,
                          "hparams/wall_seconds": seconds, "hparams/SPS": outcome.global_step / seconds},
                         outcome.global_step + 1)  # past the final checkpoint's step: a --resume purges it, and writes its own
        learners.stop()
    finally:
        if coordinator.weights is not None:  # also on Ctrl-C or a NaN: the last good policy
            export_policy(cfg.run_dir / "policy.pt", coordinator.weights, info, cfg, learners.learner.specs)
        logger.close()
    if outcome.reason == "heal":
        return HEAL_EXIT
    if outcome.reason == "target":
        logger.print(f"solved: mean return {format_return(outcome.mean_return, cfg.target_return)} over the last {WINDOW} episodes reached "
                     f"{cfg.target_return:g} at step {outcome.global_step:,} (iteration {outcome.iterations}) "
                     f"in {outcome.seconds:.1f}s, {outcome.steps / outcome.seconds:,.0f} steps/s")
    else:
        mean = format_return(outcome.mean_return, cfg.target_return)
        logger.print(f"step budget of {cfg.total_steps:,} reached at step {outcome.global_step:,} in {outcome.seconds:.1f}s "
                     f"without reaching the target (mean return of the last {WINDOW} episodes: {mean})")
    result.save(cfg.run_dir, outcome)  # what marl.train() returns; the benches and sweeps read it too
    if outcome.lost_actors:
        healed = f" after {control.restarts_done} restart(s), all --max-restarts used" if control.restarts_allowed else ""
        logger.print(f"ran degraded: {outcome.lost_actors} of {cfg.actors} actors failed during the run{healed} (see above)")
    logger.print(f"logs: tensorboard --logdir {cfg.logdir}   (run {cfg.run_name})")
    return 0
