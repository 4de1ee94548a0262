"""Fault soak: a run that loses an actor (SIGKILL) every --kill-every seconds, and how it copes.

Starts `train.py` as a user would (more actors than usual, no early stop), kills one live actor
process at every interval, and at the end stops the run with SIGTERM. It prints the agent-steps/s
in the window before and after each kill (from the progress lines), the episodes cut short (a
killed actor's in-progress episodes, one per agent slot, and its rollout in flight is dropped),
whether the mean return reached the env's target during the run, and how the run ended.
marl replaces no actor (the RPC world is static): the run goes on degraded.

    python bench/fault_soak.py --minutes 2 --kill-every 20 --actors 8
"""

from __future__ import annotations

import argparse
import os
import re
import signal
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
PROGRESS = re.compile(r"step\s+([\d,]+) \|.*\| return\s+([\d.]+|n/a)")


def actor_pids(parent: int) -> dict[int, str]:
    """Live actor processes among `parent`'s children, by their process names (marl-actorN)."""
    found = {}
    for d in Path("/proc").iterdir():
        if not d.name.isdigit():
            continue
        try:
            stat = (d / "stat").read_text()
            name = stat[stat.index("(") + 1:stat.rindex(")")]
            ppid, state = int(stat.rsplit(")", 1)[1].split()[1]), stat.rsplit(")", 1)[1].split()[0]
        except (OSError, ValueError):
            continue
        if ppid == parent and name.startswith("marl-actor") and state != "Z":
            found[int(d.name)] = name
    return found


def rate(points: list[tuple[float, int]], start: float, end: float) -> float | None:
    inside = [(t, s) for t, s in points if start <= t <= end]
    if len(inside) < 2:
        return None
    return (inside[-1][1] - inside[0][1]) / (inside[-1][0] - inside[0][0])


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--minutes", type=float, default=2.0)
    p.add_argument("--kill-every", type=float, default=20.0, help="seconds between kills")
    p.add_argument("--actors", type=int, default=8)
    p.add_argument("--envs-per-actor", type=int, default=4)
    p.add_argument("--agents", type=int, default=8)
    p.add_argument("--target", type=float, default=475.0, help="the return the run should reach (CartPole-v1's)")
    args = p.parse_args()
    points: list[tuple[float, int]] = []
    best = [0.0]
    with tempfile.TemporaryDirectory() as logdir:
        cmd = [sys.executable, str(ROOT / "train.py"), "--agents", str(args.agents), "--actors", str(args.actors),
               "--envs-per-actor", str(args.envs_per_actor), "--total-steps", str(10**12), "--target-return", "1e9",
               "--logdir", logdir, "--run-name", "soak"]
        proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, cwd=ROOT)
        start = time.monotonic()
        lines: list[str] = []

        def read() -> None:
            for line in proc.stdout:
                lines.append(line)
                m = PROGRESS.search(line)
                if m:
                    points.append((time.monotonic() - start, int(m.group(1).replace(",", ""))))
                    if m.group(2) != "n/a":
                        best[0] = max(best[0], float(m.group(2)))

        reader = threading.Thread(target=read, daemon=True)
        reader.start()
        err_lines: list[str] = []
        threading.Thread(target=lambda: err_lines.extend(proc.stderr), daemon=True).start()
        kills: list[tuple[float, str]] = []
        try:
            while not points and proc.poll() is None and time.monotonic() - start < 120:
                time.sleep(0.1)  # training has started
            first = time.monotonic() - start
            deadline = first + args.minutes * 60
            next_kill = first + args.kill_every
            while time.monotonic() - start < deadline and proc.poll() is None:
                if time.monotonic() - start >= next_kill:
                    live = actor_pids(proc.pid)
                    if len(live) > 1:
                        pid, name = sorted(live.items())[0]
                        os.kill(pid, signal.SIGKILL)
                        kills.append((time.monotonic() - start, name))
                    next_kill += args.kill_every
                time.sleep(0.05)
            proc.send_signal(signal.SIGTERM)
            proc.wait(timeout=60)
        finally:
            if proc.poll() is None:
                proc.kill()
                proc.wait()
        reader.join(timeout=5)
    window = min(5.0, args.kill_every / 2)
    print(f"fault soak: {args.actors} actors x {args.envs_per_actor} copies x {args.agents} agents, "
          f"one actor SIGKILLed every {args.kill_every:g}s for {args.minutes:g} min")
    for t, name in kills:
        before, after = rate(points, t - window, t), rate(points, t + 1.0, t + 1.0 + window)
        fmt = lambda r: "n/a" if r is None else f"{r:,.0f}"  # noqa: E731
        print(f"  {t:6.1f}s killed {name}: {fmt(before)} -> {fmt(after)} agent-steps/s "
              f"(ratio {after / before:.2f})" if before and after else f"  {t:6.1f}s killed {name}: {fmt(before)} -> {fmt(after)}")
    dropped = [line.strip() for line in lines if "failed and is dropped" in line]
    print(f"actors killed: {len(kills)}; reported dropped by the coordinator: {len(dropped)}")
    print(f"episodes cut short: {len(kills) * args.envs_per_actor * args.agents} "
          f"(each killed actor's in-progress episodes; its rollout in flight was dropped too)")
    print(f"best mean return of the last 100 episodes: {best[0]:.1f}; target {args.target:g} "
          f"{'reached' if best[0] >= args.target else 'NOT reached'}")
    print(f"run ended with exit code {proc.returncode} (143: stopped by the bench's SIGTERM, as planned)")
    ok = proc.returncode == 143 and len(dropped) == len(kills)
    if not ok:
        sys.stderr.write("".join(err_lines[-30:]))
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
