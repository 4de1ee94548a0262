"""Multi-agent results: trained policies against a random policy measured in the same run.

Cases (each trains with `train.py --config configs/<case>.toml`, seeds 1..N, to a fixed budget of
agent-steps, in sync mode so that a seed gives the same run on a busy machine):
- coop_nav: the first-party cooperative navigation env, MAPPO (`--critic central`), IPPO
  (`--critic local`), recurrent MAPPO (`--core gru`: a GRU in the actor and one in the critic), and
  the off-policy value decompositions QMIX and VDN (configs/coop_nav_qmix.toml, at MAPPO's budget);
- simple_spread: PettingZoo MPE2 simple_spread_v3 (N=3, 25 steps, discrete), MAPPO, recurrent MAPPO,
  QMIX and VDN (configs/simple_spread_qmix.toml);
- simple_spread_continuous: the same with Box actions (`continuous_actions=True`) and --norm-obs,
  MAPPO with the clipped Gaussian and with the tanh-squashed one;
- speaker_listener: MPE2 simple_speaker_listener_v4, one network per agent (`--policies per-agent`:
  their spaces differ);
- cartpole_per_agent: CartPole-v1, 4 agents with a network each, until the mean return reaches 475.

The score of a trained run is the mean episode return per agent of its exported policy (actions
sampled, as in training) over --eval-episodes episodes; in these cooperative envs each agent's
return is the team's (simple_spread: half team, half its own collisions). The random baseline
plays uniformly random actions in the same env for the same number of episodes.

    python bench/multiagent.py                                  # every case, 5 seeds
    python bench/multiagent.py --cases coop_nav --seeds 5
    python bench/multiagent.py --cases coop_nav,simple_spread --variants MAPPO,rMAPPO --seeds 3
    python bench/multiagent.py --cases coop_nav,simple_spread --variants MAPPO,QMIX,VDN --seeds 3
    python bench/multiagent.py --smoke                          # CI: tiny budgets, 1 seed, coop_nav and cartpole
    python bench/multiagent.py --cases coop_nav --variants MAPPO,IPPO --logdir runs/bench   # keep the runs (bench/plot.py)

Each run goes through the Python API (`marl.train`), its printed lines into <logdir>/<run>.log.
"""

from __future__ import annotations

import argparse
import contextlib
import os
import statistics
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

CONTINUOUS = ["--env-kwargs", '{"N": 3, "max_cycles": 25, "continuous_actions": true}', "--norm-obs"]
# case: (config, flags every run of the case and its random baseline take, {variant: its own flags})
CASES = {
    "coop_nav": ("configs/coop_nav.toml", [], {"MAPPO": ["--critic", "central"], "IPPO": ["--critic", "local"],
                                               "rMAPPO": ["--critic", "central", "--core", "gru"],
                                               "QMIX": ["--config", "configs/coop_nav_qmix.toml"],
                                               "VDN": ["--config", "configs/coop_nav_qmix.toml", "--algo", "vdn"]}),
    "simple_spread": ("configs/simple_spread.toml", [], {"MAPPO": [], "rMAPPO": ["--core", "gru"],
                                                         "QMIX": ["--config", "configs/simple_spread_qmix.toml"],
                                                         "VDN": ["--config", "configs/simple_spread_qmix.toml", "--algo", "vdn"]}),
    # Box(0, 1, (5,)) actions: a Gaussian clipped to the bounds, or squashed into them by tanh.
    "simple_spread_continuous": ("configs/simple_spread.toml", CONTINUOUS,
                                 {"MAPPO": [], "MAPPO tanh": ["--action-dist", "tanh_gaussian"]}),
    "speaker_listener": ("configs/speaker_listener.toml", [], {"MAPPO per-agent": []}),
    "cartpole_per_agent": ("configs/cartpole.toml", [], {"PPO per-agent": ["--agents", "4", "--policies", "per-agent"]}),
}


@contextlib.contextmanager
def output_to(path: Path):
    """The file descriptors 1 and 2 of this process, and so of every process a run starts, go to `path`."""
    sys.stdout.flush()
    sys.stderr.flush()
    saved = [os.dup(1), os.dup(2)]
    with open(path, "w") as f:
        os.dup2(f.fileno(), 1)
        os.dup2(f.fileno(), 2)
        try:
            yield
        finally:
            sys.stdout.flush()
            sys.stderr.flush()
            os.dup2(saved[0], 1)
            os.dup2(saved[1], 2)
            for fd in saved:
                os.close(fd)


def train(config: str, extra: list[str], seed: int, budget: int | None, logdir: str, name: str):
    """One run through the Python API, as `train.py --config <config> <extra>` with the seed and budget."""
    import marl
    from marl.config import parse_values

    values = parse_values(["--config", str(ROOT / config), *extra, "--seed", str(seed), "--logdir", logdir,
                           "--run-name", name, "--mode", "sync", *(["--total-steps", str(budget)] if budget else [])])
    log = Path(logdir) / f"{name}.log"
    try:
        with output_to(log):
            return marl.train(**values)
    except (marl.UsageError, marl.RunFailed) as e:
        sys.stderr.write(log.read_text()[-3000:])
        raise SystemExit(f"multiagent: {name}: {e}") from None


def mean_return(results: dict[str, list[float]]) -> float:
    return statistics.mean(x for r in results.values() for x in r)


def spread(values: list[float]) -> str:
    return f"median {statistics.median(values):.1f} (min {min(values):.1f}, max {max(values):.1f})"


def run_case(case: str, seeds: int, budget: int | None, episodes: int, logdir: str,
             only: list[str] | None = None) -> dict[str, list[float]]:
    from envs import describe
    from marl.config import Config, parse_values
    from marl.evaluate import evaluate, random_returns
    from marl.policies import specs_of

    config, common, variants = CASES[case]
    variants = {k: common + v for k, v in variants.items() if not only or k in only}
    if case == "cartpole_per_agent":
        return run_cartpole(config, variants, seeds, budget, logdir)
    cfg = Config(**parse_values(["--config", str(ROOT / config), *common]))
    info = describe(cfg.env, cfg.agents or None, cfg.env_kwargs)
    scores: dict[str, list[float]] = {}
    random = mean_return(random_returns(info, specs_of(cfg, info), episodes, seed=10_000))
    steps = budget or cfg.total_steps  # the preset's own, through its base
    for variant, extra in variants.items():
        scores[variant] = []
        for seed in range(1, seeds + 1):
            run = train(config, extra, seed, budget, logdir, f"{case}-{variant.replace(' ', '_')}-{seed}").run_dir
            score = mean_return(evaluate(run, episodes, seed=10_000, sample=True)[0])
            scores[variant].append(score)
            print(f"{case} {variant} seed {seed}: mean return {score:.1f} after {steps:,} agent-steps", flush=True)
        print(f"{case} {variant}: {spread(scores[variant])} over {seeds} seed(s) | random {random:.1f} | "
              f"median - random = {statistics.median(scores[variant]) - random:+.1f}", flush=True)
    if len(variants) == 2:
        (a, sa), (b, sb) = scores.items()
        print(f"{case}: {a} - {b} median difference {statistics.median(sa) - statistics.median(sb):+.1f}", flush=True)
    scores["random"] = [random]
    return scores


def run_cartpole(config: str, variants: dict, seeds: int, budget: int | None, logdir: str) -> dict[str, list[float]]:
    (variant, extra), = variants.items()
    solved, steps = 0, []
    for seed in range(1, seeds + 1):
        result = train(config, extra, seed, budget, logdir, f"cartpole-{seed}")
        hit = result.reason == "target"
        solved += hit
        steps.append(result.global_step if hit else 0)
        print(f"cartpole_per_agent seed {seed}: {f'solved (475) at step {result.global_step:,}' if hit else 'NOT solved'}",
              flush=True)
    print(f"cartpole_per_agent {variant}: solved {solved}/{seeds}; agent-steps {spread([float(s) for s in steps])}", flush=True)
    return {variant: [float(solved)]}


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--cases", default=",".join(CASES), help=f"comma-separated, from {', '.join(CASES)}")
    p.add_argument("--variants", default="", help="comma-separated variant names to run (default: every one of each case)")
    p.add_argument("--seeds", type=int, default=5, help="seeds 1..N per variant")
    p.add_argument("--budget", type=int, default=None, help="agent-steps per run (default: the config's total_steps)")
    p.add_argument("--eval-episodes", type=int, default=50, help="episodes per agent for each score")
    p.add_argument("--smoke", action="store_true", help="tiny budgets, one seed, the cases and variants "
                   "that no other test trains: that the bench runs, not its numbers")
    p.add_argument("--logdir", default="", help="keep the runs (TensorBoard logs, policies, printed lines) here "
                   "(default: a temporary directory, removed at the end)")
    args = p.parse_args()
    cases = args.cases.split(",")
    unknown = [c for c in cases if c not in CASES]
    if unknown:
        p.error(f"unknown case {unknown[0]!r}; choose from {', '.join(CASES)}")
    if args.smoke:
        args.seeds, args.budget, args.eval_episodes = 1, 2_000, 3  # one iteration of each case
        # The recurrent variants only add a flag to a case that runs anyway (tests/test_train_recurrent.py trains them),
        # and tests/test_train_off_policy.py trains QMIX and VDN on coop_nav.
        args.variants = args.variants or ",".join(v for _, _, vs in CASES.values() for v in vs
                                                  if not v.startswith(("rMAPPO", "QMIX", "VDN")))
        # Likewise the continuous case is simple_spread's with flags (tests/test_train_continuous.py trains it); and
        # simple_spread and speaker_listener take coop_nav's path through run_case, each with a preset that
        # tests/test_train.py trains. That leaves coop_nav (its two variants reach every line of run_case) and
        # cartpole_per_agent (run_cartpole).
        smoke_cases = ("coop_nav", "cartpole_per_agent")
        cases = [c for c in cases if c in smoke_cases] if args.cases == p.get_default("cases") else cases
    with tempfile.TemporaryDirectory() as scratch:
        logdir = args.logdir or scratch
        os.makedirs(logdir, exist_ok=True)
        for case in cases:
            run_case(case, args.seeds, args.budget, args.eval_episodes, logdir,
                     [v for v in args.variants.split(",") if v] or None)
    return 0


if __name__ == "__main__":
    sys.exit(main())
