"""VDN (Sunehag et al. 2018, "Value-Decomposition Networks For Cooperative Multi-Agent Learning"):
the team's Q is the sum of the agents' Qs of their own observations and actions, learnt end to end
on the team's reward (the mean of the agents': the shared reward where they all get it), so that
every agent acting greedily on its own Q acts greedily for the team. Transitions are joint (one per
env step, every agent in it: marl.replay.team_transitions); the agents act epsilon-greedily on their
own Qs, as DQN's do.
Double Q-learning and the n-step target as DQN's, with the mixer's target copy on the next step;
the squared TD error of pymarl (Rashid et al. 2018's code)."""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import nn

from marl.algorithms.dqn import DQN, unroll
from marl.distributions.categorical import masked
from marl.models.mixers import VDNMixer
from marl.models.training_nets import TrainingNets
from marl.optim import Adam
from marl.replay import nstep_windows


def chosen(q: torch.Tensor, actions: torch.Tensor) -> torch.Tensor:
    """Q [..., A] of the actions [...]."""
    return q.gather(-1, actions.long().unsqueeze(-1)).squeeze(-1)


class VDN(DQN):
    name = "vdn"
    team = True  # one transition per env step with every agent in it

    def mixer(self, specs) -> nn.Module:
        return VDNMixer()

    def networks(self, policy, specs) -> TrainingNets:
        return TrainingNets(policy, {"mixer": self.mixer(specs)}, targets=("policy", "mixer"))

    def optimizers(self, nets: TrainingNets) -> dict[str, torch.optim.Optimizer]:
        params = [*nets.policy.parameters(), *nets.others["mixer"].parameters()]
        return {"q": Adam(params, lr=self.cfg.learning_rate)}

    def loss(self, nets: TrainingNets, batch: dict[str, dict], phase: str) -> tuple[torch.Tensor, dict[str, torch.Tensor]]:
        """(Q_tot(s, a) - y)^2 averaged, y = G + gamma^n Q'_tot(s', a*), a* each agent's own argmax
        (under its online network with double Q); the agents in the policies' order."""
        b = batch["team"]
        if any(nets.state_size(name) for name in b["policies"]):
            return self.sequence_loss(nets, b)
        taken, best = [], []
        for name, p in b["policies"].items():
            online, target = nets.policies[name], nets.targets["policy"].policies[name]
            R, n = p["actions"].shape[:2]
            flat = lambda obs: {k: v.flatten(0, 1) for k, v in obs.items()}  # noqa: E731
            q, next_online = self.online_q(online, flat(p["obs"]), flat(p["next_obs"]))
            taken.append(chosen(q.view(R, n, -1), p["actions"]))
            with torch.no_grad():
                next_target = target.q_values(flat(p["next_obs"])).view(R, n, -1)
                chooser = next_target if next_online is None else next_online.view(R, n, -1)
                best.append(chosen(next_target, masked(chooser, p.get("next_action_mask")).argmax(-1)))
        qs = torch.cat(taken, dim=-1)
        q_tot = nets.others["mixer"](qs, b.get("state"))
        with torch.no_grad():
            y = b["returns"] + b["discounts"] * nets.targets["mixer"](torch.cat(best, dim=-1), b.get("next_state"))
        loss = F.mse_loss(q_tot, y)
        return loss, {"td_loss": loss.detach(), "q_values": qs.detach().mean(), "q_tot": q_tot.detach().mean()}

    def sequence_loss(self, nets: TrainingNets, b: dict) -> tuple[torch.Tensor, dict[str, torch.Tensor]]:
        """Recurrent agents (pymarl's GRU agents) on joint sequences (marl.replay.team_sequences), each
        replayed from its stored state: the same loss over the sequences' valid team steps, each
        step's target bootstrapping from row t + m of the unrolled sequence."""
        tm = lambda x: x.transpose(0, 1)  # noqa: E731 - [N, L, ...] -> time-major
        ret, disc, t_next = nstep_windows(tm(b["rewards"]), tm(b["terminated"]), tm(b["truncated"]), self.cfg.n_step,
                                          self.cfg.gamma)
        L, N = ret.shape
        taken, best = [], []
        for name, p in b["policies"].items():
            n = p["actions"].shape[-1]
            agents = lambda x: tm(x).flatten(1, 2)  # noqa: E731 - [N, L, n, ...] -> [L, N * n, ...]
            mask = p.get("action_mask")
            q, greedy = unroll(nets.policies[name], nets.targets["policy"].policies[name],
                               {k: agents(v) for k, v in p["obs"].items()}, agents(p["starts"]), p["core_state"].flatten(0, 1),
                               agents(p["actions"]), None if mask is None else agents(mask), self.cfg.double_q)
            taken.append(q.view(L, N, n))
            best.append(greedy.view(L + 1, N, n).gather(0, t_next.unsqueeze(-1).expand(L, N, n)))
        qs = torch.cat(taken, dim=-1)
        state = tm(b["state"]) if "state" in b else None
        rows = lambda x: x.flatten(0, 1)  # noqa: E731 - [L, N, ...] -> [L * N, ...]
        q_tot = nets.others["mixer"](rows(qs), None if state is None else rows(state[:L])).view(L, N)
        with torch.no_grad():
            next_state = None if state is None else state.gather(0, t_next.unsqueeze(-1).expand(L, N, state.shape[-1]))
            y = ret + disc * nets.targets["mixer"](rows(torch.cat(best, dim=-1)),
                                                   None if next_state is None else rows(next_state)).view(L, N)
        valid = tm(b["valid"])
        loss = F.mse_loss(q_tot[valid], y[valid])
        return loss, {"td_loss": loss.detach(), "q_values": qs.detach()[valid].mean(), "q_tot": q_tot.detach()[valid].mean()}
