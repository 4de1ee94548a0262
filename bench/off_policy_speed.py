"""Off-policy speed: DQN (configs/cartpole_dqn.toml) and SAC (configs/pendulum_sac.toml) through marl,
sync and async, against a one-process loop doing the same work, in one run.

marl's figures are train.py's own agent-steps/s (every process, RPC, the replay on the learner rank
included) over a fixed budget with no early stop, and the gradient steps it took per second. The
baseline is one process with no RPC and no FSDP: the same envs in one Gymnasium vector env, the same
networks (marl's Q-network; SAC's actor and twin critics), the same losses, batch, replay size and
gradient steps per agent-step, collecting the preset's steps per iteration and then taking the
gradient steps owed (as marl's sync mode does).

    python bench/off_policy_speed.py
    python bench/off_policy_speed.py --dqn-steps 30000 --sac-steps 3000
    python bench/off_policy_speed.py --smoke        # CI: tiny budgets, one marl run each (DQN sync, SAC async)
"""

from __future__ import annotations

import argparse
import sys
import tempfile
import time
from pathlib import Path

from common import run_train  # bench/common.py, which also puts the repository on sys.path


def preset(path: str):
    from marl.config import Config, load_toml

    return Config(**load_toml(path))


def marl_rate(config: str, steps: int, mode: str) -> tuple[float, float]:
    """train.py's agent-steps/s and gradient steps/s over `steps` agent-steps."""
    from marl.algorithms.base import gradient_steps

    with tempfile.TemporaryDirectory() as logdir:
        r = run_train(["--config", config, "--total-steps", str(steps), "--target-return", "inf", "--mode", mode,
                       "--checkpoint-every", "0"], Path(logdir) / "bench").result
    updates = gradient_steps(preset(config), 0, r.global_step)
    return r.global_step / r.seconds, updates / r.seconds


class Ring:
    """The one-process loop's replay: transitions in preallocated tensors, sampled uniformly."""

    def __init__(self, capacity: int, example: dict):
        import torch

        self.capacity, self.pos, self.size = capacity, 0, 0
        self.data = {k: torch.zeros((capacity, *v.shape[1:]), dtype=v.dtype) for k, v in example.items()}

    def add(self, rows: dict) -> None:
        import torch

        n = next(iter(rows.values())).shape[0]
        idx = (self.pos + torch.arange(n)) % self.capacity
        for k, v in rows.items():
            self.data[k][idx] = v
        self.pos, self.size = (self.pos + n) % self.capacity, min(self.size + n, self.capacity)

    def sample(self, k: int) -> dict:
        import torch

        idx = torch.randint(self.size, (k,))
        return {key: v[idx] for key, v in self.data.items()}


def collect(envs, act, obs, prev_done, T: int):
    """T steps of every env with `act(obs) -> (what the env is sent, what is stored)`: (rows of the real
    transitions, obs, prev_done)."""
    import numpy as np
    import torch

    rows = {k: [] for k in ("obs", "actions", "rewards", "next_obs", "terminated")}
    for _ in range(T):
        sent, a = act(obs)
        nobs, r, term, trunc, _ = envs.step(sent.numpy())
        keep = torch.from_numpy(~prev_done)  # an autoreset step is no transition
        for k, x in zip(rows, (obs, a, torch.from_numpy(r.astype(np.float32)), torch.from_numpy(nobs), torch.from_numpy(term))):
            rows[k].append(x[keep])
        prev_done = term | trunc
        obs = torch.from_numpy(nobs)
    return {k: torch.cat(v) for k, v in rows.items()}, obs, prev_done


def iteration(envs, act, obs, prev_done, cfg, ring, total: int):
    """Collect the preset's steps per iteration into the replay: (ring, obs, prev_done, gradient
    steps owed for them, agent-steps so far), as marl's sync mode does."""
    from marl.algorithms.base import gradient_steps

    rows, obs, prev_done = collect(envs, act, obs, prev_done, cfg.num_steps)
    ring = ring or Ring(cfg.buffer_size, rows)
    ring.add(rows)
    n = rows["actions"].shape[0]
    return ring, obs, prev_done, gradient_steps(cfg, total, total + n), total + n


def dqn_loop(steps: int) -> tuple[float, float]:
    import gymnasium as gym
    import numpy as np
    import torch

    from envs import describe
    from marl.algorithms.base import linear_schedule
    from marl.algorithms.dqn import td_loss, td_target
    from marl.models.q_network import QNetwork
    from marl.policies import specs_of

    cfg = preset("configs/cartpole_dqn.toml")
    (spec,) = specs_of(cfg, describe(cfg.env, cfg.agents))
    n = cfg.actors * cfg.envs_per_actor * cfg.agents
    envs = gym.make_vec(cfg.env, num_envs=n, vectorization_mode="vector_entry_point")
    q, target = (QNetwork(spec, cfg.hidden_sizes, cfg.encoder) for _ in range(2))
    target.load_state_dict(q.state_dict())
    opt = torch.optim.Adam(q.parameters(), lr=cfg.learning_rate, fused=True)
    obs, _ = envs.reset(seed=0)
    obs, prev_done = torch.from_numpy(obs), np.zeros(n, dtype=bool)
    ring, total, updates, g = None, 0, 0, torch.Generator().manual_seed(0)
    start = time.perf_counter()
    while total < steps:
        eps = linear_schedule(cfg.start_e, cfg.end_e, cfg.exploration_fraction * cfg.total_steps, total)

        def act(o):
            with torch.no_grad():
                greedy = q.q_values({"obs": o}).argmax(-1)
            a = torch.where(torch.rand(n, generator=g) < eps, torch.randint(0, 2, (n,), generator=g), greedy)
            return a, a

        ring, obs, prev_done, owed, total = iteration(envs, act, obs, prev_done, cfg, ring, total)
        for _ in range(owed):
            b = ring.sample(cfg.batch_size)
            both = q.q_values({"obs": torch.cat([b["obs"], b["next_obs"]])})
            qv, next_online = both.chunk(2)
            with torch.no_grad():
                disc = torch.where(b["terminated"], 0.0, cfg.gamma)
                y = td_target(b["rewards"], disc, target.q_values({"obs": b["next_obs"]}), next_online.detach())
            loss = td_loss(qv.gather(-1, b["actions"].unsqueeze(-1)).squeeze(-1), y)
            opt.zero_grad(set_to_none=True)
            loss.backward()
            torch.nn.utils.clip_grad_norm_(q.parameters(), cfg.max_grad_norm)
            opt.step()
            updates += 1
            if updates % cfg.target_network_frequency == 0:
                target.load_state_dict(q.state_dict())
    wall = time.perf_counter() - start
    return total / wall, updates / wall


def sac_loop(steps: int) -> tuple[float, float]:
    import math

    import gymnasium as gym
    import numpy as np
    import torch
    import torch.nn.functional as F

    from envs import describe
    from marl import distributions
    from marl.algorithms.sac import actor_loss, alpha_loss, soft_target
    from marl.models.sac import SACActor, SoftQ
    from marl.policies import specs_of

    cfg = preset("configs/pendulum_sac.toml")
    (spec,) = specs_of(cfg, describe(cfg.env, cfg.agents))
    n = cfg.actors * cfg.envs_per_actor * cfg.agents
    envs = gym.make_vec(cfg.env, num_envs=n, vectorization_mode="sync")
    actor = SACActor(spec, cfg.hidden_sizes, cfg.encoder)
    critics, targets = [SoftQ(spec, cfg.hidden_sizes, cfg.encoder) for _ in range(2)], [SoftQ(spec, cfg.hidden_sizes, cfg.encoder) for _ in range(2)]
    for c, t in zip(critics, targets):
        t.load_state_dict(c.state_dict())
    log_alpha = torch.zeros(1, requires_grad=True)
    with torch.no_grad():
        log_alpha.fill_(math.log(cfg.alpha))
    q_opt = torch.optim.Adam([p for c in critics for p in c.parameters()], lr=cfg.learning_rate, fused=True)
    a_opt = torch.optim.Adam([{"params": list(actor.parameters())}, {"params": [log_alpha]}], lr=cfg.learning_rate, fused=True)
    target_entropy = -float(spec.action.num_outputs)
    pi_of = lambda o: distributions.make(spec.action, actor.act({"obs": o})[0])  # noqa: E731
    obs, _ = envs.reset(seed=0)
    obs, prev_done = torch.from_numpy(obs), np.zeros(n, dtype=bool)
    ring, total, updates = None, 0, 0
    start = time.perf_counter()
    while total < steps:
        def act(o):
            with torch.no_grad():
                pi = pi_of(o)
                u = pi.sample()[0]
                return pi.to_env(u), u

        ring, obs, prev_done, owed, total = iteration(envs, act, obs, prev_done, cfg, ring, total)
        for _ in range(owed):
            b = ring.sample(cfg.batch_size)
            o, no = {"obs": b["obs"]}, {"obs": b["next_obs"]}
            alpha = log_alpha.exp().detach()
            with torch.no_grad():
                u, logp = pi_of(b["next_obs"]).sample()
                disc = torch.where(b["terminated"], 0.0, cfg.gamma)
                y = soft_target(b["rewards"], disc, targets[0](no, None, u), targets[1](no, None, u), logp, alpha)
            loss = F.mse_loss(critics[0](o, None, b["actions"]), y) + F.mse_loss(critics[1](o, None, b["actions"]), y)
            q_opt.zero_grad(set_to_none=True)
            a_opt.zero_grad(set_to_none=True)
            loss.backward()
            q_opt.step()
            u, logp = pi_of(b["obs"]).sample()
            loss = actor_loss(logp, torch.min(critics[0](o, None, u), critics[1](o, None, u)), alpha) + \
                alpha_loss(log_alpha, logp, target_entropy)
            q_opt.zero_grad(set_to_none=True)
            a_opt.zero_grad(set_to_none=True)
            loss.backward()
            a_opt.step()
            with torch.no_grad():
                for c, t in zip(critics, targets):
                    for pt, pc in zip(t.parameters(), c.parameters()):
                        pt.lerp_(pc, cfg.tau)
            updates += 1
    wall = time.perf_counter() - start
    return total / wall, updates / wall


def main() -> int:
    import torch

    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--dqn-steps", type=int, default=None, help="default 20,000; 1,100 with --smoke (past the "
                   "preset's 1,000 learning starts, so that both sides take gradient steps)")
    p.add_argument("--sac-steps", type=int, default=None, help="default 2,000; 100 with --smoke")
    p.add_argument("--smoke", action="store_true", help="CI: tiny budgets, and marl in one mode per algorithm (DQN "
                   "sync, SAC async: each mode once, each train.py a process to start): that every part runs")
    args = p.parse_args()
    dqn_steps = args.dqn_steps or (1_100 if args.smoke else 20_000)
    sac_steps = args.sac_steps or (100 if args.smoke else 2_000)
    modes = {"DQN": ("sync",), "SAC": ("async",)} if args.smoke else dict.fromkeys(("DQN", "SAC"), ("sync", "async"))
    torch.set_num_threads(1)
    for name, config, steps, loop in (("DQN", "configs/cartpole_dqn.toml", dqn_steps, dqn_loop),
                                      ("SAC", "configs/pendulum_sac.toml", sac_steps, sac_loop)):
        base = loop(steps)
        rows = {mode: marl_rate(config, steps, mode) for mode in modes[name]}
        print(f"{name} ({config}, {steps:,} agent-steps):")
        print(f"  one-process loop (no RPC, no FSDP, 1 thread): {base[0]:>8,.0f} agent-steps/s {base[1]:>7,.1f} updates/s")
        for mode, (rate, ups) in rows.items():
            print(f"  marl --mode {mode:<5}:                          {rate:>8,.0f} agent-steps/s {ups:>7,.1f} updates/s "
                  f"({rate / base[0]:.2f}x the loop)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
