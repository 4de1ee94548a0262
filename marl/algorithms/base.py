"""The seam between the learner and an algorithm.

Two families share it. Both build their networks around the run's policy set (`networks`) and
their optimizers (`optimizers`: by name, one per phase of a gradient step), and declare what they
can do as class attributes (`turn_based`, `recurrent`, `off_policy`, `team`), which marl.run
checks before a run starts instead of refusing algorithms by name. Each reads its
hyperparameters from `cfg`: the fields of its own `marl.config.Section`, which
`marl.config.SECTIONS` composes into `Config`. Nothing here knows of processes, RPC or FSDP.

- On-policy (`OnPolicy`: PPO, APPO, IMPALA): the learner's update (marl.on_policy) turns a rank's
  share of the trajectories just collected into the algorithm's `targets`, makes `epochs` passes
  of `minibatches` over them, and steps on the algorithm's `loss`; then the data is dropped.
- Off-policy (`OffPolicy`: DQN, IQL, VDN, QMIX, SAC): the learner's update (marl.off_policy) cuts
  the trajectories into n-step transitions (marl.replay) kept in a replay shard per rank, and
  takes the gradient steps owed for the data collected (--train-frequency): each phase of a step
  (`phases`) is one forward of the whole root and a step of that phase's optimizer on the
  algorithm's `loss`. Target networks, critics and mixers are the algorithm's, inside the root
  (marl.models.training_nets.TrainingNets), so FSDP shards them and checkpoints hold them.
"""

from __future__ import annotations

import torch
from torch import nn

from marl.optim import Adam


class OnPolicy:
    """Defaults of the on-policy algorithms: the policy set alone, one Adam over it (CleanRL's eps)."""

    off_policy = False
    value_based = False  # the policies are actor-critics
    team = False
    recurrent = True  # trains recurrent policies on whole sequences replayed from the actors' states
    action_dists: dict[str, str] = {}  # per action space, the distribution it must act with; else --action-dist
    phases = ("policy",)
    needs_current = False  # targets read the current network's log-probs and values over the trajectories
    epochs = 1  # passes over each batch
    turn_based = False  # its targets skip the steps an agent sat out waiting for its turn (traj["valid"])

    def __init__(self, cfg):
        self.cfg = cfg

    @staticmethod
    def policy_network(cfg) -> dict:
        """How its policies differ from the built-in actor-critic, as plain data (marl.models.network_of)."""
        return {}

    def networks(self, policy: nn.Module, specs) -> nn.Module:
        return policy

    def optimizers(self, model: nn.Module) -> dict[str, torch.optim.Optimizer]:
        return {"policy": Adam(model.parameters(), lr=self.cfg.learning_rate, eps=1e-5)}

    @classmethod
    def wants_after(cls, cfg) -> bool:
        """Whether its trajectories carry `after`, the observation side of the step after the last
        (marl.specs.trajectory_fields), for the learner to compute V past the last step."""
        return False

    def anchored(self, traj: dict, current) -> dict:
        """One policy's trajectories as its targets and loss read them: by default as collected."""
        return traj

    def targets(self, traj: dict, current) -> tuple[torch.Tensor, torch.Tensor]:
        """(advantages, value targets), each [T, S, n], for one policy's trajectories [T, S, n, ...].
        `current` (a marl.on_policy.Current: the learner's log-probs of the taken actions and values)
        where `needs_current`."""
        raise NotImplementedError

    def minibatches(self, sizes: dict[str, int], k: int, generator: torch.Generator) -> list[dict[str, torch.Tensor]]:
        """One pass: for each of `k` minibatches, the unit indices of each policy (`sizes`: units per
        policy, a multiple of k). A unit is a sample, or for a recurrent network a whole sequence
        (the learner decides which: `marl.trajectory.sequences`)."""
        return sample_minibatches(sizes, k, generator)

    def loss(self, new_logp: torch.Tensor, entropy: torch.Tensor, new_value: torch.Tensor,
             mb: dict) -> tuple[torch.Tensor, dict[str, torch.Tensor]]:
        """The minibatch's loss to minimise and its detached metrics by name."""
        raise NotImplementedError


class OffPolicy:
    """Defaults of the off-policy algorithms."""

    off_policy = True
    value_based = True  # its policies are Q-networks (marl.models.q_network) acting epsilon-greedily
    team = False  # one transition per env copy with every agent in it (VDN, QMIX), else one per agent-step
    recurrent = False  # a recurrent Q-network trains on stored sequences (marl.replay.sequences)
    turn_based = False  # an agent's transition spanning the other players' moves is not cut
    needs_state = False  # reads the env's global state (QMIX's mixer): --critic central records it
    action_dists = {"Discrete": "epsilon_greedy"}
    phases = ("q",)

    def __init__(self, cfg):
        self.cfg = cfg

    @classmethod
    def wants_after(cls, cfg) -> bool:
        return True  # it bootstraps from the observations after the last step, not from values

    @staticmethod
    def policy_network(cfg) -> dict:
        """Its policies are Q-networks (marl.models.q_network), plain or dueling."""
        return {"q": "dueling" if cfg.dueling else "plain"}

    def networks(self, policy: nn.Module, specs) -> nn.Module:
        """Its networks around the policy set, as one root (a TrainingNets)."""
        raise NotImplementedError

    def optimizers(self, nets: nn.Module) -> dict[str, torch.optim.Optimizer]:
        raise NotImplementedError

    def loss(self, nets: nn.Module, batch: dict[str, dict], phase: str) -> tuple[torch.Tensor, dict[str, torch.Tensor]]:
        """The loss of one phase of a gradient step on the sampled transitions (by shard: each
        policy's, or the team's), and its detached metrics as `<policy>/<name>`; run inside the
        root's forward."""
        raise NotImplementedError

    def after_update(self, nets: nn.Module, updates: int) -> None:
        """After the `updates`-th gradient step of the run: the target networks follow, when due
        (every --target-network-frequency steps, by --tau: 1 copies)."""
        if updates % self.cfg.target_network_frequency == 0:
            nets.update_targets(self.cfg.tau)

    def explore(self, nets: nn.Module, step: int) -> dict[str, float]:
        """Set the actors' exploration for the rollouts after agent-step `step`; returns it as metrics."""
        return {}


def sample_minibatches(sizes: dict[str, int], k: int, generator: torch.Generator) -> list[dict[str, torch.Tensor]]:
    """Every policy's samples shuffled and cut into `k` equal minibatches (CleanRL's ppo.py)."""
    perms = {name: torch.randperm(n, generator=generator) for name, n in sizes.items()}
    return [{name: p[i * (sizes[name] // k):(i + 1) * (sizes[name] // k)] for name, p in perms.items()} for i in range(k)]


def learning_rate(cfg, global_step: int) -> float:
    """The configured rate, annealed linearly over the step budget down to 0.1% of it (CleanRL's schedule)."""
    frac = max(1.0 - global_step / cfg.total_steps, 0.0) if cfg.anneal_lr else 1.0
    return cfg.learning_rate * max(frac, 1e-3)


def episode_flags(traj: dict, values: torch.Tensor, gamma: float) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """(discounts, next values, continues) of the V-trace recursion from a trajectory's flags and
    `values` [T, ...]: gamma unless the episode terminated; V(x_{t+1}) from `values`, or where only
    the actor saw the next observation (past the last step, and the final observation of a
    truncation) the actor's value of it; 0 where the episode ended."""
    done = traj["terminated"] | traj["truncated"]
    later = torch.cat([values[1:], traj["next_value"].unsqueeze(0)])
    next_values = torch.where(traj["truncated"], traj["bootstrap_value"], later)
    discounts = torch.full_like(values, gamma).masked_fill(traj["terminated"], 0.0)
    return discounts, next_values, (~done).to(values.dtype)


def linear_schedule(start: float, end: float, duration: float, step: int) -> float:
    """From `start` at step 0 to `end` at `duration`, then `end` (CleanRL's linear_schedule)."""
    if duration <= 0:
        return end
    return start + (end - start) * min(step / duration, 1.0)


def gradient_steps(cfg, before: int, after: int) -> int:
    """Gradient steps an off-policy algorithm owes for the agent-steps collected between `before`
    and `after`: one per --train-frequency agent-steps past --learning-starts. A function of the
    global counts only, so that every learner rank takes the same number."""
    def owed(step: int) -> int:
        return int((step - cfg.learning_starts) // cfg.train_frequency) if step >= cfg.learning_starts else 0
    return owed(after) - owed(before)
