"""Learner ranks for tests: real processes in a real gloo group, rendezvous through a file store
(as marl.launch's), ended whatever happens."""

from __future__ import annotations

import multiprocessing
import os
import traceback
import uuid
from typing import Callable

import torch
import torch.distributed as dist

from marl.launch import exit_now


def _worker(fn: Callable, rank: int, world: int, init_method: str, args: tuple) -> None:
    code = 1
    try:
        os.environ["GLOO_SOCKET_IFNAME"] = "lo"
        torch.set_num_threads(1)
        dist.init_process_group("gloo", init_method=init_method, rank=rank, world_size=world)
        try:
            fn(rank, world, *args)
        finally:
            dist.destroy_process_group()
        code = 0
    except BaseException:
        traceback.print_exc()
    finally:
        exit_now(code)  # as marl's own processes leave


def run_ranks(fn: Callable, world: int, tmp_path, *args, timeout: float = 120) -> None:
    """Call fn(rank, world, *args) in `world` processes that share the default process group;
    fails unless every one exits 0. `fn` must be a module-level function.

    Forked on CPU, as marl.launch starts its own: a spawned rank imports torch and the test's
    module again (3-6 s of a 2-core machine's CPU per rank, most of what a small test costs)."""
    ctx = multiprocessing.get_context("spawn" if torch.cuda.is_available() else "fork")
    init_method = f"file://{tmp_path}/rendezvous_{uuid.uuid4().hex}"
    procs = [ctx.Process(target=_worker, args=(fn, r, world, init_method, args)) for r in range(world)]
    for p in procs:
        p.start()
    try:
        for p in procs:
            p.join(timeout=timeout)
        assert all(p.exitcode == 0 for p in procs), [p.exitcode for p in procs]
    finally:
        for p in procs:
            if p.is_alive():
                p.kill()
