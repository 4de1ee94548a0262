"""Recurrent policies: the core against a step-by-step loop, the sequence layout, and the test that
matters: the learner replays what the actors just did, to the last digit that fp32 keeps."""

from __future__ import annotations

import dataclasses

import pytest
import torch
import torch.distributed as dist

from envs import describe
from marl.config import Config
from marl.models.core import Core, episode_starts, fresh_after
from marl.trajectory import from_sequences, sequences, to_sequences
from tests.ranks import run_ranks


@pytest.mark.parametrize("kind", ["gru", "lstm"])
def test_the_core_over_a_sequence_is_a_step_by_step_loop_with_resets(kind):
    torch.manual_seed(0)
    core = Core(kind, 5, 8)
    T, B = 9, 4
    x, h0 = torch.randn(T, B, 5), torch.randn(B, core.state_size)
    starts = torch.zeros(T, B, dtype=torch.bool)
    starts[0, 1] = starts[3, 0] = starts[3, 2] = starts[6, 0] = True
    y, h = core(x, h0, starts)
    # The reference: one cell step at a time, the state zeroed by hand where an episode starts.
    cell = (torch.nn.GRUCell if kind == "gru" else torch.nn.LSTMCell)(5, 8)
    cell.load_state_dict({k.removesuffix("_l0"): v for k, v in core.rnn.state_dict().items()})
    state = h0.clone()
    for t in range(T):
        state = torch.where(starts[t].unsqueeze(-1), 0.0, state)
        if kind == "gru":
            state = cell(x[t], state)
            out = state
        else:
            hx, cx = cell(x[t], tuple(state.chunk(2, dim=-1)))
            state, out = torch.cat([hx, cx], dim=-1), hx
        torch.testing.assert_close(y[t], out, rtol=1e-5, atol=1e-6)
    torch.testing.assert_close(h, state, rtol=1e-5, atol=1e-6)
    # Without the resets the outputs differ: the test above can fail.
    assert not torch.allclose(core(x, h0, torch.zeros_like(starts))[0], y, atol=1e-3)


def test_episode_starts_follow_ends_autoreset_steps_and_departed_agents():
    valid = torch.tensor([True, True, False, True, True, False, False, True])
    term = torch.tensor([False, True, False, False, False, False, False, False])
    trunc = torch.tensor([False, False, False, False, True, False, False, False])
    starts = episode_starts({"valid": valid, "terminated": term, "truncated": trunc})
    # Step 0: the recorded state is already zeroed. After a termination (1) and after invalid steps
    # (the autoreset step 2, a departed agent's 5 and 6) the next step starts afresh. Not right after
    # the truncation at 4: step 5 holds the final observation, whose value bootstraps the truncation
    # from the episode's memory; step 5 is invalid, so step 6 (and 7) start afresh.
    assert starts.tolist() == [False, False, True, True, False, False, True, True]
    assert fresh_after(valid, term).tolist() == [False, True, True, False, False, True, True, False]


def test_sequences_cut_chunks_pad_the_last_and_come_back():
    T, S, n, L = 10, 3, 2, 4
    g = torch.Generator().manual_seed(0)
    traj = {"obs": {"obs": torch.randn(T, S, n, 5, generator=g)}, "actions": torch.randint(0, 2, (T, S, n)),
            "logprobs": torch.randn(T, S, n), "values": torch.randn(T, S, n), "rewards": torch.randn(T, S, n),
            "terminated": torch.rand(T, S, n, generator=g) < 0.2, "truncated": torch.zeros(T, S, n, dtype=torch.bool),
            "valid": torch.ones(T, S, n, dtype=torch.bool), "bootstrap_value": torch.zeros(T, S, n),
            "next_value": torch.zeros(S, n), "core_state": torch.randn(3, S, n, 7)}
    traj["valid"][:, 2] = False  # a padding slot: its sequences are left out
    seqs = to_sequences(traj, L)
    assert seqs["values"].shape == (3 * S * n, L) and seqs["core_state"].shape == (3 * S * n, 7)
    # Sequence (chunk c, slot s, agent j) holds steps c*L .. c*L+L-1 of that slot and agent.
    c, s, j = 1, 2, 1
    i = (c * S + s) * n + j
    assert torch.equal(seqs["values"][i], traj["values"][c * L:(c + 1) * L, s, j])
    assert torch.equal(seqs["core_state"][i], traj["core_state"][c, s, j])
    assert not seqs["valid"][(2 * S) * n:, 2:].any()  # the last chunk's padding steps
    torch.testing.assert_close(from_sequences(seqs["obs"]["obs"], T, S, n), traj["obs"]["obs"], rtol=0, atol=0)
    kept = sequences(traj, traj["values"], traj["values"], L)
    assert kept["valid"].shape == (3 * 2 * n, L) and kept["valid"].any(dim=1).all()


# The settings of the replay test: short episodes (CartPole's first random ones) cross chunk
# boundaries, 40 steps in chunks of 16 leave a padded last chunk; the PettingZoo env's agents
# leave one by one and come back at the next episode, with a centralized critic (recurrent MAPPO)
# and two policies.
CARTPOLE = dict(env="CartPole-v1", agents=4, num_steps=40, seq_len=16)
LEAVING = dict(env="pettingzoo:tests.pz_envs", agents=3, num_steps=12, seq_len=0, critic="central",
               policies={"a": "first", "*": "others"})


def _replay(rank: int, world: int, cfg: Config, out: str, break_resets: bool, path: str = "") -> None:
    import sys

    from marl import trajectory
    from marl.actor import RolloutWorker
    from marl.collectives import pack, slot_bounds, slot_ranges, slots_per_rank
    from marl.learner import Learner
    from marl.specs import tree_map

    sys.path.insert(0, path)  # where the README's recurrent network was written
    if break_resets:  # the negative control: a learner that ignores episode starts
        trajectory.episode_starts = lambda traj: torch.zeros_like(traj["valid"])
    info = describe(cfg.env, cfg.agents)
    learner = Learner(cfg, info, dist.group.WORLD, torch.device("cpu"), 0)  # on 2 ranks every block is a unit
    workers = [RolloutWorker(cfg, info, i) for i in range(cfg.actors)]  # each rank makes the same ones

    def full_weights() -> dict:
        box = [learner.full_state_dict()]  # rank 0 receives them; the other ranks' actors get a copy
        dist.broadcast_object_list(box, src=0)
        return box[0]

    weights = full_weights()
    rollouts = [w.collect(0, weights) for w in workers]

    def share(rollouts):
        """This rank's whole env slots, as LearnerGroup.update cuts them."""
        bounds = slot_bounds([r.trajectories[learner.specs[0].name]["valid"].shape[1] for r in rollouts])
        per = slots_per_rank(bounds, world)
        own = {}
        for spec in learner.specs:
            packed = pack([r.trajectories[spec.name] for r in rollouts], per * world)
            own[spec.name] = tree_map(lambda v: v[:, rank * per:(rank + 1) * per], packed)
            own[spec.name]["next_value"] = packed["next_value"][rank * per:(rank + 1) * per]
        return own, slot_ranges(bounds, rank, per)

    # A big-step update first: at the initial weights the logits are near 0 and a wrong state barely shows.
    own, pieces = share(rollouts)
    learner.update(own, 0, pieces)
    weights = full_weights()
    # The second and third requests continue the first's episodes and hidden states (new weights keep them).
    rollouts = [w.collect(1, weights) for w in workers]
    rollouts = [w.collect(1, None) for w in workers]
    own, pieces = share(rollouts)
    result = {}
    with torch.no_grad():
        units = learner.training.units(own, pieces)
        for name, (pi, value, m) in learner.training.forward(units).items():
            logp = pi.log_prob(m["actions"])
            inside = units[name]["starts"][:, 1:] & units[name]["valid"][:, 1:]
            result[name] = {"ratio": float(((logp - m["logprobs"]).exp() - 1).abs().max()),
                            "value": float(((value - m["values"]).abs() / m["values"].abs().clamp(min=1)).max()),
                            "samples": int(m["actions"].shape[0]),
                            "valid": sum(int(own[name]["valid"][:, a:b].sum()) for a, b in pieces),
                            "starts_inside": int(inside.sum()),
                            "left": int((~own[name]["valid"]).sum())}
            norm = learner.model.policies[name].obs_norm
            if norm is not None:  # what the first update merged: the actors acted with these statistics
                result[name]["merged"] = min([float(m.count) for m in norm.stats.values()] + [float(norm.state.count)])
        for name, (logp, value, _) in learner.training.current(own).items():
            t = own[name]
            valid = t["valid"]
            result[name]["replay_ratio"] = float(((logp - t["logprobs"])[valid].exp() - 1).abs().max())
            result[name]["replay_value"] = float((value - t["values"])[valid].abs().max())
    stats = [torch.tensor([r["samples"], r["starts_inside"]], dtype=torch.float64) for r in result.values()]
    for s in stats:
        dist.all_reduce(s)
    if rank == 0:
        torch.save({name: {**r, "samples_all": int(s[0]), "starts_all": int(s[1])}
                    for (name, r), s in zip(result.items(), stats)}, out)


@pytest.mark.parametrize("core, setting, world", [
    ("gru", "cartpole", 1), ("lstm", "cartpole", 2), ("gru", "leaving", 2), ("lstm", "leaving", 1),
    ("readme-gru", "cartpole", 2), ("gru", "leaving-normalised", 2)])
def test_the_learner_replays_the_actors_log_probs_and_values(core, setting, world, tmp_path):
    """For GRU and LSTM cores and the README's own recurrent network, on 1 and 2 learner ranks; and
    with --norm-obs and --norm-reward, where the first update has moved the observation statistics
    (of the agents' views and of the central critic's state) that the actors then act with."""
    pytest.importorskip("pettingzoo")
    from tests.test_train_spaces import docs_network_example

    (tmp_path / "my_nets.py").write_text(docs_network_example(recurrent=True))
    network = dict(model="my_nets:GRUNet", model_kwargs={"hidden": 16}) if core == "readme-gru" else \
        dict(core=core, core_size=16, hidden_sizes=(16,))
    cfg = dataclasses.replace(Config(), actors=2, envs_per_actor=2, num_minibatches=2, update_epochs=2,
                              learning_rate=0.03, anneal_lr=False, seed=3, **network,
                              **(CARTPOLE if setting == "cartpole" else LEAVING),
                              **(dict(norm_obs=True, norm_reward=True) if setting.endswith("normalised") else {}))
    out = str(tmp_path / "replay.pt")
    run_ranks(_replay, world, tmp_path, cfg, out, False, str(tmp_path))
    for name, r in torch.load(out).items():
        assert r["ratio"] < 1e-5 and r["replay_ratio"] < 1e-5, (name, r)
        assert r["value"] < 1e-5 and r["replay_value"] < 1e-4, (name, r)
        assert r["samples"] == r["valid"] > 0  # every valid step is trained on, no padding is
        assert r["starts_all"] > 0, r  # episodes start inside the sequences
        if setting.startswith("leaving"):
            assert r["left"] > 0  # steps where an agent had left its episode (or the autoreset step)
        if setting.endswith("normalised"):
            assert r["merged"] > 10, r


def test_a_learner_that_ignores_episode_starts_fails_the_replay_test(tmp_path):
    cfg = dataclasses.replace(Config(), core="gru", core_size=16, hidden_sizes=(16,), actors=2, envs_per_actor=2,
                              num_minibatches=2, update_epochs=2, learning_rate=0.03, anneal_lr=False, seed=3,
                              **CARTPOLE)
    out = str(tmp_path / "replay.pt")
    run_ranks(_replay, 1, tmp_path, cfg, out, True)
    assert torch.load(out)["shared"]["ratio"] > 1e-3
