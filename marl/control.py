"""Run-control objects that the launcher hands rank 0's main: the start-up clock and the stop signals."""

from __future__ import annotations

import os
import signal
import time
from dataclasses import dataclass, field


@dataclass
class StartupClock:
    """Wall-clock marks (time.time()) of a run's start-up, for the start-up line and perf/startup_*."""

    command: float | None  # this process's start, from /proc (None where there is no /proc)
    launch: float  # imports and config checks done, processes about to start
    marks: dict[str, float] = field(default_factory=dict)  # later phases, in order

    def mark(self, phase: str) -> None:
        self.marks[phase] = time.time()

    def parts(self) -> dict[str, float]:
        """Seconds spent in each phase, the phase named by the mark that ends it."""
        out, last = {}, self.launch
        if self.command is not None:
            out["imports_and_checks"] = self.launch - self.command
        for phase, t in self.marks.items():
            out[phase], last = t - last, t
        return out


class Terminated(Exception):
    """SIGTERM, turned into an exception so that the same unwinding as Ctrl-C's flushes the logs."""


class StopSignals:
    """SIGINT and SIGTERM ask the run to stop at the next iteration boundary: an exception raised
    at an arbitrary point can land inside torch's C++ RPC code and leave a future that never
    completes (seen: Ctrl-C during dispatch hung the coordinator in wait_all). A second signal
    stops at once."""

    def __init__(self):
        self.received: int | None = None
        for sig in (signal.SIGINT, signal.SIGTERM):
            signal.signal(sig, self._handle)

    def _handle(self, signum, frame) -> None:
        if self.received is not None:
            self.raise_for(signum)
        self.received = signum

    @staticmethod
    def raise_for(signum: int):
        raise KeyboardInterrupt() if signum == signal.SIGINT else Terminated()

    def check(self) -> None:
        """Raise KeyboardInterrupt or Terminated if a signal came; call it where stopping is safe."""
        if self.received is not None:
            self.raise_for(self.received)


# Rank 0's exit code for "an actor failed; the checkpoint is written: start every process again
# from it" (sysexits' EX_TEMPFAIL). The local launcher restarts the world on it; torchrun restarts
# its group on any failure.
HEAL_EXIT = 75


@dataclass
class RunControl:
    """What the launcher hands rank 0's main: the start-up clock, the stop signals, and how many
    times the world may still be restarted to replace a failed actor."""

    clock: StartupClock
    stop: StopSignals
    restarts_done: int = 0  # worlds started again so far in this run
    restarts_allowed: int = 0  # at most, in all; past it a failed actor is dropped and the run goes on degraded
    peers_lost: bool = False  # set by the coordinator when it drops a process that failed


def process_start_time() -> float | None:
    """When this process started, on the time.time() clock (Linux; 10 ms resolution)."""
    try:
        with open("/proc/self/stat") as f:
            start_ticks = int(f.read().rsplit(")", 1)[1].split()[19])  # field 22, starttime
        with open("/proc/uptime") as f:
            uptime = float(f.read().split()[0])
        return time.time() - (uptime - start_ticks / os.sysconf("SC_CLK_TCK"))
    except (OSError, ValueError, IndexError):
        return None
