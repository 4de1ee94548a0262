"""Cooperative navigation: N agents must cover N landmarks without bumping into each other.

A first-party, pure-numpy rewrite of MPE's `simple_spread` (Lowe et al. 2017, "Multi-Agent
Actor-Critic for Mixed Cooperative-Competitive Environments"), exposed through PettingZoo's
Parallel API. marl loads it as `--env pettingzoo:envs.coop_nav`, i.e.
`importlib.import_module("envs.coop_nav").parallel_env(**env_kwargs)`.

World
    A 2-D box [-1, 1]^2 with `n_agents` agents (discs of radius `agent_radius`, default 0.15, MPE's
    agent size) and as many landmarks (points). At reset, agent and landmark positions are drawn
    independently and uniformly from the box, agent velocities are zero (as in MPE; agents may
    start overlapping). `reset(options={"agent_pos": (N, 2), "landmark_pos": (N, 2)})` places
    them instead (either key alone is fine; other option keys are ignored).

Dynamics (every step, for all agents at once)
    Actions are Discrete(5): 0 no-op, 1 +x, 2 -x, 3 +y, 4 -y. The action is a unit force
    direction u, scaled by ACCEL = 5.0 (MPE's default sensitivity, unit mass):
        v <- (1 - DAMPING) * v + ACCEL * u * DT          DAMPING = 0.25, DT = 0.1
        v <- v * min(1, MAX_SPEED / |v|)                   MAX_SPEED = 1.0
        p <- p + v * DT
        p <- clip(p, -1, 1); a velocity component that pushed into a wall is set to 0.
    Agents do not push each other (no contact forces); collisions only cost reward.
    The episode truncates after `max_cycles` steps (default 25, MPE's); it never terminates.

Reward (shared: every agent gets the same number, every step, computed after the move)
    r = - sum_{l in landmarks} min_{i in agents} ||x_l - p_i||
        - collision_penalty * #{ (i, j) : i < j, ||p_i - p_j|| < 2 * agent_radius }
    with collision_penalty = 1.0 by default (MPE's). The first term needs coordination: it is
    only near 0 when each landmark has its own agent; two agents on one landmark leave another
    uncovered, and parking side by side on one landmark is also a collision.

Observation of agent i (float32 Box, flat, 4N + 2 values, in this order)
    [ v_i (2), p_i (2),
      x_l - p_i for l = 0..N-1 (2N),
      p_j - p_i for j = 0..N-1, j != i, in index order (2(N-1)) ]
    Bounds: |v| <= MAX_SPEED, |p| <= 1, relative positions in [-2, 2] (positions are clipped).

Global state `state()` (float32, 6N values; `state_space` is its Box)
    [ p_0 .. p_{N-1} (2N), v_0 .. v_{N-1} (2N), x_0 .. x_{N-1} (2N) ]

What "solved" means, roughly: with 3 agents and 25 steps (team return = any one agent's return,
mean over reset seeds 0..199), uniform random actions score about -56 and always-no-op about -55;
the greedy fixed-assignment heuristic in tests/test_coop_nav.py about -29, of which about -5.5 is
collisions, and it ends episodes at about -0.25 per step (landmarks covered). A good learned policy
beats random clearly and reaches or passes the heuristic: it can choose a better assignment than
agent i -> landmark i, and avoid the collisions that crossing paths cause.

Why these choices: MPE's constants, so that returns compare roughly with published simple_spread
numbers (which also count communication and let agents wander off; ours cannot). Positions are
clipped to the box so the observation space is bounded and 25-step episodes are not wasted on
agents flying away. Discrete actions because marl's policies handle Discrete best and MPE's
default is discrete. No contact forces keeps the step a few vectorised numpy lines.
"""

from __future__ import annotations

import numpy as np
from gymnasium import spaces

from envs import draw
from envs.protocol import AgentCounts

ACCEL = 5.0
DAMPING = 0.25
DT = 0.1
MAX_SPEED = 1.0
# Action index -> unit force direction: no-op, +x, -x, +y, -y.
MOVES = np.array([[0.0, 0.0], [1.0, 0.0], [-1.0, 0.0], [0.0, 1.0], [0.0, -1.0]])
RENDER_SIZE = 400
AGENT_COLORS = [(66, 133, 244), (219, 68, 55), (244, 180, 0), (15, 157, 88), (171, 71, 188), (0, 172, 193)]


class CoopNavEnv(AgentCounts):
    """PettingZoo Parallel env of cooperative navigation; see the module docstring."""

    metadata = {"name": "coop_nav_v0", "is_parallelizable": True, "render_modes": ["rgb_array"], "render_fps": 10}

    def __init__(self, n_agents: int = 3, max_cycles: int = 25, collision_penalty: float = 1.0,
                 agent_radius: float = 0.15, render_mode: str | None = None):
        if int(n_agents) != n_agents or n_agents < 1:
            raise ValueError(f"coop_nav: n_agents must be an integer >= 1, got {n_agents!r}")
        if int(max_cycles) != max_cycles or max_cycles < 1:
            raise ValueError(f"coop_nav: max_cycles must be an integer >= 1, got {max_cycles!r}")
        if render_mode not in (None, "rgb_array"):
            raise ValueError(f"coop_nav: render_mode must be None or 'rgb_array', got {render_mode!r}")
        self.n = n = int(n_agents)
        self.max_cycles = int(max_cycles)  # a plain attribute: parallel_api_test overwrites it
        self.collision_penalty = float(collision_penalty)
        self.agent_radius = float(agent_radius)
        self.render_mode = render_mode
        self.possible_agents = [f"agent_{i}" for i in range(n)]
        self.agents: list[str] = []

        low = np.concatenate([np.full(2, -MAX_SPEED), np.full(2, -1.0), np.full(2 * n + 2 * (n - 1), -2.0)])
        obs_space = spaces.Box(low.astype(np.float32), -low.astype(np.float32), dtype=np.float32)
        # One object per agent, built once: PettingZoo wants the same object on every call.
        self._obs_spaces = {a: obs_space for a in self.possible_agents}
        self._act_spaces = {a: spaces.Discrete(len(MOVES)) for a in self.possible_agents}
        s_high = np.concatenate([np.full(2 * n, 1.0), np.full(2 * n, MAX_SPEED), np.full(2 * n, 1.0)])
        self.state_space = spaces.Box(-s_high.astype(np.float32), s_high.astype(np.float32), dtype=np.float32)

        self._rng = np.random.default_rng()
        self._t = 0
        self._others = ~np.eye(n, dtype=bool)      # mask picking j != i from an (N, N) table, row-major
        self._pairs = np.triu_indices(n, k=1)      # each unordered pair once
        self.agent_pos = np.zeros((n, 2))
        self.agent_vel = np.zeros((n, 2))
        self.landmark_pos = np.zeros((n, 2))

    # --- PettingZoo attributes -------------------------------------------------------------
    def observation_space(self, agent: str) -> spaces.Box:
        return self._obs_spaces[agent]

    def action_space(self, agent: str) -> spaces.Discrete:
        return self._act_spaces[agent]

    # --- episode ---------------------------------------------------------------------------
    def reset(self, seed: int | None = None, options: dict | None = None):
        if seed is not None:
            self._rng = np.random.default_rng(seed)  # seed=None keeps drawing from the same generator
        n = self.n
        self.agent_pos = self._rng.uniform(-1.0, 1.0, size=(n, 2))
        self.landmark_pos = self._rng.uniform(-1.0, 1.0, size=(n, 2))
        self.agent_vel = np.zeros((n, 2))
        options = options or {}
        for key in ("agent_pos", "landmark_pos"):
            if key in options:
                value = np.array(options[key], dtype=np.float64)
                if value.shape != (n, 2):
                    raise ValueError(f"coop_nav: options[{key!r}] must have shape ({n}, 2), got {value.shape}")
                setattr(self, key, np.clip(value, -1.0, 1.0))
        self._t = 0
        self.agents = list(self.possible_agents)
        obs = self._observations()
        return {a: obs[i] for i, a in enumerate(self.agents)}, {a: {} for a in self.agents}

    def step(self, actions: dict):
        if not self.agents:
            raise RuntimeError("coop_nav: step() after the episode ended; call reset() first")
        act = np.array([actions[a] for a in self.possible_agents]).astype(np.int64, copy=False).reshape(self.n)
        if np.any((act < 0) | (act >= len(MOVES))):
            raise ValueError(f"coop_nav: actions must be in 0..{len(MOVES) - 1}, got {act.tolist()}")

        vel = (1.0 - DAMPING) * self.agent_vel + ACCEL * MOVES[act] * DT
        speed = np.linalg.norm(vel, axis=1, keepdims=True)
        vel *= np.minimum(1.0, MAX_SPEED / np.maximum(speed, 1e-12))
        pos = self.agent_pos + vel * DT
        clipped = np.clip(pos, -1.0, 1.0)
        vel[clipped != pos] = 0.0  # hit a wall: that component stops
        self.agent_pos, self.agent_vel = clipped, vel
        self._t += 1

        reward = float(self._team_reward())
        truncated = self._t >= self.max_cycles
        obs = self._observations()
        agents = self.agents
        result = ({a: obs[i] for i, a in enumerate(agents)},
                  dict.fromkeys(agents, reward),
                  dict.fromkeys(agents, False),
                  dict.fromkeys(agents, truncated),
                  {a: {} for a in agents})
        if truncated:
            self.agents = []
        return result

    def _team_reward(self) -> float:
        pos = self.agent_pos
        lm_to_agent = np.linalg.norm(self.landmark_pos[:, None, :] - pos[None, :, :], axis=-1)  # (L, N)
        agent_dist = np.linalg.norm(pos[:, None, :] - pos[None, :, :], axis=-1)                 # (N, N)
        collisions = np.count_nonzero(agent_dist[self._pairs] < 2.0 * self.agent_radius)
        return -lm_to_agent.min(axis=1).sum() - self.collision_penalty * collisions

    def _observations(self) -> np.ndarray:
        """(N, 4N + 2) float32, row i is agent i's observation."""
        n, pos = self.n, self.agent_pos
        rel_lm = self.landmark_pos[None, :, :] - pos[:, None, :]               # (N, L, 2): x_l - p_i
        rel_ag = (pos[None, :, :] - pos[:, None, :])[self._others]             # (N(N-1), 2): p_j - p_i
        return np.concatenate([self.agent_vel, pos, rel_lm.reshape(n, 2 * n),
                               rel_ag.reshape(n, 2 * (n - 1))], axis=1).astype(np.float32)

    def state(self) -> np.ndarray:
        return np.concatenate([self.agent_pos.ravel(), self.agent_vel.ravel(),
                               self.landmark_pos.ravel()]).astype(np.float32)

    def render(self) -> np.ndarray | None:
        """render_mode="rgb_array": a 400x400 top view of the box, landmarks as black dots, agents as
        coloured discs of their true radius (drawn in index order: a later agent covers an earlier one)."""
        if self.render_mode != "rgb_array":
            return None
        size = RENDER_SIZE
        img = draw.canvas(size, size, (235, 235, 235))

        def px(p):  # world [-1, 1]^2, y up -> pixels, y down
            return (p[0] + 1.0) / 2.0 * size, (1.0 - p[1]) / 2.0 * size

        for lm in self.landmark_pos:
            draw.disc(img, *px(lm), 0.04 * size / 2.0, (20, 20, 20))
        for i, p in enumerate(self.agent_pos):
            draw.disc(img, *px(p), self.agent_radius * size / 2.0, AGENT_COLORS[i % len(AGENT_COLORS)])
        return img

    def close(self):
        pass


def parallel_env(**kwargs) -> CoopNavEnv:
    """PettingZoo-style factory: `envs.coop_nav.parallel_env(n_agents=3, max_cycles=25, ...)`."""
    return CoopNavEnv(**kwargs)
