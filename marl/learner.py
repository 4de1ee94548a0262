"""Learner: one learner rank's part of training, the policies sharded over the ranks (marl.sharding),
and the algorithm's update on that rank's env slots.

Learner rank 0 hosts the coordinator, which drives the other ranks through `LearnerGroup`; ranks > 0
run `follow`. Both ends speak `marl.collectives`' commands, so that every rank enters every
collective (FSDP's, the metrics' all-reduce, the state-dict gather, the checkpoint) in the same
order. Nothing here knows about RPC or actors.
"""

from __future__ import annotations

from pathlib import Path

import torch
import torch.distributed as dist
from torch.distributed.device_mesh import DeviceMesh

from envs import EnvInfo
from marl import checkpoint, collectives
from marl.algorithms import make_algorithm
from marl.algorithms.base import learning_rate
from marl.collectives import Command, CommandChannel, Order
from marl.config import Config
from marl.errors import NonFiniteError
from marl.models import build_model, network_of
from marl.normalize import RewardScaler
from marl.off_policy import ReplayTraining
from marl.on_policy import OnPolicyTraining
from marl.optim import clip_grad_norm_
from marl.policies import PolicySpec, specs_of
from marl.sharding import MIN_BLOCK_PARAMS, parallelize
from marl.specs import trajectory_fields, tree_map

__all__ = ["Learner", "LearnerGroup", "follow", "parallelize", "save", "MIN_BLOCK_PARAMS"]


class Learner:
    """One learner rank: its shard of every network the algorithm trains and of its optimizers, the
    algorithm's update (marl.on_policy or marl.off_policy), and what it checkpoints (`state`).
    Every method that touches the model is a collective: every rank calls it, in the same order."""

    def __init__(self, cfg: Config, info: EnvInfo, group: dist.ProcessGroup, device: torch.device,
                 min_block_params: int = MIN_BLOCK_PARAMS):
        self.cfg, self.info, self.group, self.device = cfg, info, group, device
        self.specs = specs_of(cfg, info)
        self.rank, self.world = dist.get_rank(group), dist.get_world_size(group)
        self.algorithm = make_algorithm(cfg)
        # Every rank must start from the same full weights: fully_shard keeps each rank's own slice.
        with torch.random.fork_rng(devices=[]):
            torch.manual_seed(cfg.seed)
            policies = build_model(self.specs, network_of(cfg))
            # The algorithm's networks around the policies (an off-policy one's targets, critics, a mixer): one root.
            model = self.algorithm.networks(policies, self.specs).to(device)
        self.state_sizes = {s.name: policies.state_size(s.name) for s in self.specs}
        self.sharded = self.world > 1 or cfg.precision != "fp32"
        if self.sharded:
            mesh = DeviceMesh.from_group(group, device.type)
            self.model = parallelize(model, mesh, cfg.precision, min_block_params, cfg.activation_checkpointing)
        else:
            # One fp32 rank has nothing to shard, and FSDP's per-step collectives and DTensor
            # dispatch cost more than the math of a small policy (77 ms vs 47 ms per default
            # update). TorchTitan likewise applies fully_shard only when the data-parallel shard
            # degree is above 1. bf16 goes through FSDP even on one rank: its MixedPrecisionPolicy
            # is how the learner computes in bf16.
            self.model = parallelize(model, None, cfg.precision, min_block_params, cfg.activation_checkpointing)
        self.policies = self.model.policies  # what actors run and `full_state_dict` publishes
        self.optimizers = self.algorithm.optimizers(self.model)  # one per phase of a gradient step
        for opt in self.optimizers.values():
            for pg in opt.param_groups:
                pg.setdefault("base_lr", pg["lr"])  # what the learning-rate schedule scales
        self.generator = torch.Generator().manual_seed(cfg.seed * 1_000 + self.rank)  # minibatch order, replay samples
        # Which samples a policy keeps when its count is cut to the minibatches (rank 0's stream is
        # the one the coordinator used before targets moved to the learner ranks).
        self.cut_generator = torch.Generator().manual_seed(cfg.seed + 7_919 * self.rank)
        # --norm-reward: each policy's statistics of the discounted return, checkpointed with the rank's state.
        self.reward_scalers = {s.name: RewardScaler(cfg.clip_reward, device) for s in self.specs} if cfg.norm_reward else {}
        self.state = checkpoint.TrainState(self.model, tuple(self.optimizers.values()), (self.generator, self.cut_generator),
                                           self.rank, {f"reward_norm.{name}": r for name, r in self.reward_scalers.items()})
        self.commands = CommandChannel(group, device, cfg.actors, len(self.specs))
        self.training = (ReplayTraining if self.algorithm.off_policy else OnPolicyTraining)(self)
        # What only this rank holds and checkpoints for itself (--save-buffer: its replay shards).
        self.own = self.training.own if self.algorithm.off_policy and cfg.save_buffer else {}
        if cfg.resume:
            checkpoint.load(self.state, Path(cfg.resume), self.group)  # a collective, like everything a Learner does
            if self.algorithm.off_policy:
                self._load_replay(Path(cfg.resume))

    def _load_replay(self, path: Path) -> None:
        """A rank's replay shards from the checkpoint (--save-buffer), where it was written by as many
        learner ranks as this run has: a shard holds the env slots of its rank, with its share of the
        capacity. On another count, or without the buffer, they start empty."""
        saved_by = checkpoint.read_trainer(path)["learners"]
        loaded = saved_by == self.world and checkpoint.load_own(self.training.own, path, self.rank)
        if self.rank == 0 and not loaded:
            why = (f"it was saved by {saved_by} learner ranks, this run has {self.world}" if saved_by != self.world
                   else "the checkpoint holds none (--save-buffer keeps it)")
            print(f"marl: the replay buffer starts empty: {why}", flush=True)

    def update(self, trajs: dict[str, dict], global_step: int, pieces: list[tuple[int, int]]) -> tuple[dict[str, float], int]:
        """One update from this rank's share of every policy's trajectories ([T, S, n, ...], whole env
        slots; `pieces`: the slot ranges of the rollouts they came from) at `global_step` (the
        learning-rate schedule's). Returns the metrics, averaged over ranks (per policy as
        `<policy>/<metric>`, over policies as `<metric>`), and the samples trained on over all ranks."""
        lr = self._set_learning_rate(global_step)
        metrics, used = self.training.update(trajs, global_step, pieces)
        metrics["learning_rate"] = lr
        return metrics, used

    def _set_learning_rate(self, global_step: int) -> float:
        """Every optimizer's rate at `global_step`: its own base rate, under the configured schedule."""
        scale = learning_rate(self.cfg, global_step) / self.cfg.learning_rate
        for opt in self.optimizers.values():
            for pg in opt.param_groups:
                pg["lr"] = pg["base_lr"] * scale
        return next(iter(self.optimizers.values())).param_groups[0]["lr"]

    def step(self, loss: torch.Tensor, phase: str, where: str) -> torch.Tensor:
        """One step of the optimizer of `phase` on `loss`, its gradients clipped to --max-grad-norm
        over its parameters (and every rank's shards); returns the global norm before the clip.
        Every gradient is cleared first: another phase's backward may have reached these parameters."""
        for opt in self.optimizers.values():
            opt.zero_grad(set_to_none=True)
        loss.backward()
        opt = self.optimizers[phase]
        grad_norm = clip_grad_norm_([p for group in opt.param_groups for p in group["params"]], self.cfg.max_grad_norm)
        if self.sharded:
            grad_norm = grad_norm.full_tensor()  # the global norm over every rank's shards
        if not torch.isfinite(grad_norm):
            # The norm is global, so every rank sees the same value and stops at the same step.
            raise NonFiniteError(f"the loss or its gradients became NaN or Inf ({where}); the weights were left as "
                                 f"they were before this step")
        opt.step()
        return grad_norm.detach().float()

    def on_device(self, trajs: dict[str, dict]) -> dict[str, dict]:
        """The trajectories on this rank's device, rewards scaled where --norm-reward is on."""
        trajs = {name: tree_map(lambda v: v.to(self.device, non_blocking=True), t) for name, t in trajs.items()}
        for name, scale in self.reward_scalers.items():
            t = trajs[name]
            t["rewards"] = scale(t["rewards"], t.pop("discounted_return"), t["valid"], self.group)
        return trajs

    def update_obs_stats(self, observed: dict[str, dict]) -> None:
        """--norm-obs: merge each policy's observations of this update ({"obs": leaves [B, ...],
        "state"?}) into its statistics, after its gradient steps: the batch trains under the
        statistics its actors acted with (PPO's first ratios are 1), and the next weights published
        carry the new ones."""
        if not self.cfg.norm_obs:
            return
        for spec in self.specs:
            if spec.name in observed:
                o = observed[spec.name]
                self.policies[spec.name].obs_norm.update(o["obs"], o.get("state"), self.group)

    def scatter(self, spec: PolicySpec, T: int, per_rank: int, packed: dict | None = None) -> dict:
        """This rank's env slots of policy `spec`'s trajectories (`marl.collectives.scatter`): rank 0
        passes the packed batch, the others receive."""
        fields = trajectory_fields(spec, self.state_sizes[spec.name], self.cfg.norm_reward,
                                   self.algorithm.wants_after(self.cfg))
        return collectives.scatter(fields, len(spec.agents), T, self.cfg.seq_len, per_rank, self.group, self.device,
                                   packed)

    def full_state_dict(self) -> dict[str, torch.Tensor]:
        """The policies' unsharded CPU weights, what actors load (a collective: every rank calls it;
        rank 0 receives them). An off-policy root's other networks stay on the learners."""
        if not self.sharded:
            # A copy: the next optimizer step changes the parameters in place under whoever holds it.
            return self._published({k: v.detach().to("cpu", copy=True) for k, v in self.model.state_dict().items()})
        from torch.distributed.checkpoint.state_dict import StateDictOptions, get_model_state_dict

        sd = get_model_state_dict(self.model, options=StateDictOptions(full_state_dict=True, cpu_offload=True))
        if self.world == 1 and self.device.type == "cpu":
            # Nothing to gather or offload: the result aliases the live parameters, as above.
            return self._published({k: v.clone() for k, v in sd.items()})
        # Buffers are not sharded, so on CPU they come back as the live tensors (--norm-obs statistics,
        # which the next update changes in place).
        live = {b.data_ptr() for b in self.model.buffers()}
        return self._published({k: v.clone() if v.data_ptr() in live else v for k, v in sd.items()})

    def _published(self, sd: dict[str, torch.Tensor]) -> dict[str, torch.Tensor]:
        """What actors load: the policy set's weights (an off-policy root's `policy.` part)."""
        if not self.algorithm.off_policy:
            return sd
        return {k[len("policy."):]: v for k, v in sd.items() if k.startswith("policy.")}


def save(learner: Learner, iteration: int, trainer: dict | None = None) -> Path:
    """Every rank's part of a checkpoint; rank 0 adds the coordinator's `trainer` state and what
    it takes to check a resume against (see marl.checkpoint)."""
    cfg = learner.cfg
    meta = None
    if trainer is not None:
        meta = {**trainer, "learners": learner.world, "model_shape": checkpoint.model_shape(learner.specs, network_of(cfg)),
                "env": cfg.env}
    return checkpoint.save(learner.state, learner.group, cfg.run_dir, iteration, meta, cfg, cfg.keep_checkpoints,
                           learner.own)


class LearnerGroup:
    """Rank 0's handle on all learner ranks: sends each rank whole env slots of the trajectories,
    gathers weights, checkpoints, each behind a command that `follow` carries out on the other
    ranks. It computes no targets: every rank computes its own."""

    def __init__(self, learner: Learner):
        self.learner = learner
        self.commands = learner.commands

    def update(self, trajectories: list[dict[str, dict]], global_step: int) -> tuple[dict[str, float], int]:
        """One update on the rollouts' trajectories (a dict of policy -> trajectory per rollout, on
        CPU) at `global_step` (for the learning-rate schedule). Returns the metrics and the samples used.

        Each rank gets whole env slots (contiguous blocks, padded with invalid slots to an equal
        count), time-major, each rollout padded with invalid steps to the longest.
        """
        learner = self.learner
        bounds = collectives.slot_bounds([t[learner.specs[0].name]["valid"].shape[1] for t in trajectories])
        per_rank = collectives.slots_per_rank(bounds, learner.world)
        steps, packed = [], {}
        for spec in learner.specs:
            parts = [t[spec.name] for t in trajectories]
            steps.append(max(p["valid"].shape[0] for p in parts))
            packed[spec.name] = collectives.pack(parts, per_rank * learner.world)
        self.commands.send(Order(Command.TRAIN, global_step, bounds, steps))
        own = {spec.name: learner.scatter(spec, T, per_rank, packed[spec.name]) for spec, T in zip(learner.specs, steps)}
        return learner.update(own, global_step, collectives.slot_ranges(bounds, 0, per_rank))

    def gather(self) -> dict[str, torch.Tensor]:
        self.commands.send(Order(Command.GATHER))
        return self.learner.full_state_dict()

    def save(self, iteration: int, trainer: dict) -> Path:
        """Checkpoint every rank's shard and rank 0's `trainer` state (see marl.checkpoint)."""
        self.commands.send(Order(Command.SAVE, iteration))
        return save(self.learner, iteration, trainer)

    def stop(self) -> None:
        self.commands.send(Order(Command.STOP))


def follow(learner: Learner) -> None:
    """Learner ranks > 0: do what rank 0's LearnerGroup orders, until it says stop."""
    while True:
        order = learner.commands.receive()
        if order.command == Command.STOP:
            return
        if order.command == Command.GATHER:
            learner.full_state_dict()
            continue
        if order.command == Command.SAVE:
            save(learner, order.arg)
            continue
        per_rank = collectives.slots_per_rank(order.bounds, learner.world)
        own = {spec.name: learner.scatter(spec, T, per_rank) for spec, T in zip(learner.specs, order.steps)}
        try:
            learner.update(own, order.arg, collectives.slot_ranges(order.bounds, learner.rank, per_rank))
        except NonFiniteError:
            return  # rank 0 met the same global norm and reports it
