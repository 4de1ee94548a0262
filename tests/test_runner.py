"""marl.runner's EnvRunner with the action sources and recorders that plug into it."""

import torch

from envs import describe, make_agent_batch
from marl.config import Config
from marl.policies import policy_specs
from marl.recorders import Recorder, ReturnsRecorder
from marl.runner import EnvRunner
from marl.sources import Act, LookaheadSource, RandomSource, SeatSource

TICTACTOE = "pettingzoo:pettingzoo.classic.tictactoe_v3"


def runner_for(env_id: str, agents: int, copies: int):
    info = describe(env_id, agents)
    specs = policy_specs(info, "shared", False, "local")
    env = make_agent_batch(info, copies, [list(s.agents) for s in specs])
    runner = EnvRunner(env, specs, copies, name=env_id)
    runner.reset(0)
    return info, specs, runner


class Legal(Recorder):
    """Whether every move a slot made while its step was real was legal."""

    def __init__(self):
        self.moves = self.illegal = 0
        self.pending = None

    def act(self, t, g, runner, a):
        self.pending = (runner.masks[g].gather(-1, a.action.unsqueeze(-1)).squeeze(-1).bool(), runner.active[g].clone())

    def step(self, t, g, r, term, trunc, valid, done):
        legal, active = self.pending
        self.moves += int(active.sum())
        self.illegal += int((active & ~legal).sum())


def test_quota_mode_gives_each_slot_exactly_its_episodes_and_a_custom_recorder_sees_each_move():
    info, specs, runner = runner_for(TICTACTOE, 2, 4)
    returns, legal = ReturnsRecorder(specs), Legal()
    runner.run(LookaheadSource(TICTACTOE, 0), [returns, legal], quota=3)
    assert len(returns.finished) == 4 * 2 * 3  # 4 copies x 2 seats x 3 games
    assert {r for _, r, _ in returns.finished} <= {-1.0, 0.0, 1.0}
    assert legal.moves > 4 * 3 * 5 and legal.illegal == 0


class Counting:
    """A source that counts how often it is asked, acting as RandomSource does."""

    def __init__(self, source):
        self.source, self.calls = source, 0

    def act(self, g, obs, mask, fresh, state) -> Act:
        self.calls += 1
        return self.source.act(g, obs, mask, fresh, state)


def test_seats_are_played_by_the_other_source_which_is_asked_only_when_it_holds_one():
    info, specs, runner = runner_for("CartPole-v1", 3, 2)
    g0, g1 = torch.Generator().manual_seed(0), torch.Generator().manual_seed(1)
    base, other = Counting(RandomSource(specs, 2, g0)), Counting(RandomSource(specs, 2, g1))
    seats = torch.tensor([[False, True, False], [False, False, False]])
    held = {"seats": seats}
    sent = []
    step = runner.env.step
    runner.env.step = lambda actions: (sent.append(actions[0].copy()), step(actions))[1]
    source = SeatSource(base, other, lambda g: held["seats"])
    runner.run(source, [], num_steps=5)
    assert base.calls == other.calls == 5
    # The other source's moves went to its seat only: replay both streams.
    r0, r1 = RandomSource(specs, 2, torch.Generator().manual_seed(0)), RandomSource(specs, 2, torch.Generator().manual_seed(1))
    obs = runner.obs[0]
    for actions in sent:
        a, b = r0.act(0, obs, None, None, None).env, r1.act(0, obs, None, None, None).env
        assert torch.equal(torch.from_numpy(actions), torch.where(seats, b, a))
    held["seats"] = torch.zeros_like(seats)
    runner.run(source, [], num_steps=3)
    assert base.calls == 8 and other.calls == 5


def test_foreign_seats_neither_count_returns_nor_end_episodes_but_fill_the_quota():
    info, specs, runner = runner_for(TICTACTOE, 2, 3)
    returns = ReturnsRecorder(specs)
    theirs = torch.tensor([[True, False]] * 3)  # seat 0 is someone else's in every game
    runner.run(RandomSource(specs, 3, torch.Generator().manual_seed(0)), [returns], quota=2, foreign=lambda g: theirs)
    assert len(returns.finished) == 3 * 2 and all(agent == 1 for agent, _, _ in returns.finished)
