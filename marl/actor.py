"""Actor: env copies plus a CPU copy of the policies, turning "collect" requests into Rollouts.

A `RolloutWorker` lives in an actor process; the coordinator creates it there with `rpc.remote`
and calls `collect` on it. One call steps all E env copies x N agents together, with one batched
forward per policy per step, and returns torch tensors. It knows nothing of FSDP or the learner.
"""

from __future__ import annotations

import time

import numpy as np
import torch

from envs import EnvInfo, make_agent_batch
from marl import distributions
from marl.config import Config
from marl.models import build_model, network_of
from marl.models.core import fresh_after
from marl.policies import critic_state, policy_obs, sides, specs_of
from marl.specs import allocate, step_fields, tree_map
from marl.trajectory import Rollout

# A slot in --rollout episodes mode may not need more than this many steps per episode; past
# it, something (an env that never ends) is wrong and the request fails instead of hanging.
_MAX_EPISODE_STEPS = 100_000


class RolloutWorker:
    def __init__(self, cfg: Config, info: EnvInfo, index: int, seed_offset: int = 0):
        """`seed_offset`: a resumed run passes the iteration it resumes at, so that its envs do not
        replay the episodes the run began with."""
        self.cfg, self.info, self.index = cfg, info, index
        self.copies = cfg.envs_per_actor
        self.specs = specs_of(cfg, info)
        # The env packs each policy's agents into arrays of their own: one forward per policy per step.
        self.env = make_agent_batch(info, cfg.envs_per_actor, [list(s.agents) for s in self.specs])
        self.policy = build_model(self.specs, network_of(cfg)).eval()
        self.central = any(s.central for s in self.specs)
        self.state_sizes = [self.policy.state_size(s.name) for s in self.specs]
        self.version = -1
        # Each actor's envs and sampling get their own stream, all derived from the run's seed.
        seed = cfg.seed * 100_003 + 7_919 * (index + 1) + 1_000_003 * seed_offset
        self.generator = torch.Generator().manual_seed(seed)
        # --opponents pool: the frozen snapshots this actor holds, the one it plays this request, and
        # per env copy the side (marl.policies.sides) that snapshot plays in the current game (-1: none).
        self.snapshots: dict[int, dict] = {}
        self.opponent_id: int | None = None
        if cfg.opponents == "pool":
            with torch.random.fork_rng(devices=[]):  # its weights come from the pool: leave the global stream alone
                self.frozen = build_model(self.specs, network_of(cfg)).eval()
        self.frozen_side = torch.full((self.copies,), -1, dtype=torch.int64)
        # Per policy, [sides + 1, its agents]: which of them each side holds; the last row (side -1) holds
        # none. Sliced per policy once here, since _frozen reads it twice a step.
        teams = sides(self.specs, info.agent_ids)
        members = torch.zeros((len(teams) + 1, len(info.agent_ids)), dtype=torch.bool)
        for k, (_, agents) in enumerate(teams):
            members[k, list(agents)] = True
        self._members = [members[:, list(s.agents)] for s in self.specs]
        self._sides = len(teams)
        self._nobody = [torch.zeros((self.copies, len(s.agents)), dtype=torch.bool) for s in self.specs]
        self._reset(seed)
        self._buffers: list[dict] = [{} for _ in self.specs]
        self._capacity = 0

    def _observe(self, obs) -> None:
        """The env's arrays for the current step as tensors (no copies), the agent-id leaf added."""
        self.obs = [policy_obs(spec, o, (self.copies,)) for spec, o in zip(self.specs, obs)]
        self.masks = [None if m is None else torch.from_numpy(m) for m in self.env.masks]

    def _draw_opponents(self, copies: torch.Tensor) -> None:
        """For each env copy in `copies` (bool [copies]) starting a game: with probability --pool-prob,
        the side the snapshot plays in it, uniformly among the sides; else none."""
        if self.opponent_id is None:
            self.frozen_side[copies] = -1
            return
        draw = torch.rand(self.copies, generator=self.generator) < self.cfg.pool_prob
        side = torch.randint(self._sides, (self.copies,), generator=self.generator)
        self.frozen_side = torch.where(copies, torch.where(draw, side, -1), self.frozen_side)

    def _frozen(self, g: int) -> torch.Tensor:
        """[copies, agents of policy g]: the slots a snapshot plays in the current games."""
        if self.opponent_id is None:
            return self._nobody[g]
        return self._members[g][self.frozen_side]

    def _reset(self, seed: int | None) -> None:
        self._observe(self.env.reset(seed=seed))
        self._draw_opponents(torch.ones(self.copies, dtype=torch.bool))
        # Per slot: its next step is a real transition (not an autoreset step, not a departed agent's padding).
        self.active = [torch.from_numpy(a.copy()) for a in self.env.active]
        self.ep_return = [torch.zeros(a.shape, dtype=torch.float64) for a in self.active]
        self.ep_length = [torch.zeros(a.shape, dtype=torch.int64) for a in self.active]
        # A recurrent policy's state per slot, and whether the slot's next step starts an episode
        # (its state is zeroed then). New weights keep the states, as Sample Factory and CleanRL do.
        self.core = [torch.zeros((*a.shape, size)) for a, size in zip(self.active, self.state_sizes)]
        self.fresh = [torch.ones(a.shape, dtype=torch.bool) for a in self.active]
        # --norm-reward: each slot's discounted return so far, G = gamma * G + r, restarted after each episode.
        self.discounted = [torch.zeros(a.shape, dtype=torch.float64) for a in self.active]

    def _grow(self, steps: int) -> None:
        """(Re)allocate the per-step buffers for at least `steps` steps, keeping what they hold."""
        if steps <= self._capacity:
            return
        cap = max(steps, 2 * self._capacity)
        for g, spec in enumerate(self.specs):
            new = allocate(step_fields(spec, self.cfg.norm_reward), (cap, self.copies, len(spec.agents)))
            if self._capacity:
                tree_map(lambda pair: pair[0][: self._capacity].copy_(pair[1]), _zip(new, self._buffers[g]))
            self._buffers[g] = new
        self._capacity = cap

    def _forward(self, g: int, state: torch.Tensor | None, model=None):
        """Policy g's distribution and values for the current observations, the critic's state
        input, and a recurrent policy's state after this step (None for a feed-forward one).
        `model`: another set of the same networks (a frozen snapshot; feed-forward), instead of the policy."""
        spec = self.specs[g]
        net = (model or self.policy).policies[spec.name]
        s = critic_state(spec, state)
        flat = {k: x.reshape(-1, *x.shape[2:]) for k, x in self.obs[g].items()}
        s_flat = None if s is None else s.reshape(-1, spec.state_dim)
        lead = (self.copies, len(spec.agents))
        if self.state_sizes[g] and model is None:
            # One step of the sequence API: a batched call over every agent slot.
            params, value, core = net({k: x.unsqueeze(0) for k, x in flat.items()},
                                      None if s_flat is None else s_flat.unsqueeze(0),
                                      self.core[g].reshape(-1, self.state_sizes[g]), self.fresh[g].reshape(1, -1))
            core = core.reshape(*lead, -1)
        else:
            params, value, core = net(flat, s_flat)
        mask = self.masks[g]
        dist = distributions.make(spec.action, params, None if mask is None else mask.reshape(-1, mask.shape[-1]))
        return dist, value.reshape(lead), s, core

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
            self.frozen.load_state_dict(self.snapshots[snap])
            self.opponent_id = snap
        with torch.inference_mode():
            if self.cfg.rollout == "steps":
                steps, episodes = self._run(self.cfg.num_steps, quota=None)
            else:
                self._reset(None)  # a fresh start, so that every slot's K episodes are whole
                steps, episodes = self._run(None, quota=self.cfg.episodes_per_request)
            state = torch.from_numpy(self.env.state()) if self.central else None
            trajectories = {}
            for g, spec in enumerate(self.specs):
                b = tree_map(lambda v: v[:steps].clone(), self._buffers[g])
                _, next_value, _, _ = self._forward(g, state)  # the state after it is not kept: the next request redoes this step
                # With NEXT_STEP autoreset the value computed on the step after a truncation is V(final obs).
                later = torch.cat([b["values"][1:], next_value.unsqueeze(0)])
                bootstrap = torch.where(b["truncated"], later, 0.0)
                after = torch.cat([b["values"], next_value.unsqueeze(0)])
                for (rows, c, j), step in self._late_truncations[g]:
                    bootstrap[rows, c, j] = after[step, c, j]
                trajectories[spec.name] = {**b, "bootstrap_value": bootstrap, "next_value": next_value}
                if self.state_sizes[g]:
                    trajectories[spec.name]["core_state"] = torch.stack(self._chunk_states[g])
        return Rollout(
            trajectories,
            episode_returns=torch.tensor([e[1] for e in episodes], dtype=torch.float64),
            episode_lengths=torch.tensor([e[2] for e in episodes], dtype=torch.int64),
            episode_agents=torch.tensor([e[0] for e in episodes], dtype=torch.int64),
            policy_version=self.version, actor=self.index, collect_seconds=time.perf_counter() - start)

    def _close_waiting(self, g: int, t: int, waiting: torch.Tensor, opened: torch.Tensor, r_t: torch.Tensor,
                       te_t: torch.Tensor, tr_t: torch.Tensor) -> torch.Tensor:
        """Rewards and ends that reach slots at step t while they wait (not valid, a transition open)
        belong to the row of their latest move; returns which slots' episodes ended so."""
        B = self._buffers[g]
        c, j = waiting.nonzero(as_tuple=True)
        rows = opened[c, j]
        B["rewards"][rows, c, j] += r_t[c, j]
        self.ep_return[g][c, j] += r_t[c, j]
        if self.cfg.norm_reward:  # that row's discounted return, and what follows from it, grow by the reward
            B["discounted_return"][rows, c, j] += r_t[c, j]
            self.discounted[g][c, j] += r_t[c, j]
        ended = te_t[c, j] | tr_t[c, j]
        B["terminated"][rows, c, j] |= te_t[c, j]
        B["truncated"][rows, c, j] |= tr_t[c, j] & ~te_t[c, j]
        late = tr_t[c, j] & ~te_t[c, j]
        if bool(late.any()):  # bootstrapped from the final observation, which the step after t sees
            self._late_truncations[g].append((torch.stack([rows[late], c[late], j[late]]), t + 1))
        out = torch.zeros_like(waiting)
        out[c[ended], j[ended]] = True
        if self.cfg.norm_reward:
            self.discounted[g][out] = 0.0
        self.fresh[g][out] = True
        return out

    def _run(self, num_steps: int | None, quota: int | None) -> tuple[int, list[tuple[int, float, int]]]:
        """Step all slots for `num_steps` steps, or until every slot has finished `quota` episodes.

        Returns the number of steps taken and the finished episodes as (agent, return, length).
        """
        self._grow(num_steps or 256)
        finished: list[tuple[int, float, int]] = []
        done_count = [torch.zeros(a.shape, dtype=torch.int64) for a in self.active]
        self._chunk_states = [[] for _ in self.specs]
        # Per slot, the row of its latest move while the transition it began is still open: a
        # turn-based game's waiting agent (envs.aec) gets its rewards, and its end, at other agents'
        # steps. -1: none open (or the move was its episode's last).
        opened = [torch.full(a.shape, -1, dtype=torch.int64) for a in self.active]
        self._late_truncations: list[list[tuple[torch.Tensor, int]]] = [[] for _ in self.specs]
        t = 0
        while True:
            if num_steps is not None and t == num_steps:
                return t, finished
            if quota is not None:
                if all(bool((d >= quota).all()) for d in done_count):
                    return t, finished
                if t >= _MAX_EPISODE_STEPS * quota:
                    raise RuntimeError(f"{self.info.env_id}: episodes did not end within {_MAX_EPISODE_STEPS} steps")
            self._grow(t + 1)
            state = torch.from_numpy(self.env.state()) if self.central else None
            actions = []
            for g, spec in enumerate(self.specs):
                B = self._buffers[g]
                if self.state_sizes[g] and (t % self.cfg.seq_len == 0 if self.cfg.seq_len else t == 0):
                    # The state a chunk starts from, zeroed where an episode starts: the learner replays from it.
                    self._chunk_states[g].append(torch.where(self.fresh[g].unsqueeze(-1), 0.0, self.core[g]))
                dist, value, s, core = self._forward(g, state)
                if core is not None:
                    self.core[g] = core
                action, logprob = dist.sample(self.generator)
                action = action.reshape(self.copies, len(spec.agents), *spec.action.shape)
                frozen = self._frozen(g)
                env_action = distributions.env_action(dist, action).numpy()
                if bool(frozen.any()):  # those seats move as the snapshot would; their rows stay invalid
                    theirs = self._forward(g, state, self.frozen)[0]
                    a_op = theirs.sample(self.generator)[0].reshape(action.shape)
                    pick = frozen.view(*frozen.shape, *[1] * (action.dim() - 2))
                    env_action = np.where(pick.numpy(), distributions.env_action(theirs, a_op).numpy(), env_action)
                    action = torch.where(pick, a_op, action)
                for name, x in self.obs[g].items():
                    B["obs"][name][t] = x
                B["actions"][t], B["values"][t] = action, value
                B["logprobs"][t] = logprob.reshape(self.copies, len(spec.agents))
                if spec.mask:
                    B["action_mask"][t] = self.masks[g]
                if s is not None:
                    B["state"][t] = s
                actions.append(env_action)
            obs, rew, term, trunc, active = self.env.step(actions)
            for g, spec in enumerate(self.specs):
                B = self._buffers[g]
                frozen = self._frozen(g)
                valid = self.active[g] & ~frozen
                if quota is not None:
                    valid &= done_count[g] < quota
                    done_count[g] += (torch.from_numpy(term[g]) | torch.from_numpy(trunc[g])) & frozen
                r_t, te_t, tr_t = torch.from_numpy(rew[g]), torch.from_numpy(term[g]), torch.from_numpy(trunc[g])
                B["rewards"][t] = r_t
                term_g, trunc_g = te_t & valid, tr_t & valid
                B["terminated"][t], B["truncated"][t], B["valid"][t] = term_g, trunc_g, valid
                self.fresh[g] = fresh_after(valid, term_g)
                self.ep_return[g] += r_t * valid
                self.ep_length[g] += valid
                done = term_g | trunc_g
                if self.cfg.norm_reward:
                    G = self.discounted[g] * self.cfg.gamma + r_t * valid
                    B["discounted_return"][t] = G
                    self.discounted[g] = G.masked_fill(done, 0.0)
                waiting = ~valid & (opened[g] >= 0)
                if bool(waiting.any()):
                    done |= self._close_waiting(g, t, waiting, opened[g], r_t, te_t, tr_t)
                opened[g] = torch.where(valid, torch.where(done, -1, t), torch.where(done, -1, opened[g]))
                if bool(done.any()):
                    for (c, j), ret, length in zip(done.nonzero().tolist(), self.ep_return[g][done].tolist(),
                                                   self.ep_length[g][done].tolist()):
                        finished.append((spec.agents[j], ret, length))
                    self.ep_return[g][done] = 0.0
                    self.ep_length[g][done] = 0
                    done_count[g] += done
                # A slot's env resets on the step after it reports done (NEXT_STEP autoreset): the env
                # says so with active False, as it does for the padding of an agent that left its episode.
                # (A slot past its episode quota stays invalid until the next request resets every env.)
                self.active[g] = torch.from_numpy(active[g])
            if self.opponent_id is not None:
                over = ~torch.stack([a.any(dim=1) for a in self.active]).any(dim=0)  # copies whose next step is a reset
                if bool(over.any()):
                    self._draw_opponents(over)
            self._observe(obs)
            t += 1


def _zip(a: dict, b: dict) -> dict:
    """Two nested dicts of the same shape as one of pairs."""
    return {k: _zip(a[k], b[k]) if isinstance(a[k], dict) else (a[k], b[k]) for k in a}
