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
from marl import checkpoint, collectives, distributions
from marl.algorithms import make_algorithm
from marl.algorithms.base import gradient_steps, learning_rate
from marl.collectives import Command, CommandChannel, Order
from marl.config import Config
from marl.errors import NonFiniteError
from marl.models import build_model, network_of
from marl.normalize import RewardScaler
from marl.policies import PolicySpec, specs_of
from marl.sharding import MIN_BLOCK_PARAMS, parallelize
from marl.replay import ReplayShard, nstep
from marl.specs import cat, slice_slots, trajectory_fields, tree_map
from marl.trajectory import flatten_valid, from_sequences, sequences, to_sequences

__all__ = ["Learner", "LearnerGroup", "follow", "parallelize", "save", "MIN_BLOCK_PARAMS"]


class Learner:
    """One learner rank: its shard of every policy's network and of the optimizer, the algorithm,
    and what it checkpoints (`state`). Every method that touches the model is a collective: every
    rank calls it, in the same order."""

    def __init__(self, cfg: Config, info: EnvInfo, group: dist.ProcessGroup, device: torch.device,
                 min_block_params: int = MIN_BLOCK_PARAMS):
        self.cfg, self.info, self.group, self.device = cfg, info, group, device
        self.specs = specs_of(cfg, info)
        self.rank, self.world = dist.get_rank(group), dist.get_world_size(group)
        # Every rank must start from the same full weights: fully_shard keeps each rank's own slice.
        self.algorithm = make_algorithm(cfg)
        off_policy = self.algorithm.off_policy
        with torch.random.fork_rng(devices=[]):
            torch.manual_seed(cfg.seed)
            model = build_model(self.specs, network_of(cfg))
        self.state_sizes = {s.name: model.state_size(s.name) for s in self.specs}
        # An off-policy algorithm's networks (targets, critics, a mixer) join the policies in one root.
        model = (self.algorithm.networks(model) if off_policy else model).to(device)
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
        # The PolicySet inside: what actors run and `full_state_dict` publishes.
        self.policies = (self.model.policy if off_policy else self.model).policies
        if off_policy:
            self.optimizers = self.algorithm.optimizers(self.model)
        else:
            # fused: one kernel for all (DTensor) parameters; the per-parameter loop costs more than the math here.
            self.optimizers = [torch.optim.Adam(self.model.parameters(), lr=cfg.learning_rate, eps=1e-5, fused=True)]
        for opt in self.optimizers:
            for group in opt.param_groups:
                group.setdefault("base_lr", group["lr"])  # what the learning-rate schedule scales
        self.generator = torch.Generator().manual_seed(cfg.seed * 1_000 + self.rank)  # minibatch order
        # Which samples a policy keeps when its count is cut to the minibatches (rank 0's stream is
        # the one the coordinator used before targets moved to the learner ranks).
        self.cut_generator = torch.Generator().manual_seed(cfg.seed + 7_919 * self.rank)
        # --norm-reward: each policy's statistics of the discounted return, checkpointed with the rank's state.
        self.reward_scalers = {s.name: RewardScaler(cfg.clip_reward, device) for s in self.specs} if cfg.norm_reward else {}
        # Each rank's replay shard: the transitions of the env slots it trains on (--save-buffer checkpoints them).
        self.replay = {s.name: ReplayShard(max(cfg.buffer_size // self.world, 1), self.rank, device)
                       for s in self.specs} if off_policy else {}
        self.state = checkpoint.TrainState(self.model, self.optimizers[0] if not off_policy else tuple(self.optimizers),
                                           (self.generator, self.cut_generator), self.rank,
                                           {f"reward_norm.{name}": r for name, r in self.reward_scalers.items()})
        self.commands = CommandChannel(group, device, cfg.actors, len(self.specs))
        if off_policy:
            self.algorithm.explore(self.model, 0)  # the first rollouts' (a resume loads the saved value)
        if cfg.resume:
            checkpoint.load(self.state, Path(cfg.resume), self.group)  # a collective, like everything a Learner does
            if off_policy:
                checkpoint.load_own(self.replay, Path(cfg.resume), self.rank)

    def update(self, trajs: dict[str, dict], global_step: int, pieces: list[tuple[int, int]]) -> tuple[dict[str, float], int]:
        """One update from this rank's share of every policy's trajectories ([T, S, n, ...], whole env
        slots): the algorithm's targets, then its passes over minibatches, each step summing the
        policies' losses so that one optimizer step updates them all. `pieces` are the slot ranges
        of the rollouts these slots came from, flattened one after another (the order a single
        rank has always used). Returns metrics averaged over minibatches and ranks (per policy as
        `<policy>/<metric>`, over policies as `<metric>`) and the samples used over all ranks.

        A feed-forward policy trains on shuffled samples (its valid steps); a recurrent one on
        shuffled whole sequences (`marl.trajectory.sequences`), replayed from the states the actors
        recorded, their padding and invalid steps left out of every loss term."""
        cfg, algo = self.cfg, self.algorithm
        lr = self._set_learning_rate(global_step)
        if algo.off_policy:
            return self._update_replay(trajs, global_step, pieces, lr)
        samples = self.units(trajs, pieces)
        # Equal minibatch steps on every rank: each policy is cut to what the rank with the fewest has.
        K = cfg.num_minibatches
        counts = torch.tensor([samples[s.name]["values"].shape[0] for s in self.specs], device=self.device)
        dist.all_reduce(counts, op=dist.ReduceOp.MIN, group=self.group)
        sizes = {s.name: (int(c) // K) * K for s, c in zip(self.specs, counts)}
        if not any(sizes.values()):
            raise RuntimeError(f"batches of {counts.tolist()} samples per rank are too small for {K} minibatches")
        # A policy whose agents made too few valid steps this iteration (agents that left early) sits it out.
        specs = [s for s in self.specs if sizes[s.name]]
        data = {}
        for spec in specs:
            n = samples[spec.name]["values"].shape[0]
            perm = torch.randperm(n, generator=self.cut_generator)[: sizes[spec.name]].to(self.device)
            data[spec.name] = tree_map(lambda v: v[perm], samples[spec.name])
        metrics = self._explained_variance(samples)
        totals: dict[str, torch.Tensor] = {}
        count = 0
        for epoch in range(algo.epochs):
            epoch_kl = torch.zeros((), device=self.device)
            for k, idx in enumerate(algo.minibatches({name: sizes[name] for name in data}, K, self.generator)):
                mb = {name: tree_map(lambda v: v[idx[name].to(self.device)], d) for name, d in data.items()}
                out = self.forward(mb)
                loss, step = 0.0, {}
                for spec in specs:
                    pi, value, m = out[spec.name]
                    policy_loss, policy_stats = algo.loss(pi.log_prob(m["actions"]), pi.entropy(), value, m)
                    loss = loss + policy_loss
                    step.update({f"{spec.name}/{k_}": v for k_, v in policy_stats.items()})
                step["grad_norm"] = self._step(loss, f"epoch {epoch + 1}, minibatch {k + 1}")
                for name, v in step.items():
                    totals[name] = totals.get(name, 0.0) + v
                kls = [v for name, v in step.items() if name.endswith("/approx_kl")]
                if kls:
                    epoch_kl += torch.stack(kls).mean()
                count += 1
            if cfg.target_kl is not None:
                # Every rank must stop after the same epoch, or the next collective deadlocks.
                dist.all_reduce(epoch_kl, group=self.group)
                if epoch_kl.item() / (self.world * K) > cfg.target_kl:
                    break
        means = self._mean_over_ranks({name: v / count for name, v in totals.items()})
        metrics.update(means)
        for name in {n.split("/", 1)[1] for n in means if "/" in n}:
            per_policy = [v for n, v in means.items() if n.endswith("/" + name)]
            metrics[name] = sum(per_policy) / len(per_policy)
        metrics["learning_rate"] = lr
        used = torch.tensor(sum(int(d["valid"].sum()) if "valid" in d else sizes[name] for name, d in data.items()),
                            device=self.device)
        dist.all_reduce(used, group=self.group)
        self._update_obs_stats(samples)
        return metrics, int(used)

    def _set_learning_rate(self, global_step: int) -> float:
        """Every optimizer's rate at `global_step`: its own base rate, under the configured schedule."""
        scale = learning_rate(self.cfg, global_step) / self.cfg.learning_rate
        for opt in self.optimizers:
            for group in opt.param_groups:
                group["lr"] = group["base_lr"] * scale
        return self.optimizers[0].param_groups[0]["lr"]

    def _step(self, loss: torch.Tensor, where: str) -> torch.Tensor:
        """One optimizer step of every optimizer on `loss`, the gradients clipped to --max-grad-norm
        over every parameter (and every rank's shards); returns the global norm before the clip."""
        for opt in self.optimizers:
            opt.zero_grad(set_to_none=True)
        loss.backward()
        grad_norm = torch.nn.utils.clip_grad_norm_(self.model.parameters(), self.cfg.max_grad_norm)
        if self.sharded:
            grad_norm = grad_norm.full_tensor()  # the global norm over every rank's shards
        if not torch.isfinite(grad_norm):
            # The norm is global, so every rank sees the same value and stops at the same step.
            raise NonFiniteError(f"the loss or its gradients became NaN or Inf ({where}); the weights were left as "
                                 f"they were before this step")
        for opt in self.optimizers:
            opt.step()
        return grad_norm.detach().float()

    def _update_replay(self, trajs: dict[str, dict], global_step: int, pieces: list[tuple[int, int]],
                       lr: float) -> tuple[dict[str, float], int]:
        """An off-policy update: this rank's new transitions (n-step, `marl.replay.nstep`) into its
        replay shards, then the gradient steps owed for every rank's new agent-steps
        (`gradient_steps`: the same number on every rank), each on a batch that every rank samples
        its share of from its own shards; then the exploration for the next rollouts."""
        cfg, algo = self.cfg, self.algorithm
        trajs = self._on_device(trajs)
        collected = torch.zeros((), dtype=torch.int64, device=self.device)
        added = {}
        for spec in self.specs:
            traj = trajs[spec.name]
            collected += traj["valid"].sum()
            rows = [nstep(slice_slots(traj, a, b), cfg.n_step, cfg.gamma, algo.team) for a, b in pieces]
            if rows:
                added[spec.name] = cat(rows)
                self.replay[spec.name].add(added[spec.name])
        dist.all_reduce(collected, group=self.group)
        owed = gradient_steps(cfg, global_step, global_step + int(collected))
        # A policy whose shard is still empty on some rank (its agents made no valid step yet) waits.
        sizes = torch.tensor([len(self.replay[s.name]) for s in self.specs], device=self.device)
        dist.all_reduce(sizes, op=dist.ReduceOp.MIN, group=self.group)
        ready = [s.name for s, n in zip(self.specs, sizes.tolist()) if n]
        per_rank = cfg.batch_size // self.world
        before = gradient_steps(cfg, 0, global_step)
        totals: dict[str, torch.Tensor] = {}
        for u in range(owed if ready else 0):
            batch = {name: self.replay[name].sample(per_rank, self.generator) for name in ready}
            loss, stats = self.model(algo.loss, batch)
            stats["grad_norm"] = self._step(loss, f"gradient step {before + u + 1}")
            algo.after_update(self.model, before + u + 1)
            for name, v in stats.items():
                totals[name] = totals.get(name, 0.0) + v
        metrics = {}
        if totals:
            means = self._mean_over_ranks({name: v / owed for name, v in totals.items()})
            metrics.update(means)
            for name in {n.split("/", 1)[1] for n in means if "/" in n}:
                per_policy = [v for n, v in means.items() if n.endswith("/" + name)]
                metrics[name] = sum(per_policy) / len(per_policy)
        metrics.update(algo.explore(self.model, global_step + int(collected)))
        metrics["learning_rate"] = lr
        if cfg.norm_obs:
            self._update_obs_stats({name: {"obs": rows["obs"], **({"state": rows["state"]} if "state" in rows else {})}
                                    for name, rows in added.items()})
        return metrics, owed * per_rank * self.world if ready else 0

    def _on_device(self, trajs: dict[str, dict]) -> dict[str, dict]:
        """The trajectories on this rank's device, rewards scaled where --norm-reward is on."""
        trajs = {name: tree_map(lambda v: v.to(self.device, non_blocking=True), t) for name, t in trajs.items()}
        for name, scale in self.reward_scalers.items():
            t = trajs[name]
            t["rewards"] = scale(t["rewards"], t.pop("discounted_return"), t["valid"], self.group)
        return trajs

    def _update_obs_stats(self, samples: dict[str, dict]) -> None:
        """--norm-obs: merge the batch's observations into each policy's statistics, after the
        epochs: the batch trains under the statistics its actors acted with (its ratios start at 1),
        and the next weights published carry the new ones."""
        if not self.cfg.norm_obs:
            return
        for spec in self.specs:
            if spec.name not in samples:
                continue
            s = samples[spec.name]
            obs = tree_map(lambda v: _valid_steps(s, v), s["obs"])
            state = _valid(s, "state") if "state" in s else None
            self.policies[spec.name].obs_norm.update(obs, state, self.group)

    def units(self, trajs: dict[str, dict], pieces: list[tuple[int, int]]) -> dict[str, dict]:
        """Every policy's training units from this rank's trajectories: the algorithm's targets, then
        the valid steps as samples [B, ...], or a recurrent policy's sequences [N, L, ...], with the
        advantages normalised over every rank."""
        trajs = self._on_device(trajs)
        current = self.current(trajs) if self.algorithm.needs_current else {}
        samples = {}
        for spec in self.specs:
            traj = trajs[spec.name]
            adv, ret = self.algorithm.targets(traj, current.get(spec.name))
            if self.state_sizes[spec.name]:
                units = lambda t, a, r: sequences(t, a, r, self.cfg.seq_len)  # noqa: E731
            else:
                units = flatten_valid
            samples[spec.name] = cat([units(tree_map(lambda v: v[:, a:b], traj), adv[:, a:b], ret[:, a:b])
                                      for a, b in pieces or [(0, 0)]])  # a rank may hold only padding slots
        return self._normalise(samples)

    def forward(self, mb: dict[str, dict]) -> dict[str, tuple]:
        """The current network on a minibatch of each policy's units: (action distribution, values,
        the units' fields), all as flat samples, in one forward of the sharded root."""
        out = self.model({name: self._inputs(name, m) for name, m in mb.items()})
        result = {}
        for spec in self.specs:
            if spec.name in mb:
                pd, value, m = self._outputs(spec.name, out[spec.name], mb[spec.name])
                result[spec.name] = (distributions.make(spec.action, pd.float(), m.get("action_mask")), value.float(), m)
        return result

    def _inputs(self, name: str, m: dict) -> tuple:
        """The model's inputs for policy `name`'s units: flat samples as they are; batch-first
        sequences time-major, with their initial states and episode starts."""
        if not self.state_sizes[name]:
            return m["obs"], m.get("state"), None, None
        tm = lambda v: v.transpose(0, 1)  # noqa: E731
        return tree_map(tm, m["obs"]), tm(m["state"]) if "state" in m else None, m["core_state"], tm(m["starts"])

    def _outputs(self, name: str, out: tuple, m: dict) -> tuple[torch.Tensor, torch.Tensor, dict]:
        """(params, values, fields) as flat samples: for sequences, their valid steps only."""
        pd, value, _ = out
        if not self.state_sizes[name]:
            return pd, value, m
        valid = m["valid"]
        fields = {k: v for k, v in m.items() if k not in ("core_state", "starts", "valid")}
        pd, value = _batch_first(pd, valid), _batch_first(value, valid)
        return pd[valid], value[valid], tree_map(lambda v: v[valid], fields)

    def current(self, trajs: dict[str, dict]) -> dict[str, tuple[torch.Tensor, torch.Tensor]]:
        """The learner's log-probs of the taken actions and its values over whole trajectories [T, S, n]
        (V-trace's target policy), in one forward of every policy (FSDP's collectives run in the
        root's forward); a recurrent policy replays each chunk from the state its actor recorded."""
        inputs, flat = {}, {}
        for spec in self.specs:
            t = trajs[spec.name]
            if self.state_sizes[spec.name]:
                f = to_sequences(t, self.cfg.seq_len)
            else:
                f = tree_map(lambda v: v.reshape(-1, *v.shape[3:]),
                             {k: t[k] for k in ("obs", "actions", "state", "action_mask") if k in t})
            inputs[spec.name], flat[spec.name] = self._inputs(spec.name, f), f
        with torch.no_grad():
            out = self.model(inputs)
        current = {}
        for spec in self.specs:
            f, (pd, value, _) = flat[spec.name], out[spec.name]
            T, S, n = trajs[spec.name]["values"].shape
            if self.state_sizes[spec.name]:
                pd, value = _batch_first(pd, f["valid"]), _batch_first(value, f["valid"])
            logp = distributions.make(spec.action, pd.float(), f.get("action_mask")).log_prob(f["actions"])
            if self.state_sizes[spec.name]:
                current[spec.name] = (from_sequences(logp, T, S, n), from_sequences(value.float(), T, S, n))
            else:
                current[spec.name] = (logp.reshape(T, S, n), value.float().reshape(T, S, n))
        return current

    def _normalise(self, samples: dict[str, dict]) -> dict[str, dict]:
        """Advantages normalised per policy by the mean and standard deviation of every rank's
        samples together, so that 1 rank and 2 ranks take the same step (CleanRL normalises per
        minibatch instead). The advantages are gathered, a scalar per sample, so that the statistics
        are torch's own over the whole batch, exactly those a single rank computes."""
        if not self.cfg.norm_adv:
            return samples
        for name, s in samples.items():
            a = s["advantages"]
            everyone = self._gather_1d(_valid(s, "advantages"))
            if everyone.numel() > 1:  # one sample has no spread to normalise by
                s["advantages"] = (a - everyone.mean()) / (everyone.std() + 1e-8)
        return samples

    def _gather_1d(self, x: torch.Tensor) -> torch.Tensor:
        """Every rank's 1-D tensor, concatenated in rank order (they may differ in length)."""
        if self.world == 1:
            return x
        counts = [torch.zeros((), dtype=torch.int64, device=self.device) for _ in range(self.world)]
        dist.all_gather(counts, torch.tensor(x.numel(), device=self.device), group=self.group)
        longest = int(max(counts))
        padded = torch.cat([x, x.new_zeros(longest - x.numel())])
        parts = [torch.empty_like(padded) for _ in range(self.world)]
        dist.all_gather(parts, padded, group=self.group)
        return torch.cat([p[: int(c)] for p, c in zip(parts, counts)])

    def _explained_variance(self, samples: dict[str, dict]) -> dict[str, float]:
        """1 - Var(returns - values) / Var(returns), per policy and over all, from sums over every rank."""
        rows = []
        for name, s in samples.items():
            ret, res = _valid(s, "returns").double(), (_valid(s, "returns") - _valid(s, "values")).double()
            rows.append(torch.stack([ret.new_tensor(ret.numel()), ret.sum(), (ret ** 2).sum(), res.sum(), (res ** 2).sum()]))
        table = torch.stack(rows)
        dist.all_reduce(table, group=self.group)

        def ev(n, r, r2, e, e2) -> float:
            if n < 2:
                return float("nan")
            var_r, var_e = (r2 - r * r / n) / (n - 1), (e2 - e * e / n) / (n - 1)
            return float("nan") if var_r <= 0 else float(1 - var_e / var_r)

        out = {f"{name}/explained_variance": ev(*row.tolist()) for name, row in zip(samples, table)}
        out["explained_variance"] = ev(*table.sum(0).tolist())
        return out

    def _mean_over_ranks(self, values: dict[str, torch.Tensor]) -> dict[str, float]:
        """The all-reduced mean of a dict of scalars, by name (every rank holds the same names)."""
        names = sorted(values)
        stacked = torch.stack([torch.as_tensor(values[n], device=self.device).float() for n in names])
        dist.all_reduce(stacked, group=self.group)
        return dict(zip(names, (stacked / self.world).tolist()))

    def scatter(self, spec: PolicySpec, T: int, per_rank: int, packed: dict | None = None) -> dict:
        """This rank's env slots of policy `spec`'s trajectories (`marl.collectives.scatter`): rank 0
        passes the packed batch, the others receive."""
        fields = trajectory_fields(spec, self.state_sizes[spec.name], self.cfg.norm_reward, self.algorithm.off_policy)
        return collectives.scatter(fields, len(spec.agents), T, self.cfg.seq_len, per_rank, self.group, self.device,
                                   packed)

    def full_state_dict(self) -> dict[str, torch.Tensor]:
        """Unsharded CPU weights (a collective: every rank calls it; rank 0 receives them)."""
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


def _batch_first(x: torch.Tensor, valid: torch.Tensor) -> torch.Tensor:
    """A recurrent model's time-major output [L * N, ...] in the units' batch-first layout [N, L, ...]."""
    N, L = valid.shape
    return x.unflatten(0, (L, N)).transpose(0, 1)


def _valid(s: dict, key: str) -> torch.Tensor:
    """A field's values at the valid steps of a policy's units: all of them for samples, the
    unpadded steps for sequences."""
    return _valid_steps(s, s[key])


def _valid_steps(s: dict, x: torch.Tensor) -> torch.Tensor:
    """`x`, a field of the units `s` (or one leaf of it), at their valid steps (see `_valid`)."""
    return x[s["valid"]] if "valid" in s else x


def save(learner: Learner, iteration: int, trainer: dict | None = None) -> Path:
    """Every rank's part of a checkpoint; rank 0 adds the coordinator's `trainer` state and what
    it takes to check a resume against (see marl.checkpoint)."""
    cfg = learner.cfg
    meta = None
    if trainer is not None:
        meta = {**trainer, "learners": learner.world, "model_shape": checkpoint.model_shape(learner.specs, network_of(cfg)),
                "env": cfg.env}
    own = learner.replay if cfg.save_buffer else None
    return checkpoint.save(learner.state, learner.group, cfg.run_dir, iteration, meta, cfg, cfg.keep_checkpoints, own)


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
