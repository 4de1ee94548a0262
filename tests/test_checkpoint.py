"""Checkpoints for real: DCP over gloo learner ranks, restored exactly, on the same or another number of ranks."""

from __future__ import annotations

import dataclasses
import subprocess
import sys

import pytest
import torch
import torch.distributed as dist
from torch.distributed.checkpoint.state_dict import StateDictOptions, get_state_dict

from envs import describe
from marl import checkpoint
from marl.config import Config
from marl.learner import Learner, LearnerGroup, follow
from tests.conftest import ROOT
from tests.ranks import run_ranks
from tests.test_fsdp import make_trajectories

CFG = dataclasses.replace(Config(), num_minibatches=2, update_epochs=2, seed=0, hidden_sizes=(16, 16))


def full_state(learner: Learner) -> dict:
    """Unsharded model and optimizer state (a collective: every rank calls it; rank 0 receives it)."""
    model, optim = get_state_dict(learner.model, tuple(learner.optimizers.values()),
                                  options=StateDictOptions(full_state_dict=True, cpu_offload=True))
    return {"model": {k: v.clone() for k, v in model.items()},
            "optim": {fqn: {k: v.clone() for k, v in s.items()} for fqn, s in optim.get("state", {}).items()},
            "rng": learner.generator.get_state(), "cut_rng": learner.cut_generator.get_state()}


def _save(rank: int, world: int, run_dir: str, out: str) -> None:
    cfg = dataclasses.replace(CFG, logdir=str(run_dir), run_name="run")
    learner = Learner(cfg, describe("CartPole-v1", 1), dist.group.WORLD, torch.device("cpu"))
    if rank == 0:
        group = LearnerGroup(learner)
        after = learner.algorithm.wants_after(cfg)
        group.update(make_trajectories(learner.specs, after=after), global_step=0)  # the optimizer has state worth restoring
        group.update(make_trajectories(learner.specs, seed=5, after=after), global_step=100)
        group.save(7, {"iteration": 7, "global_step": 123, "version": 2, "recent": torch.tensor([1.0, 2.0])})
        group.stop()
    else:
        follow(learner)
    state = full_state(learner)
    if rank == 0:
        torch.save(state, out)


def _load(rank: int, world: int, ckpt: str, out: str) -> None:
    cfg = dataclasses.replace(CFG, seed=99, resume=ckpt)  # another seed: other initial weights, unless restored
    learner = Learner(cfg, describe("CartPole-v1", 1), dist.group.WORLD, torch.device("cpu"))
    state = full_state(learner)
    if rank == 0:
        torch.save(state, out)


@pytest.mark.parametrize("saved_by, loaded_by", [(2, 2), (2, 1), (1, 2)])
def test_restored_model_and_optimizer_equal_the_saved_ones_exactly(saved_by, loaded_by, tmp_path):
    run_ranks(_save, saved_by, tmp_path, tmp_path, str(tmp_path / "saved.pt"))
    ckpt = checkpoint.latest(tmp_path / "run")
    assert ckpt is not None and ckpt.name == "iter_000007"
    if saved_by == 1:  # one unsharded rank writes its whole state in one file, without importing DCP
        assert (ckpt / checkpoint.LEARNER_FILE).is_file() and not list(ckpt.glob("*.distcp"))
    else:
        assert sorted(p.name for p in ckpt.glob("*.distcp")) == [f"__{r}_0.distcp" for r in range(saved_by)]  # a shard per rank
    run_ranks(_load, loaded_by, tmp_path, str(ckpt), str(tmp_path / "loaded.pt"))
    saved, loaded = torch.load(tmp_path / "saved.pt"), torch.load(tmp_path / "loaded.pt")
    assert saved["model"].keys() == loaded["model"].keys()
    for key in saved["model"]:
        assert torch.equal(saved["model"][key], loaded["model"][key]), key
    assert saved["optim"].keys() == loaded["optim"].keys() and saved["optim"]
    for fqn in saved["optim"]:
        for k in ("step", "exp_avg", "exp_avg_sq"):
            assert torch.equal(saved["optim"][fqn][k], loaded["optim"][fqn][k]), (fqn, k)
        assert saved["optim"][fqn]["step"].item() == 2 * CFG.update_epochs * CFG.num_minibatches
    # Rank 0's sampling generator continues where it was (rank 0 exists whatever the count).
    assert torch.equal(saved["rng"], loaded["rng"]) and torch.equal(saved["cut_rng"], loaded["cut_rng"])
    trainer = checkpoint.read_trainer(ckpt)  # weights_only: plain values and tensors only
    assert (trainer["iteration"], trainer["global_step"], trainer["learners"]) == (7, 123, saved_by)
    assert trainer["env"] == "CartPole-v1" and trainer["model_shape"]["network"]["hidden_sizes"] == [16, 16]
    from marl.models import network_of
    from marl.policies import specs_of

    assert trainer["model_shape"] == checkpoint.model_shape(specs_of(CFG, describe("CartPole-v1", 1)), network_of(CFG))


def test_only_a_complete_checkpoint_counts_and_old_ones_are_pruned(tmp_path):
    run_ranks(_save, 1, tmp_path, tmp_path, str(tmp_path / "saved.pt"))
    root = tmp_path / "run" / "checkpoints"
    good = root / "iter_000007"
    # A crash while writing leaves the temporary name, or a directory without the trainer state.
    (root / ".iter_000009.tmp").mkdir()
    half = root / "iter_000008"
    half.mkdir()
    (half / ".metadata").write_bytes(b"")
    assert checkpoint.latest(tmp_path / "run") == good
    assert checkpoint.resolve(str(tmp_path / "run")) == good
    assert checkpoint.resolve(str(good)) == good
    for name in ("iter_000003", "iter_000005", "iter_1000000"):
        (root / name).mkdir()
        for f in (".metadata", checkpoint.TRAINER_FILE):
            (root / name / f).write_bytes(b"")
    assert checkpoint.latest(tmp_path / "run").name == "iter_1000000"  # by iteration, not by name
    checkpoint._prune(tmp_path / "run", keep=3)
    assert [p.name for p in checkpoint.complete(tmp_path / "run")] == ["iter_000005", "iter_000007", "iter_1000000"]
    # Resuming from iter 7 replaces what came after it: the newer checkpoint goes.
    assert checkpoint.drop_newer(good) == [root / "iter_1000000"]
    assert checkpoint.latest(tmp_path / "run") == good


@pytest.mark.parametrize("make, message", [
    (lambda p: p / "nope", "no such directory"),
    (lambda p: p, "is not a checkpoint"),
    (lambda p: (p / "checkpoints").mkdir() or p, "no complete checkpoint"),
])
def test_resume_of_something_that_is_not_a_checkpoint_says_so(make, message, tmp_path):
    with pytest.raises(checkpoint.CheckpointError, match=message):
        checkpoint.resolve(str(make(tmp_path)))


SAC = dataclasses.replace(CFG, env="Pendulum-v1", algo="sac", learning_starts=0, train_frequency=64.0, batch_size=32,
                          save_buffer=True)


def _off_policy_state(learner: Learner) -> dict:
    state = full_state(learner)
    state["replay"] = {k: v.state_dict() for k, v in learner.training.own.items()}
    return state


def _save_off_policy(rank: int, world: int, run_dir: str, out: str) -> None:
    from marl.specs import example_trajectory

    cfg = dataclasses.replace(SAC, logdir=str(run_dir), run_name="run")
    learner = Learner(cfg, describe(cfg.env, 1), dist.group.WORLD, torch.device("cpu"))
    if rank == 0:
        group = LearnerGroup(learner)
        g = torch.Generator().manual_seed(3)
        for step in (0, 2_000):  # gradient steps in both updates: every optimizer has state worth restoring
            metrics, used = group.update([{s.name: example_trajectory(s, 16, 4, g, after=True) for s in learner.specs}],
                                         global_step=step)
            assert used > 0
        group.save(3, {"iteration": 3, "global_step": 4_000, "version": 2, "recent": torch.tensor([1.0])})
        group.stop()
    else:
        follow(learner)
    state = _off_policy_state(learner)
    if rank == 0:
        torch.save(state, out)


def _load_off_policy(rank: int, world: int, ckpt: str, out: str) -> None:
    cfg = dataclasses.replace(SAC, seed=99, resume=ckpt)
    learner = Learner(cfg, describe(cfg.env, 1), dist.group.WORLD, torch.device("cpu"))
    state = _off_policy_state(learner)
    if rank == 0:
        torch.save(state, out)


@pytest.mark.parametrize("saved_by, loaded_by", [(2, 2), (2, 1)])
def test_an_off_policy_checkpoint_restores_targets_every_optimizer_and_the_buffer(saved_by, loaded_by, tmp_path):
    """SAC's policy, twin critics, their targets and the temperature, both optimizers (critic, actor),
    and with --save-buffer each rank's replay shard (the same rank count only: shards are per rank)."""
    run_ranks(_save_off_policy, saved_by, tmp_path, tmp_path, str(tmp_path / "saved.pt"))
    ckpt = checkpoint.latest(tmp_path / "run")
    assert sorted(p.name for p in ckpt.glob("own_rank*.pt")) == [f"own_rank{r}.pt" for r in range(saved_by)]
    run_ranks(_load_off_policy, loaded_by, tmp_path, str(ckpt), str(tmp_path / "loaded.pt"))
    saved, loaded = torch.load(tmp_path / "saved.pt"), torch.load(tmp_path / "loaded.pt")
    assert any(k.startswith("targets.qf1.") for k in saved["model"]) and any("temperature" in k for k in saved["model"])
    assert saved["model"].keys() == loaded["model"].keys()
    for key in saved["model"]:
        assert torch.equal(saved["model"][key], loaded["model"][key]), key
    assert any(fqn.startswith("others.qf1.") for fqn in saved["optim"]) and any(fqn.startswith("policy.") for fqn in saved["optim"])
    assert saved["optim"].keys() == loaded["optim"].keys()
    for fqn in saved["optim"]:
        for k in ("step", "exp_avg", "exp_avg_sq"):
            assert torch.equal(saved["optim"][fqn][k], loaded["optim"][fqn][k]), (fqn, k)
    (key,) = saved["replay"]  # rank 0's shard
    if saved_by == loaded_by:
        assert int(loaded["replay"][key]["size"]) == int(saved["replay"][key]["size"]) > 0
        for name, rows in saved["replay"][key].items():
            assert torch.equal(rows, loaded["replay"][key][name]), name
    else:
        assert int(loaded["replay"][key]["size"]) == 0  # another rank count: the shards start empty


def test_one_unsharded_ranks_state_is_the_layout_dcps_get_state_dict_makes():
    """One fp32 learner's TrainState builds its state dicts itself (DCP's helpers import torch._dynamo);
    they must be DCP's, key for key and value for value, or its checkpoints would not load on 2 ranks."""
    from torch import nn

    from marl.checkpoint import TrainState
    from marl.optim import Adam

    from torch.distributed.algorithms._checkpoint.checkpoint_wrapper import checkpoint_wrapper

    def made(wrapped: bool):
        torch.manual_seed(0)
        first = nn.Linear(3, 4)
        net = nn.Sequential(checkpoint_wrapper(first) if wrapped else first, nn.Tanh(), nn.Linear(4, 2))
        net.register_parameter("tied", net[2].weight)  # one parameter under two names: DCP keeps the first
        opts = (Adam(net[0].parameters(), lr=1e-3), Adam([{"params": net[2].parameters()}], lr=2e-3, eps=1e-5))
        for g in opts[0].param_groups + opts[1].param_groups:
            g["base_lr"] = g["lr"]
        return net, opts

    # A fresh optimizer (its state made as DCP makes it) and a trained one; plain and with
    # --activation-checkpointing's wrapper, which one fp32 rank applies too.
    for steps, wrapped in ((0, False), (2, False), (2, True)):
        net, opts = made(wrapped)
        ref_net, ref_opts = made(wrapped)
        for m, os_ in ((net, opts), (ref_net, ref_opts)):
            for k in range(steps):
                for o in os_:
                    o.zero_grad()
                m(torch.full((5, 3), float(k + 1))).sum().backward()
                for o in os_:
                    o.step()
        ours = TrainState(net, opts, (torch.Generator(),), 0).state_dict()
        model_sd, optim_sd = get_state_dict(ref_net, ref_opts)
        assert ours["model"].keys() == model_sd.keys() and all(torch.equal(ours["model"][k], v) for k, v in model_sd.items())
        assert ours["optim"]["param_groups"] == optim_sd["param_groups"]
        assert ours["optim"]["state"].keys() == optim_sd["state"].keys()
        for name, st in optim_sd["state"].items():
            assert all(torch.equal(ours["optim"]["state"][name][k], v) for k, v in st.items()), name
        fresh_net, fresh_opts = made(wrapped)
        TrainState(fresh_net, fresh_opts, (torch.Generator(),), 0).load_state_dict(ours)
        for a, b in zip(fresh_opts, opts):
            assert a.state_dict()["param_groups"] == b.state_dict()["param_groups"]
            for i, st in b.state_dict()["state"].items():
                assert all(torch.equal(a.state_dict()["state"][i][k], v) for k, v in st.items())


ONE_RANK = r"""
import dataclasses, sys, torch, torch.distributed as dist
from envs import describe
from marl import checkpoint
from marl.config import Config
from marl.learner import Learner, LearnerGroup
from marl.specs import example_trajectory

dist.init_process_group("gloo", init_method="file://" + sys.argv[1] + "/store", rank=0, world_size=1)
cfg = dataclasses.replace(Config(), num_minibatches=2, update_epochs=2, seed=0, hidden_sizes=(16, 16),
                          logdir=sys.argv[1], run_name="run")
learner = Learner(cfg, describe("CartPole-v1", 1), dist.group.WORLD, torch.device("cpu"))
group = LearnerGroup(learner)
g = torch.Generator().manual_seed(1)
group.update([{s.name: example_trajectory(s, 16, 4, g, after=learner.algorithm.wants_after(cfg)) for s in learner.specs}],
             global_step=0)
path = group.save(3, {"iteration": 3, "global_step": 10, "version": 1, "recent": torch.tensor([1.0])})
resumed = Learner(dataclasses.replace(cfg, seed=5, resume=str(path)), describe("CartPole-v1", 1), dist.group.WORLD,
                  torch.device("cpu"))
same = all(torch.equal(a, b) for a, b in zip(learner.model.state_dict().values(), resumed.model.state_dict().values()))
print(same, sorted(m for m in ("torch.distributed.checkpoint", "torch.distributed.tensor", "sympy", "torch._dynamo")
                   if m in sys.modules))
group.stop()
dist.destroy_process_group()
"""


def test_one_unsharded_rank_saves_and_resumes_without_importing_dcp(tmp_path):
    """Importing DCP (with DTensor and sympy) costs 1.6-3.6 s on a 2-core machine, a quarter of a CartPole
    run: one fp32 learner rank writes and reads its whole state as learner.pt instead."""
    r = subprocess.run([sys.executable, "-c", ONE_RANK, str(tmp_path)], capture_output=True, text=True, timeout=120,
                       cwd=ROOT)
    assert r.returncode == 0, r.stderr[-3000:]
    assert r.stdout.split("\n")[-2] == "True []", r.stdout
    assert (checkpoint.latest(tmp_path / "run") / checkpoint.LEARNER_FILE).is_file()
