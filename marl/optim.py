"""Adam for marl's learners: torch.optim.Adam without the guards that keep torch.compile out of it.

torch.optim wraps `add_param_group`, `zero_grad`, `state_dict` and `load_state_dict` in
`torch._disable_dynamo` and `step` in a wrapper that calls `torch._dynamo.graph_break()`; the first
call of either imports torch._dynamo (with sympy: 1-2.3 s on a 2-core machine, more than the rest of
a learner's start-up together). Those guards only matter under torch.compile, which marl never uses,
so this class calls the same methods undecorated: the same arithmetic, the same state dicts, one
fused kernel as before. A learner of one fp32 rank (the default run) then never imports
torch._dynamo (its checkpoints skip DCP's get_state_dict for the same reason: marl.checkpoint); a
sharded one does at once (FSDP2 makes its DTensor parameters under the guard).
"""

from __future__ import annotations

import inspect

import torch

# The undecorated methods, found once (not on every step).
_ADD_PARAM_GROUP, _ZERO_GRAD, _STATE_DICT, _LOAD_STATE_DICT = (
    inspect.unwrap(f) for f in (torch.optim.Optimizer.add_param_group, torch.optim.Optimizer.zero_grad,
                                torch.optim.Optimizer.state_dict, torch.optim.Optimizer.load_state_dict))
_ADAM_STEP = inspect.unwrap(torch.optim.Adam.step)


class Adam(torch.optim.Adam):
    """torch.optim.Adam, fused, that never imports torch._dynamo (see the module's docstring).

    Algorithms (and users' own, see marl.algorithms.base) make their optimizers with it."""

    def __init__(self, params, lr: float, betas: tuple[float, float] = (0.9, 0.999), eps: float = 1e-8,
                 weight_decay: float = 0.0):
        # fused: one kernel for all (DTensor) parameters; the per-parameter loop costs more than the math here.
        super().__init__(params, lr=lr, betas=betas, eps=eps, weight_decay=weight_decay, fused=True)

    def add_param_group(self, param_group: dict) -> None:
        _ADD_PARAM_GROUP(self, param_group)

    def zero_grad(self, set_to_none: bool = True) -> None:
        _ZERO_GRAD(self, set_to_none)

    def state_dict(self) -> dict:
        return _STATE_DICT(self)

    def load_state_dict(self, state_dict: dict) -> None:
        _LOAD_STATE_DICT(self, state_dict)

    def step(self, closure=None):
        # What the undecorated step's wrapper does in eager mode (differentiable=False): no autograd.
        with torch.no_grad():
            return _ADAM_STEP(self, closure)
