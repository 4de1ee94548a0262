"""The one env loop, for training (marl.actor) and evaluation (marl.evaluate) alike.

`EnvRunner` steps an agent batch (envs.make_agent_batch: per policy, arrays [copies, n_g, ...]) with
what an action source (marl.sources) decides, one call per policy per step, and keeps the episode
accounting: which slots' steps are real transitions, episode starts, returns and lengths, the
waiting agents of turn-based games, and per-slot episode quotas. What is kept of the steps is the
recorders' (marl.recorders): each gets

    act(t, g, runner, a)                      after policy g acted at step t (runner.obs, masks, fresh: its inputs)
    step(t, g, r, term, trunc, valid, done)   after the env stepped: the step's flags, masked by `valid`
    wait(t, g, rows, c, j, r, term, trunc)    rewards and ends reaching waiting slots (c, j), which belong
                                              to the row of their latest move, `rows`
    episodes(g, done, returns, lengths)       the episodes that ended at this step
    stepped()                                 once per env step, after the env stepped
"""

from __future__ import annotations

from typing import Callable

import torch

from marl.models.core import fresh_after
from marl.policies import policy_obs

# A slot in quota mode may not need more than this many steps per episode; past it, something (an
# env that never ends) is wrong and the run fails instead of hanging.
MAX_EPISODE_STEPS = 100_000


class EnvRunner:
    def __init__(self, env, specs, copies: int, central: bool = False, name: str = "the env", turn_based: bool = True):
        """`central`: read the env's global state each step (a centralized critic's input); `name`
        (the env id) for errors; `turn_based`: agents may wait mid-episode for their turn (envs.aec),
        so that rewards and ends reach a slot between its moves; False (EnvInfo.turn_based says so)
        skips that bookkeeping, a few ops of every step."""
        self.env, self.specs, self.copies, self.central, self.name = env, specs, copies, central, name
        self.turn_based = turn_based
        # A torch batch (envs.protocol.AgentBatch) gives tensors on its device and takes its actions there;
        # the runner's own counters live beside them. None: a NumPy batch, counters on the CPU.
        self.device = getattr(env, "device", None)

    def _observe(self, obs) -> None:
        """The env's arrays for the current step as tensors (no copies), the agent-id leaf added."""
        self.obs = [policy_obs(spec, o, (self.copies,), self.device) for spec, o in zip(self.specs, obs)]
        self.masks = [None if m is None else torch.as_tensor(m) for m in self.env.masks]

    def state(self) -> torch.Tensor | None:
        return torch.as_tensor(self.env.state()) if self.central else None

    def reset(self, seed: int | None) -> None:
        self._observe(self.env.reset(seed=seed))
        # Per slot: its next step is a real transition (not an autoreset step, not a departed agent's padding).
        self.active = [torch.as_tensor(a).clone() for a in self.env.active]
        self.ep_return = [torch.zeros(a.shape, dtype=torch.float64, device=self.device) for a in self.active]
        self.ep_length = [torch.zeros(a.shape, dtype=torch.int64, device=self.device) for a in self.active]
        # Whether the slot's next step starts an episode (a recurrent policy's state is zeroed then).
        self.fresh = [torch.ones(a.shape, dtype=torch.bool, device=self.device) for a in self.active]

    def run(self, source, recorders: list, num_steps: int | None = None, quota: int | None = None,
            foreign: Callable[[int], torch.Tensor] | None = None,
            new_games: Callable[[torch.Tensor], None] | None = None,
            until: Callable[[], bool] | None = None) -> int:
        """Step every slot for `num_steps` steps, or until each has finished `quota` episodes (a slot past
        its quota steps on, its steps no longer valid), or until `until()`; returns the steps taken.
        `foreign(g)` [copies, n_g]: slots played for someone else (a frozen snapshot's seats), whose steps
        are not valid and whose episodes count only toward the quota. `new_games(copies)`: called with
        the env copies whose next step is a reset, before it."""
        counted = [torch.zeros(a.shape, dtype=torch.int64, device=self.device) for a in self.active]
        # Per slot, the row of its latest move while the transition it began is still open: a
        # turn-based game's waiting agent (envs.aec) gets its rewards, and its end, at other agents'
        # steps. -1: none open (or the move was its episode's last).
        opened = [torch.full(a.shape, -1, dtype=torch.int64, device=self.device) for a in self.active]
        t = 0
        while True:
            if num_steps is not None and t == num_steps:
                return t
            if quota is not None:
                if all(bool((d >= quota).all()) for d in counted):
                    return t
                if t >= MAX_EPISODE_STEPS * quota:
                    raise RuntimeError(f"{self.name}: not every agent finished {quota} episodes within {t:,} steps")
            if until is not None and until():
                return t
            state = self.state()
            actions = []
            for g in range(len(self.specs)):
                a = source.act(g, self.obs[g], self.masks[g], self.fresh[g], state)
                for r in recorders:
                    r.act(t, g, self, a)
                actions.append(a.env.numpy() if self.device is None else a.env)
            obs, rew, term, trunc, active = self.env.step(actions)
            for r in recorders:
                r.stepped()
            for g in range(len(self.specs)):
                r_t, te_t, tr_t = torch.as_tensor(rew[g]), torch.as_tensor(term[g]), torch.as_tensor(trunc[g])
                valid = self.active[g]
                if foreign is not None:
                    theirs = foreign(g)
                    valid = valid & ~theirs
                    counted[g] += (te_t | tr_t) & theirs
                if quota is not None:
                    valid = valid & (counted[g] < quota)
                term_g, trunc_g = te_t & valid, tr_t & valid
                self.fresh[g] = fresh_after(valid, term_g)
                self.ep_return[g] += r_t * valid
                self.ep_length[g] += valid
                done = term_g | trunc_g
                for r in recorders:
                    r.step(t, g, r_t, term_g, trunc_g, valid, done)
                if self.turn_based:
                    waiting = ~valid & (opened[g] >= 0)
                    if bool(waiting.any()):
                        done |= self._close_waiting(recorders, t, g, waiting, opened[g], r_t, te_t, tr_t)
                    opened[g] = torch.where(valid, torch.where(done, -1, t), torch.where(done, -1, opened[g]))
                if bool(done.any()):
                    ended = done.nonzero(as_tuple=True)  # found once for both reads
                    for r in recorders:
                        r.episodes(g, done, self.ep_return[g][ended], self.ep_length[g][ended])
                    self.ep_return[g].masked_fill_(done, 0.0)
                    self.ep_length[g].masked_fill_(done, 0)
                    counted[g] += done
                # A slot's env resets on the step after it reports done (NEXT_STEP autoreset): the env
                # says so with active False, as it does for the padding of an agent that left its episode.
                # (A slot past its quota stays invalid until the next reset.)
                self.active[g] = torch.as_tensor(active[g])
            if new_games is not None:
                over = ~torch.stack([a.any(dim=1) for a in self.active]).any(dim=0)
                if bool(over.any()):
                    new_games(over)
            self._observe(obs)
            t += 1

    def _close_waiting(self, recorders, t, g, waiting, opened, r_t, te_t, tr_t) -> torch.Tensor:
        """Rewards and ends that reach slots at step t while they wait (not valid, a transition open)
        count toward their episode; returns which slots' episodes ended so."""
        c, j = waiting.nonzero(as_tuple=True)
        self.ep_return[g][c, j] += r_t[c, j]
        for r in recorders:
            r.wait(t, g, opened[c, j], c, j, r_t[c, j], te_t[c, j], tr_t[c, j])
        ended = te_t[c, j] | tr_t[c, j]
        out = torch.zeros_like(waiting)
        out[c[ended], j[ended]] = True
        self.fresh[g][out] = True
        return out
