"""Learning curves from runs' TensorBoard logs: the README's figures (`pip install -e '.[dev]'` for matplotlib).

Each SERIES argument is LABEL=GLOB (or a plain GLOB, labelled by itself): the run directories it
matches make one series. Each run is drawn thin, as logged (`--tag`, default the mean return of the
episodes finished in each iteration, against agent-steps); the series' median over its runs is drawn
thick, on a grid of agent-steps, where at least half of its runs have got that far (a run that
stopped at its target leaves the median there). A dashed line marks `--target` if given.

    python bench/time_to_solve.py --seeds 5 --logdir runs/bench/cartpole -- --agents 8
    python bench/plot.py --out bench/figures/cartpole.png --title "CartPole-v1 x 8 agents, seeds 1-5" \\
        --target 475 "seeds 1-5=runs/bench/cartpole/seed*"
"""

from __future__ import annotations

import argparse
import glob
import statistics
import sys
from pathlib import Path

GRID = 200  # points of a series' median


def read_curve(run_dir: str, tag: str) -> list[tuple[int, float]]:
    """(step, value) of `tag` in a run's event files, with TensorBoard's own reader (a resumed run's
    purged events already dropped)."""
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    acc = EventAccumulator(run_dir, size_guidance={"scalars": 0})
    acc.Reload()
    if tag not in acc.Tags()["scalars"]:
        return []
    return [(e.step, e.value) for e in acc.Scalars(tag)]


def value_at(curve: list[tuple[int, float]], step: float) -> float | None:
    """The curve at `step`, linear between the two points logged around it; None outside the curve."""
    if not curve or step < curve[0][0] or step > curve[-1][0]:
        return None
    for (s0, v0), (s1, v1) in zip(curve, curve[1:]):
        if s0 <= step <= s1:
            return v0 if s1 == s0 else v0 + (v1 - v0) * (step - s0) / (s1 - s0)
    return curve[-1][1]


def median_curve(curves: list[list[tuple[int, float]]]) -> tuple[list[float], list[float]]:
    end = max(c[-1][0] for c in curves)
    xs, ys = [], []
    for i in range(1, GRID + 1):
        x = end * i / GRID
        values = [v for v in (value_at(c, x) for c in curves) if v is not None]
        if len(values) * 2 >= len(curves):
            xs.append(x)
            ys.append(statistics.median(values))
    return xs, ys


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("series", nargs="+", help="LABEL=GLOB of run directories (or GLOB)")
    p.add_argument("--out", required=True, help="image file to write (.png, .svg, ...)")
    p.add_argument("--title", default="")
    p.add_argument("--tag", default="charts/episodic_return", help="the scalar to draw")
    p.add_argument("--ylabel", default="episode return")
    p.add_argument("--target", type=float, default=None, help="draw this value as a dashed line")
    p.add_argument("--target-label", default="target", help="the dashed line's name in the legend")
    args = p.parse_args()
    try:
        import matplotlib
    except ImportError:
        print("error: bench/plot.py needs matplotlib: pip install -e '.[dev]'", file=sys.stderr)
        return 2
    matplotlib.use("Agg")  # files only, no display
    import matplotlib.pyplot as plt
    import matplotlib.ticker

    fig, ax = plt.subplots(figsize=(7, 4), dpi=110)
    colors = plt.rcParams["axes.prop_cycle"].by_key()["color"]
    for k, spec in enumerate(args.series):
        label, _, pattern = spec.rpartition("=") if "=" in spec else (spec, "", spec)
        runs = sorted(d for d in glob.glob(pattern) if Path(d).is_dir())
        curves = [c for c in (read_curve(d, args.tag) for d in runs) if c]
        if not curves:
            print(f"error: {pattern!r} matches no run directory with {args.tag} in its logs", file=sys.stderr)
            return 2
        color = colors[k % len(colors)]
        for c in curves:
            ax.plot([s for s, _ in c], [v for _, v in c], color=color, alpha=0.25, linewidth=0.8)
        xs, ys = median_curve(curves)
        ax.plot(xs, ys, color=color, linewidth=2.2, label=f"{label} (median of {len(curves)})")
        print(f"{label}: {len(curves)} runs, {sum(len(c) for c in curves)} points, "
              f"median at the end {ys[-1] if ys else float('nan'):.1f}")
    if args.target is not None:
        ax.axhline(args.target, color="gray", linestyle="--", linewidth=1, label=f"{args.target_label} {args.target:g}")
    ax.xaxis.set_major_formatter(matplotlib.ticker.FuncFormatter(
        lambda x, _: f"{x / 1e6:g}M" if x >= 1e6 else f"{x / 1e3:g}k" if x else "0"))
    ax.set_xlabel("agent-steps")
    ax.set_ylabel(args.ylabel)
    ax.set_title(args.title)
    ax.grid(alpha=0.3)
    ax.legend(loc="lower right")
    fig.tight_layout()
    Path(args.out).parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(args.out)
    print(f"wrote {args.out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
