"""Turn-based games (PettingZoo AEC, envs/aec.py): what the actor records against PettingZoo's own
agent_iter() loop, legal moves only, the gap-aware GAE, and tic-tac-toe self-play from the command line."""

from __future__ import annotations

import dataclasses
import json
import warnings

import numpy as np
import pytest
import torch

from tests.conftest import ROOT, evaluate_cli, read_scalars

pytest.importorskip("pettingzoo.classic")

TICTACTOE = "pettingzoo:pettingzoo.classic.tictactoe_v3"


def test_the_wrapped_aec_games_pass_pettingzoos_api_test():
    """The AEC env inside what marl's env factory builds for each game passes PettingZoo's own checks
    (api_test raises on a failure), and the wrapper shows its spaces unchanged."""
    from pettingzoo.test import api_test

    from envs.aec import TurnBased
    from envs.registry import pettingzoo_factory

    for game in (TICTACTOE, "pettingzoo:pettingzoo.classic.connect_four_v3"):
        env = pettingzoo_factory(game)()
        assert isinstance(env, TurnBased), game
        for agent in env.possible_agents:
            assert env.observation_space(agent) == env.aec.observation_space(agent)
            assert env.action_space(agent) == env.aec.action_space(agent)
        api_test(env.aec, num_cycles=200)


def test_aec_is_told_from_parallel_by_the_object():
    from envs import describe

    assert describe(TICTACTOE).turn_based and describe("pettingzoo:pettingzoo.classic.connect_four_v3").turn_based
    assert not describe("pettingzoo:envs.coop_nav").turn_based  # a Parallel module


def reference_game(moves: list[int]) -> dict[str, list[tuple[np.ndarray, int, float, bool]]]:
    """Replay `moves` in PettingZoo's own loop: per agent, its transitions (observation it moved on,
    its move, the reward last() reports at its next turn or at the end, whether the game ended)."""
    from pettingzoo.classic import tictactoe_v3

    env = tictactoe_v3.env()
    env.reset()
    pending: dict[str, list] = {}
    out: dict[str, list] = {a: [] for a in env.possible_agents}
    moves = list(moves)
    for agent in env.agent_iter():
        obs, reward, term, trunc, _ = env.last()
        if agent in pending:  # its previous move's outcome: what it accumulated since then
            o, m = pending.pop(agent)
            out[agent].append((o, m, float(reward), bool(term or trunc)))
        if term or trunc:
            env.step(None)
            continue
        move = moves.pop(0)
        pending[agent] = (obs["observation"].copy(), move)
        env.step(move)
    assert not moves and not pending
    return out


def test_the_actor_records_each_seats_moves_as_pettingzoos_own_loop_does():
    from envs import describe
    from marl.actor import RolloutWorker
    from marl.config import Config

    info = describe(TICTACTOE)
    cfg = dataclasses.replace(Config(), env=TICTACTOE, agents=2, envs_per_actor=8, rollout="episodes",
                              episodes_per_request=3)
    w = RolloutWorker(cfg, info, index=0)
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # PettingZoo warns (and ends the game) on an illegal move
        rollout = w.collect(0, w.policy.state_dict())
    tr = rollout.trajectories["shared"]
    valid, board = tr["valid"], tr["obs"]["observation"]
    T, E, N = valid.shape
    games = 0
    for c in range(E):
        rows = [t for t in range(T) if valid[t, c].any()]
        assert all(int(valid[t, c].sum()) == 1 for t in rows)  # one mover per step
        # Cut the copy's moves into games at the rows where the final move was made.
        game: list[tuple[int, int]] = []  # (row, seat)
        for t in rows:
            seat = int(valid[t, c].nonzero())
            game.append((t, seat))
            latest = {s2: r for r, s2 in game}
            # The game is over once every seat's latest move is flagged terminal (the loser's is an earlier row).
            if len(latest) == N and all(bool(tr["terminated"][r, c, s2]) for s2, r in latest.items()):
                moves = [int(tr["actions"][r, c, s]) for r, s in game]
                ref = reference_game(moves)
                for s, agent in enumerate(info.agent_ids):
                    mine = [(r, s2) for r, s2 in game if s2 == s]
                    assert len(mine) == len(ref[agent])
                    for (r, _), (obs, move, reward, ended) in zip(mine, ref[agent]):
                        assert np.array_equal(board[r, c, s].numpy(), obs) and int(tr["actions"][r, c, s]) == move
                        assert float(tr["rewards"][r, c, s]) == reward  # the loser's -1 on its own last move
                        assert bool(tr["terminated"][r, c, s]) == ended
                games += 1
                game = []
        assert not game  # whole games only
    assert games == E * cfg.episodes_per_request
    # Every seat's finished game is reported with the return PettingZoo gives it.
    assert rollout.episode_returns.numel() == 2 * games
    assert sorted(rollout.episode_returns.tolist()) == sorted(float(tr["rewards"][t, c, s]) for t, c, s in
                                                             (tr["terminated"] & valid).nonzero().tolist())


def test_no_illegal_move_is_ever_sent_over_30k_moves():
    torch.set_num_threads(1)  # as in an actor process: batches of 256 rows, where threads cost more than they give
    from envs import describe
    from marl.actor import RolloutWorker
    from marl.config import Config

    info = describe(TICTACTOE)
    cfg = dataclasses.replace(Config(), env=TICTACTOE, agents=2, envs_per_actor=128, rollout="episodes",
                              episodes_per_request=8)
    w = RolloutWorker(cfg, info, index=0)
    moves = 0
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        while moves < 30_000:
            tr = w.collect(0, w.policy.state_dict() if moves == 0 else None).trajectories["shared"]
            valid = tr["valid"]
            chosen = tr["action_mask"].gather(-1, tr["actions"].unsqueeze(-1)).squeeze(-1)
            assert bool(chosen[valid].all())
            moves += int(valid.sum())


def reference_gae(rewards, values, valid, done, gamma, lam, next_value):
    """Slot by slot: drop the steps it sat out, then the plain recursion over what is left."""
    T = rewards.shape[0]
    out = torch.zeros_like(values)
    for slot in range(rewards.shape[1]):
        idx = [t for t in range(T) if valid[t, slot]]
        adv = 0.0
        for k in reversed(range(len(idx))):
            t = idx[k]
            nxt = values[idx[k + 1], slot] if k + 1 < len(idx) else next_value[slot]
            nxt = 0.0 if done[t, slot] else nxt
            adv = rewards[t, slot] + gamma * nxt - values[t, slot] + (0.0 if done[t, slot] else gamma * lam * adv)
            out[t, slot] = adv
    return out


def test_gae_skips_the_steps_a_waiting_agent_sat_out():
    from marl.algorithms.gae import gae

    g = torch.Generator().manual_seed(0)
    T, S = 12, 6
    rewards, values = torch.randn(T, S, generator=g, dtype=torch.float64), torch.randn(T, S, generator=g, dtype=torch.float64)
    valid = torch.rand(T, S, generator=g) < 0.55
    terminated = (torch.rand(T, S, generator=g) < 0.15) & valid
    truncated = torch.zeros(T, S, dtype=torch.bool)
    next_value = torch.randn(S, generator=g, dtype=torch.float64)
    adv, ret = gae(rewards, values, next_value, terminated, truncated, torch.zeros(T, S, dtype=torch.float64),
                   0.97, 0.9, valid)
    ref = reference_gae(rewards, values, valid, terminated, 0.97, 0.9, next_value)
    assert torch.allclose(adv[valid], ref[valid]) and torch.allclose(ret[valid], (ref + values)[valid])
    # All valid: the plain GAE, bit for bit.
    full = gae(rewards, values, next_value, terminated, truncated, torch.zeros(T, S, dtype=torch.float64), 0.97, 0.9)
    same = gae(rewards, values, next_value, terminated, truncated, torch.zeros(T, S, dtype=torch.float64), 0.97, 0.9,
               torch.ones(T, S, dtype=torch.bool))
    assert torch.equal(full[0], same[0])


def replayed(module, moves: list[int]):
    """A fresh game of `module` with `moves` played in PettingZoo's own loop."""
    env = module.env()
    env.reset()
    for m in moves:
        env.step(m)
    return env


@pytest.mark.parametrize("game", ["tictactoe_v3", "connect_four_v3"])
def test_the_lookahead_player_finds_every_move_that_completes_a_line(game):
    """Against the game itself: a move wins iff playing it in a replay of the game pays the mover +1; a cell
    must be blocked iff, after some other move of ours that does not end the game, the opponent wins there."""
    import importlib

    from marl.heuristics import completing_moves, line_game

    module = importlib.import_module(f"pettingzoo.classic.{game}")
    k, gravity = line_game(game)
    rng = np.random.default_rng(0)
    env = module.env()
    found = {0: 0, 1: 0}
    for seed in range(40 if game == "tictactoe_v3" else 12):  # a connect-four game replays ~40x as many positions
        env.reset(seed=seed)
        moves: list[int] = []
        while not (env.terminations[env.agent_selection] or env.truncations[env.agent_selection]):
            mover = env.agent_selection
            obs = env.observe(mover)
            planes, legal = obs["observation"], obs["action_mask"]
            legal_moves = [int(a) for a in np.flatnonzero(legal)]
            wins = {a for a in legal_moves if replayed(module, moves + [a]).rewards[mover] == 1}
            assert set(completing_moves(planes, legal, k, gravity, 0)) == wins
            others = [m for m in legal_moves if m not in wins]
            if len(others) >= 2:  # room for a move of ours that leaves the threat's cell free
                threats = set()
                for a in legal_moves:
                    for m in others:
                        if m == a:
                            continue
                        after = replayed(module, moves + [m])
                        if after.terminations[after.agent_selection] or not after.observe(after.agent_selection)["action_mask"][a]:
                            continue
                        opponent = after.agent_selection
                        after.step(a)
                        threats |= {a} if after.rewards[opponent] == 1 else set()
                        break
                assert set(completing_moves(planes, legal, k, gravity, 1)) == threats
                found[1] += len(threats)
            found[0] += len(wins)
            move = int(rng.choice(legal_moves))
            moves.append(move)
            env.step(move)
    assert found[0] > 20 and found[1] > 20  # the positions held lines to complete and to block


def test_the_lookahead_player_beats_random_play():
    from envs import describe
    from marl.evaluate import random_actor, versus_table
    from marl.heuristics import lookahead_actor
    from marl.policies import policy_specs

    info = describe(TICTACTOE)
    specs = policy_specs(info, "shared", False, "local")
    table = versus_table(info, specs, lambda: lookahead_actor(TICTACTOE, 1), random_actor(2, specs), 200, 0)
    # Random against random: the first player wins 58%, the second 29%; this player measured 90% and 74%.
    assert table["player_1"]["win"] >= 0.8 and table["player_2"]["win"] >= 0.6, table


def test_tictactoe_evaluates_against_random_play_during_training_and_after(train):
    """The in-training evaluation's tags and the evaluation CLI's per-seat table, at a small budget: the
    learning check of self-play is connect-four's (below); bench/selfplay.py trains tic-tac-toe to its
    budget (its smoke runs in tests/test_bench.py)."""
    r = train("--config", str(ROOT / "configs" / "tictactoe.toml"), "--total-steps", "6000", "--eval-every", "3",
              "--eval-episodes", "20", "--run-name", "ttt")
    assert r.returncode == 0, r.stderr[-3000:]
    iterations = int([line for line in r.stdout.splitlines() if line.startswith("iter ")][-1].split()[1])
    assert iterations >= 6
    scalars = read_scalars(train.logdir / "ttt")
    for tag in ["eval/win_rate_vs_random"] + [f"eval/{a}/{k}_rate_vs_random" for a in ("player_1", "player_2")
                                              for k in ("win", "draw", "loss")]:
        assert len(scalars[tag]) == iterations // 3, tag
    for (_, w), (_, a), (_, b) in zip(scalars["eval/win_rate_vs_random"], scalars["eval/player_1/win_rate_vs_random"],
                                      scalars["eval/player_2/win_rate_vs_random"]):
        assert w == pytest.approx((a + b) / 2)
    e = evaluate_cli([str(train.logdir / "ttt"), "--opponent", "random", "--episodes", "40", "--json"], timeout=300)
    assert e.returncode == 0, e.stderr[-2000:]
    out = json.loads(e.stdout)
    first, second = out["seats"]["player_1"], out["seats"]["player_2"]
    assert first["games"] == second["games"] == 40
    for seat in (first, second):
        assert abs(seat["win"] + seat["draw"] + seat["loss"] - 1) < 1e-9
    assert set(out["agents"]) == {"player_1", "player_2"} and out["agents"]["player_1"]["episodes"] == 40


def test_connect_four_with_its_preset_beats_random_play(train):
    """The preset (a CNN, half the games against a history pool) for 15k agent-steps, seed 1: measured 91.0% wins
    moving first and 79.5% moving second over 200 games (the check plays 100) (random against random: 56% and 42%; at 30k, 94.5% and
    91.5%). bench/selfplay.py trains it to the preset's 1M and scores it against random play and the lookahead
    player."""
    r = train("--config", str(ROOT / "configs" / "connect_four.toml"), "--total-steps", "15000", "--run-name", "c4")
    assert r.returncode == 0, r.stderr[-3000:]
    e = evaluate_cli([str(train.logdir / "c4"), "--opponent", "random",
                        "--episodes", "100", "--json"], timeout=300)
    assert e.returncode == 0, e.stderr[-2000:]
    seats = json.loads(e.stdout)["seats"]
    assert seats["player_0"]["win"] >= 0.8 and seats["player_1"]["win"] >= 0.65, seats


def test_turn_based_games_need_whole_game_requests_and_ppo(train):
    r = train("--env", TICTACTOE, "--rollout", "steps", "--run-name", "steps")
    assert r.returncode == 2 and "pass --rollout episodes" in r.stderr and "Traceback" not in r.stderr
    r = train("--config", str(ROOT / "configs" / "tictactoe.toml"), "--algo", "appo", "--run-name", "appo")
    assert r.returncode == 2 and "use --algo ppo" in r.stderr


def test_a_frozen_snapshot_plays_one_seat_and_makes_no_samples():
    from envs import describe
    from marl.actor import RolloutWorker
    from marl.config import Config

    info = describe(TICTACTOE)
    cfg = dataclasses.replace(Config(), env=TICTACTOE, agents=2, envs_per_actor=16, rollout="episodes",
                              episodes_per_request=4, opponents="pool", pool_prob=1.0)
    w = RolloutWorker(cfg, info, index=0)
    snapshot = {k: v.clone() for k, v in w.policy.state_dict().items()}
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        rollout = w.collect(0, w.policy.state_dict(), (7, snapshot, [7]))
    assert set(w.snapshots) == {7}
    tr = rollout.trajectories["shared"]
    valid, ends = tr["valid"], tr["terminated"] & tr["valid"]
    # Every game has one learning seat: per copy 4 games, each with one seat's rows valid and ending.
    assert torch.equal(ends.sum(dim=(0, 2)), torch.full((16,), 4))
    assert rollout.episode_returns.numel() == 16 * 4 and set(rollout.episode_returns.tolist()) <= {-1.0, 0.0, 1.0}
    assert torch.equal(rollout.episode_lengths.sum(), valid.sum())
    # Both seats are played by the snapshot in some games (a fair draw), and its seat never trains.
    learned = ends.sum(dim=(0, 1))
    assert learned.sum() == 64 and learned.min() >= 16
    # The next request without an opponent: self-play again, both seats learn in every game.
    plain = w.collect(0, None).trajectories["shared"]
    assert torch.equal((plain["terminated"] & plain["valid"]).sum(dim=(0, 2)), torch.full((16,), 8))


def test_a_learning_seat_against_a_snapshot_is_recorded_as_pettingzoos_own_loop_plays_it():
    """Games with one seat frozen: the learning seat's moves, rewards and ends match a replay of the whole game
    (its moves and the snapshot's, read from the rows the snapshot played) in PettingZoo's agent_iter() loop."""
    from envs import describe
    from marl.actor import RolloutWorker
    from marl.config import Config

    info = describe(TICTACTOE)
    cfg = dataclasses.replace(Config(), env=TICTACTOE, agents=2, envs_per_actor=8, rollout="episodes",
                              episodes_per_request=3, opponents="pool", pool_prob=1.0)
    w = RolloutWorker(cfg, info, index=0)
    snapshot = {k: v * 3 for k, v in w.policy.state_dict().items()}  # another policy than the learning one
    tr = w.collect(0, w.policy.state_dict(), (1, snapshot, [1])).trajectories["shared"]
    valid, actions, board = tr["valid"], tr["actions"], tr["obs"]["observation"]
    checked = 0
    for c in range(8):
        t, games = 0, 0
        while games < 3:  # each copy's first 3 games are its learning seat's quota
            if not valid[t, c].any() and board[t, c].sum() > 0:
                t += 1  # the autoreset step after a game
                continue
            moves: list[int] = []
            while True:  # a game's moves alternate seats from its first row; it ends where the replay ends
                moves.append(int(actions[t + len(moves), c, len(moves) % 2]))
                try:
                    ref = reference_game(moves)
                    break
                except (AssertionError, IndexError):
                    continue
            rows = [(t + k, k % 2) for k in range(len(moves)) if valid[t + k, c, k % 2]]
            seat = rows[0][1]
            assert all(s == seat for _, s in rows) and not valid[t:t + len(moves), c, 1 - seat].any()
            agent = info.agent_ids[seat]
            assert len(rows) == len(ref[agent])
            for (r, _), (obs, move, reward, ended) in zip(rows, ref[agent]):
                assert np.array_equal(board[r, c, seat].numpy(), obs) and int(actions[r, c, seat]) == move
                assert float(tr["rewards"][r, c, seat]) == reward and bool(tr["terminated"][r, c, seat]) == ended
            checked, games = checked + 1, games + 1
            t += len(moves)
    assert checked == 24


def test_a_history_pool_is_a_uniform_sample_of_every_snapshot_taken():
    """--pool-keep history against its definition: after n snapshots, each is in the pool with probability
    size / n (reservoir sampling); --pool-keep latest holds the newest `size`."""
    from marl.opponents import OpponentPool

    size, n, trials = 4, 20, 3000
    counts = torch.zeros(n)
    for trial in range(trials):
        pool = OpponentPool(size, seed=trial, keep="history")
        for i in range(n):
            pool.add(10 * i, {"w": torch.tensor(float(i))})
        assert len(pool.ids) == size and pool.ids == sorted(pool.ids)
        assert all(int(w["w"]) == i for i, _, w in pool.snapshots)  # each id keeps its own weights
        counts[pool.ids] += 1
    # Binomial(3000, 0.2) per id: standard deviation 22 around 600; 5 of them is 110.
    assert bool(((counts - trials * size / n).abs() < 110).all()), counts
    latest = OpponentPool(size, seed=0)
    for i in range(n):
        latest.add(10 * i, {"w": torch.tensor(float(i))})
    assert latest.ids == list(range(n - size, n))


def test_self_play_with_a_pool_keeps_it_in_checkpoints_and_evaluates_against_it(train):
    import torch as t

    args = ["--config", str(ROOT / "configs" / "tictactoe.toml"), "--opponents", "pool", "--snapshot-every", "4",
            "--pool-size", "3", "--pool-keep", "latest", "--eval-every", "6", "--eval-episodes", "20", "--checkpoint-every", "6"]
    r = train(*args, "--total-steps", "12000", "--run-name", "pool")
    assert r.returncode == 0, r.stderr[-3000:]
    run = train.logdir / "pool"
    newest = sorted((run / "checkpoints").iterdir())[-1]
    iterations = int(newest.name.split("_")[1])
    pool = t.load(newest / "trainer.pt", weights_only=True)["opponents"]
    made = 1 + iterations // 4  # the initial weights, then one every 4 iterations
    assert pool["ids"] == list(range(made - 3, made)) and pool["iterations"] == [4 * i for i in range(made - 3, made)]
    scalars = read_scalars(run)
    assert len(scalars["eval/win_rate_vs_pool"]) == iterations // 6
    assert 0 < sum(v for _, v in scalars["charts/episodic_return"]) / len(scalars["charts/episodic_return"]) <= 1
    # A resume goes on with the pool, its ids counting on.
    r = train("--resume", str(run), "--total-steps", "20000", logdir=False)
    assert r.returncode == 0, r.stderr[-3000:]
    newest = sorted((run / "checkpoints").iterdir())[-1]
    later = t.load(newest / "trainer.pt", weights_only=True)["opponents"]
    assert later["ids"][0] > pool["ids"][0] and later["next_id"] == 1 + int(newest.name.split("_")[1]) // 4
    e = evaluate_cli([str(run), "--opponent", "pool", "--episodes", "30",
                        "--json"], timeout=300)
    assert e.returncode == 0, e.stderr[-2000:]
    seats = json.loads(e.stdout)["seats"]
    assert seats["player_1"]["games"] == seats["player_2"]["games"] == 30  # 10 games against each of 3 snapshots
    # --pool-ids: only the snapshots named (the newest one here: 10 games per seat against it alone).
    newest_id = later["ids"][-1]
    e = evaluate_cli([str(run), "--opponent", "pool", "--pool-ids", str(newest_id),
                        "--episodes", "10", "--json"], timeout=300)
    assert e.returncode == 0, e.stderr[-2000:]
    assert json.loads(e.stdout)["seats"]["player_1"]["games"] == 10
    gone = evaluate_cli([str(run), "--opponent", "pool", "--pool-ids", "0-1"], timeout=300)
    assert gone.returncode == 2 and "snapshot 0 is not in" in gone.stderr and "Traceback" not in gone.stderr


def test_pool_prob_zero_keeps_snapshots_and_trains_as_self_play(train):
    """--pool-prob 0: the pool is kept (to measure the policy against its early selves later) and never
    played, so the run is self-play's, step for step; the lookahead player is an opponent for evaluation."""
    common = ["--config", str(ROOT / "configs" / "tictactoe.toml"), "--total-steps", "6000", "--snapshot-every", "2"]
    r = train(*common, "--opponents", "self", "--run-name", "self")
    assert r.returncode == 0, r.stderr[-3000:]
    r = train(*common, "--opponents", "pool", "--pool-prob", "0", "--pool-size", "100", "--run-name", "kept")
    assert r.returncode == 0, r.stderr[-3000:]
    a, b = read_scalars(train.logdir / "self"), read_scalars(train.logdir / "kept")
    assert a["charts/episodic_return"] == b["charts/episodic_return"] and a["losses/entropy"] == b["losses/entropy"]
    newest = sorted((train.logdir / "kept" / "checkpoints").iterdir())[-1]
    pool = torch.load(newest / "trainer.pt", weights_only=True)["opponents"]
    assert pool["ids"] == list(range(1 + int(newest.name.split("_")[1]) // 2))  # every snapshot, the initial one first
    e = evaluate_cli([str(train.logdir / "kept"), "--opponent", "lookahead",
                        "--episodes", "20", "--json"], timeout=300)
    assert e.returncode == 0, e.stderr[-2000:]
    seats = json.loads(e.stdout)["seats"]
    assert all(s["games"] == 20 and abs(s["win"] + s["draw"] + s["loss"] - 1) < 1e-9 for s in seats.values())
    bad = evaluate_cli([str(train.logdir / "kept"), "--pool-ids", "0"], timeout=300)
    assert bad.returncode == 2 and "add --opponent pool" in bad.stderr


def test_gae_where_only_autoreset_steps_are_invalid_takes_one_pass_with_the_loops_arithmetic():
    from marl.algorithms.gae import gae

    g = torch.Generator().manual_seed(1)
    T, S = 16, 5
    rewards, values = torch.randn(T, S, generator=g), torch.randn(T, S, generator=g)
    terminated = torch.rand(T, S, generator=g) < 0.15
    truncated = (torch.rand(T, S, generator=g) < 0.1) & ~terminated
    bootstrap = torch.where(truncated, torch.randn(T, S, generator=g), 0.0)
    done = terminated | truncated
    valid = torch.ones(T, S, dtype=torch.bool)
    valid[1:] = ~done[:-1]  # NEXT_STEP autoreset: the step after an end is no transition
    rewards, done = torch.where(valid, rewards, 0.0), done & valid
    terminated, truncated = terminated & valid, truncated & valid
    assert not valid.all() and bool(done.any())
    next_value = torch.randn(S, generator=g)
    args = (0.97, 0.9)
    fast = gae(rewards, values, next_value, terminated, truncated, bootstrap, *args, valid)
    # One more slot in which an agent sits a step out mid-episode sends the same slots through the loop.
    waits = torch.ones(T, 1, dtype=torch.bool)
    waits[5] = False
    extra = lambda x, fill: torch.cat([x, torch.full((T, 1), fill, dtype=x.dtype)], dim=1)  # noqa: E731
    slow = gae(extra(rewards, 0.0), extra(values, 0.5), torch.cat([next_value, torch.zeros(1)]),
               extra(terminated, False), extra(truncated, False), extra(bootstrap, 0.0), *args,
               torch.cat([valid, waits], dim=1))
    # The loop is checked against the definition above; the one pass must equal it on every valid step.
    for f, s in zip(fast, slow):
        assert torch.equal(f[valid], s[:, :S][valid])
