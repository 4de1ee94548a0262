"""Turn-based games: a PettingZoo AEC env (`pettingzoo.classic`: tic-tac-toe, connect four, ...)
in the Parallel form the batches step, one move at a time.

`TurnBased(aec_env)` speaks PettingZoo's Parallel API with one twist that the actors rely on:
`agents` holds only the agent whose turn it is, so every other agent is inactive for that step
(the mask that departed agents already use), and `step({agent: action})` plays that one move.
What a step returns:

- rewards for EVERY agent, each its share of `env.rewards` over this step (the move, and the
  dead agents' `step(None)` after it when the game ends). An agent's rewards between two of its
  moves add up to what AEC's `last()` gives it at its next move: its accumulated reward since its
  own last action. A waiting agent's reward belongs to its open transition (the actor adds it to
  the agent's last move, see marl/actor.py);
- terminations and truncations for every agent that left in this step, with its final
  observation: when the game ends, every seat gets its final reward and its done flag, the
  loser's -1 included, though it did not move;
- the observation of the agent to move next.

Rewards in PettingZoo's classic games are zero-sum +1 / -1 at the end (0 for a draw).
"""

from __future__ import annotations

from typing import Any


def is_aec(env: Any) -> bool:
    from pettingzoo.utils.env import AECEnv

    return isinstance(env, AECEnv)


class TurnBased:
    """An AEC env as a Parallel env whose `agents` is the agent to move (see the module docstring)."""

    def __init__(self, aec):
        self.aec = aec
        self.possible_agents = list(aec.possible_agents)
        self.agents: list[str] = []
        self.metadata = {**getattr(aec, "metadata", {}), "turn_based": True}
        self.render_mode = getattr(aec, "render_mode", None)

    def observation_space(self, agent: str):
        return self.aec.observation_space(agent)

    def action_space(self, agent: str):
        return self.aec.action_space(agent)

    def _to_move(self) -> tuple[dict, dict]:
        """The next agent's observation and info; dead agents that AEC selects are stepped out first."""
        if not self.aec.agents:
            self.agents = []
            return {}, {}
        agent = self.aec.agent_selection
        self.agents = [agent]
        return {agent: self.aec.observe(agent)}, {agent: dict(self.aec.infos.get(agent, {}))}

    def reset(self, seed: int | None = None, options: dict | None = None):
        self.aec.reset(seed=seed, options=options)
        return self._to_move()

    def step(self, actions: dict):
        if not self.agents:
            raise RuntimeError("step() after the game ended; call reset() first")
        aec, mover = self.aec, self.agents[0]
        rewards = dict.fromkeys(self.possible_agents, 0.0)
        terms: dict[str, bool] = {}
        truncs: dict[str, bool] = {}
        final_obs: dict[str, Any] = {}
        infos: dict[str, dict] = {}

        def collect():
            for a, r in aec.rewards.items():
                rewards[a] += float(r)

        aec.step(actions[mover])
        collect()
        # Agents whose game is over leave AEC only when stepped with None, each in its turn: step them
        # now (their rewards still count), keeping each one's final observation and flags.
        while aec.agents and (aec.terminations[aec.agent_selection] or aec.truncations[aec.agent_selection]):
            a = aec.agent_selection
            final_obs[a] = aec.observe(a)
            terms[a], truncs[a] = bool(aec.terminations[a]), bool(aec.truncations[a])
            infos[a] = dict(aec.infos.get(a, {}))
            aec.step(None)
            collect()
        obs, next_infos = self._to_move()  # the mover, if the game goes on, waits with its transition open
        return ({**final_obs, **obs}, rewards, terms, truncs, {**infos, **next_infos})

    def state(self):
        return self.aec.state()

    def render(self):
        return self.aec.render()

    def close(self):
        self.aec.close()
