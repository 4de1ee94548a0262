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


MODES = {"degraded": "0", "healing": "1000"}  # --max-restarts: never, or at every kill
REPORTS = {"degraded": "failed and is dropped", "healing": "marl: healing"}  # the run's line for each kill


def reported(lines: list[str], mode: str) -> int:
    return sum(REPORTS[mode] in line for line in lines)


def soak(args, mode: str) -> dict:
    """One run of `mode`: kill an actor every --kill-every seconds while its world is training."""
    points: list[tuple[float, int]] = []
    best, ready, heals, lines = [0.0], [False], [], []
    with tempfile.TemporaryDirectory() as logdir:
        cmd = [sys.executable, str(ROOT / "train.py"), "--agents", str(args.agents), "--actors", str(args.actors),
               "--envs-per-actor", str(args.envs_per_actor), "--total-steps", str(10**12), "--target-return", "1e9",
               "--logdir", logdir, "--run-name", "soak", "--max-restarts", MODES[mode]]
        proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, cwd=ROOT)
        start = time.monotonic()

        def read() -> None:
            for line in proc.stdout:
                now = time.monotonic() - start
                lines.append(line)
                m = PROGRESS.search(line)
                if m:
                    points.append((now, int(m.group(1).replace(",", ""))))
                    if m.group(2) != "n/a":
                        best[0] = max(best[0], float(m.group(2)))
                elif line.startswith("start-up:"):  # a world's first rollout
                    ready[0] = True
                    if heals and heals[-1][1] is None:
                        heals[-1][1] = now
                elif line.startswith(REPORTS["healing"]):
                    ready[0] = False

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
                now = time.monotonic() - start
                if now >= next_kill and ready[0]:  # never during a world's start-up
                    live = actor_pids(proc.pid)
                    if len(live) > 1:
                        pid, name = sorted(live.items())[0]
                        os.kill(pid, signal.SIGKILL)
                        kills.append((now, name))
                        if mode == "healing":
                            heals.append([now, None])
                    next_kill += args.kill_every
                time.sleep(0.05)
            # The last kill may be seconds from being noticed: let the run report it before the stop.
            settle = time.monotonic() + 30
            while reported(lines, mode) < len(kills) and time.monotonic() < settle and proc.poll() is None:
                time.sleep(0.1)
            proc.send_signal(signal.SIGTERM)
            proc.wait(timeout=60)
        finally:
            if proc.poll() is None:
                proc.kill()
                proc.wait()
        reader.join(timeout=5)
    slots = args.envs_per_actor * args.agents
    return {
        "kills": len(kills), "reported": reported(lines, mode), "code": proc.returncode,
        "rate": (points[-1][1] - points[0][1]) / (points[-1][0] - points[0][0]) if len(points) > 1 else 0.0,
        "heal_seconds": [end - t for t, end in heals if end is not None],
        # Degraded: the killed actor's episodes; healing: every actor's, at each restart.
        "lost": len(kills) * slots * (args.actors if mode == "healing" else 1),
        "best": best[0], "err": err_lines,
    }


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--minutes", type=float, default=2.0)
    p.add_argument("--kill-every", type=float, default=20.0, help="seconds between kills")
    p.add_argument("--actors", type=int, default=8)
    p.add_argument("--envs-per-actor", type=int, default=4)
    p.add_argument("--agents", type=int, default=8)
    p.add_argument("--target", type=float, default=475.0, help="the return the run should reach (CartPole-v1's)")
    p.add_argument("--modes", default="degraded,healing", help=f"comma-separated, of {', '.join(MODES)}")
    args = p.parse_args()
    print(f"fault soak: {args.actors} actors x {args.envs_per_actor} copies x {args.agents} agents, "
          f"one actor SIGKILLed every {args.kill_every:g}s for {args.minutes:g} min (never during a start-up)")
    ok = True
    for mode in args.modes.split(","):
        r = soak(args, mode)
        heal = r["heal_seconds"]
        heal_text = (f" | kill -> first rollout of the new world: median {sorted(heal)[len(heal) // 2]:.1f}s "
                     f"(min {min(heal):.1f}, max {max(heal):.1f})" if heal else "")
        print(f"{mode}: {r['kills']} actors killed, {r['reported']} reported "
              f"{'healed' if mode == 'healing' else 'dropped'} | {r['rate']:,.0f} agent-steps/s over the run{heal_text} | "
              f"{r['lost']} episodes lost | best mean return {r['best']:.1f}, target {args.target:g} "
              f"{'reached' if r['best'] >= args.target else 'NOT reached'} | exit code {r['code']} (143: the bench's SIGTERM)",
              flush=True)
        good = r["code"] == 143 and r["reported"] == r["kills"]
        if not good:
            sys.stderr.write("".join(r["err"][-30:]))
        ok = ok and good
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
