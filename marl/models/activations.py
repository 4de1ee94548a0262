"""The MLPs' tanh, computed where it is fast.

torch built with MKL computes a float32 tanh on the CPU with MKL's vector math (`vsTanh`), and MKL
takes its vectorised kernels on Intel CPUs only: elsewhere it runs a generic one. Seen on an AMD
EPYC (2026-12-06, torch 2.13, one thread): `mkl_vml_kernel_sTanh_EXHAynn` took 84 us on 512x64
floats, where torch's own sigmoid took 14 us and 2 * sigmoid(2x) - 1 34 us; on the Intel Xeon of
2026-12-05 torch's tanh took 23 us forward and backward on 1024x64 floats, and the sigmoid form 257
us. So the learner's training forward (512-sample minibatches) takes the sigmoid form off Intel,
with tanh's own backward, and everything else (actors' inference, bf16, CUDA, traced exports) takes
torch's tanh. The two agree to 2e-7.
"""

from __future__ import annotations

import functools
from pathlib import Path

import torch
from torch import nn


@functools.cache
def generic_mkl_tanh() -> bool:
    """Whether torch's float32 CPU tanh runs MKL's generic kernel on this machine (see the module)."""
    if not torch.backends.mkl.is_available():
        return False
    try:
        cpuinfo = Path("/proc/cpuinfo").read_text()
    except OSError:
        return False  # not Linux: nothing known, torch's own
    return "vendor_id" in cpuinfo and "GenuineIntel" not in cpuinfo


class _TanhViaSigmoid(torch.autograd.Function):
    """tanh(x) = 2 sigmoid(2x) - 1, and tanh's backward, grad * (1 - y^2), from the output."""

    @staticmethod
    def forward(ctx, x: torch.Tensor) -> torch.Tensor:
        y = torch.sigmoid(x * 2).mul_(2).sub_(1)
        ctx.save_for_backward(y)
        return y

    @staticmethod
    def backward(ctx, grad: torch.Tensor) -> torch.Tensor:
        (y,) = ctx.saved_tensors
        return torch.ops.aten.tanh_backward(grad, y)


class Tanh(nn.Module):
    """nn.Tanh, through the sigmoid where torch's tanh is MKL's generic kernel and the input is a
    float32 CPU tensor that trains (the inference calls of actors are small enough that the extra
    ops cost more than they save: 1.11x an actor's collect, measured)."""

    def __init__(self):
        super().__init__()
        self.via_sigmoid = generic_mkl_tanh()

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        if (self.via_sigmoid and x.requires_grad and torch.is_grad_enabled() and x.dtype == torch.float32
                and x.device.type == "cpu" and not torch.jit.is_tracing()):
            return _TanhViaSigmoid.apply(x)
        return torch.tanh(x)
