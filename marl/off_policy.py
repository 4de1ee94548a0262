"""The off-policy update of a learner rank (DQN, IQL, VDN, QMIX, SAC): the trajectories just collected
become n-step transitions in this rank's replay shards (marl.replay), then the gradient steps owed
for every rank's new agent-steps, each on a batch that every rank samples its share of from its
own shards (FSDP averages the gradients, so the step is that of the whole batch), then the actors'
exploration for the next rollouts.

Every method is a collective over the learner ranks: every rank calls it, in the same order, and
takes the same number of gradient steps (`gradient_steps` is a function of the global counts).
"""

from __future__ import annotations

import torch
import torch.distributed as dist

from marl.algorithms.base import gradient_steps
from marl.collectives import mean_over_ranks, per_policy_means
from marl.replay import ReplayShard, agent_sequences, agent_transitions, team_sequences, team_transitions
from marl.specs import cat, slice_slots

TEAM = "team"  # the shard name of joint transitions (VDN, QMIX)


class ReplayTraining:
    def __init__(self, learner):
        self.learner = learner
        self.cfg, self.algorithm, self.specs = learner.cfg, learner.algorithm, learner.specs
        self.group, self.device, self.world = learner.group, learner.device, learner.world
        names = [TEAM] if self.algorithm.team else [s.name for s in self.specs]
        # Each rank's share of --buffer-size, per shard: the transitions of the env slots it trains on.
        self.shards = {name: ReplayShard(max(self.cfg.buffer_size // self.world, 1), learner.rank, self.device,
                                         name if len(names) > 1 else "") for name in names}
        self.algorithm.explore(learner.model, 0)  # the first rollouts' (a resume loads the saved value)

    def transitions(self, trajs: dict[str, dict], pieces: list[tuple[int, int]]) -> dict[str, dict]:
        """This rank's new rows by shard, cut rollout by rollout (a window never runs across two): n-step
        transitions, or a recurrent network's sequences of --seq-len steps (their targets are the loss's)."""
        cfg = self.cfg
        if not pieces:
            return {}
        recurrent = any(self.learner.state_sizes.values())
        if self.algorithm.team:
            cut = (lambda ts: team_sequences(ts, cfg.seq_len)) if recurrent else \
                (lambda ts: team_transitions(ts, cfg.n_step, cfg.gamma))
            return {TEAM: cat([cut({name: slice_slots(t, a, b) for name, t in trajs.items()}) for a, b in pieces])}
        out = {}
        for name, t in trajs.items():
            cut = (lambda x: agent_sequences(x, cfg.seq_len)) if self.learner.state_sizes[name] else \
                (lambda x: agent_transitions(x, cfg.n_step, cfg.gamma))
            out[name] = cat([cut(slice_slots(t, a, b)) for a, b in pieces])
        return out

    def update(self, trajs: dict[str, dict], global_step: int, pieces: list[tuple[int, int]]) -> tuple[dict[str, float], int]:
        """Store this rank's transitions, then take the gradient steps owed for the agent-steps every
        rank collected. Returns the metrics (averaged over steps and ranks) and the transitions trained on."""
        cfg, algo, learner = self.cfg, self.algorithm, self.learner
        trajs = learner.on_device(trajs)
        collected = torch.zeros((), dtype=torch.int64, device=self.device)
        for traj in trajs.values():
            collected += traj["valid"].sum()
        added = self.transitions(trajs, pieces)
        for name, rows in added.items():
            self.shards[name].add(rows)
        dist.all_reduce(collected, group=self.group)
        owed = gradient_steps(cfg, global_step, global_step + int(collected))
        # A shard still empty on some rank (its agents made no valid step yet) waits.
        sizes = torch.tensor([len(shard) for shard in self.shards.values()], device=self.device)
        stored = sizes.sum()
        dist.all_reduce(sizes, op=dist.ReduceOp.MIN, group=self.group)
        dist.all_reduce(stored, group=self.group)
        ready = [name for name, n in zip(self.shards, sizes.tolist()) if n]
        steps = owed if ready else 0
        per_rank = cfg.batch_size // self.world
        before = gradient_steps(cfg, 0, global_step)
        totals: dict[str, torch.Tensor] = {}
        for u in range(steps):
            batch = {name: self.shards[name].sample(per_rank, learner.generator) for name in ready}
            stats = self.step(batch, f"gradient step {before + u + 1}")
            algo.after_update(learner.model, before + u + 1)
            for name, v in stats.items():
                totals[name] = totals.get(name, 0.0) + v
        metrics = per_policy_means(mean_over_ranks({name: v / steps for name, v in totals.items()}, self.group, self.device))
        metrics.update(algo.explore(learner.model, global_step + int(collected)), replay_size=int(stored))
        learner.update_obs_stats(self._observations(added))
        return metrics, steps * per_rank * self.world

    def step(self, batch: dict[str, dict], where: str) -> dict[str, torch.Tensor]:
        """One gradient step on a sampled batch: each of the algorithm's phases is a forward of the
        whole root (the loss runs inside it: FSDP2 gathers the root's parameters there) and a step of
        that phase's optimizer. Returns the detached metrics, with each phase's gradient norm."""
        stats = {}
        phases = self.algorithm.phases
        for phase in phases:
            loss, s = self.learner.model(self.algorithm.loss, batch, phase)
            stats.update(s)
            norm = self.learner.step(loss, phase, f"{where}, {phase}")
            stats["grad_norm" if len(phases) == 1 else f"{phase}_grad_norm"] = norm
        return stats

    def _observations(self, added: dict[str, dict]) -> dict[str, dict]:
        """--norm-obs: each policy's new observations, [B, ...] as the statistics take them: a
        sequence's valid steps, a team row's agents side by side; the global state where a critic reads it."""
        team = added.get(TEAM)
        out = {}
        for name, rows in (team["policies"] if team is not None else added).items():
            def steps(x: torch.Tensor) -> torch.Tensor:
                if "starts" in rows:  # sequences: the steps of their valid transitions
                    x = x[:, :-1][(team or rows)["valid"]]
                return x.flatten(0, 1) if team is not None else x
            out[name] = {"obs": {k: steps(v) for k, v in rows["obs"].items()}}
            if team is None and "starts" not in rows and "state" in rows:  # SAC's critics read it
                out[name]["state"] = rows["state"]
        return out

    @property
    def own(self) -> dict[str, ReplayShard]:
        """What --save-buffer checkpoints: the rank's shards, by their keys."""
        return {shard.key: shard for shard in self.shards.values()}
