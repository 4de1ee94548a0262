"""Learner: the policy sharded with FSDP2 over the learner ranks, and the PPO update.

`parallelize` shards a plain model (TorchTitan's split: the model knows nothing of FSDP).
`Learner` is one rank's half of an update. Learner rank 0 hosts the coordinator, which drives
the other ranks through `LearnerGroup`; ranks > 0 run `follow`. Each command goes out as a
broadcast header, so every rank enters every collective (FSDP's, the state-dict gather) in
the same order. Nothing here knows about RPC or actors.
"""

from __future__ import annotations

from pathlib import Path

import torch
import torch.distributed as dist
from torch import nn
from torch.distributed.device_mesh import DeviceMesh

from envs import EnvInfo
from marl import checkpoint, distributions
from marl.algorithms import ppo_loss
from marl.config import Config
from marl.errors import NonFiniteError
from marl.models import PolicySet, build_model, network_of
from marl.policies import PolicySpec, specs_of
from marl.specs import leaves, sample_fields, tree_map

_STOP, _TRAIN, _GATHER, _SAVE = 0, 1, 2, 3

METRICS = ("policy_loss", "value_loss", "entropy", "approx_kl", "clipfrac", "grad_norm")


# A block gets its own FSDP unit only if it is at least this big. Each unit costs an all-gather and
# a reduce-scatter per step; below about a million parameters that fixed cost outweighs what
# sharding saves (a 64-64 MLP step measured 6.2 ms with a unit per block, 3.9 ms with the root
# alone, 2.9 ms unsharded, 1 rank, CPU). Size-based wrapping is FSDP's usual auto-wrap rule.
MIN_BLOCK_PARAMS = 1_000_000


def _replace(root: nn.Module, target: nn.Module, new: nn.Module) -> None:
    """Put `new` where `target` sits in `root`'s tree."""
    for name, module in root.named_modules():
        if module is target:
            parent, _, attr = name.rpartition(".")
            setattr(root.get_submodule(parent), attr, new)
            return
    raise ValueError("module not found in the model")


def parallelize(model: PolicySet, mesh: DeviceMesh | None, precision: str, min_block_params: int = MIN_BLOCK_PARAMS,
                activation_checkpointing: bool = False) -> PolicySet:
    """Optionally checkpoint each block's activations, then shard each block big enough to be worth
    it, then the root (which takes every other parameter): TorchTitan's order, AC before FSDP.
    The blocks are what a built-in network declares, or for a user's network the submodules that
    FSDP's size-based rule picks (`PolicySet.blocks`). With no mesh, only the activation
    checkpointing is applied."""
    # Imported here, not at the top: a single fp32 learner rank needs neither.
    from torch.distributed.algorithms._checkpoint.checkpoint_wrapper import checkpoint_wrapper

    blocks = model.blocks(min_block_params)
    if activation_checkpointing:
        # Recompute each block's activations in backward instead of keeping them from forward.
        wrapped = []
        for block in blocks:
            new = checkpoint_wrapper(block, preserve_rng_state=False)
            _replace(model, block, new)
            wrapped.append(new)
        blocks = wrapped
    if mesh is None:
        return model
    from torch.distributed.fsdp import MixedPrecisionPolicy, fully_shard
    if precision == "bf16":
        # Sharded master weights stay fp32 and gradients reduce in fp32; only compute is bf16.
        # Blocks hand bf16 on to the next layer; the root returns fp32 for the loss.
        block_mp = MixedPrecisionPolicy(param_dtype=torch.bfloat16, reduce_dtype=torch.float32)
        root_mp = MixedPrecisionPolicy(param_dtype=torch.bfloat16, reduce_dtype=torch.float32, output_dtype=torch.float32)
    else:
        block_mp = root_mp = MixedPrecisionPolicy()
    for block in blocks:
        if sum(p.numel() for p in block.parameters()) >= min_block_params:
            fully_shard(block, mesh=mesh, mp_policy=block_mp)
    fully_shard(model, mesh=mesh, mp_policy=root_mp)
    return model


class TrainState:
    """What a learner rank checkpoints, as a `torch.distributed.checkpoint` Stateful: the model's
    and the optimizer's (sharded) state and this rank's sampling generator. The checkpointer sees
    only `state_dict` / `load_state_dict` (TorchTitan's rule), never a learner's attributes."""

    def __init__(self, model: nn.Module, optimizer: torch.optim.Optimizer, generator: torch.Generator, rank: int):
        self.model, self.optimizer, self.generator = model, optimizer, generator
        self.rng_key = f"rng.learner{rank}"

    def state_dict(self) -> dict:
        from torch.distributed.checkpoint.state_dict import get_state_dict

        # get_state_dict creates the optimizer's state (zeros) so that a load has tensors to load into.
        model_sd, optim_sd = get_state_dict(self.model, self.optimizer)
        return {"model": model_sd, "optim": optim_sd, self.rng_key: self.generator.get_state()}

    def load_state_dict(self, state: dict) -> None:
        from torch.distributed.checkpoint.state_dict import set_state_dict

        set_state_dict(self.model, self.optimizer, model_state_dict=state["model"], optim_state_dict=state["optim"])
        # A rank the saving run did not have keeps the fresh seed it was given (checkpoint.load).
        self.generator.set_state(state[self.rng_key])


class Learner:
    def __init__(self, cfg: Config, info: EnvInfo, group: dist.ProcessGroup, device: torch.device,
                 min_block_params: int = MIN_BLOCK_PARAMS):
        self.cfg, self.info, self.group, self.device = cfg, info, group, device
        self.specs = specs_of(cfg, info)
        self.rank, self.world = dist.get_rank(group), dist.get_world_size(group)
        # Every rank must start from the same full weights: fully_shard keeps each rank's own slice.
        with torch.random.fork_rng(devices=[]):
            torch.manual_seed(cfg.seed)
            model = build_model(self.specs, network_of(cfg))
        model = model.to(device)
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
        # fused: one kernel for all (DTensor) parameters; the per-parameter loop costs more than the math here.
        self.optimizer = torch.optim.Adam(self.model.parameters(), lr=cfg.learning_rate, eps=1e-5, fused=True)
        self.generator = torch.Generator().manual_seed(cfg.seed * 1_000 + self.rank)
        self.state = TrainState(self.model, self.optimizer, self.generator, self.rank)
        if cfg.resume:
            checkpoint.load(self.state, Path(cfg.resume), self.group)  # a collective, like everything a Learner does

    def update(self, shards: dict[str, dict[str, torch.Tensor]], lr: float) -> dict[str, float]:
        """PPO epochs over this rank's shard of every policy's samples: each minibatch step sums the
        policies' losses, so one optimizer step updates them all. Returns metrics averaged over
        minibatches and ranks: per policy as `<policy>/<metric>`, and over policies as `<metric>`."""
        cfg = self.cfg
        # A policy whose agents made too few valid steps this iteration (agents that left early) sits it out.
        specs = [s for s in self.specs if shards[s.name]["values"].shape[0] > 0]
        for group in self.optimizer.param_groups:
            group["lr"] = lr
        data = {s.name: tree_map(lambda v: v.to(self.device, non_blocking=True), shards[s.name]) for s in specs}
        K = cfg.num_minibatches
        sizes = {name: d["values"].shape[0] // K for name, d in data.items()}
        per_policy = len(METRICS) - 1
        totals = torch.zeros(len(specs) * per_policy + 1, device=self.device)
        count = 0
        for epoch in range(cfg.update_epochs):
            perms = {name: torch.randperm(d["values"].shape[0], generator=self.generator).to(self.device)
                     for name, d in data.items()}
            epoch_kl = torch.zeros((), device=self.device)
            for k in range(K):
                mb = {name: tree_map(lambda v: v[perms[name][k * sizes[name]:(k + 1) * sizes[name]]], d)
                      for name, d in data.items()}
                out = self.model({name: (m["obs"], m.get("state")) for name, m in mb.items()})
                loss, stats = 0.0, []
                for spec in specs:
                    m, (pd, value) = mb[spec.name], out[spec.name]
                    pi = distributions.make(spec.action, pd.float(), m.get("action_mask"))
                    policy_loss, policy_stats = ppo_loss(
                        pi.log_prob(m["actions"]), m["logprobs"], m["advantages"], value.float(),
                        m["values"], m["returns"], pi.entropy(), clip_coef=cfg.clip_coef,
                        clip_vloss=cfg.clip_vloss, vf_coef=cfg.vf_coef, ent_coef=cfg.ent_coef)
                    loss = loss + policy_loss
                    stats.extend(policy_stats[name] for name in METRICS[:-1])
                self.optimizer.zero_grad(set_to_none=True)
                loss.backward()
                grad_norm = torch.nn.utils.clip_grad_norm_(self.model.parameters(), cfg.max_grad_norm)
                if self.sharded:
                    grad_norm = grad_norm.full_tensor()  # the global norm over every rank's shards
                if not torch.isfinite(grad_norm):
                    # The norm is global, so every rank sees the same value and stops at the same step.
                    raise NonFiniteError(f"the loss or its gradients became NaN or Inf (epoch {epoch + 1}, "
                                         f"minibatch {k + 1}); the weights were left as they were before this step")
                self.optimizer.step()
                step_stats = torch.stack([*stats, grad_norm.detach().float()])
                totals += step_stats
                epoch_kl += step_stats[METRICS.index("approx_kl"):-1:per_policy].mean()
                count += 1
            if cfg.target_kl is not None:
                # Every rank must stop after the same epoch, or the next collective deadlocks.
                dist.all_reduce(epoch_kl, group=self.group)
                if epoch_kl.item() / (self.world * K) > cfg.target_kl:
                    break
        dist.all_reduce(totals, group=self.group)
        means = (totals / (count * self.world)).tolist()
        metrics = {"grad_norm": means[-1]}
        for j, name in enumerate(METRICS[:-1]):
            values = means[j:-1:per_policy]
            metrics[name] = sum(values) / len(values)
            for spec, v in zip(specs, values):
                metrics[f"{spec.name}/{name}"] = v
        return metrics

    def full_state_dict(self) -> dict[str, torch.Tensor]:
        """Unsharded CPU weights (a collective: every rank calls it; rank 0 receives them)."""
        if not self.sharded:
            # A copy: the next optimizer step changes the parameters in place under whoever holds it.
            return {k: v.detach().to("cpu", copy=True) for k, v in self.model.state_dict().items()}
        from torch.distributed.checkpoint.state_dict import StateDictOptions, get_model_state_dict

        sd = get_model_state_dict(self.model, options=StateDictOptions(full_state_dict=True, cpu_offload=True))
        if self.world == 1 and self.device.type == "cpu":
            # Nothing to gather or offload: the result aliases the live parameters, as above.
            sd = {k: v.clone() for k, v in sd.items()}
        return sd


def _scatter(learner: Learner, spec: PolicySpec, per_rank: int, batch: dict | None = None,
             perm: torch.Tensor | None = None) -> dict:
    """This rank's `per_rank` samples of one policy: rank 0 passes the shuffled batch, the others
    receive. Every field of `sample_fields` goes, in the same order on every rank."""
    shard = {}
    for name, (shape, dtype) in leaves(sample_fields(spec)):
        out = torch.empty((per_rank, *shape), dtype=dtype, device=learner.device)
        if per_rank:
            chunks = None
            if batch is not None:
                source = batch
                for key in name.split("."):
                    source = source[key]
                chunks = [c.to(learner.device).contiguous() for c in source[perm].split(per_rank)]
            dist.scatter(out, chunks, group=learner.group, group_src=0)
        node = shard
        *path, last = name.split(".")
        for key in path:
            node = node.setdefault(key, {})
        node[last] = out
    return shard


def save(learner: Learner, iteration: int, trainer: dict | None = None) -> Path:
    """Every rank's part of a checkpoint; rank 0 adds the coordinator's `trainer` state and what
    it takes to check a resume against (see marl.checkpoint)."""
    cfg = learner.cfg
    meta = None
    if trainer is not None:
        meta = {**trainer, "learners": learner.world, "model_shape": checkpoint.model_shape(learner.specs, network_of(cfg)),
                "env": cfg.env}
    return checkpoint.save(learner.state, learner.group, cfg.run_dir, iteration, meta, cfg, cfg.keep_checkpoints)


class LearnerGroup:
    """Rank 0's handle on all learner ranks: splits the batch, sends each rank its shard, gathers weights."""

    def __init__(self, learner: Learner):
        self.learner = learner
        self.generator = torch.Generator().manual_seed(learner.cfg.seed)

    def _header(self, command: int, arg: int = 0, lr: float = 0.0, per_rank: list[int] | None = None) -> None:
        # [command, arg, lr, then each policy's samples per rank]: one broadcast, a fixed size every rank knows.
        sizes = per_rank or [0] * len(self.learner.specs)
        header = torch.tensor([command, arg, lr, *sizes], dtype=torch.float64, device=self.learner.device)
        dist.broadcast(header, group=self.learner.group, group_src=0)

    def update(self, batches: dict[str, dict[str, torch.Tensor]], lr: float) -> tuple[dict[str, float], int]:
        """One PPO update on each policy's batch (flat samples on CPU). Returns the metrics and the samples used.

        Each policy's samples are shuffled, then cut to a multiple of ranks x minibatches (a few at
        most are dropped when masked steps make the batch size odd), so that every rank does the
        same number of equal minibatch steps.
        """
        L, K = self.learner.world, self.learner.cfg.num_minibatches
        sizes, perms = [], {}
        for spec in self.learner.specs:
            n = batches[spec.name]["values"].shape[0]
            sizes.append((n // (L * K)) * K)  # 0: too few this time; the policy sits this update out
            perms[spec.name] = torch.randperm(n, generator=self.generator)[: sizes[-1] * L]
        if not any(sizes):
            raise RuntimeError(f"batches of {[b['values'].shape[0] for b in batches.values()]} samples are too small for "
                               f"{L} learner(s) x {K} minibatches")
        self._header(_TRAIN, 0, lr, sizes)
        own = {spec.name: _scatter(self.learner, spec, per_rank, batches[spec.name], perms[spec.name])
               for spec, per_rank in zip(self.learner.specs, sizes)}
        return self.learner.update(own, lr), sum(sizes) * L

    def gather(self) -> dict[str, torch.Tensor]:
        self._header(_GATHER)
        return self.learner.full_state_dict()

    def save(self, iteration: int, trainer: dict) -> Path:
        """Checkpoint every rank's shard and rank 0's `trainer` state (see marl.checkpoint)."""
        self._header(_SAVE, iteration)
        trainer = {**trainer, "group_rng": self.generator.get_state()}
        return save(self.learner, iteration, trainer)

    def restore(self, trainer: dict) -> None:
        """Rank 0's part of a resume that the Learner's own restore does not cover."""
        self.generator.set_state(trainer["group_rng"])

    def stop(self) -> None:
        self._header(_STOP)


def follow(learner: Learner) -> None:
    """Learner ranks > 0: do what rank 0's LearnerGroup broadcasts, until it says stop."""
    header = torch.empty(3 + len(learner.specs), dtype=torch.float64, device=learner.device)
    while True:
        dist.broadcast(header, group=learner.group, group_src=0)
        command, arg, lr = int(header[0]), int(header[1]), float(header[2])
        if command == _STOP:
            return
        if command == _GATHER:
            learner.full_state_dict()
            continue
        if command == _SAVE:
            save(learner, arg)
            continue
        shards = {spec.name: _scatter(learner, spec, per_rank)
                  for spec, per_rank in zip(learner.specs, header[3:].long().tolist())}
        try:
            learner.update(shards, lr)
        except NonFiniteError:
            return  # rank 0 met the same global norm and reports it
