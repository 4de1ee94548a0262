"""Training throughput: PPO end to end, sync and async, against a one-process PPO loop, one run.

marl's figures are `train.py`'s own agent-steps/s (collect + learn + publish, every process and
RPC included) with the default config except a fixed step budget and no early stop, once with
`--mode sync` and once with `--mode async`. The baseline is the same PPO in one process with no
RPC, no FSDP and no other process: the same envs in one Gymnasium vector env, the same network,
the same reward scaling, GAE, loss, minibatches and epochs (CleanRL's shape).

    python bench/train_throughput.py                        # default config
    python bench/train_throughput.py -- --num-steps 128     # any train.py flags after --, for both modes
"""

from __future__ import annotations

import argparse
import dataclasses
import sys
import tempfile
import time
from pathlib import Path

from common import run_train  # bench/common.py, which also puts the repository on sys.path

TARGET = 250_000


def marl_rate(steps: int, extra: list[str]) -> tuple[float, dict[str, float]]:
    """train.py's agent-steps/s, and the mean of its perf/ scalars over the run (first 3 iterations skipped)."""
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    with tempfile.TemporaryDirectory() as logdir:
        r = run_train(["--total-steps", str(steps), "--target-return", "inf", *extra], Path(logdir) / "bench").result
        acc = EventAccumulator(str(Path(logdir) / "bench"), size_guidance={"scalars": 0})
        acc.Reload()
        perf = {}
        for tag in acc.Tags()["scalars"]:
            values = [e.value for e in acc.Scalars(tag)]
            values = values[3:] or values  # warm-up iterations out, unless that is all there is
            if tag.startswith("perf/") and values and "startup" not in tag:
                perf[tag[5:]] = sum(values) / len(values)
    return r.global_step / r.seconds, perf


def show_perf(mode: str, perf: dict[str, float]) -> None:
    ms = ", ".join(f"{k.removesuffix('_seconds')} {v * 1e3:.1f} ms" for k, v in perf.items() if k.endswith("_seconds"))
    print(f"  {mode} per iteration: {ms}; policy lag {perf.get('policy_lag', 0):.2f}")
    print(f"  {mode} coordinator overhead (RPC wait beyond actor compute + weight publication) / iteration: "
          f"{perf['coordinator_overhead']:.1%} (target < 10%)")


def baseline_rate(steps: int) -> float:
    """The same synchronous PPO in one process: collect T steps of every env, then learn."""
    import gymnasium as gym
    import torch

    from envs import describe
    from marl import distributions
    from marl.algorithms import gae, ppo_loss
    from marl.config import Config, validate
    from marl.models.actor_critic import ActorCritic
    from marl.normalize import RewardScaler
    from marl.policies import specs_of

    torch.set_num_threads(1)
    cfg = validate(dataclasses.replace(Config(), agents=8), gpus=0)  # the defaults as train.py resolves them
    scaler = RewardScaler(cfg.clip_reward) if cfg.norm_reward else None  # --norm-reward, on by default for PPO
    info = describe(cfg.env, cfg.agents)
    n = cfg.actors * cfg.envs_per_actor * cfg.agents
    envs = gym.make_vec(cfg.env, num_envs=n, vectorization_mode="vector_entry_point")
    (spec,) = specs_of(cfg, info)  # the one shared policy
    model = ActorCritic(spec, cfg.hidden_sizes, cfg.encoder)
    opt = torch.optim.Adam(model.parameters(), lr=cfg.learning_rate, eps=1e-5, fused=True)
    obs, _ = envs.reset(seed=0)
    obs = torch.from_numpy(obs)
    T = cfg.num_steps
    done_prev = torch.zeros(n, dtype=torch.bool)
    discounted = torch.zeros(n)  # each env's discounted return so far, as an actor slot keeps it
    total, start = 0, time.perf_counter()
    while total < steps:
        buf = {k: [] for k in ("obs", "act", "logp", "val", "rew", "term", "trunc", "valid", "ret")}
        with torch.inference_mode():
            for _ in range(T):
                pd, v, _ = model({"obs": obs})
                a, lp = distributions.make(spec.action, pd).sample()
                nobs, r, term, trunc, _ = envs.step(a.numpy())
                r = torch.from_numpy(r).float()
                G = discounted * cfg.gamma + r * ~done_prev
                for k, x in zip(buf, (obs, a, lp, v, r, torch.from_numpy(term), torch.from_numpy(trunc), ~done_prev, G)):
                    buf[k].append(x)
                done_prev = torch.from_numpy(term | trunc)
                discounted = G.masked_fill(done_prev, 0.0)
                obs = torch.from_numpy(nobs)
            _, next_v, _ = model({"obs": obs})
        b = {k: torch.stack(v) for k, v in buf.items()}
        if scaler is not None:
            b["rew"] = scaler(b["rew"], b["ret"], b["valid"], None)
        later = torch.cat([b["val"][1:], next_v[None]])
        adv, ret = gae(b["rew"], b["val"], next_v, b["term"], b["trunc"], torch.where(b["trunc"], later, 0.0),
                       cfg.gamma, cfg.gae_lambda)
        m = b["valid"].reshape(-1)
        data = [x.reshape(T * n, *x.shape[2:])[m].clone() for x in (b["obs"], b["act"], b["logp"], b["val"], adv, ret)]
        data[4] = (data[4] - data[4].mean()) / (data[4].std() + 1e-8)
        size = data[0].shape[0]
        mb = size // cfg.num_minibatches
        for _ in range(cfg.update_epochs):
            perm = torch.randperm(size)
            for k in range(cfg.num_minibatches):
                i = perm[k * mb:(k + 1) * mb]
                pd, v, _ = model({"obs": data[0][i]})
                pi = distributions.make(spec.action, pd)
                loss, _ = ppo_loss(pi.log_prob(data[1][i]), data[2][i], data[4][i], v, data[3][i],
                                   data[5][i], pi.entropy(), clip_coef=cfg.clip_coef,
                                   clip_vloss=cfg.clip_vloss, vf_coef=cfg.vf_coef, ent_coef=cfg.ent_coef)
                opt.zero_grad()
                loss.backward()
                torch.nn.utils.clip_grad_norm_(model.parameters(), cfg.max_grad_norm)
                opt.step()
        total += int(m.sum())
    return total / (time.perf_counter() - start)


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--steps", type=int, default=300_000, help="agent-steps for each of the two runs")
    p.add_argument("--repeats", type=int, default=3, help="sync and async runs, alternating; medians are reported")
    p.add_argument("train_args", nargs=argparse.REMAINDER, help="extra train.py flags, after --")
    args = p.parse_args()
    extra = [a for a in args.train_args if a != "--"]
    base = baseline_rate(args.steps)
    # Alternate the modes so that a noisy neighbour on a shared machine hits both alike.
    runs = {"sync": [], "async": []}
    for _ in range(args.repeats):
        for mode in runs:
            runs[mode].append(marl_rate(args.steps, ["--mode", mode, *extra]))
    (sync, sync_perf), (async_, async_perf) = (sorted(runs[m], key=lambda r: r[0])[len(runs[m]) // 2] for m in runs)
    print(f"median of {args.repeats} runs each; sync runs: {', '.join(f'{r:,.0f}' for r, _ in runs['sync'])}; "
          f"async runs: {', '.join(f'{r:,.0f}' for r, _ in runs['async'])} agent-steps/s")
    shown = " ".join(extra) or "default config"
    print(f"one-process PPO loop (no RPC, no FSDP, 1 thread): {base:>10,.0f} agent-steps/s")
    print(f"marl --mode sync  ({shown}): {sync:>10,.0f} agent-steps/s")
    print(f"marl --mode async ({shown}): {async_:>10,.0f} agent-steps/s")
    show_perf("sync", sync_perf)
    show_perf("async", async_perf)
    print(f"ratio sync / one-process loop: {sync / base:.2f}")
    print(f"ratio async / sync: {async_ / sync:.2f} (target >= 1.50)")
    print(f"ratio sync / {TARGET:,} target: {sync / TARGET:.2f}; async / target: {async_ / TARGET:.2f} (target >= 1.00)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
