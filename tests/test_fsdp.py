"""FSDP2 over gloo, for real: one PPO optimizer step on 2 learner ranks equals the same step on 1."""

from __future__ import annotations

import dataclasses

import pytest
import torch
import torch.distributed as dist
from torch.distributed.fsdp import FSDPModule

from envs import describe
from marl.config import Config
from marl.learner import Learner, LearnerGroup, follow
from marl.sharding import MIN_BLOCK_PARAMS
from marl.specs import example_trajectory
from tests.ranks import run_ranks

# The sync step (PPO's own objective); --mode pipelined's decoupled step has tests of its own below.
CFG = dataclasses.replace(Config(), num_minibatches=1, update_epochs=1, seed=0, hidden_sizes=(16, 16),
                          max_grad_norm=0.05, mode="sync")  # small enough that clipping really acts


def make_trajectories(specs, T: int = 16, E: int = 4, seed: int = 123, state_sizes: dict | None = None,
                      seq_len: int = 0, discounted_return: bool = False, after: bool = False) -> list[dict]:
    """One rollout's trajectories for each policy: T x E slots of every field, all valid (64 samples
    a policy by default), episodes ending now and then; 2 ranks get E/2 slots each. A recurrent
    policy's trajectories carry its chunks' initial states; with `after` (what the learner's
    algorithm `wants_after`), the observations past the last step."""
    g = torch.Generator().manual_seed(seed)
    return [{s.name: example_trajectory(s, T, E, g, (state_sizes or {}).get(s.name, 0), seq_len, discounted_return,
                                        after) for s in specs}]


def _step(rank: int, world: int, precision: str, out: str, min_block_params: int, ac: bool, agents: int,
          mode: str) -> None:
    # Two agents: one policy each (per-agent), both in one sharded module and one optimizer step.
    cfg = dataclasses.replace(CFG, precision=precision, activation_checkpointing=ac,
                              policies="shared" if agents == 1 else "per-agent", mode=mode)
    learner = Learner(cfg, describe("CartPole-v1", agents), dist.group.WORLD, torch.device("cpu"), min_block_params)
    units = [m for m in learner.model.modules() if isinstance(m, FSDPModule)]
    if world == 1 and precision == "fp32":
        assert not units  # one fp32 rank: plain PyTorch, the reference the sharded runs must match
    else:
        assert len(units) == (1 + len(learner.model.blocks()) if min_block_params == 0 else 1)
    if rank == 0:
        group = LearnerGroup(learner)
        before = group.gather()
        metrics, used = group.update(make_trajectories(learner.specs, after=learner.algorithm.wants_after(cfg)),
                                     global_step=0)
        after = group.gather()
        group.stop()
        torch.save({"before": before, "after": after, "metrics": metrics, "used": used}, out)
    else:
        follow(learner)


def one_step(world: int, precision: str, tmp_path, min_block_params: int = 0, ac: bool = False, agents: int = 1,
             mode: str = "sync") -> dict:
    """One update on `world` ranks; by default every block is its own FSDP unit (the big-model layout)."""
    out = str(tmp_path / f"w{world}_{precision}_{min_block_params}_{ac}_{agents}_{mode}.pt")
    run_ranks(_step, world, tmp_path, precision, out, min_block_params, ac, agents, mode)
    return torch.load(out)


def assert_same_update(one: dict, two: dict, rel: float) -> None:
    """Both runs started from the same weights, moved every tensor, and moved it the same way: the
    2-rank update differs from the 1-rank update by at most `rel` of the 1-rank update's size, per
    tensor. (A step moves a weight by about the learning rate, so a tolerance on the weights
    themselves would pass a step that went anywhere.)"""
    assert one["before"].keys() == two["before"].keys() == one["after"].keys() == two["after"].keys()
    for key in one["before"]:
        torch.testing.assert_close(one["before"][key], two["before"][key], rtol=0, atol=0)
        d1 = (one["after"][key] - one["before"][key]).double()
        d2 = (two["after"][key] - two["before"][key]).double()
        assert d1.abs().max() > 0 and d2.abs().max() > 0, f"{key} did not move"
        off = float((d2 - d1).norm() / d1.norm())
        assert off <= rel, f"{key}: the 2-rank update is off the 1-rank update by {off:.2e} of its size (> {rel:g})"


# Measured (CPU, gloo): fp32 at most 2e-6 of a tensor's update apart, bf16 at most 3.3e-3.
REL = {"fp32": 1e-4, "bf16": 1e-2}


@pytest.mark.parametrize("precision, tol, min_block_params, agents", [
    ("fp32", 1e-6, 0, 1), ("bf16", 1e-2, 0, 1), ("fp32", 1e-6, MIN_BLOCK_PARAMS, 1), ("fp32", 1e-6, 0, 2)],
    ids=["fp32", "bf16", "root-only", "two-policies"])
def test_two_ranks_take_the_same_step_as_one(precision, tol, min_block_params, agents, tmp_path):
    one = one_step(1, precision, tmp_path, min_block_params, agents=agents)
    two = one_step(2, precision, tmp_path, min_block_params, agents=agents)
    assert one["used"] == two["used"] == 64 * agents
    for key in one["after"]:
        assert one["after"][key].dtype == two["after"][key].dtype == torch.float32  # master weights stay fp32 under bf16
    assert_same_update(one, two, REL[precision])
    # Clipping used the same global norm (over both ranks' shards), and it was active.
    assert two["metrics"]["grad_norm"] == pytest.approx(one["metrics"]["grad_norm"], rel=tol, abs=tol)
    assert one["metrics"]["grad_norm"] > CFG.max_grad_norm
    names = ("policy_loss", "value_loss", "entropy")
    for name in [*names, *(f"agent_{i}/{n}" for i in range(agents) for n in names if agents > 1)]:
        assert two["metrics"][name] == pytest.approx(one["metrics"][name], rel=tol, abs=tol)


def test_one_rank_step_matches_a_hand_written_step(tmp_path):
    """The learner's update against the same loss and optimizer step written out here."""
    from marl.algorithms import gae
    from marl.trajectory import flatten_valid
    from marl.models import build_model, network_of
    from marl.policies import specs_of

    got = one_step(1, "fp32", tmp_path)
    torch.manual_seed(CFG.seed)
    (spec,) = specs_of(CFG, describe("CartPole-v1", 1))
    assert spec.action.kind == "categorical" and spec.action.nvec == (2,)
    model = build_model((spec,), network_of(CFG))
    model.load_state_dict(got["before"])
    (traj,) = (t["shared"] for t in make_trajectories((spec,)))
    adv, ret = gae(traj["rewards"], traj["values"], traj["next_value"], traj["terminated"], traj["truncated"],
                   traj["bootstrap_value"], CFG.gamma, CFG.gae_lambda)
    assert_hand_step(got, CFG, spec, model, flatten_valid(traj, adv, ret))


def assert_hand_step(got: dict, cfg: Config, spec, model, b: dict) -> None:
    """PPO's step on the samples `b` written out (advantages normalised over the batch, the loss,
    the global-norm clip, Adam), from `model` at the learner's weights before it, against the
    learner's update `got`; with `prox_logprobs` in `b`, the decoupled objective's."""
    from marl import distributions
    from marl.algorithms import ppo_loss

    opt = torch.optim.Adam(model.parameters(), lr=cfg.learning_rate, eps=1e-5)  # global step 0: no annealing yet
    b["advantages"] = (b["advantages"] - b["advantages"].mean()) / (b["advantages"].std() + 1e-8)
    pd, v, _ = model.policies["shared"](b["obs"], None)
    pi = distributions.make(spec.action, pd)
    loss, _ = ppo_loss(pi.log_prob(b["actions"]), b["logprobs"], b["advantages"], v, b["values"],
                       b["returns"], pi.entropy(), clip_coef=cfg.clip_coef, clip_vloss=cfg.clip_vloss,
                       vf_coef=cfg.vf_coef, ent_coef=cfg.ent_coef, prox_logprob=b.get("prox_logprobs"))
    loss.backward()
    norm = torch.nn.utils.clip_grad_norm_(model.parameters(), cfg.max_grad_norm)
    opt.step()
    assert got["metrics"]["grad_norm"] == pytest.approx(norm.item(), rel=1e-5)
    for key, value in model.state_dict().items():
        torch.testing.assert_close(got["after"][key], value, rtol=1e-5, atol=1e-6)


def test_pipelined_step_is_the_decoupled_step_written_out(tmp_path):
    """--mode pipelined: the update on rollouts one version old, against Hilton et al.'s decoupled
    objective written out here: the proximal policy and values are the weights before the step,
    GAE runs on those values and bootstraps from their value of the observations past the last
    step (`after`), and the importance weight pi_prox / pi_behav scales the clipped surrogate."""
    from marl import distributions
    from marl.algorithms import gae
    from marl.trajectory import flatten_valid
    from marl.models import build_model, network_of
    from marl.policies import specs_of

    cfg = dataclasses.replace(CFG, mode="pipelined")
    got = one_step(1, "fp32", tmp_path, mode="pipelined")
    (spec,) = specs_of(cfg, describe("CartPole-v1", 1))
    model = build_model((spec,), network_of(cfg))
    model.load_state_dict(got["before"])
    (traj,) = (t["shared"] for t in make_trajectories((spec,), after=True))
    T, E, n = traj["values"].shape
    net = model.policies["shared"]
    with torch.no_grad():
        pd, values, _ = net({k: v.reshape(T * E * n, *v.shape[3:]) for k, v in traj["obs"].items()}, None)
        prox = distributions.make(spec.action, pd).log_prob(traj["actions"].reshape(T * E * n)).reshape(T, E, n)
        next_value = net({k: v.reshape(E * n, *v.shape[2:]) for k, v in traj["after"]["obs"].items()}, None)[1]
    next_value = next_value.reshape(E, n)
    values = values.reshape(T, E, n)
    assert not torch.allclose(prox, traj["logprobs"]) and not torch.allclose(values, traj["values"])
    adv, ret = gae(traj["rewards"], values, next_value, traj["terminated"], traj["truncated"],
                   traj["bootstrap_value"], cfg.gamma, cfg.gae_lambda)
    anchored = {**{k: v for k, v in traj.items() if k != "after"}, "values": values, "prox_logprobs": prox}
    assert_hand_step(got, cfg, spec, model, flatten_valid(anchored, adv, ret))


@pytest.mark.parametrize("agents", [1, 2])
def test_two_ranks_take_the_same_pipelined_step_as_one(agents, tmp_path):
    """The observations past the last step are scattered with their env slots and valued on each rank."""
    one = one_step(1, "fp32", tmp_path, agents=agents, mode="pipelined")
    two = one_step(2, "fp32", tmp_path, agents=agents, mode="pipelined")
    assert one["used"] == two["used"] == 64 * agents
    assert_same_update(one, two, REL["fp32"])
    assert two["metrics"]["grad_norm"] == pytest.approx(one["metrics"]["grad_norm"], rel=1e-6, abs=1e-6)


def test_activation_checkpointing_changes_memory_not_math(tmp_path):
    plain, ac = one_step(1, "fp32", tmp_path), one_step(2, "fp32", tmp_path, ac=True)
    assert plain["after"].keys() == ac["after"].keys()  # the wrapper leaves parameter names alone
    for key in plain["after"]:
        torch.testing.assert_close(ac["after"][key], plain["after"][key], rtol=1e-6, atol=1e-6)
    assert ac["metrics"]["grad_norm"] == pytest.approx(plain["metrics"]["grad_norm"], rel=1e-6)


def _step_network(rank: int, world: int, cfg: Config, out: str, extra_path: str) -> None:
    import sys

    sys.path.insert(0, extra_path)
    learner = Learner(cfg, describe(cfg.env, 1), dist.group.WORLD, torch.device("cpu"), 0)
    units = [m for m in learner.model.modules() if isinstance(m, FSDPModule)]
    assert (not units) if world == 1 and cfg.precision == "fp32" else len(units) == 1 + len(learner.model.blocks(0)) > 1
    seen = []
    for policy in learner.model.policies.values():
        if policy.obs_norm is not None:  # what the normaliser is given: fp32 even under bf16
            policy.obs_norm.register_forward_pre_hook(lambda m, args: seen.extend(x.dtype for x in args[0].values()))
    if rank == 0:
        group = LearnerGroup(learner)
        before = group.gather()
        metrics, used = group.update(make_trajectories(learner.specs, seed=7, state_sizes=learner.state_sizes,
                                                       seq_len=cfg.seq_len, discounted_return=cfg.norm_reward),
                                     global_step=0)
        after = group.gather()
        group.stop()
        torch.save({"before": before, "after": after, "metrics": metrics, "used": used}, out)
    else:
        follow(learner)
    assert set(seen) <= {torch.float32} and (bool(seen) or not cfg.norm_obs), seen


def _readme_module(tmp_path) -> str:
    from tests.test_train_spaces import docs_network_example

    (tmp_path / "my_nets.py").write_text(docs_network_example())
    return str(tmp_path)


@pytest.mark.parametrize("network", ["cnn", "readme-custom", "readme-custom-ac", "appo", "impala", "gru-ac-appo",
                                     "lstm-bf16-normalised", "normalised-tanh-central"])
def test_two_ranks_take_the_same_step_as_one_for_any_network(network, tmp_path):
    """Trajectories in, weights out, for the small CNN on MiniGrid's uint8 image (its own FSDP unit),
    the README's custom module (sharded by FSDP's size-based rule: every submodule with parameters,
    at a threshold of 0), APPO's and IMPALA's V-trace targets, and recurrent cores (each its own
    unit; sequences of 8 steps, whole on one rank; with activation checkpointing, V-trace, bf16 with
    the observations normalised in fp32 before the cast), and
    observation and reward normalisation with a tanh-squashed Box action and a central critic (the
    statistics merged over both ranks: after the step they are the moments of the whole batch)."""
    tol = 1e-5
    if network.startswith(("gru", "lstm")):
        core, *extra = network.split("-")
        cfg = dataclasses.replace(CFG, core=core, core_size=16, seq_len=8, activation_checkpointing="ac" in extra,
                                  algo="appo" if "appo" in extra else "ppo",
                                  precision="bf16" if "bf16" in extra else "fp32", norm_obs="normalised" in extra)
        tol = REL["bf16"] if "bf16" in extra else tol
    elif network == "cnn":
        pytest.importorskip("minigrid")
        cfg = dataclasses.replace(CFG, env="MiniGrid-Empty-5x5-v0")
    elif network == "normalised-tanh-central":
        cfg = dataclasses.replace(CFG, env="Pendulum-v1", norm_obs=True, norm_reward=True, action_dist="tanh_gaussian",
                                  critic="central")
    elif network in ("appo", "impala"):  # V-trace targets from each rank's own forward over its slots
        cfg = dataclasses.replace(CFG, algo=network)
    else:
        cfg = dataclasses.replace(CFG, model="my_nets:TwoTowers", model_kwargs={"hidden": 16},
                                  activation_checkpointing=network.endswith("-ac"))
    path = _readme_module(tmp_path)
    results = []
    for world in (1, 2):
        out = str(tmp_path / f"{network}_{world}.pt")
        run_ranks(_step_network, world, tmp_path, cfg, out, path)
        results.append(torch.load(out))
    one, two = results
    assert one["used"] == two["used"] == 64
    assert_same_update(one, two, REL[cfg.precision])
    assert two["metrics"]["grad_norm"] == pytest.approx(one["metrics"]["grad_norm"], rel=tol)
    if network == "cnn":
        assert any(".cnns.image.convs." in k for k in one["after"])
    if network == "normalised-tanh-central":
        from marl.policies import specs_of

        (traj,) = [t["shared"] for t in make_trajectories(specs_of(cfg, describe(cfg.env, 1)), seed=7,
                                                          discounted_return=True)]
        for key, x in (("stats.obs", traj["obs"]["obs"]), ("state", traj["state"])):
            x = x.reshape(-1, x.shape[-1]).double()
            for rank_result in (one, two):
                torch.testing.assert_close(rank_result["after"][f"policies.shared.obs_norm.{key}.mean"], x.mean(0),
                                           rtol=1e-4, atol=1e-4)  # the prior pseudo-count of 1e-4 moves it a little
                torch.testing.assert_close(rank_result["after"][f"policies.shared.obs_norm.{key}.var"],
                                           x.var(0, unbiased=False), rtol=1e-4, atol=1e-4)


def _epochs(rank: int, world: int, target_kl: float, out: str) -> None:
    cfg = dataclasses.replace(CFG, num_minibatches=2, update_epochs=3, target_kl=target_kl)
    learner = Learner(cfg, describe("CartPole-v1", 1), dist.group.WORLD, torch.device("cpu"))
    if rank == 0:
        group = LearnerGroup(learner)
        group.update(make_trajectories(learner.specs), global_step=0)
        group.stop()
    else:
        follow(learner)
    torch.save(sorted({int(s["step"]) for s in learner.optimizers["policy"].state.values()}), f"{out}.{rank}")


@pytest.mark.parametrize("world", [1, 2])
@pytest.mark.parametrize("target_kl, steps", [(1e-12, 2), (1e9, 6)])
def test_target_kl_stops_every_rank_after_the_same_epoch(world, target_kl, steps, tmp_path):
    # 2 minibatches x 3 epochs: a KL past the target after the first epoch leaves 2 optimizer steps.
    out = str(tmp_path / "steps")
    run_ranks(_epochs, world, tmp_path, target_kl, out)
    assert [torch.load(f"{out}.{r}") for r in range(world)] == [[steps]] * world
