"""How processes are born, find each other, and end.

World layout: ranks 0..L-1 are learners (rank 0 also runs the coordinator), ranks L..L+A-1 are
actors. Every rank joins one RPC world and one gloo default process group; the learners also
form their own group (NCCL on GPUs, gloo on CPU) that FSDP2 shards over.

Local spawn (the default): this process becomes rank 0 and starts the others; the rendezvous
goes through files in a private temporary directory, so no rendezvous port is opened at all. Under `torchrun`, every process is started by torchrun and reads its rank from the
environment; the rendezvous goes through torchrun's own store.
"""

from __future__ import annotations

import ctypes
import os
import shutil
import signal
import sys
import tempfile
import threading
import time
import traceback
import warnings
from datetime import timedelta
from pathlib import Path
from typing import Callable, NoReturn

import torch
import torch.distributed as dist
import torch.distributed.rpc as rpc
import torch.multiprocessing as mp

from envs import EnvInfo
from marl.config import Config, UsageError
from marl.control import RunControl, StartupClock, StopSignals, Terminated, process_start_time
from marl.errors import AllActorsLost, NonFiniteError

_PR_SET_PDEATHSIG = 1


def device_and_backend(local_rank: int) -> tuple[torch.device, str]:
    """The one place that decides where learners compute: NCCL on cuda:<local_rank>, else gloo on CPU."""
    if torch.cuda.is_available():
        return torch.device(f"cuda:{local_rank}"), "nccl"
    return torch.device("cpu"), "gloo"


def role_name(rank: int, learners: int) -> str:
    return f"learner{rank}" if rank < learners else f"actor{rank - learners}"


def _name_process(name: str) -> None:
    """Show the role in ps/top (Linux's comm holds 15 bytes)."""
    try:
        with open("/proc/self/comm", "w") as f:
            f.write(f"marl-{name}"[:15])
    except OSError:
        pass


def _die_with_parent() -> None:
    """A child of local spawn must not outlive the launcher, even if the launcher is SIGKILLed."""
    try:
        ctypes.CDLL("libc.so.6", use_errno=True).prctl(_PR_SET_PDEATHSIG, signal.SIGKILL)
    except OSError:
        pass


Rank0Main = Callable[[Config, EnvInfo, "dist.ProcessGroup", torch.device, RunControl], int]


def run_rank(rank: int, world: int, local_rank: int, cfg: Config, info: EnvInfo, init_methods: tuple[str, str],
             on_ready: Callable[[], None] | None = None, rank0_main: Rank0Main | None = None,
             control: RunControl | None = None) -> int:
    """Everything one process does, from joining the job to leaving it. Returns its exit code.

    `on_ready` is called once the last rendezvous (RPC's) is done: every process is up.
    `rank0_main` replaces the coordinator's training loop on rank 0 (benchmarks drive the same
    processes differently); the other ranks do not change.
    """
    role = role_name(rank, cfg.learners)
    _name_process(role)
    is_learner = rank < cfg.learners
    device, backend = device_and_backend(local_rank) if is_learner else (torch.device("cpu"), "gloo")
    if device.type == "cuda":
        torch.cuda.set_device(device)
    torch.set_num_threads(1)  # learners and actors share the cores; small MLPs gain nothing from threads
    if not is_learner:
        # The learner is the serial bottleneck of every iteration; when cores are short, actors yield.
        os.nice(5)
    if cfg.mode == "async" and not _under_torchrun():
        _pin_for_async(rank, cfg.learners)
    timeout = timedelta(seconds=max(cfg.rpc_timeout, 60))
    pg_init, rpc_init = init_methods  # each rendezvous has a store of its own
    dist.init_process_group("gloo", init_method=pg_init, rank=rank, world_size=world, timeout=timeout)
    learner_group = dist.new_group(list(range(cfg.learners)), backend=backend, timeout=timeout)
    options = rpc.TensorPipeRpcBackendOptions(
        init_method=rpc_init, rpc_timeout=cfg.rpc_timeout,
        # TensorPipe's shm/cma transports have failed in containers; plain sockets always work.
        _transports=["uv"], _channels=["basic"])
    with warnings.catch_warnings():
        # TensorPipe's own device-map exchange trips a torch deprecation warning that users can do nothing about.
        warnings.filterwarnings("ignore", message=".*as a ProcessGroup.*")
        rpc.init_rpc(role, rank=rank, world_size=world, rpc_backend_options=options)
    if control is not None:
        control.clock.mark("processes_and_rendezvous")
    if on_ready is not None:
        on_ready()
    store = _control_store(init_methods, world)
    leave = _ABORT
    try:
        if rank == 0:
            if rank0_main is None:
                from marl.coordinator import main as rank0_main
            code = rank0_main(cfg, info, learner_group, device, control)
            # A graceful RPC shutdown is a barrier of every process: it hangs if one died.
            leave = _GRACEFUL if code == 0 and not control.peers_lost else _ABORT
        else:
            if is_learner:
                from marl.learner import Learner, follow
                follow(Learner(cfg, info, learner_group, device))
            # An actor serves the coordinator's RPCs from its RPC threads until rank 0 says how to leave.
            store.wait([_DONE_KEY], timedelta(days=365))
            leave = store.get(_DONE_KEY)
            code = 0
        return code
    finally:
        if rank == 0:
            store.set(_DONE_KEY, leave)
        rpc.shutdown(graceful=leave == _GRACEFUL)
        if leave == _GRACEFUL:
            dist.destroy_process_group()


_DONE_KEY, _GRACEFUL, _ABORT = "marl/leave", b"graceful", b"abort"


def _control_store(init_methods: tuple[str, str], world: int) -> dist.Store:
    """The store through which rank 0 tells every other rank that the run is over, and how to leave."""
    if init_methods[0].startswith("file://"):
        return dist.FileStore(str(Path(init_methods[0][len("file://"):]).parent / "control"), world)
    return dist.TCPStore(os.environ["MASTER_ADDR"], int(os.environ["MASTER_PORT"]), is_master=False)  # torchrun's


def _pin_for_async(rank: int, learners: int) -> None:
    """In async mode learners and actors run at once; give each learner rank a core of its own and
    let the actors share the rest, so that the bottleneck is never preempted. Measured on 2 cores,
    default config: 4.1 s vs 4.65 s for 300k agent-steps. (Sync mode alternates collect and learn,
    and is better off with every process free to use every core.)"""
    cores = sorted(os.sched_getaffinity(0))
    if len(cores) <= learners:
        return  # no core to spare: leave it to the scheduler
    os.sched_setaffinity(0, {cores[rank]} if rank < learners else set(cores[learners:]))


def _child(rank: int, world: int, cfg: Config, info: EnvInfo, init_methods: tuple[str, str]) -> None:
    _die_with_parent()
    signal.signal(signal.SIGINT, signal.SIG_IGN)  # Ctrl-C is the launcher's to handle
    signal.signal(signal.SIGTERM, signal.SIG_DFL)  # not the launcher's stop-at-the-boundary handler
    sys.exit(run_rank(rank, world, rank, cfg, info, init_methods))


def _start_method() -> str:
    """fork where it is safe: no CUDA to inherit and no thread of ours yet, and it costs
    milliseconds where forkserver costs a fresh interpreter importing torch (about a second).
    CUDA does not survive fork, so GPU machines use forkserver."""
    return "forkserver" if torch.cuda.is_available() else "fork"


def exit_now(code: int) -> NoReturn:
    """End this process at once, skipping the interpreter's teardown: call it once every child is
    joined and every log flushed. torch's C++ teardown at exit takes over a second here and has now
    and then aborted ('terminate called without an active exception') after the work was done."""
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(code)


def _under_torchrun() -> bool:
    return "TORCHELASTIC_RUN_ID" in os.environ and "RANK" in os.environ


def launch(cfg: Config, info: EnvInfo, rank0_main: Rank0Main | None = None) -> int:
    """Run the whole job; returns the exit code for this process. See `run_rank` for `rank0_main`."""
    clock = StartupClock(process_start_time(), time.time())
    world = cfg.learners + cfg.actors
    if _under_torchrun():
        if int(os.environ["WORLD_SIZE"]) != world:
            raise UsageError(f"torchrun started {os.environ['WORLD_SIZE']} processes but --learners {cfg.learners} + "
                             f"--actors {cfg.actors} = {world}; make --nproc-per-node x --nnodes equal {world}")
        rank = int(os.environ["RANK"])
        # torchrun signals every process. Rank 0 stops at an iteration boundary and then writes the
        # final checkpoint with the other learner ranks, so those ignore the signal and leave when
        # rank 0 tells them (or at torchrun's SIGKILL if rank 0 is gone). Actors keep the default
        # actions, so that the signal ends them even while they block in C++.
        control = RunControl(clock, StopSignals()) if rank == 0 else None
        if 0 < rank < cfg.learners:
            signal.signal(signal.SIGTERM, signal.SIG_IGN)
            signal.signal(signal.SIGINT, signal.SIG_IGN)
        # Both rendezvous go through torchrun's agent store.
        return run_rank(rank, world, int(os.environ["LOCAL_RANK"]), cfg, info, ("env://", "env://"),
                        rank0_main=rank0_main, control=control)

    # Gloo and TensorPipe otherwise pick an address from the hostname, which may not be loopback.
    os.environ.setdefault("GLOO_SOCKET_IFNAME", "lo")
    os.environ.setdefault("TP_SOCKET_IFNAME", "lo")
    # File stores in a directory only this user can read: torch's TCPStore listens on every
    # interface whatever host it is given, and all the processes are on this machine anyway.
    # A fresh directory per run also means no port to pick and no race for one.
    control = RunControl(clock, StopSignals())
    rdzv = tempfile.mkdtemp(prefix="marl-rendezvous-")
    init_methods = (f"file://{rdzv}/c10d", f"file://{rdzv}/rpc")
    ctx = mp.get_context(_start_method())
    if ctx.get_start_method() == "forkserver":
        ctx.set_forkserver_preload(["marl.launch"])
    children = [ctx.Process(target=_child, args=(r, world, cfg, info, init_methods), name=role_name(r, cfg.learners),
                            daemon=True) for r in range(1, world)]
    for p in children:
        p.start()
    started = threading.Event()
    watchdog = threading.Thread(target=_watch_start, args=(children, started), daemon=True)
    watchdog.start()
    code = 1
    try:
        code = run_rank(0, world, 0, cfg, info, init_methods, on_ready=started.set, rank0_main=rank0_main, control=control)
    except KeyboardInterrupt:
        print("marl: interrupted, stopping every process", file=sys.stderr)
        code = 130
    except Terminated:
        print("marl: terminated, stopping every process", file=sys.stderr)
        code = 143
    except NonFiniteError as e:
        print(f"marl: error: {e}. Stopping; lower --learning-rate or check the env's rewards and observations.",
              file=sys.stderr)
        code = 1
    except AllActorsLost as e:
        print(f"marl: error: {e}", file=sys.stderr)
        code = 1
    except Exception:
        traceback.print_exc()
        print("marl: the run failed (traceback above); stopping every process", file=sys.stderr)
        code = 1
    finally:
        started.set()  # the start-up watchdog must not take the children's ending for a failure
        _end_children(children, wait=10.0 if code == 0 else 0.0)
        shutil.rmtree(rdzv, ignore_errors=True)
    return code


def _watch_start(children: list, started: threading.Event) -> None:
    """During start-up rank 0 blocks inside rendezvous calls that would wait minutes for a child
    that already died; end the job at once instead."""
    while not started.is_set():
        for p in children:
            if p.exitcode is not None:
                print(f"marl: process {p.name} exited with code {p.exitcode} during start-up; stopping", file=sys.stderr, flush=True)
                _end_children(children, wait=0.0)
                os._exit(1)
        time.sleep(0.05)


def _end_children(children: list, wait: float) -> None:
    deadline = time.monotonic() + wait
    for p in children:
        p.join(timeout=max(deadline - time.monotonic(), 0))
    for p in children:
        if p.is_alive():
            p.kill()
    for p in children:
        p.join(timeout=5)
