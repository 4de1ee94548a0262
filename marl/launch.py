"""How processes are born, find each other, and end.

World layout: ranks 0..L-1 are learners (rank 0 also runs the coordinator), ranks L..L+A-1 are
actors, except on equal torchrun nodes (see learner_ranks). Every rank joins one RPC world and one gloo default process group; the learners also
form their own group (NCCL on GPUs, gloo on CPU) that FSDP2 shards over.

Local spawn (the default): this process supervises and every rank is a child of it; the
rendezvous goes through files in a private temporary directory, so no rendezvous port is opened at
all. When an actor fails, rank 0 checkpoints and exits with HEAL_EXIT, and the supervisor starts a
fresh world that resumes from that checkpoint (`--max-restarts` times at most). Under `torchrun`,
every process is started by torchrun and reads its rank from the environment; the rendezvous goes
through torchrun's own store, and torchrun restarts the group (its own `--max-restarts`).
"""

from __future__ import annotations

import ctypes
import dataclasses
import faulthandler
import gc
import math
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
from marl import checkpoint
from marl.config import Config, UsageError
from marl.control import HEAL_EXIT, RunControl, StartupClock, StopSignals, Terminated, process_start_time
from marl.devices import actor_device, device_and_backend  # noqa: F401 - benches import device_and_backend from here
from marl.errors import AllActorsLost, NonFiniteError

_PR_SET_PDEATHSIG = 1


def learner_ranks(learners: int, world: int) -> list[int]:
    """The global ranks of the learners; every other rank is an actor, and rank 0 is learner 0.

    Learners first (ranks 0..L-1), except under torchrun on equal nodes whose count divides L:
    there each node's first L/nodes local ranks are learners, so that every node trains on its own
    GPUs (cuda:<local_rank>) and steps envs with the rest (learners first would put them all on
    the first nodes, more than those have GPUs)."""
    nodes, per_node = int(os.environ.get("GROUP_WORLD_SIZE", 1)), int(os.environ.get("LOCAL_WORLD_SIZE", world))
    if _under_torchrun() and nodes > 1 and nodes * per_node == world and learners % nodes == 0:
        return [n * per_node + i for n in range(nodes) for i in range(learners // nodes)]
    return list(range(learners))


def role_name(rank: int, ranks: list[int]) -> str:
    """`ranks`: the learners' (learner_ranks); actors are numbered in rank order after them."""
    if rank in ranks:
        return f"learner{ranks.index(rank)}"
    return f"actor{rank - sum(r < rank for r in ranks)}"


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
    # A crash in C++ (RPC, gloo) then leaves every thread's Python stack on stderr, not just a signal number.
    faulthandler.enable()
    # What this process imported (torch's some 10^5 objects) lives as long as it does: the collector's
    # full passes of the training loop need not walk it again.
    gc.freeze()
    learners = learner_ranks(cfg.learners, world)
    role = role_name(rank, learners)
    _name_process(role)
    is_learner = rank in learners
    os.environ["LOCAL_RANK"] = str(local_rank)  # as torchrun does: what marl.devices.actor_device reads in RPC threads
    device, backend = device_and_backend(local_rank) if is_learner else (actor_device(info, local_rank), "gloo")
    if device.type == "cuda":
        torch.cuda.set_device(device)
    torch.set_num_threads(1)  # learners and actors share the cores; small MLPs gain nothing from threads
    if not is_learner:
        # The learner is the serial bottleneck of every iteration; when cores are short, actors yield.
        os.nice(5)
    if cfg.mode != "sync" and not _under_torchrun():
        _pin_for_overlap(rank, cfg.learners)
    timeout = timedelta(seconds=max(cfg.rpc_timeout, 60))
    if init_methods == TORCHRUN:
        pg_store, rpc_init, store, _rpc_server = _torchrun_stores(rank, world, timeout)  # the server lives as long as this call
        dist.init_process_group("gloo", store=pg_store, rank=rank, world_size=world, timeout=timeout)
    else:
        rpc_init = init_methods[1]  # each rendezvous has a store of its own
        dist.init_process_group("gloo", init_method=init_methods[0], rank=rank, world_size=world, timeout=timeout)
        store = dist.FileStore(str(Path(init_methods[0][len("file://"):]).parent / "control"), world)
    learner_group = dist.new_group(learners, backend=backend, timeout=timeout)
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
            if init_methods == TORCHRUN:
                _leave_together(store, rank, world)


# The control store is where rank 0 tells every other rank that the run is over, and how to leave.
_DONE_KEY, _GRACEFUL, _ABORT = "marl/leave", b"graceful", b"abort"
TORCHRUN = ("torchrun", "torchrun")  # init_methods under torchrun: stores from _torchrun_stores


def _leave_together(store: dist.Store, rank: int, world: int) -> None:
    """Under torchrun rank 0 hosts RPC's store, which the other ranks still read in RPC's graceful
    shutdown after rank 0 is through it: rank 0 leaves last (seen: "Failed to recv" on the others)."""
    if rank:
        store.set(f"left/{rank}", b"1")
        return
    try:
        store.wait([f"left/{r}" for r in range(1, world)], timedelta(seconds=30))
    except Exception:  # noqa: BLE001 - a rank that died on its way out; the run is over anyway
        pass


def _torchrun_stores(rank: int, world: int, timeout: timedelta):
    """The c10d store, the RPC init URL, the control store, and the store server rank 0 hosts for
    RPC (None elsewhere), for this attempt of a torchrun group.

    torchrun's agents keep one TCPStore for every restart of a group (TORCHELASTIC_USE_AGENT_STORE),
    and env:// rendezvous keys do not name the attempt: a restarted group would read the addresses
    of the processes that just died (seen: gloo "connection refused" on every rank). So every key
    of ours goes under the attempt, and RPC, which takes only a URL, gets a store of its own from
    rank 0 on a free port."""
    addr, port = os.environ["MASTER_ADDR"], int(os.environ["MASTER_PORT"])
    rank0_hosts = os.environ.get("TORCHELASTIC_USE_AGENT_STORE") != "True"  # then it is new for every attempt
    base = dist.TCPStore(addr, port, world, is_master=rank == 0 and rank0_hosts, timeout=timeout, multi_tenant=True)
    if rank0_hosts:
        return base, "env://", dist.PrefixStore("marl/control", base), None
    ours = dist.PrefixStore(f"marl/attempt_{os.environ.get('TORCHELASTIC_RESTART_COUNT', '0')}", base)
    server = None
    if rank == 0:
        server = dist.TCPStore(addr, 0, world, is_master=True, timeout=timeout, wait_for_workers=False)
        ours.set("rpc_port", str(server.port))
    rpc_init = f"tcp://{addr}:{int(ours.get('rpc_port'))}"  # every rank a client (agent-store mode)
    return dist.PrefixStore("c10d", ours), rpc_init, dist.PrefixStore("control", ours), server


def _pin_for_overlap(rank: int, learners: int) -> None:
    """In async and pipelined mode learners and actors run at once; give each learner rank a core
    of its own and let the actors share the rest, so that the bottleneck is never preempted. Measured on 2 cores,
    default config: 4.1 s vs 4.65 s for 300k agent-steps. (Sync mode alternates collect and learn,
    and is better off with every process free to use every core.)"""
    cores = sorted(os.sched_getaffinity(0))
    if len(cores) <= learners:
        return  # no core to spare: leave it to the scheduler
    os.sched_setaffinity(0, {cores[rank]} if rank < learners else set(cores[learners:]))


def _child(rank: int, world: int, cfg: Config, info: EnvInfo, init_methods: tuple[str, str]) -> None:
    _die_with_parent()
    # A stop is the supervisor's to pass on to rank 0. timeout(1), scancel, Kubernetes and systemd
    # signal the whole process group: an actor that died of it first looked to rank 0 like a failed
    # actor, and the run healed instead of stopping. The supervisor ends these processes itself
    # (SIGKILL, or their parent-death signal).
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    signal.signal(signal.SIGTERM, signal.SIG_IGN)
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


def launch(cfg: Config, info: EnvInfo, rank0_main: Rank0Main | None = None, called_at: float | None = None) -> int:
    """Run the whole job; returns the exit code for this process. See `run_rank` for `rank0_main`.
    `called_at` (time.time()): where the start-up line counts from, for a run started from Python
    (marl.train), whose process may have started long before; by default the process's own start."""
    clock = StartupClock(called_at if called_at is not None else process_start_time(), time.time())
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
        # torchrun restarts its whole group when a process fails; its own --max-restarts is the budget.
        local_rank, init_methods = int(os.environ["LOCAL_RANK"]), TORCHRUN
        if rank > 0:
            if rank in learner_ranks(cfg.learners, world):
                signal.signal(signal.SIGTERM, signal.SIG_IGN)
                signal.signal(signal.SIGINT, signal.SIG_IGN)
            return run_rank(rank, world, local_rank, cfg, info, init_methods)
        control = RunControl(clock, StopSignals(), restarts_done=int(os.environ.get("TORCHELASTIC_RESTART_COUNT", 0)),
                             restarts_allowed=int(os.environ.get("TORCHELASTIC_MAX_RESTARTS", 0)))
        return _rank0_code(lambda: run_rank(0, world, local_rank, cfg, info, init_methods, rank0_main=rank0_main,
                                            control=control))

    # Gloo and TensorPipe otherwise pick an address from the hostname, which may not be loopback.
    os.environ.setdefault("GLOO_SOCKET_IFNAME", "lo")
    os.environ.setdefault("TP_SOCKET_IFNAME", "lo")
    if rank0_main is not None:
        # A benchmark drives rank 0 in this process, to read its results from memory: one world, no restarts.
        return _local_world(cfg, info, clock, rank0_main=rank0_main)
    # This process only supervises: every rank of every world is a child of it, so each world starts
    # from fresh processes (a process that has run torch RPC cannot host another world, nor fork one).
    forward = _ForwardSignals()
    restarts = quick = 0
    try:
        while True:
            began = time.monotonic()
            code = _local_world(cfg, info, clock, restarts=restarts, forward=forward)
            if code == HEAL_EXIT and forward.received is not None:
                # An actor failed while the run was stopping: the stop wins (rank 0 has checkpointed).
                raise KeyboardInterrupt() if forward.received == signal.SIGINT else Terminated()
            if code != HEAL_EXIT:
                return code
            restarts += 1
            # A world that trained a while lost an actor to a fault of its own: start again at once.
            # Worlds that fail one after the other double the pause, giving a lasting cause time to clear.
            quick = quick + 1 if time.monotonic() - began < 15.0 else 0
            pause = min(2.0 ** quick, 30.0)
            print(f"marl: restart {restarts} of {cfg.max_restarts} in {pause:g}s", file=sys.stderr, flush=True)
            time.sleep(pause)
            newest = checkpoint.latest(cfg.run_dir)  # none if the first iteration never finished
            cfg = dataclasses.replace(cfg, resume=str(newest) if newest else cfg.resume)
            clock = StartupClock(None, time.time())
    except (KeyboardInterrupt, Terminated) as e:  # between two worlds, or instead of the next one
        print(f"marl: {'interrupted' if isinstance(e, KeyboardInterrupt) else 'terminated'} before restarting; "
              f"go on with: python train.py --resume {cfg.run_dir}", file=sys.stderr)
        return 130 if isinstance(e, KeyboardInterrupt) else 143
    finally:
        forward.restore()


def _local_world(cfg: Config, info: EnvInfo, clock: StartupClock, restarts: int = 0,
                 forward: "_ForwardSignals | None" = None, rank0_main: Rank0Main | None = None) -> int:
    """Start one world of processes on this machine and wait for rank 0's exit code.

    Rank 0 runs in this process when `rank0_main` is given, else as a child (with `forward`
    passing this process's SIGINT and SIGTERM on to it)."""
    world = cfg.learners + cfg.actors
    # File stores in a directory only this user can read: torch's TCPStore listens on every
    # interface whatever host it is given, and all the processes are on this machine anyway.
    # A fresh directory per world also means no port to pick and no race for one.
    rdzv = tempfile.mkdtemp(prefix="marl-rendezvous-")
    init_methods = (f"file://{rdzv}/c10d", f"file://{rdzv}/rpc")
    ctx = mp.get_context(_start_method())
    if ctx.get_start_method() == "forkserver":
        ctx.set_forkserver_preload(["marl.launch"])
    started = ctx.Event()
    in_process = rank0_main is not None
    children = [ctx.Process(target=_child, args=(r, world, cfg, info, init_methods), name=role_name(r, learner_ranks(cfg.learners, world)),
                            daemon=True) for r in range(1, world)]
    if not in_process:
        children.insert(0, ctx.Process(target=_rank0_child, args=(world, cfg, info, init_methods, clock, restarts, started),
                                       name="learner0", daemon=True))
    for p in children:
        p.start()
    watched = children if in_process else children[1:]  # rank 0's own exit is the world's end, not a start-up failure
    watchdog = threading.Thread(target=_watch_start, args=(children, watched, started), daemon=True)
    watchdog.start()
    code = 1
    try:
        if in_process:
            control = RunControl(clock, StopSignals())
            code = _rank0_code(lambda: run_rank(0, world, 0, cfg, info, init_methods, on_ready=started.set,
                                                rank0_main=rank0_main, control=control))
        else:
            code = forward.wait_for(children[0])
    finally:
        started.set()  # the start-up watchdog must not take the children's ending for a failure
        _end_children(children, wait=10.0 if code == 0 else 0.0)
        shutil.rmtree(rdzv, ignore_errors=True)
    return code


def _rank0_code(run: Callable[[], int]) -> int:
    """Rank 0's exit code, with one line for each way a run stops other than by finishing."""
    try:
        return run()
    except KeyboardInterrupt:
        print("marl: interrupted, stopping every process", file=sys.stderr)
        return 130
    except Terminated:
        print("marl: terminated, stopping every process", file=sys.stderr)
        return 143
    except NonFiniteError as e:
        print(f"marl: error: {e}. Stopping; lower --learning-rate or check the env's rewards and observations.",
              file=sys.stderr)
        return 1
    except AllActorsLost as e:
        print(f"marl: error: {e}", file=sys.stderr)
        return 1
    except Exception:
        traceback.print_exc()
        print("marl: the run failed (traceback above); stopping every process", file=sys.stderr)
        return 1


def _rank0_child(world: int, cfg: Config, info: EnvInfo, init_methods: tuple[str, str], clock: StartupClock,
                 restarts: int, started) -> None:
    _die_with_parent()
    # A group of its own: Ctrl-C in a terminal signals the supervisor alone, which passes it on once
    # (twice would be "stop now" to StopSignals).
    os.setpgrp()
    control = RunControl(clock, StopSignals(), restarts_done=restarts, restarts_allowed=cfg.max_restarts)
    exit_now(_rank0_code(lambda: run_rank(0, world, 0, cfg, info, init_methods, on_ready=started.set, control=control)))


class _ForwardSignals:
    """The supervisor's SIGINT and SIGTERM go to rank 0, which stops at an iteration boundary and
    checkpoints; between two worlds they stop the supervisor itself. Once one came, no world is
    started again."""

    REPEAT_SECONDS = 1.0  # a repeat within this is the same stop delivered twice, not "stop at once"

    def __init__(self):
        self.target: mp.Process | None = None
        self.received: int | None = None
        self.last = -math.inf
        self.previous = {sig: signal.signal(sig, self._handle) for sig in (signal.SIGINT, signal.SIGTERM)}

    def _handle(self, signum, frame) -> None:
        # timeout(1) signals its child, then the child's whole group: this process gets the signal twice.
        repeat, self.last = time.monotonic() - self.last < self.REPEAT_SECONDS, time.monotonic()
        if self.received is None:
            self.received = signum
        if self.target is not None and self.target.pid is not None and self.target.exitcode is None:
            if not repeat:
                os.kill(self.target.pid, signum)
        else:
            StopSignals.raise_for(signum)

    def wait_for(self, rank0: mp.Process) -> int:
        """Rank 0's exit code, once it has exited."""
        self.target = rank0
        try:
            while rank0.exitcode is None:
                rank0.join(0.2)
        finally:
            self.target = None
        if rank0.exitcode < 0:
            print(f"marl: the coordinator (rank 0) was killed by signal {-rank0.exitcode}; stopping every process",
                  file=sys.stderr, flush=True)
            return 1
        return rank0.exitcode

    def restore(self) -> None:
        for sig, handler in self.previous.items():
            signal.signal(sig, handler)


def _watch_start(children: list, watched: list, started) -> None:
    """During start-up rank 0 blocks inside rendezvous calls that would wait minutes for a child
    that already died; end the job at once instead."""
    while not started.is_set():
        for p in watched:
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
