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


def _plain(tensors: list[torch.Tensor]) -> bool:
    """Plain tensors (not DTensor shards) of one device and dtype: what the direct kernels below take."""
    first = tensors[0]
    return all(type(t) in (torch.Tensor, torch.nn.Parameter) and t.device == first.device and t.dtype == first.dtype
               for t in tensors)


def clip_grad_norm_(params: list[torch.Tensor], max_norm: float) -> torch.Tensor:
    """torch.nn.utils.clip_grad_norm_ (foreach, L2), the same kernels in the same order, without its
    regrouping and dispatch: on a small policy those cost about as much as the arithmetic (one rank
    of the default run clips 16 times an iteration). Sharded (DTensor) or mixed gradients, or
    parameters without one, go through torch's own."""
    grads = [p.grad for p in params]
    if not grads or any(g is None for g in grads) or not _plain(grads):
        return torch.nn.utils.clip_grad_norm_(params, max_norm)
    with torch.no_grad():
        total = torch.linalg.vector_norm(torch.stack(torch._foreach_norm(grads, 2.0)), 2.0)
        torch._foreach_mul_(grads, torch.clamp(max_norm / (total + 1e-6), max=1.0))
    return total


class Adam(torch.optim.Adam):
    """torch.optim.Adam, fused, that never imports torch._dynamo (see the module's docstring).

    Algorithms (and users' own, see marl.algorithms.base) make their optimizers with it.

    Once its state exists, a step over plain fp32 tensors calls the fused kernel directly with lists
    made once (what torch's fused path calls after regrouping the tensors every step): the same
    kernel and arithmetic, bitwise (tests/test_optim.py), at a fraction of the overhead."""

    def __init__(self, params, lr: float, betas: tuple[float, float] = (0.9, 0.999), eps: float = 1e-8,
                 weight_decay: float = 0.0):
        # fused: one kernel for all (DTensor) parameters; the per-parameter loop costs more than the math here.
        super().__init__(params, lr=lr, betas=betas, eps=eps, weight_decay=weight_decay, fused=True)
        self._lists: list[tuple] | None = None  # per group: params, exp_avgs, exp_avg_sqs, steps

    def add_param_group(self, param_group: dict) -> None:
        _ADD_PARAM_GROUP(self, param_group)
        self._lists = None

    def zero_grad(self, set_to_none: bool = True) -> None:
        if not set_to_none:
            return _ZERO_GRAD(self, False)
        # What torch's does, without its profiler range: the default run clears 16 times an iteration.
        for group in self.param_groups:
            for p in group["params"]:
                p.grad = None

    def state_dict(self) -> dict:
        return _STATE_DICT(self)

    def load_state_dict(self, state_dict: dict) -> None:
        _LOAD_STATE_DICT(self, state_dict)
        self._lists = None  # the state tensors are new ones

    def step(self, closure=None):
        # What the undecorated step's wrapper does in eager mode (differentiable=False): no autograd.
        with torch.no_grad():
            # A GradScaler hands a fused step its scale and inf flag as attributes: torch's own step reads them.
            scaled = getattr(self, "grad_scale", None) is not None or getattr(self, "found_inf", None) is not None
            if closure is None and not scaled and self._lists is not None and self._direct():
                return None
            loss = _ADAM_STEP(self, closure)
            self._lists = self._make_lists()
            return loss

    def _make_lists(self) -> list[tuple] | None:
        """The direct step's lists, if every group qualifies: plain tensors of one device, float32,
        every parameter with its state, plain Adam (no amsgrad, maximize, capturable, decoupled decay)."""
        lists = []
        for group in self.param_groups:
            params = group["params"]
            if (not params or group["amsgrad"] or group["maximize"] or group["capturable"]
                    or group["decoupled_weight_decay"] or not _plain(params)
                    or params[0].dtype != torch.float32 or any(p not in self.state for p in params)):
                return None
            states = [self.state[p] for p in params]
            lists.append((params, [s["exp_avg"] for s in states], [s["exp_avg_sq"] for s in states],
                          [s["step"] for s in states]))
        return lists

    def _direct(self) -> bool:
        """The fused kernel on every group, as torch.optim.adam._fused_adam calls it; False (nothing
        done) if a parameter has no gradient this step, which the regular step skips."""
        if len(self._lists) != len(self.param_groups):  # a group appended to param_groups by hand
            return False
        grads = [[p.grad for p in params] for params, *_ in self._lists]
        if any(g is None for gs in grads for g in gs):
            return False
        for group, (params, exp_avgs, exp_avg_sqs, steps), gs in zip(self.param_groups, self._lists, grads):
            beta1, beta2 = group["betas"]
            torch._foreach_add_(steps, 1)
            torch._fused_adam_(params, gs, exp_avgs, exp_avg_sqs, [], steps, amsgrad=False, lr=group["lr"],
                               beta1=beta1, beta2=beta2, weight_decay=group["weight_decay"], eps=group["eps"],
                               maximize=False, grad_scale=None, found_inf=None)
        return True
