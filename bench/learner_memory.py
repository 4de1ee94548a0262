"""Learner memory: what FSDP2 sharding and activation checkpointing save on a ~100M-parameter policy.

Everything runs the real `marl.learner.Learner` (gloo, CPU, one thread per rank) on the CartPole-v1
actor-critic with 4 hidden layers of 4096 (about 100.7M parameters; sharded, every 4096x4096 block
is its own FSDP2 unit under the default MIN_BLOCK_PARAMS). Each run is a fresh set of real
processes, one per rank (spawned: fresh interpreters; --smoke forks them from the bench's process, as
marl.launch starts its ranks on CPU, which spares each the seconds of importing torch again).

1. Sharding: one real PPO optimizer step (LearnerGroup.update on rank 0, follow on the others) on 1
   rank, then on 2 ranks. Each rank then counts the bytes of its local parameter shards, gradient
   shards and Adam state, and reads its peak RSS. Baseline: the 1-rank run, whatever Learner does
   there (one fp32 rank trains the plain module, unsharded; the FSDP unit count is printed).
2. Gather: seconds for the full-state-dict gather that feeds the actors (LearnerGroup.gather, a
   collective), on 1 and on 2 ranks, timed on rank 0.
3. Activation checkpointing: one update of a batch large enough that activations dominate, on 1
   rank, in a fresh process with AC off and one with AC on: peak RSS and update time of each.
   Baseline: AC off.

    python bench/learner_memory.py                     # 4096,4096,4096,4096; a few minutes on 2 cores
    python bench/learner_memory.py --smoke             # tiny sizes, forked ranks, well under a minute (CI)
    python bench/learner_memory.py --hidden 2048,2048 --batch 512 --ac-batch 8192
"""

from __future__ import annotations

import argparse
import dataclasses
import importlib
import json
import multiprocessing
import multiprocessing.connection
import os
import resource
import sys
import tempfile
import time
import traceback
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

import torch  # noqa: E402
import torch.distributed as dist  # noqa: E402
from torch.distributed.fsdp import FSDPModule  # noqa: E402
from torch.distributed.tensor import DTensor  # noqa: E402

from envs import describe  # noqa: E402
from marl.config import Config  # noqa: E402
from marl.launch import exit_now  # noqa: E402
from marl.learner import Learner, LearnerGroup, follow  # noqa: E402
from marl.sharding import MIN_BLOCK_PARAMS  # noqa: E402
from marl.specs import example_trajectory  # noqa: E402

ENV = "CartPole-v1"
HIDDEN = (4096, 4096, 4096, 4096)
BATCH = 256
AC_BATCH = 16384
SMOKE_HIDDEN, SMOKE_BATCH, SMOKE_AC_BATCH = (64, 64), 64, 512
MIN_PARAMS = 100_000_000
SHARD_TARGET = 0.6  # 2-rank per-rank bytes of params + grads + Adam over the 1-rank bytes
ADAM_STATE = ("exp_avg", "exp_avg_sq", "step")
GATHERS = 2  # the first gather may pay one-time setup; the second is what every later update pays
TIMEOUT_S, SMOKE_TIMEOUT_S = 1800.0, 120.0
MIB = 1024 * 1024


@dataclasses.dataclass(frozen=True)
class Job:
    """What one run of ranks does."""

    hidden: tuple[int, ...]
    batch: int
    activation_checkpointing: bool
    gathers: int


class ChildFailed(RuntimeError):
    pass


# --- in the rank processes


def peak_rss_bytes() -> int:
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024  # ru_maxrss is KiB on Linux


def local_bytes(tensors) -> int:
    """Bytes this rank holds: a DTensor counts only its local shard."""
    total = 0
    for t in tensors:
        t = t.to_local() if isinstance(t, DTensor) else t
        total += t.numel() * t.element_size()
    return total


def state_bytes(learner: Learner) -> dict[str, int]:
    params = list(learner.model.parameters())
    adam = [v for opt in learner.optimizers.values() for s in opt.state.values() for k, v in s.items()
            if k in ADAM_STATE and torch.is_tensor(v)]
    return {"param_bytes": local_bytes(params), "grad_bytes": local_bytes(p.grad for p in params if p.grad is not None),
            "adam_bytes": local_bytes(adam)}


def timed_gathers(group: LearnerGroup, n: int) -> tuple[list[float], int]:
    seconds, nbytes = [], 0
    for _ in range(n):
        start = time.perf_counter()
        weights = group.gather()
        seconds.append(time.perf_counter() - start)
        nbytes = sum(v.numel() * v.element_size() for v in weights.values())
        del weights  # one copy at a time, as an actor-facing publisher would hold
    return seconds, nbytes


def run_rank(rank: int, world: int, init_method: str, job: Job) -> dict:
    os.environ["GLOO_SOCKET_IFNAME"] = "lo"
    torch.set_num_threads(1)
    dist.init_process_group("gloo", init_method=init_method, rank=rank, world_size=world)
    try:
        cfg = dataclasses.replace(Config(), env=ENV, hidden_sizes=job.hidden, num_minibatches=1, update_epochs=1,
                                  seed=0, activation_checkpointing=job.activation_checkpointing)
        info = describe(ENV, 1)
        learner = Learner(cfg, info, dist.group.WORLD, torch.device("cpu"))
        params = list(learner.model.parameters())
        out = {"params": sum(p.numel() for p in params),  # a DTensor's numel is the global one
               "local_params": sum((p.to_local() if isinstance(p, DTensor) else p).numel() for p in params),
               "fsdp_units": sum(isinstance(m, FSDPModule) for m in learner.model.modules()),
               "rss_built": peak_rss_bytes()}
        # STOP only ends `follow`'s loop, so rank 0 stops the followers after the update to let every
        # rank take its measurements at the same point, then drives them again for the gathers.
        group = LearnerGroup(learner) if rank == 0 else None
        if group is not None:
            start = time.perf_counter()
            (spec,) = learner.specs  # CartPole: one Box(4,) leaf, Discrete(2) actions
            E = 8  # env slots: every rank gets some
            traj = example_trajectory(spec, max(job.batch // E, 1), E, torch.Generator().manual_seed(123),
                                      after=learner.algorithm.wants_after(cfg))
            group.update([{"shared": traj}], global_step=0)
            out["update_s"] = time.perf_counter() - start
            group.stop()
        else:
            follow(learner)
        out.update(state_bytes(learner), rss_update=peak_rss_bytes())
        if job.gathers:
            dist.barrier()  # rank 0's clock starts when every rank is ready to gather
            if group is not None:
                out["gather_s"], out["gather_bytes"] = timed_gathers(group, job.gathers)
                group.stop()
            else:
                follow(learner)
            out["rss_gather"] = peak_rss_bytes()
        return out
    finally:
        dist.destroy_process_group()


def worker(rank: int, world: int, init_method: str, job: Job, out: str) -> None:
    code = 1
    try:
        Path(out).write_text(json.dumps(run_rank(rank, world, init_method, job)))
        code = 0
    except BaseException:
        traceback.print_exc()
    finally:
        exit_now(code)  # as marl's own processes leave


# --- in the parent


def wait_all(procs: list, timeout: float) -> bool:
    """Wait for every process; stop early once one fails (its peers would sit in a collective until
    the timeout). Returns False on timeout."""
    deadline = time.monotonic() + timeout
    while True:
        pending = [p for p in procs if p.exitcode is None]
        if not pending or any(p.exitcode not in (None, 0) for p in procs):
            return True
        left = deadline - time.monotonic()
        if left <= 0:
            return False
        multiprocessing.connection.wait([p.sentinel for p in pending], timeout=left)


def run_ranks(world: int, job: Job, timeout: float, start_method: str = "spawn") -> list[dict]:
    """One run: `world` fresh rank processes doing `job`; each rank's measurements."""
    ctx = multiprocessing.get_context(start_method)
    with tempfile.TemporaryDirectory() as tmp:
        # A file-store rendezvous, as marl.launch's: no port to pick, none opened beyond loopback.
        init_method = f"file://{tmp}/rendezvous"
        outs = [os.path.join(tmp, f"rank{r}.json") for r in range(world)]
        procs = [ctx.Process(target=worker, args=(r, world, init_method, job, outs[r]), daemon=True) for r in range(world)]
        started = []
        try:
            for p in procs:
                p.start()
                started.append(p)
            finished = wait_all(started, timeout)
        finally:
            for p in started:
                if p.is_alive():
                    p.kill()
            for p in started:
                p.join()
        codes = [p.exitcode for p in procs]
        what = f"{world} rank(s), hidden {','.join(map(str, job.hidden))}, batch {job.batch}, AC {'on' if job.activation_checkpointing else 'off'}"
        if not finished:
            raise ChildFailed(f"{what}: timed out after {timeout:.0f} s and was killed (exit codes {codes})")
        if any(c != 0 for c in codes):
            raise ChildFailed(f"{what}: a rank failed (exit codes {codes})")
        return [json.loads(Path(o).read_text()) for o in outs]


def mib(n: float) -> str:
    if abs(n) < MIB:  # smoke sizes: MiB would round to 0.0
        return f"{n / 1024:,.1f} KiB"
    return f"{n / MIB:,.1f} MiB"


def verdict(ok: bool) -> str:
    return "met" if ok else "NOT MET"


def shard_total(r: dict) -> int:
    return r["param_bytes"] + r["grad_bytes"] + r["adam_bytes"]


def report_model(runs: dict[int, list[dict]], smoke: bool) -> None:
    n, two = runs[1][0]["params"], runs[2]
    target = "n/a (smoke)" if smoke else verdict(n >= MIN_PARAMS)
    print(f"parameters: {n:,} (target >= {MIN_PARAMS:,}: {target})")
    units = ", ".join(f"{w} rank{'s' if w > 1 else ''} {r[0]['fsdp_units']}" for w, r in runs.items())
    print(f"FSDP units: {units} (0: the plain module; else the root plus every block of >= {MIN_BLOCK_PARAMS:,} parameters)")
    parts = [f"{r['local_params']:,}" for r in two]
    covered = sum(r["local_params"] for r in two)
    print(f"2-rank shards hold {' + '.join(parts)} = {covered:,} parameters "
          f"({'each exactly once' if covered == n else 'MISMATCH'})")


def report_sharding(runs: dict[int, list[dict]], batch: int, smoke: bool) -> None:
    print(f"\nsharding, per rank, after one optimizer step on {batch} samples (fp32 Adam, 1 minibatch, 1 epoch):")
    print(f"  {'ranks':>5} {'rank':>4} {'params':>13} {'grads':>13} {'Adam':>13} {'total':>13} "
          f"{'peak RSS built':>15} {'after update':>13} {'after gather':>13}")
    for world, ranks in runs.items():
        for rank, r in enumerate(ranks):
            print(f"  {world:>5} {rank:>4} {mib(r['param_bytes']):>13} {mib(r['grad_bytes']):>13} {mib(r['adam_bytes']):>13} "
                  f"{mib(shard_total(r)):>13} {mib(r['rss_built']):>15} {mib(r['rss_update']):>13} {mib(r['rss_gather']):>13}")
    base = runs[1][0]
    print(f"  1 rank: {shard_total(base) / base['params']:.2f} bytes of params+grads+Adam per parameter")
    ratios = [shard_total(r) / shard_total(base) for r in runs[2]]
    worst = max(ratios)
    target = "n/a (smoke)" if smoke else verdict(worst <= SHARD_TARGET)
    print(f"ratio 2-rank / 1-rank, params+grads+Adam per rank: {', '.join(f'rank {i} {x:.3f}' for i, x in enumerate(ratios))}; "
          f"worst {worst:.3f} (target <= {SHARD_TARGET:.2f}: {target})")
    rss = [r["rss_update"] / base["rss_update"] for r in runs[2]]
    print(f"ratio 2-rank / 1-rank, peak RSS after the update: {', '.join(f'rank {i} {x:.3f}' for i, x in enumerate(rss))} "
          f"(no target: includes the torch runtime and each rank's full-model build before sharding)")


def report_gather(runs: dict[int, list[dict]]) -> None:
    base = runs[1][0]["gather_s"]
    print(f"\nfull-state-dict gather for actors ({mib(runs[1][0]['gather_bytes'])} of weights to rank 0), timed on rank 0:")
    for world, ranks in runs.items():
        times = ranks[0]["gather_s"]
        vs = "" if world == 1 else f"  ({', '.join(f'{t / b:.2f}x' for t, b in zip(times, base))} the 1-rank time)"
        print(f"  {world} rank{'s' if world > 1 else ''}: {', '.join(f'gather {i + 1} {t:.3f} s' for i, t in enumerate(times))}{vs}")


def report_ac(off: dict, on: dict, batch: int, smoke: bool) -> None:
    print(f"\nactivation checkpointing, 1 rank, one update of {batch} samples, a fresh process each:")
    for name, r in (("AC off", off), ("AC on ", on)):
        print(f"  {name}: peak RSS {mib(r['rss_update'])} (built {mib(r['rss_built'])}, "
              f"the update added {mib(r['rss_update'] - r['rss_built'])}), update {r['update_s']:.2f} s")
    saved = off["rss_update"] - on["rss_update"]
    grow_off, grow_on = off["rss_update"] - off["rss_built"], on["rss_update"] - on["rss_built"]
    if saved > 0:
        shown = f"saves {mib(saved)}"
    else:
        shown = f"{mib(-saved)} more: {'expected at smoke sizes' if smoke else 'AC DID NOT SAVE MEMORY'}"
    print(f"  AC on / AC off: peak RSS {on['rss_update'] / off['rss_update']:.3f} ({shown}), "
          f"the update's own growth {grow_on / max(grow_off, 1):.3f}, "
          f"update time {on['update_s'] / off['update_s']:.2f}x")


def parse_args() -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--smoke", action="store_true", help=f"tiny sizes (hidden {','.join(map(str, SMOKE_HIDDEN))}) "
                   "and ranks forked from this process, so CI can keep the script working; targets are not applicable")
    p.add_argument("--hidden", type=lambda s: tuple(int(v) for v in s.split(",")), default=None,
                   help=f"hidden widths (default {','.join(map(str, HIDDEN))})")
    p.add_argument("--batch", type=int, default=None, help=f"samples of the sharding update (default {BATCH})")
    p.add_argument("--ac-batch", type=int, default=None, help=f"samples of the activation-checkpointing update (default {AC_BATCH})")
    p.add_argument("--timeout", type=float, default=None, help=f"seconds per run before its ranks are killed "
                   f"(default {TIMEOUT_S:.0f}, {SMOKE_TIMEOUT_S:.0f} with --smoke)")
    args = p.parse_args()
    args.hidden = args.hidden or (SMOKE_HIDDEN if args.smoke else HIDDEN)
    args.batch = args.batch or (SMOKE_BATCH if args.smoke else BATCH)
    args.ac_batch = args.ac_batch or (SMOKE_AC_BATCH if args.smoke else AC_BATCH)
    args.timeout = args.timeout or (SMOKE_TIMEOUT_S if args.smoke else TIMEOUT_S)
    if min(args.hidden) < 1 or args.batch < 2 or args.ac_batch < 1:
        p.error("--hidden widths must be positive, --batch at least 2 (one sample per rank), --ac-batch at least 1")
    return args


def main() -> int:
    args = parse_args()
    print(f"learner memory: {ENV} actor-critic, hidden {','.join(map(str, args.hidden))}, fp32, Learner over gloo on CPU, "
          f"1 thread per rank{' [smoke sizes]' if args.smoke else ''}", flush=True)
    start = time.perf_counter()
    method = "spawn"  # fresh interpreters: the memory figures are of a rank's own process, and nothing else
    if args.smoke:
        # The figures are not the smoke's point: fork the ranks from this process, which has imported what they
        # run, torch._dynamo included (a rank's first optimizer imports it: seconds, each rank, each run).
        importlib.import_module("torch._dynamo")
        method = "fork"
    try:
        shard = {w: run_ranks(w, Job(args.hidden, args.batch, False, GATHERS), args.timeout, method) for w in (1, 2)}
        report_model(shard, args.smoke)
        report_sharding(shard, args.batch, args.smoke)
        report_gather(shard)
        sys.stdout.flush()
        off = run_ranks(1, Job(args.hidden, args.ac_batch, False, 0), args.timeout, method)[0]
        on = run_ranks(1, Job(args.hidden, args.ac_batch, True, 0), args.timeout, method)[0]
        report_ac(off, on, args.ac_batch, args.smoke)
    except ChildFailed as e:
        print(f"learner_memory: {e}", file=sys.stderr)
        return 1
    print(f"\ntotal wall time {time.perf_counter() - start:.1f} s")
    return 0


if __name__ == "__main__":
    sys.exit(main())
