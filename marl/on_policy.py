"""The on-policy update of a learner rank (PPO, APPO, IMPALA): the trajectories just collected turn
into the algorithm's targets, then its passes over minibatches, and are dropped.

Every method is a collective over the learner ranks (FSDP's in the root's forward, the metrics'
all-reduce): every rank calls it, in the same order.
"""

from __future__ import annotations

import itertools
from typing import NamedTuple

import torch
import torch.distributed as dist

from marl import distributions
from marl.collectives import gather_1d, mean_over_ranks, per_policy_means
from marl.specs import cat, tree_map
from marl.trajectory import flatten_valid, from_sequences, sequences, to_sequences


class Current(NamedTuple):
    """One policy's trajectories under the learner's weights (`OnPolicyTraining.current`)."""

    logprobs: torch.Tensor  # [T, S, n] of the taken actions
    values: torch.Tensor  # [T, S, n]
    next_value: torch.Tensor | None  # [S, n], V past the last step where the trajectories carry `after`


class OnPolicyTraining:
    def __init__(self, learner):
        self.learner = learner
        self.cfg, self.algorithm, self.specs = learner.cfg, learner.algorithm, learner.specs
        self.group, self.device, self.world = learner.group, learner.device, learner.world
        self.state_sizes = learner.state_sizes
        self.generator, self.cut_generator = learner.generator, learner.cut_generator

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
        cfg, algo, learner = self.cfg, self.algorithm, self.learner
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
        cut = {s.name: torch.randperm(samples[s.name]["values"].shape[0], generator=self.cut_generator)[: sizes[s.name]]
               for s in specs}
        metrics = self._explained_variance(samples)
        stats: list[dict[str, torch.Tensor]] = []
        for epoch in range(algo.epochs):
            batches = algo.minibatches({name: sizes[name] for name in cut}, K, self.generator)
            # One gather per field and pass, in the pass's order (the cut, then the minibatches one
            # after another): each minibatch is then a slice of it. A gather per minibatch cost more
            # than the step's arithmetic on the default run.
            passes, ends = {}, {}  # (nothing else holds the last pass's copy: it goes before this one is made)
            for name, c in cut.items():
                order = c[torch.cat([b[name] for b in batches]).to(c.device)].to(self.device)
                passes[name] = tree_map(lambda v: v[order], samples[name])  # noqa: B023 - applied here, at once
                ends[name] = [0, *itertools.accumulate(len(b[name]) for b in batches)]
            epoch_kl = torch.zeros((), device=self.device)
            for k in range(len(batches)):
                step = self._minibatch(specs, _slices(passes, ends, k), f"epoch {epoch + 1}, minibatch {k + 1}")
                stats.append(step)
                if cfg.target_kl is not None:
                    kls = [v for name, v in step.items() if name.endswith("/approx_kl")]
                    if kls:
                        epoch_kl += torch.stack(kls).mean()
            if cfg.target_kl is not None:
                # Every rank must stop after the same epoch, or the next collective deadlocks.
                dist.all_reduce(epoch_kl, group=self.group)
                if epoch_kl.item() / (self.world * K) > cfg.target_kl:
                    break
        # Averaged once at the end (a running sum was an op per metric per step).
        means = {name: torch.stack([s[name] for s in stats]).mean() for name in stats[0]}
        metrics.update(per_policy_means(mean_over_ranks(means, self.group, self.device)))
        used = torch.tensor(sum(int(samples[name]["valid"][c].sum()) if "valid" in samples[name] else sizes[name]
                                for name, c in cut.items()), device=self.device)
        dist.all_reduce(used, group=self.group)
        learner.update_obs_stats({name: {"obs": tree_map(lambda v: _valid_steps(s, v), s["obs"]),
                                         **({"state": _valid(s, "state")} if "state" in s else {})}
                                  for name, s in samples.items()})
        return metrics, int(used)

    def _minibatch(self, specs, mb: dict[str, dict], where: str) -> dict[str, torch.Tensor]:
        """One gradient step on a minibatch of each policy's units, the policies' losses summed;
        returns its metrics by `<policy>/<name>`, and `grad_norm`."""
        out = self.forward(mb)
        loss, step = 0.0, {}
        for spec in specs:
            pi, value, m = out[spec.name]
            policy_loss, policy_stats = self.algorithm.loss(pi.log_prob(m["actions"]), pi.entropy(), value, m)
            loss = loss + policy_loss
            step.update({f"{spec.name}/{k}": v for k, v in policy_stats.items()})
        step["grad_norm"] = self.learner.step(loss, "policy", where)
        return step

    def units(self, trajs: dict[str, dict], pieces: list[tuple[int, int]]) -> dict[str, dict]:
        """Every policy's training units from this rank's trajectories: the algorithm's targets, then
        the valid steps as samples [B, ...], or a recurrent policy's sequences [N, L, ...], with the
        advantages normalised over every rank."""
        trajs = self.learner.on_device(trajs)
        current = self.current(trajs) if self.algorithm.needs_current else {}
        samples = {}
        for spec in self.specs:
            here = current.get(spec.name)
            traj = self.algorithm.anchored({k: v for k, v in trajs[spec.name].items() if k != "after"}, here)
            adv, ret = self.algorithm.targets(traj, here)
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
        out = self.learner.model({name: self._inputs(name, m) for name, m in mb.items()})
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
        pd, value = batch_first(pd, valid), batch_first(value, valid)
        return pd[valid], value[valid], tree_map(lambda v: v[valid], fields)

    def current(self, trajs: dict[str, dict]) -> dict[str, Current]:
        """The learner's log-probs of the taken actions and its values over whole trajectories [T, S, n]
        (V-trace's target policy, the decoupled PPO's proximal one), in one forward of every policy
        (FSDP's collectives run in the root's forward); a recurrent policy replays each chunk from
        the state its actor recorded. A feed-forward policy whose trajectories carry `after` also
        values the observations past the last step, as rows appended to the same forward."""
        inputs, flat, rows = {}, {}, {}
        for spec in self.specs:
            t = trajs[spec.name]
            if self.state_sizes[spec.name]:  # (replayed from the actor's states, it keeps the actor's V past the end)
                f = to_sequences({k: v for k, v in t.items() if k != "after"}, self.cfg.seq_len)
            else:
                f = tree_map(lambda v: v.reshape(-1, *v.shape[3:]),
                             {k: t[k] for k in ("obs", "actions", "state", "action_mask") if k in t})
            inputs[spec.name], flat[spec.name] = self._inputs(spec.name, f), f
            if "after" in t and not self.state_sizes[spec.name]:
                after = tree_map(lambda v: v.reshape(-1, *v.shape[2:]), t["after"])
                rows[spec.name] = f["actions"].shape[0]
                both = {"obs": {k: torch.cat([v, after["obs"][k]]) for k, v in f["obs"].items()}}
                if "state" in f:
                    both["state"] = torch.cat([f["state"], after["state"]])
                inputs[spec.name] = self._inputs(spec.name, both)
        with torch.no_grad():
            out = self.learner.model(inputs)
        current = {}
        for spec in self.specs:
            f, (pd, value, _) = flat[spec.name], out[spec.name]
            T, S, n = trajs[spec.name]["values"].shape
            value, next_value = value.float(), None
            if spec.name in rows:
                k = rows[spec.name]
                pd, value, next_value = pd[:k], value[:k], value[k:].reshape(S, n)
            if self.state_sizes[spec.name]:
                pd, value = batch_first(pd, f["valid"]), batch_first(value, f["valid"])
            logp = distributions.make(spec.action, pd.float(), f.get("action_mask")).log_prob(f["actions"])
            if self.state_sizes[spec.name]:
                current[spec.name] = Current(from_sequences(logp, T, S, n), from_sequences(value, T, S, n), None)
            else:
                current[spec.name] = Current(logp.reshape(T, S, n), value.reshape(T, S, n), next_value)
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
            everyone = gather_1d(_valid(s, "advantages"), self.group, self.device)
            if everyone.numel() > 1:  # one sample has no spread to normalise by
                s["advantages"] = (a - everyone.mean()) / (everyone.std() + 1e-8)
        return samples

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


def _slices(passes: dict[str, dict], ends: dict[str, list[int]], k: int) -> dict[str, dict]:
    """Minibatch k of a pass: each policy's units from ends[k] to ends[k + 1] (views)."""
    return {name: tree_map(lambda v: v[ends[name][k]:ends[name][k + 1]], d) for name, d in passes.items()}  # noqa: B023


def batch_first(x: torch.Tensor, valid: torch.Tensor) -> torch.Tensor:
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
