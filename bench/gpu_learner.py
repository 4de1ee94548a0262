"""Learner throughput alone: marl's FSDP2 learner on whatever device `marl.launch` picks, on a synthetic batch.

No actors, no RPC, no environment stepping: every process is a learner rank, set up as
`marl.launch.run_rank` sets one up (`device_and_backend` picks NCCL on cuda:<local rank> or gloo
on CPU; one CPU thread), and the ranks run marl's own code: rank 0 drives with `LearnerGroup`
(scatter the batch, PPO epochs, gather the full state dict), the others `follow`. After a
warm-up it times `--updates` updates and a few full-state-dict gathers.

    torchrun --standalone --nproc-per-node 8 bench/gpu_learner.py                  # bf16, 3 x 1024 MLPs, 65,536 samples
    torchrun --standalone --nproc-per-node 1 bench/gpu_learner.py --precision fp32
    torchrun --standalone --nproc-per-node 2 bench/gpu_learner.py --hidden 64,64 --batch 1024 --updates 2   # CPU smoke test
    python bench/gpu_learner.py ...                                                # one rank, no torchrun

Rank 0 prints the results, the last line in `key=value` form for scripts (bench/gpu_check.sh).
Exit status 0 only if every step succeeded on every rank (torchrun fails the job if any rank fails).
"""

from __future__ import annotations

import argparse
import dataclasses
import math
import os
import statistics
import sys
import tempfile
import time
import traceback
from datetime import timedelta
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

import torch  # noqa: E402
import torch.distributed as dist  # noqa: E402

from envs import EnvInfo, describe  # noqa: E402
from marl.config import Config  # noqa: E402
from marl.launch import device_and_backend, exit_now  # noqa: E402
from marl.learner import Learner, LearnerGroup, follow  # noqa: E402
from marl.specs import example_trajectory  # noqa: E402

RESULT_TAG = "gpu_learner-result:"


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--precision", choices=("fp32", "bf16"), default="bf16", help="learner compute precision (default: bf16)")
    p.add_argument("--hidden", default="1024,1024,1024", help="hidden widths of the actor and critic MLPs (default: 1024,1024,1024)")
    p.add_argument("--batch", type=int, default=65_536, help="samples per update, over all ranks (default: 65536)")
    p.add_argument("--updates", type=int, default=10, help="timed updates (default: 10)")
    p.add_argument("--warmup", type=int, default=2, help="untimed updates first (default: 2)")
    p.add_argument("--minibatches", type=int, default=Config().num_minibatches,
                   help=f"minibatches per epoch, over all ranks (default: {Config().num_minibatches})")
    p.add_argument("--epochs", type=int, default=Config().update_epochs, help=f"epochs per update (default: {Config().update_epochs})")
    p.add_argument("--gathers", type=int, default=5, help="timed full-state-dict gathers; the median is reported (default: 5)")
    p.add_argument("--activation-checkpointing", action="store_true", help="recompute block activations in backward")
    p.add_argument("--env", default="CartPole-v1", help="env whose observation and action spaces shape the policy (default: CartPole-v1)")
    p.add_argument("--lr", type=float, default=1e-4, help="learning rate of every update (default: 1e-4)")
    p.add_argument("--seed", type=int, default=1)
    p.add_argument("--timeout", type=float, default=300.0, help="seconds before a stuck collective fails the run (default: 300)")
    args = p.parse_args(argv)
    try:
        args.hidden = tuple(int(w) for w in args.hidden.split(","))
    except ValueError:
        p.error(f"--hidden expects comma-separated integers like 1024,1024, got {args.hidden!r}")
    for name in ("batch", "updates", "minibatches", "epochs", "gathers"):
        if getattr(args, name) < 1:
            p.error(f"--{name} must be at least 1, got {getattr(args, name)}")
    if args.warmup < 0:
        p.error(f"--warmup must be at least 0, got {args.warmup}")
    if not args.hidden or min(args.hidden) < 1:
        p.error(f"--hidden must be positive widths like 1024,1024, got {args.hidden}")
    return args


def make_trajectories(spec_list, n: int, seed: int, after: bool) -> list[dict]:
    """One synthetic rollout of about `n` agent-steps per policy, every field of what actors send
    (marl.specs.example_trajectory): LearnerGroup computes the targets and cuts the minibatches."""
    g = torch.Generator().manual_seed(seed)
    out = {}
    for spec in spec_list:
        E = 16  # env slots: every rank gets some
        T = max(n // (E * len(spec.agents)), 1)
        out[spec.name] = example_trajectory(spec, T, E, g, after=after)
    return [out]


def _sync(device: torch.device) -> None:
    if device.type == "cuda":
        torch.cuda.synchronize(device)


def drive(args: argparse.Namespace, learner: Learner, device: torch.device) -> dict:
    """Rank 0: warm up, time the updates and the gathers, then tell the other ranks to stop."""
    group = LearnerGroup(learner)
    batch = make_trajectories(learner.specs, args.batch, args.seed, learner.algorithm.wants_after(learner.cfg))
    metrics: dict[str, float] = {}
    used = 0
    for _ in range(args.warmup):
        metrics, used = group.update(batch, 0)
    times = []
    _sync(device)
    start = time.perf_counter()
    for _ in range(args.updates):
        t = time.perf_counter()
        metrics, used = group.update(batch, 0)
        _sync(device)
        times.append(time.perf_counter() - t)
    total = time.perf_counter() - start
    bad = [k for k, v in metrics.items() if not math.isfinite(v)]
    if bad:
        raise RuntimeError(f"the last update's metrics are not finite: {metrics}")
    gathers = []
    state = {}
    for _ in range(args.gathers):
        _sync(device)
        t = time.perf_counter()
        state = group.gather()
        gathers.append(time.perf_counter() - t)
    group.stop()
    params = sum(v.numel() for v in state.values())
    bad = [k for k, v in state.items() if v.is_floating_point() and not torch.isfinite(v).all()]
    if bad:
        raise RuntimeError(f"gathered weights are not finite: {bad}")
    return dict(total=total, times=times, gathers=gathers, used=used, params=params,
                weight_bytes=sum(v.numel() * v.element_size() for v in state.values()), metrics=metrics)


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    under_torchrun = "RANK" in os.environ and "WORLD_SIZE" in os.environ
    local_rank = int(os.environ.get("LOCAL_RANK", 0))
    device, backend = device_and_backend(local_rank)
    if device.type == "cuda":
        if local_rank >= torch.cuda.device_count():
            raise RuntimeError(f"local rank {local_rank} has no GPU: only {torch.cuda.device_count()} visible "
                               f"(CUDA_VISIBLE_DEVICES={os.environ.get('CUDA_VISIBLE_DEVICES', '<unset>')}); "
                               f"start at most that many processes per node")
        torch.cuda.set_device(device)
    torch.set_num_threads(1)  # as marl.launch.run_rank: learners and actors share the cores
    timeout = timedelta(seconds=args.timeout)
    if under_torchrun:
        dist.init_process_group(backend, init_method="env://", timeout=timeout)
    else:  # one rank, no torchrun: a private file store, as marl.launch uses (no port opened)
        store = dist.FileStore(os.path.join(tempfile.mkdtemp(prefix="gpu_learner-"), "store"), 1)
        dist.init_process_group(backend, store=store, rank=0, world_size=1, timeout=timeout)
    rank, world = dist.get_rank(), dist.get_world_size()
    info = describe(args.env, 1)
    fields = dict(env=args.env, agents=1, learners=world, hidden_sizes=args.hidden, precision=args.precision,
                  num_minibatches=args.minibatches, update_epochs=args.epochs, learning_rate=args.lr, anneal_lr=False, seed=args.seed)
    if args.activation_checkpointing:
        fields["activation_checkpointing"] = True
    cfg = dataclasses.replace(Config(), **fields)
    learner = Learner(cfg, info, dist.group.WORLD, device)
    result = drive(args, learner, device) if rank == 0 else None
    if rank != 0:
        follow(learner)
    # After the stop command every rank is here: one last collective for the peak memory of the busiest rank.
    peak = torch.tensor([torch.cuda.max_memory_allocated(device) if device.type == "cuda" else 0], dtype=torch.float64,
                        device=device)
    dist.all_reduce(peak, op=dist.ReduceOp.MAX)
    if rank == 0:
        report(args, cfg, device, backend, world, result, int(peak.item()))
    dist.destroy_process_group()
    return 0


def report(args, cfg: Config, device: torch.device, backend: str, world: int, r: dict, peak_max: int) -> None:
    used, total, n = r["used"], r["total"], len(r["times"])
    samples_s = used * n / total
    epoch_samples_s = used * cfg.update_epochs * n / total
    steps = cfg.update_epochs * cfg.num_minibatches
    # Dense matmul work of forward + backward: about 6 FLOPs per parameter per sample.
    tflops = 6 * r["params"] * epoch_samples_s / 1e12
    gather = statistics.median(r["gathers"])
    name = torch.cuda.get_device_name(device) if device.type == "cuda" else "cpu"
    print(f"device {device} ({name}), backend {backend}, world size {world}, precision {cfg.precision}, "
          f"torch {torch.__version__}", flush=True)
    print(f"policy: actor and critic MLPs {'x'.join(map(str, cfg.hidden_sizes))} on {cfg.env}, "
          f"{r['params']:,} parameters ({r['weight_bytes'] / 2**20:,.1f} MiB fp32)"
          f"{', activation checkpointing' if cfg.activation_checkpointing else ''}")
    print(f"update: {used:,} samples ({args.batch:,} asked), {cfg.update_epochs} epochs x {cfg.num_minibatches} minibatches "
          f"= {steps} optimizer steps of {used // cfg.num_minibatches:,} samples; {args.warmup} warm-up + {n} timed updates")
    print(f"learner: {epoch_samples_s:>14,.0f} samples x epochs/s   ({samples_s:,.0f} samples/s, "
          f"{total / n * 1e3:,.1f} ms per update, median {statistics.median(r['times']) * 1e3:,.1f} ms, "
          f"~{tflops:.3g} TFLOP/s at 6 x params x samples)")
    print(f"gather:  full state dict to rank 0's CPU in {gather * 1e3:,.1f} ms (median of {len(r['gathers'])}, "
          f"min {min(r['gathers']) * 1e3:,.1f} ms)")
    if device.type == "cuda":
        print(f"memory:  peak allocated {torch.cuda.max_memory_allocated(device) / 2**30:,.2f} GiB on rank 0, "
              f"{peak_max / 2**30:,.2f} GiB on the busiest rank")
    print("last update: " + ", ".join(f"{k} {v:.4g}" for k, v in r["metrics"].items()))
    fields = dict(device=device, backend=backend, world=world, precision=cfg.precision,
                  hidden="x".join(map(str, cfg.hidden_sizes)), params=r["params"], samples=used,
                  epochs=cfg.update_epochs, minibatches=cfg.num_minibatches, updates=n,
                  samples_epochs_per_s=f"{epoch_samples_s:.0f}", samples_per_s=f"{samples_s:.0f}",
                  update_ms=f"{total / n * 1e3:.2f}", gather_ms=f"{gather * 1e3:.2f}", tflops=f"{tflops:.3f}",
                  peak_mem_gib=f"{peak_max / 2**30:.3f}" if device.type == "cuda" else "n/a")
    print(RESULT_TAG + " " + " ".join(f"{k}={v}" for k, v in fields.items()), flush=True)


if __name__ == "__main__":
    code = 1
    try:
        code = main()
    except SystemExit as e:  # argparse: its message is printed already
        code = e.code if isinstance(e.code, int) else 1
        if isinstance(e.code, str):
            print(e.code, file=sys.stderr)
    except BaseException:
        rank = os.environ.get("RANK", "0")
        print(f"gpu_learner: rank {rank} failed:", file=sys.stderr)
        traceback.print_exc()
        code = 1
    # On failure the process group is left as is: the other ranks may be stuck in a collective, and
    # torchrun ends them when this rank exits non-zero.
    exit_now(code)
