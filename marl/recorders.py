"""What an `EnvRunner` (marl.runner) keeps of the steps it takes: the hooks are listed there; a
recorder overrides those it needs. Trajectories for the learner, finished episodes' returns, frames.
"""

from __future__ import annotations

import torch

from marl.specs import allocate, step_fields, tree_map


class Recorder:
    def act(self, t, g, runner, a) -> None: ...
    def step(self, t, g, r, term, trunc, valid, done) -> None: ...
    def wait(self, t, g, rows, c, j, r, term, trunc) -> None: ...
    def episodes(self, g, done, returns, lengths) -> None: ...
    def stepped(self) -> None: ...


class ReturnsRecorder(Recorder):
    """Every finished episode as (agent index, return, length), in the order they end."""

    def __init__(self, specs):
        self.specs = specs
        self.finished: list[tuple[int, float, int]] = []

    def episodes(self, g, done, returns, lengths) -> None:
        agents = self.specs[g].agents
        for (_, j), ret, length in zip(done.nonzero().tolist(), returns.tolist(), lengths.tolist()):
            self.finished.append((agents[j], ret, length))

    def by_agent(self, agent_ids) -> dict[str, list[float]]:
        out: dict[str, list[float]] = {a: [] for a in agent_ids}
        for agent, ret, _ in self.finished:
            out[agent_ids[agent]].append(ret)
        return out


class TrajectoryRecorder(Recorder):
    """Each policy's steps into the buffers its spec allocates (marl.specs.step_fields), [T, copies, n_g],
    grown as needed; the rewards and ends of waiting slots added to the row of their latest move.
    Kept across rollouts: the buffers, and with `norm_reward` each slot's discounted return so far
    (G = gamma * G + r, restarted after each episode; `reset` restarts it with the envs)."""

    def __init__(self, specs, copies: int, state_sizes: list[int], seq_len: int, norm_reward: bool, gamma: float,
                 device: torch.device | str = "cpu"):
        self.specs, self.copies, self.state_sizes = specs, copies, state_sizes
        self.seq_len, self.norm_reward, self.gamma = seq_len, norm_reward, gamma
        self.device = device  # the env's and the policy's: the buffers fill where the steps are
        self.buffers: list[dict] = [{} for _ in specs]
        self.capacity = 0
        self.reset()

    def reset(self) -> None:
        self.discounted = [torch.zeros((self.copies, len(s.agents)), dtype=torch.float64, device=self.device)
                           for s in self.specs]

    def begin(self, steps: int) -> None:
        """A new rollout: room for `steps` steps; no chunk states, no late truncations yet."""
        self._grow(steps)
        self.chunk_states: list[list[torch.Tensor]] = [[] for _ in self.specs]
        # (rows, copies, agents) of truncations that reached waiting slots, and the step whose value bootstraps them.
        self.late_truncations: list[list[tuple[torch.Tensor, int]]] = [[] for _ in self.specs]

    def _grow(self, steps: int) -> None:
        """(Re)allocate the buffers for at least `steps` steps, keeping what they hold."""
        if steps <= self.capacity:
            return
        cap = max(steps, 2 * self.capacity)
        for g, spec in enumerate(self.specs):
            new = allocate(step_fields(spec, self.norm_reward), (cap, self.copies, len(spec.agents)), self.device)
            if self.capacity:
                tree_map(lambda pair: pair[0][: self.capacity].copy_(pair[1]), _zip(new, self.buffers[g]))
            self.buffers[g] = new
        self.capacity = cap

    def act(self, t, g, runner, a) -> None:
        if g == 0:
            self._grow(t + 1)
        B = self.buffers[g]
        if self.state_sizes[g] and (t % self.seq_len == 0 if self.seq_len else t == 0):
            # The state a chunk starts from, zeroed where an episode starts: the learner replays from it.
            self.chunk_states[g].append(torch.where(runner.fresh[g].unsqueeze(-1), 0.0, a.core))
        for name, x in runner.obs[g].items():
            B["obs"][name][t] = x
        B["actions"][t], B["values"][t], B["logprobs"][t] = a.action, a.value, a.logprob
        if self.specs[g].mask:
            B["action_mask"][t] = runner.masks[g]
        if a.critic is not None:
            B["state"][t] = a.critic

    def step(self, t, g, r, term, trunc, valid, done) -> None:
        B = self.buffers[g]
        B["rewards"][t] = r
        B["terminated"][t], B["truncated"][t], B["valid"][t] = term, trunc, valid
        if self.norm_reward:
            G = self.discounted[g] * self.gamma + r * valid
            B["discounted_return"][t] = G
            self.discounted[g] = G.masked_fill(done, 0.0)

    def wait(self, t, g, rows, c, j, r, term, trunc) -> None:
        B = self.buffers[g]
        B["rewards"][rows, c, j] += r
        if self.norm_reward:  # that row's discounted return, and what follows from it, grow by the reward
            B["discounted_return"][rows, c, j] += r
            self.discounted[g][c, j] += r
        B["terminated"][rows, c, j] |= term
        late = trunc & ~term
        B["truncated"][rows, c, j] |= late
        if bool(late.any()):  # bootstrapped from the final observation, which the step after t sees
            self.late_truncations[g].append((torch.stack([rows[late], c[late], j[late]]), t + 1))
        if self.norm_reward:
            ended = term | trunc
            self.discounted[g][c[ended], j[ended]] = 0.0

    def trajectory(self, g: int, steps: int, next_value: torch.Tensor) -> dict:
        """Policy g's first `steps` steps (copies), with the bootstrap value of each truncated step:
        with NEXT_STEP autoreset, the value computed on the step after a truncation is V(final obs)."""
        b = tree_map(lambda v: v[:steps].clone(), self.buffers[g])
        later = torch.cat([b["values"][1:], next_value.unsqueeze(0)])
        bootstrap = torch.where(b["truncated"], later, 0.0)
        after = torch.cat([b["values"], next_value.unsqueeze(0)])
        for (rows, c, j), step in self.late_truncations[g]:
            bootstrap[rows, c, j] = after[step, c, j]
        out = {**b, "bootstrap_value": bootstrap, "next_value": next_value}
        if self.state_sizes[g]:
            out["core_state"] = torch.stack(self.chunk_states[g])
        return out


class RenderError(Exception):
    """The env cannot give rgb_array frames; the message is one line."""


class FrameRecorder(Recorder):
    """The rendered env's frames, cut into whole episodes: the first frame of each is its reset's, then
    one per step, so an episode of L steps has L + 1 frames (envs' `render()`, `rendered_episode_over`).
    Call `grab()` once after the reset; the runner calls it after each step."""

    def __init__(self, env, episodes: int):
        self.env, self.wanted = env, episodes  # not `episodes`: that name is the runner's hook
        self.done: list[list] = []
        self.current: list = []

    @property
    def full(self) -> bool:
        return len(self.done) >= self.wanted

    def stepped(self) -> None:
        self.grab()

    def grab(self) -> None:
        if self.full:
            return
        try:
            frame = self.env.render()
        except Exception as e:  # noqa: BLE001 - each renderer fails its own way (MuJoCo without OpenGL, ...)
            raise RenderError(f"render() failed ({type(e).__name__}: {' '.join(str(e).split())})") from None
        if frame is None or getattr(frame, "ndim", 0) != 3:
            raise RenderError(f"render() gave {type(frame).__name__}, not an (H, W, 3) frame")
        self.current.append(frame)
        if self.env.rendered_episode_over:
            self.done.append(self.current)
            self.current = []


def _zip(a: dict, b: dict) -> dict:
    """Two nested dicts of the same shape as one of pairs."""
    return {k: _zip(a[k], b[k]) if isinstance(a[k], dict) else (a[k], b[k]) for k in a}
