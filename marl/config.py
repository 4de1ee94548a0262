"""The run's configuration: one dataclass, TOML files and command-line overrides.

`Config` is the single source of truth. A TOML file (`--config`) sets any field by name, the
command line overrides any field as `--field-name`, and `validate` rejects impossible values
before a single process starts. Errors a user can cause are `UsageError`s: `train.py` prints
their one line and exits 2.
"""

from __future__ import annotations

import argparse
import dataclasses
import difflib
import json
import math
import time
import tomllib
import typing
from dataclasses import dataclass, field
from pathlib import Path


class UsageError(Exception):
    """A mistake in the user's input; its message is one line that names the problem and the fix."""


def _f(default, help: str, **kw):
    if isinstance(default, dict):  # a mutable default: each Config gets its own copy
        return field(default_factory=lambda: dict(default), metadata={"help": help, **kw})
    return field(default=default, metadata={"help": help, **kw})


class Section:
    """One component's fields, declared once: a dataclass whose fields are flags (`--field-name`),
    TOML keys (flat, or under `[key]`) and attributes of `Config`, which inherits every section.
    `check` refuses the section's own impossible values with one line each; what spans sections
    (the batch against the learner ranks, a --model against --core) is `validate`'s."""

    key: typing.ClassVar[str]  # its TOML table and runs/<run>/config.toml's
    title: typing.ClassVar[str]  # its --help group and the flag reference's heading

    def check(self) -> None:
        for f in dataclasses.fields(self):  # the CLI checks choices, a TOML file does not
            choices, value = f.metadata.get("choices"), getattr(self, f.name)
            if choices and value not in choices:
                raise UsageError(f"{_flag(f.name)} must be one of {', '.join(choices)}, got {value!r}{_suggest(str(value), choices)}")

    def _at_least(self, bound: int, *names: str, why: str = "") -> None:
        for name in names:
            v = getattr(self, name)
            if v < bound:
                raise UsageError(f"{_flag(name)} must be at least {bound}{why}, got {v}")

    def _one_or_zero_for(self, name: str, zero: str) -> None:
        """A count that is at least 1, or 0 for a default that `zero` names."""
        if getattr(self, name) < 0:
            raise UsageError(f"{_flag(name)} must be at least 1 (or 0 for {zero}), got {getattr(self, name)}")

    def _within(self, *checks: tuple[str, bool, str]) -> None:
        for name, ok, want in checks:
            v = getattr(self, name)
            if not ok or (isinstance(v, float) and not math.isfinite(v)):
                raise UsageError(f"{_flag(name)} must be {want}, got {v}")


def _flag(name: str) -> str:
    return "--" + name.replace("_", "-")


@dataclass
class EnvSection(Section):
    key: typing.ClassVar[str] = "env"
    title: typing.ClassVar[str] = "environment"

    env: str = _f("CartPole-v1", "Gymnasium id (also `module:EnvId`), a single-agent id becoming N independent agents; or a PettingZoo Parallel env as `pettingzoo:<module>.<env>`, e.g. pettingzoo:mpe2.simple_spread_v3 or the first-party pettingzoo:envs.coop_nav")
    env_kwargs: dict = _f({}, "keyword arguments for the env's constructor: JSON on the command line ('{\"max_cycles\": 25}'), a table in TOML", mapping=True)
    agents: int = _f(0, "agents acting in each environment copy; 0 = 8 for a single-agent Gymnasium id, the env's own count for a PettingZoo env")
    wrappers: tuple = _f((), "Gymnasium wrappers around each env copy, e.g. \"AtariPreprocessing(frame_skip=4),FrameStackObservation(stack_size=4)\" or `atari` for the standard Atari preprocessing", items=str)
    obs_keys: tuple = _f((), "observation keys the network reads, e.g. image,direction (default: every key a network can read; text keys are dropped)", items=str)

    def check(self) -> None:
        super().check()
        self._one_or_zero_for("agents", "the env's own count")


@dataclass
class PolicySection(Section):
    key: typing.ClassVar[str] = "policy"
    title: typing.ClassVar[str] = "policies"

    policies: typing.Union[str, dict] = _f("shared", "which network acts for which agent: `shared` (one network for all: parameter sharing), `per-agent`, or a mapping of agent-id patterns to policy names (JSON, or a TOML table), first match wins", mapping=True)
    agent_id_input: bool = _f(False, "append a one-hot of the agent (within its policy) to a shared policy's observation, so that one network can act differently per agent")
    opponents: str = _f("self", "`self`: every seat plays the current policy (self-play); `pool`: also a pool of frozen snapshots of it (every --snapshot-every iterations, at most --pool-size, the first one the initial weights): each game, with probability --pool-prob, one side (a seat; a team where several policies play) is played by a snapshot drawn from the pool, and makes no training samples (PettingZoo envs)", choices=("self", "pool"))
    snapshot_every: int = _f(10, "--opponents pool: iterations between snapshots")
    pool_size: int = _f(10, "--opponents pool: snapshots kept")
    pool_keep: str = _f("latest", "--opponents pool, once --pool-size snapshots are kept: `latest` drops the oldest for each new one; `history` keeps a uniform sample of all snapshots taken (reservoir sampling), early selves included", choices=("latest", "history"))
    pool_prob: float = _f(0.5, "--opponents pool: probability that a game has one side played by a snapshot (0: snapshots are kept, for evaluation, but never played)")
    critic: str = _f("local", "`local`: each agent's critic sees its own observation (IPPO); `central`: the critic sees the global state, env.state() or all agents' observations in a fixed order (MAPPO)", choices=("local", "central"))

    def check(self) -> None:
        super().check()
        if isinstance(self.policies, str) and self.policies not in ("shared", "per-agent"):
            raise UsageError(f"--policies must be shared, per-agent, or a JSON mapping like "
                             f"'{{\"speaker_*\": \"speaker\", \"*\": \"listener\"}}', got {self.policies!r}")
        self._at_least(1, "snapshot_every", "pool_size")
        self._within(("pool_prob", 0 <= self.pool_prob <= 1, "in [0, 1]"))


@dataclass
class ProcessSection(Section):
    key: typing.ClassVar[str] = "processes"
    title: typing.ClassVar[str] = "processes"

    actors: int = _f(2, "actor processes (RPC workers stepping environments)")
    envs_per_actor: int = _f(4, "environment copies owned by each actor")
    learners: int = _f(0, "learner ranks (FSDP2); 0 = one per visible GPU, or 1 without GPUs")
    max_restarts: int = _f(3, "when an actor fails: checkpoint, end every process and start the world again at full strength, resuming from that checkpoint, up to this many times per run (then go on degraded); 0 = never (under torchrun its own --max-restarts decides)")

    def check(self) -> None:
        super().check()
        self._at_least(1, "actors", "envs_per_actor")
        self._at_least(0, "max_restarts", why=" (0: go on degraded when an actor fails)")
        self._one_or_zero_for("learners", "one per GPU")


@dataclass
class CollectionSection(Section):
    key: typing.ClassVar[str] = "collection"
    title: typing.ClassVar[str] = "collection"

    mode: str = _f("pipelined", "`sync`: collect, then learn, then publish; `pipelined`: the next rollout is asked for, with the weights before this update, as soon as this one arrives, and collected while the learner trains on it (a lag of exactly one version, reproducible; PPO corrects it with the decoupled objective); `async`: actors keep collecting with the newest weights they have while the learner trains (PPO's ratio against the behaviour policy corrects the lag)", choices=("sync", "pipelined", "async"))
    async_ahead: int = _f(1, "--mode async: finished rollouts an actor may have waiting for the learner before it pauses; more keeps actors busy and makes the policy lag larger")
    rollout: str = _f("auto", "unit of one actor request: `steps` (num-steps per env copy, episodes continue), `episodes`, or `auto`: episodes for a turn-based game (a move's outcome comes at the other player's move), else steps", choices=("auto", "steps", "episodes"))
    num_steps: int = _f(32, "environment steps per actor request (rollout=steps)")
    episodes_per_request: int = _f(1, "whole episodes per agent per actor request (rollout=episodes)")

    def check(self) -> None:
        super().check()
        self._at_least(1, "async_ahead", "num_steps", "episodes_per_request")


@dataclass
class BudgetSection(Section):
    key: typing.ClassVar[str] = "budget"
    title: typing.ClassVar[str] = "budget and stopping"

    total_steps: int = _f(500_000, "step budget in agent-steps (one agent acting once = one step)")
    target_return: typing.Optional[float] = _f(None, "stop when the mean return of the last 100 episodes reaches this; default: the env's reward_threshold")

    def check(self) -> None:
        super().check()
        self._at_least(1, "total_steps")


@dataclass
class AlgorithmSection(Section):
    key: typing.ClassVar[str] = "algorithm"
    title: typing.ClassVar[str] = "algorithm"

    # The choices are marl.algorithms.ALGORITHMS' names, and OFF_POLICY those with `off_policy` (a
    # test holds them equal): listed here so that --help and a usage error need no torch import.
    OFF_POLICY: typing.ClassVar[frozenset] = frozenset({"dqn", "iql", "vdn", "qmix", "sac"})
    algo: str = _f("ppo", "`ppo` (GAE, clipped surrogate, several epochs); `appo` (the clipped surrogate on V-trace advantages and value targets: for --mode async); `impala` (the V-trace actor-critic loss, one pass per batch); off-policy, from a replay buffer on the learner ranks: `dqn` (a Q-network acting epsilon-greedily; Discrete actions), `iql` (the same on a multi-agent env: independent Q-learning), `vdn` and `qmix` (cooperative teams: the agents' Qs summed, or mixed by a network of the global state, which needs --critic central), `sac` (soft actor-critic: Box or Discrete actions)", choices=("ppo", "appo", "impala", "dqn", "iql", "vdn", "qmix", "sac"))


@dataclass
class VTraceSection(Section):
    """The hyperparameters of the V-trace algorithms (APPO, IMPALA): an algorithm's own section."""

    key: typing.ClassVar[str] = "vtrace"
    title: typing.ClassVar[str] = "V-trace (appo, impala)"

    vtrace_rho: float = _f(1.0, "V-trace's clip of the importance weights in its TD errors and advantages (rho-bar; appo, impala)")
    vtrace_c: float = _f(1.0, "V-trace's clip of the trace-cutting importance weights (c-bar; appo, impala)")

    def check(self) -> None:
        super().check()
        self._within(("vtrace_rho", self.vtrace_rho > 0, "greater than 0"), ("vtrace_c", self.vtrace_c > 0, "greater than 0"))


@dataclass
class ReplaySection(Section):
    """The off-policy algorithms' replay, names as CleanRL's dqn.py. Each learner rank keeps the
    transitions of the env slots it trains on and samples its share of each batch from them."""

    key: typing.ClassVar[str] = "replay"
    title: typing.ClassVar[str] = "replay (off-policy: dqn, iql, vdn, qmix, sac)"

    buffer_size: int = _f(100_000, "transitions kept, over all learner ranks together (each keeps its share)")
    learning_starts: int = _f(1_000, "agent-steps collected before the first gradient step")
    train_frequency: float = _f(1.0, "agent-steps collected per gradient step (the inverse of the update-to-data ratio; below 1: several steps per agent-step)")
    batch_size: int = _f(128, "transitions per gradient step, over all learner ranks together")
    n_step: int = _f(1, "steps of rewards summed in each TD target before it bootstraps (n-step returns)")
    tau: float = _f(1.0, "target network update rate: 1 copies the online network, below 1 moves it that fraction of the way (soft update)")
    target_network_frequency: int = _f(500, "gradient steps between target network updates")
    save_buffer: bool = _f(False, "also checkpoint every rank's replay buffer, for a resume on as many learner ranks (without it a resumed run starts with an empty buffer, which its actors fill again, and trains on it from its first iteration)")

    def check(self) -> None:
        super().check()
        self._at_least(1, "buffer_size", "batch_size", "n_step", "target_network_frequency")
        self._at_least(0, "learning_starts")
        self._within(("train_frequency", self.train_frequency > 0, "greater than 0"),
                     ("tau", 0 < self.tau <= 1, "in (0, 1]"))
        if self.buffer_size < self.batch_size:
            raise UsageError(f"--buffer-size {self.buffer_size} is smaller than --batch-size {self.batch_size}")


@dataclass
class DQNSection(Section):
    key: typing.ClassVar[str] = "dqn"
    title: typing.ClassVar[str] = "value methods (dqn, iql, vdn, qmix)"

    start_e: float = _f(1.0, "epsilon-greedy exploration: epsilon at the start")
    end_e: float = _f(0.05, "epsilon-greedy exploration: epsilon at the end of its schedule, and after")
    exploration_fraction: float = _f(0.5, "fraction of --total-steps over which epsilon falls linearly from --start-e to --end-e")
    double_q: bool = _f(True, "double Q-learning: the online network picks the next action, the target network values it (van Hasselt et al. 2016)")
    dueling: bool = _f(False, "the dueling head: Q = V + A - mean A (Wang et al. 2016)")

    def check(self) -> None:
        super().check()
        self._within(("start_e", 0 <= self.start_e <= 1, "in [0, 1]"), ("end_e", 0 <= self.end_e <= self.start_e, "in [0, --start-e]"),
                     ("exploration_fraction", 0 < self.exploration_fraction <= 1, "in (0, 1]"))


@dataclass
class MixerSection(Section):
    key: typing.ClassVar[str] = "qmix"
    title: typing.ClassVar[str] = "QMIX's mixer (qmix)"

    mixing_embed_dim: int = _f(32, "units of the mixing network's hidden layer")
    hypernet_embed: int = _f(64, "units of the hidden layer of the hypernetworks that make the mixing weights from the state")

    def check(self) -> None:
        super().check()
        self._at_least(1, "mixing_embed_dim", "hypernet_embed")


@dataclass
class SACSection(Section):
    """Names as CleanRL's sac_continuous_action.py and sac_atari.py."""

    key: typing.ClassVar[str] = "sac"
    title: typing.ClassVar[str] = "soft actor-critic (sac)"

    alpha: float = _f(0.2, "the entropy temperature: fixed, or where --autotune starts it")
    autotune: bool = _f(True, "learn the temperature towards a target entropy: -dim(A) for Box actions, --target-entropy-scale x log(actions) for Discrete")
    target_entropy_scale: float = _f(0.3, "Discrete actions with --autotune: the target entropy as a fraction of the uniform policy's (over the legal actions, with a mask). CleanRL's Atari SAC uses 0.89, which held the policy near uniform on envs.masked (a return of 8.2 of 16 after 6k agent-steps, against 14.8 with 0.3; uniformly random legal actions score 5.25)")

    def check(self) -> None:
        super().check()
        self._within(("alpha", self.alpha > 0, "greater than 0"),
                     ("target_entropy_scale", 0 < self.target_entropy_scale < 1, "in (0, 1)"))


@dataclass
class OptimSection(Section):
    """Names as in CleanRL's ppo.py; IMPALA reads the shared ones (learning rate, gamma, coefficients).
    The defaults, rewards scaled (NormSection), solve CartPole-v1 with 8 agents in a median 79,444
    agent-steps over seeds 1-5 on an AMD EPYC (77,437 over seeds 1-20; docs/results/index.md):
    32-step rollouts and 2 epochs of 8 minibatches (a gradient step per 128 samples, 256 to a step),
    a learning rate of 1e-2 (CleanRL's is 2.5e-4) annealed over the 500k budget, and no value
    clipping (unscaled returns reach ~100, which a 0.2 clip only slows down)."""

    key: typing.ClassVar[str] = "ppo"
    title: typing.ClassVar[str] = "optimisation (CleanRL's PPO names)"

    learning_rate: float = _f(1e-2, "Adam learning rate")
    anneal_lr: bool = _f(True, "anneal the learning rate linearly over the step budget, down to 0.1% of it")
    gamma: float = _f(0.99, "discount factor")
    gae_lambda: float = _f(0.95, "GAE lambda")
    num_minibatches: int = _f(8, "minibatches per epoch (over all learner ranks together)")
    update_epochs: int = _f(2, "epochs over each batch")
    norm_adv: bool = _f(True, "normalise advantages over the batch")
    clip_coef: float = _f(0.2, "PPO surrogate clipping coefficient")
    clip_vloss: bool = _f(False, "clip the value loss like the policy ratio")
    ent_coef: float = _f(0.0, "entropy bonus coefficient")
    vf_coef: float = _f(0.5, "value loss coefficient")
    max_grad_norm: float = _f(0.5, "clip gradients to this global norm (across all learner ranks)")
    target_kl: typing.Optional[float] = _f(None, "stop an update's epochs early when approx KL exceeds this")

    def check(self) -> None:
        super().check()
        self._at_least(1, "num_minibatches", "update_epochs")
        self._within(
            ("learning_rate", 0 < self.learning_rate <= 1, "in (0, 1]"),
            ("gamma", 0 <= self.gamma <= 1, "in [0, 1]"),
            ("gae_lambda", 0 <= self.gae_lambda <= 1, "in [0, 1]"),
            ("clip_coef", 0 < self.clip_coef < 1, "in (0, 1)"),
            ("ent_coef", self.ent_coef >= 0, "at least 0"),
            ("vf_coef", self.vf_coef > 0, "greater than 0"),
            ("max_grad_norm", self.max_grad_norm > 0, "greater than 0"),
        )
        if self.target_kl is not None:
            self._within(("target_kl", self.target_kl > 0, "greater than 0"))


@dataclass
class NormSection(Section):
    """Observations raw by default (CartPole's defaults solve it without; continuous control wants
    them normalised); rewards scaled by default for the on-policy algorithms (CartPole's median
    seed solves in 79k agent-steps with it, 81.5k without: docs/results/index.md)."""

    key: typing.ClassVar[str] = "normalisation"
    title: typing.ClassVar[str] = "normalisation"

    norm_obs: bool = _f(False, "normalise every float vector observation (and a central critic's state) by a running mean and variance merged from every actor's rollouts, applied alike on actors, learners and in evaluation, saved with the weights")
    clip_obs: float = _f(10.0, "--norm-obs: clip normalised observations to +-this")
    norm_reward: typing.Optional[bool] = _f(None, "divide rewards by the running standard deviation of the discounted return (SB3's VecNormalize, Gymnasium's NormalizeReward); logged returns stay raw (default: on for ppo, appo and impala; off for the off-policy algorithms, whose replay would hold rewards scaled by many older scales)")
    clip_reward: float = _f(10.0, "--norm-reward: clip scaled rewards to +-this")

    def check(self) -> None:
        super().check()
        self._within(("clip_obs", self.clip_obs > 0, "greater than 0"), ("clip_reward", self.clip_reward > 0, "greater than 0"))


@dataclass
class ModelSection(Section):
    key: typing.ClassVar[str] = "model"
    title: typing.ClassVar[str] = "network"

    encoder: str = _f("auto", "observation encoder of the built-in network: `auto` (an MLP over vectors and one-hot discrete values, a CNN for each image-shaped Box: the Nature-DQN CNN from 36x36 up, a small conv stack below), `mlp` (flatten everything), `cnn`", choices=("auto", "mlp", "cnn"))
    hidden_sizes: tuple = _f((64, 64), "hidden layer widths of the actor and critic MLPs (after the encoder), e.g. 64,64")
    action_dist: str = _f("auto", "the policy's action distribution: `auto` (the space's own: categorical for Discrete, multicategorical for MultiDiscrete, bernoulli for MultiBinary, gaussian for Box), or for Box actions `gaussian` (samples clipped to the bounds by the env adapter), `tanh_gaussian` (squashed into the bounds, log-determinant in its log-probabilities, log-std bounded to [-5, 2]; was --action-squash tanh), `tanh_normal` (the same with a state-dependent scale from the head, TorchRL's TanhNormal as BenchMARL uses it) or `beta` (Chou et al. 2017, scaled to the bounds)")
    core: str = _f("none", "recurrent core of the built-in network, between the encoder and the MLPs: `none`, `gru` or `lstm` (memory, for partially observed tasks; the actor and the critic get one each)", choices=("none", "gru", "lstm"))
    core_size: int = _f(64, "units of the recurrent core (--core gru|lstm)")
    seq_len: int = _f(0, "steps per training sequence of a recurrent network, each replayed from the state its actor recorded at its start; 0 = the whole rollout")
    model: str = _f("", "your own torch.nn.Module as module:Class instead of the built-in network (see docs/guides/spaces-and-networks.md, \"Your own network\")")
    model_kwargs: dict = _f({}, "keyword arguments for --model's constructor: JSON on the command line, a table in TOML", mapping=True)
    activation_checkpointing: bool = _f(False, "recompute each block's activations in backward instead of storing them (saves learner memory on big policies)")
    precision: str = _f("fp32", "learner compute precision (bf16 keeps fp32 master weights and fp32 gradient reduction)", choices=("fp32", "bf16"))

    def check(self) -> None:
        super().check()
        self._at_least(1, "core_size")
        self._one_or_zero_for("seq_len", "the whole rollout")
        if self.model and self.core != "none":
            raise UsageError(f"--core {self.core} is the built-in network's; a --model is recurrent by its own "
                             f"state_size (docs/guides/spaces-and-networks.md, \"Your own network\"); drop --core or --model")
        if not self.hidden_sizes or min(self.hidden_sizes) < 1:
            raise UsageError(f"--hidden-sizes must be positive widths like 64,64, got {self.hidden_sizes}")


@dataclass
class RunSection(Section):
    key: typing.ClassVar[str] = "run"
    title: typing.ClassVar[str] = "bookkeeping"

    seed: int = _f(1, "random seed (environments, sampling, initial weights)")
    logdir: str = _f("runs", "TensorBoard root directory")
    run_name: str = _f("", "run directory name under logdir; default: <env>__<seed>__<unix time>")
    overwrite: bool = _f(False, "replace an existing run directory of the same name (otherwise the run refuses to start)")
    rpc_timeout: float = _f(60.0, "seconds before an RPC to an actor is declared failed")
    checkpoint_every: int = _f(25, "write a checkpoint every this many iterations (0: only at the end); one is also written at the end and on Ctrl-C/SIGTERM")
    keep_checkpoints: int = _f(2, "checkpoints kept per run; older ones are deleted")
    eval_every: int = _f(0, "every this many iterations, rank 0 plays the newest weights (most likely actions) and logs eval/: for a turn-based game each seat against uniformly random legal moves, --eval-episodes games per seat (eval/win_rate_vs_random, and per seat its win, draw and loss rates); for other envs eval/episodic_return over --eval-episodes episodes per agent (0: never)")
    eval_episodes: int = _f(100, "--eval-every: games per seat, or episodes per agent")
    video_every: int = _f(0, "every this many iterations, play one episode with the newest weights (most likely actions) and write it to runs/<run>/videos/iter_N.mp4 and to TensorBoard's Images tab (0: never; pip install -e '.[video]')")
    track: bool = _f(False, "also log to Weights & Biases, as CleanRL's --track does (pip install -e '.[wandb]'; WANDB_MODE=offline keeps it on this machine)")
    wandb_project_name: str = _f("marl", "--track: the W&B project")
    wandb_entity: str = _f("", "--track: the W&B team or user (default: yours)")
    resume: str = _f("", "continue a run from runs/<run> (its newest checkpoint) or runs/<run>/checkpoints/iter_N; flags given with it override the run's config", saved=False)

    def check(self) -> None:
        super().check()
        if self.seed < 0:
            raise UsageError(f"--seed must be at least 0 (Gymnasium's seeds are unsigned), got {self.seed}")
        self._within(("rpc_timeout", self.rpc_timeout > 0, "greater than 0"))
        self._at_least(0, "checkpoint_every", why=" (0: only at the end)")
        self._at_least(1, "keep_checkpoints")
        self._at_least(0, "eval_every", "video_every", why=" (0: never)")
        self._at_least(1, "eval_episodes")
        if self.run_name and ("/" in self.run_name or self.run_name in (".", "..")):
            raise UsageError(f"--run-name must be a plain directory name, got {self.run_name!r}")

    @property
    def run_dir(self) -> Path:
        return Path(self.logdir) / self.run_name


# In the order of --help, the docs' flag reference and a saved config.toml. A new algorithm's own
# section (a Section subclass, as VTraceSection) joins by being named here.
SECTIONS: tuple[type[Section], ...] = (EnvSection, PolicySection, ProcessSection, CollectionSection, BudgetSection,
                                       AlgorithmSection, VTraceSection, ReplaySection, DQNSection, MixerSection, SACSection, OptimSection, NormSection, ModelSection, RunSection)


@dataclass
class Config(*reversed(SECTIONS)):
    """Every section's fields as one flat view (`cfg.learning_rate`); `cfg.section(OptimSection)`
    is one component's part of it."""

    @classmethod
    def sections(cls) -> tuple[type[Section], ...]:
        return SECTIONS

    def section(self, kind: type[Section]) -> Section:
        return kind(**{f.name: getattr(self, f.name) for f in dataclasses.fields(kind)})

    def check(self) -> None:
        for kind in SECTIONS:
            kind.check(self.section(kind))

    @classmethod
    def from_toml(cls, path: str, **fields) -> "Config":
        """A TOML file's fields (as `--config` reads it, configs/ holds the presets), with `fields` on top."""
        return cls(**{**load_toml(path), **fields})


FIELDS = {f.name: f for f in dataclasses.fields(Config)}
SECTION_OF = {f.name: kind for kind in SECTIONS for f in dataclasses.fields(kind)}
# Fields renamed since a run's config.toml may have been written: old name -> (new name, old value -> new value).
RENAMED = {"action_squash": ("action_dist", {"tanh": "tanh_gaussian", "clip": "auto"})}
_HINTS = typing.get_type_hints(Config)


def _base_type(name: str):
    hint = _HINTS[name]
    args = [a for a in typing.get_args(hint) if a is not type(None)]
    return args[0] if args else hint


def _convert(name: str, value):
    """Turn a CLI string or a TOML value into the field's type; raise UsageError if it does not fit."""
    kind = _base_type(name)
    flag = "--" + name.replace("_", "-")
    if FIELDS[name].metadata.get("mapping"):
        return _mapping(flag, value, allow_str=kind is not dict)
    if value is None or (isinstance(value, str) and value.lower() == "none" and _HINTS[name] != kind):
        if _HINTS[name] == kind:
            raise UsageError(f"{flag} needs a value")
        return None
    try:
        if kind is bool:
            if isinstance(value, bool):
                return value
            if str(value).lower() in ("1", "true", "yes", "on"):
                return True
            if str(value).lower() in ("0", "false", "no", "off"):
                return False
            raise ValueError
        if kind is int:
            if isinstance(value, float) or isinstance(value, bool):
                raise ValueError
            return int(str(value).replace("_", ""))
        if kind is float:
            if isinstance(value, bool):
                raise ValueError
            return float(value)
        if kind is tuple:
            if FIELDS[name].metadata.get("items") is str:
                items = value if isinstance(value, (list, tuple)) else split_top_level(str(value))
                return tuple(str(v).strip() for v in items if str(v).strip())
            items = value if isinstance(value, (list, tuple)) else str(value).split(",")
            return tuple(int(v) for v in items)
        if not isinstance(value, str):
            raise ValueError
        return value
    except ValueError:
        raise UsageError(f"{flag} expects {kind.__name__ if kind is not tuple else 'comma-separated integers'}, got {value!r}") from None


def split_top_level(text: str) -> list[str]:
    """Split on the commas outside parentheses: "A(x=1, y=2),B" -> ["A(x=1, y=2)", "B"]."""
    parts, depth, start = [], 0, 0
    for i, ch in enumerate(text):
        depth += ch in "([{"
        depth -= ch in ")]}"
        if ch == "," and depth == 0:
            parts.append(text[start:i])
            start = i + 1
    return [*parts, text[start:]]


def _mapping(flag: str, value, allow_str: bool):
    """A TOML table, or JSON text on the command line; a plain word where the field also takes one."""
    if isinstance(value, str) and value.lstrip().startswith("{"):
        try:
            value = json.loads(value)
        except json.JSONDecodeError as e:
            raise UsageError(f"{flag} is not valid JSON ({e.msg} at character {e.pos}): {value}") from None
    if isinstance(value, dict):
        nulls = [k for k, v in value.items() if v is None]
        if nulls:  # TOML has no null, and every run's config is saved as TOML
            raise UsageError(f"{flag}: {nulls[0]!r} is null, which a TOML config cannot hold; leave the key out to get its default")
        return value
    if allow_str and isinstance(value, str):
        return value
    raise UsageError(f"{flag} expects a JSON object like '{{\"key\": 1}}' (a table in TOML), got {value!r}")


def _suggest(word: str, options) -> str:
    close = difflib.get_close_matches(word, list(options), n=1)
    return f" (did you mean {close[0]!r}?)" if close else ""


def load_toml(path: str, _chain: tuple[Path, ...] = ()) -> dict:
    """A config file's fields: keys flat (`learning_rate = 1e-3`) or under their section's table
    (`[ppo]`), on top of the preset its `base` names (a path relative to the file; chains allowed)."""
    p = Path(path)
    if not p.is_file():
        raise UsageError(f"config file {path} does not exist; pass an existing TOML file to --config (see configs/)")
    if p.resolve() in _chain:
        names = " -> ".join(c.name for c in (*_chain, p.resolve()))
        raise UsageError(f"config file {path}: its base presets come back to it ({names}); remove one `base`")
    try:
        data = tomllib.loads(p.read_text())
    except tomllib.TOMLDecodeError as e:
        raise UsageError(f"config file {path} is not valid TOML: {e}") from None
    base = data.pop("base", None)
    if base is not None and not isinstance(base, str):
        raise UsageError(f"config file {path}: base must name a preset file, like base = \"coop_nav.toml\", got {base!r}")
    out = load_toml(str(p.parent / base), (*_chain, p.resolve())) if base else {}
    for key, value in _flat(path, data).items():
        name = key.replace("-", "_")
        if name in RENAMED:  # a run saved before the rename
            name, values = RENAMED[name]
            value = values.get(value, value)
        if name not in FIELDS:
            raise UsageError(f"config file {path}: unknown key {key!r}{_suggest(name, FIELDS)}")
        out[name] = _convert(name, value)
    return out


_TABLES = {kind.key: kind for kind in SECTIONS}


def _flat(path: str, data: dict) -> dict:
    """The keys of a file's `[section]` tables beside its flat ones; a field under another section's
    table is refused (a field that takes a mapping keeps a table of its own name)."""
    out = {}
    for key, value in data.items():
        kind = _TABLES.get(key)
        if kind is None or not isinstance(value, dict) or FIELDS.get(key) and FIELDS[key].metadata.get("mapping"):
            out[key] = value
            continue
        for name, v in value.items():
            owner = SECTION_OF.get(name.replace("-", "_"))
            if owner is not None and owner is not kind:
                raise UsageError(f"config file {path}: {name!r} belongs to [{owner.key}], not [{key}]")
            out[name] = v
    return out


class _Parser(argparse.ArgumentParser):
    def error(self, message):  # one line, exit 2, as for every other usage error
        raise UsageError(f"{message} (see --help)")


def build_parser() -> argparse.ArgumentParser:
    p = _Parser(prog="train.py", allow_abbrev=False, description=(
        "Train agents with PPO, APPO or IMPALA: RPC actors collect, an FSDP2 learner group learns. "
        "Every flag is a field of marl.config.Config and can also be set in a --config TOML file."))
    p.add_argument("--config", default=argparse.SUPPRESS,
                   help="TOML file of field = value pairs (see configs/); flags given here override it")
    for section in SECTIONS:
        group = p.add_argument_group(section.title)
        for f in dataclasses.fields(section):
            _add_flag(group, f)
    return p


def _default_text(f: dataclasses.Field) -> str | None:
    """The default as a user writes it on the command line; None where there is none to show."""
    default = f.default if f.default is not dataclasses.MISSING else f.default_factory()
    if default in ("", None, ()):
        return None
    if _base_type(f.name) is tuple:
        return ",".join(map(str, default))
    return json.dumps(default) if isinstance(default, (dict, bool)) else str(default)


def _help(f: dataclasses.Field) -> str:
    text, default = f.metadata["help"], _default_text(f)
    if default is not None and "default:" not in text:  # a help text that says its default keeps it
        text += f" (default: {default})"
    return text


def _add_flag(group, f: dataclasses.Field) -> None:
    kind = _base_type(f.name)
    kw = dict(default=argparse.SUPPRESS, help=_help(f).replace("%", "%%"))
    flag = "--" + f.name.replace("_", "-")
    if kind is bool:
        group.add_argument(flag, action=argparse.BooleanOptionalAction, **kw)
    else:
        choices = f.metadata.get("choices")
        metavar = ("{" + ",".join(choices) + "}" if choices else
                   ("A,B" if f.metadata.get("items") is str else "N,N") if kind is tuple else
                   "JSON" if kind is dict else kind.__name__.upper())
        group.add_argument(flag, metavar=metavar, choices=choices, **kw)


def unknown_flag(parser: argparse.ArgumentParser, flag: str) -> UsageError:
    """One line naming the flag meant: the only one `flag` abbreviates (what argparse's prefix
    matching would have taken), else the nearest spelling."""
    names = [o for a in parser._actions for o in a.option_strings if o.startswith("--") and o != "--help"]
    close = [n for n in names if n.startswith(flag)]
    close = close if len(close) == 1 else difflib.get_close_matches(flag, names, n=1)
    return UsageError(f"unknown flag {flag}" + (f"; did you mean {close[0]}?" if close else " (see --help)"))


def parse_values(argv: list[str] | None = None) -> dict:
    """The fields the user set: the TOML file's, then the flags' (which win); not yet validated."""
    parser = build_parser()
    known, unknown = parser.parse_known_args(argv)
    if unknown:
        flags = [a.split("=", 1)[0] for a in unknown if a.startswith("--")]
        if flags and flags[0][2:].replace("-", "_") in RENAMED:
            new, values = RENAMED[flags[0][2:].replace("-", "_")]
            given = unknown[unknown.index(flags[0]) + 1] if flags[0] in unknown[:-1] else unknown[0].partition("=")[2]
            raise UsageError(f"{flags[0]} is renamed: use {_flag(new)} {values.get(given, 'tanh_gaussian')}")
        if flags:
            raise unknown_flag(parser, flags[0])
        raise UsageError(f"unexpected argument {unknown[0]!r}: every value follows its flag, e.g. --agents 8 (see --help)")
    args = vars(known)
    values = load_toml(args.pop("config")) if "config" in args else {}
    for name, raw in args.items():
        values[name] = raw if isinstance(raw, bool) else _convert(name, raw)
    return values


def parse_args(argv: list[str] | None = None) -> Config:
    """Config from defaults, then the TOML file, then the flags; not yet validated."""
    return Config(**parse_values(argv))


def validate(cfg: Config, *, gpus: int) -> Config:
    """Reject impossible values with one line each; fill in the defaults that depend on the machine.

    Each section checks its own fields (`Section.check`); what spans sections is checked here, and
    filled in: --norm-reward's default, which is the algorithm family's.
    `gpus` is the number of visible CUDA devices (0 on CPU). Env-dependent checks (id, spaces,
    reward threshold, `--rollout auto`) happen in `marl.run.prepare` once the env is described.
    """
    cfg.check()
    learners = cfg.learners or max(gpus, 1)
    if gpus and learners > gpus:
        raise UsageError(f"--learners {learners} is more than the {gpus} visible GPU(s); use --learners {gpus} or fewer")
    if cfg.agents and cfg.rollout != "auto":
        check_batch(cfg, learners)
    run_name = cfg.run_name or f"{cfg.env.replace(':', '_').replace('/', '_')}__{cfg.seed}__{int(time.time())}"
    # Left None, a Config built by hand and never validated scales nothing (as its --rollout auto means
    # steps: marl.actor); train.py, marl.train and --resume all come through here.
    norm_reward = cfg.algo not in AlgorithmSection.OFF_POLICY if cfg.norm_reward is None else cfg.norm_reward
    return dataclasses.replace(cfg, learners=learners, run_name=run_name, norm_reward=norm_reward)


def check_batch(cfg: Config, learners: int, recurrent: bool | None = None) -> None:
    """The batch must split into minibatches on every learner rank; needs the number of agents
    (`train.py` calls it again once the env has said how many it has, and whether the network is
    recurrent: a --model says so only once it is built; before that, --core decides)."""
    if cfg.algo in AlgorithmSection.OFF_POLICY:
        # Replay samples transitions, not the batch just collected: only whole env slots per rank and
        # an equal share of each sampled batch matter.
        if (cfg.actors * cfg.envs_per_actor) % learners or cfg.batch_size % learners:
            raise UsageError(f"--actors x --envs-per-actor ({cfg.actors * cfg.envs_per_actor}) and --batch-size "
                             f"({cfg.batch_size}) must both be multiples of the {learners} learner ranks: each takes "
                             f"whole env copies and an equal share of every batch")
        return
    known = recurrent is not None or not cfg.model  # a --model is recurrent or not once it is built
    recurrent = cfg.core != "none" if recurrent is None else recurrent
    # --seq-len without a recurrent network is accepted and unused, so that a run and the same run
    # with --core none differ in that flag only.
    slots = cfg.actors * cfg.envs_per_actor
    if slots % learners:
        # Each learner rank computes the targets of whole env slots (an env copy's time-major steps).
        raise UsageError(f"--actors x --envs-per-actor = {slots} env copies do not split evenly over {learners} learner(s): "
                         f"each learner rank takes whole env copies; make it a multiple of {learners}")
    # With several policies each one's samples are split on their own; the smallest may have one agent.
    agents = cfg.agents if cfg.policies == "shared" else 1
    slots = cfg.envs_per_actor * agents * cfg.actors
    if recurrent:
        # A recurrent network's minibatches are whole sequences: each rank needs one per minibatch.
        chunks = -(-cfg.num_steps // cfg.seq_len) if cfg.rollout == "steps" and cfg.seq_len else 1
        per_rank = chunks * slots // learners
        if per_rank < cfg.num_minibatches:
            raise UsageError(f"a recurrent network trains on whole sequences (env copy x agent x --seq-len steps): "
                             f"{per_rank}{' per policy' if agents != cfg.agents else ''} per learner are fewer than "
                             f"--num-minibatches {cfg.num_minibatches}; lower --num-minibatches or --seq-len, or add env copies")
    if cfg.rollout == "steps":
        batch = cfg.num_steps * slots
        if batch % (learners * cfg.num_minibatches) and cfg.policies == "shared" and known and not recurrent:
            raise UsageError(
                f"the batch of {batch} agent-steps (num-steps x envs-per-actor x agents x actors) does not split into "
                f"{cfg.num_minibatches} minibatches on {learners} learner(s); change --num-steps or --num-minibatches")
    else:
        batch = cfg.episodes_per_request * slots  # at least one step per episode
    # Autoreset steps are masked out of a batch: leave room for them, or a minibatch can come out empty.
    if batch < 2 * learners * cfg.num_minibatches:
        raise UsageError(f"a batch of at most {batch} agent-steps{' per policy' if agents != cfg.agents else ''} is too "
                         f"small for {cfg.num_minibatches} minibatches on {learners} learner(s); raise --num-steps or "
                         f"lower --num-minibatches")


def _toml_value(v) -> str:
    if isinstance(v, bool):
        return "true" if v else "false"
    if isinstance(v, str):
        return json.dumps(v)  # a JSON string is a TOML basic string
    if isinstance(v, (tuple, list)):
        return "[" + ", ".join(_toml_value(x) for x in v) + "]"
    if isinstance(v, dict):
        return "{ " + ", ".join(f"{json.dumps(str(k))} = {_toml_value(x)}" for k, x in v.items()) + " }"
    if isinstance(v, float) and not math.isfinite(v):
        return "nan" if math.isnan(v) else ("inf" if v > 0 else "-inf")
    return repr(v) if isinstance(v, float) else str(v)


def to_toml(cfg: Config) -> str:
    """The resolved config as TOML that `--config` reads back, a table per section (None fields are
    left out, and `resume`: it names this run's past, not its config)."""
    lines = []
    for section in SECTIONS:
        lines.append(f"{'' if not lines else chr(10)}[{section.key}]")
        for f in dataclasses.fields(section):
            v = getattr(cfg, f.name)
            if v is not None and f.metadata.get("saved", True):
                lines.append(f"{f.name} = {_toml_value(v)}")
    return "\n".join(lines) + "\n"
