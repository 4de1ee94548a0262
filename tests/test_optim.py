"""marl.optim: torch's fused Adam and gradient clipping step for step, without importing torch._dynamo."""

from __future__ import annotations

import copy
import subprocess
import sys

import torch

from marl.optim import Adam, clip_grad_norm_
from tests.conftest import ROOT


def _trained(opt_cls, clip=torch.nn.utils.clip_grad_norm_, steps: int = 6, **kw):
    """A small net trained by `opt_cls`, its gradients clipped by `clip`, under a changing learning
    rate (the run's schedule), with a step where one layer gets no gradient (torch skips it)."""
    torch.manual_seed(0)
    net = torch.nn.Sequential(torch.nn.Linear(4, 8), torch.nn.Tanh(), torch.nn.Linear(8, 2))
    opt = opt_cls([{"params": net[0].parameters()}, {"params": net[2].parameters()}], lr=1e-2, eps=1e-5, **kw)
    gen = torch.Generator().manual_seed(1)
    norms = []
    for i in range(steps):
        opt.zero_grad()
        for group in opt.param_groups:
            group["lr"] = 1e-2 * (1 - i / 10)
        if i == 3:  # the first layer's output detached: its parameters get no gradient this step
            net[2](net[1](net[0](torch.randn(16, 4, generator=gen)).detach())).pow(2).mean().backward()
        else:
            net(torch.randn(16, 4, generator=gen)).pow(2).mean().backward()
        norms.append(clip([p for g in opt.param_groups for p in g["params"]], 0.05))
        opt.step()
    return net, opt, torch.stack(norms)


def _same_state(mine: dict, theirs: dict) -> None:
    assert mine["param_groups"] == theirs["param_groups"]
    for k in theirs["state"]:
        for name, v in theirs["state"][k].items():
            assert torch.equal(mine["state"][k][name], v), (k, name)


def test_the_steps_and_the_state_are_torchs_fused_adams_exactly():
    ours, ours_opt, our_norms = _trained(Adam, clip=clip_grad_norm_)
    ref, ref_opt, ref_norms = _trained(torch.optim.Adam, fused=True)
    assert ours_opt._lists is not None  # the direct kernel call took the steps after the first
    assert torch.equal(our_norms, ref_norms) and bool((ref_norms > 0.05).any())  # some steps were clipped
    for a, b in zip(ours.parameters(), ref.parameters()):
        assert torch.equal(a, b)
    _same_state(ours_opt.state_dict(), ref_opt.state_dict())
    # Loading torch's state makes ours continue as torch's does (the direct path's lists made anew).
    theirs = copy.deepcopy(ref_opt.state_dict())  # its tensors are ref_opt's own, which go on stepping
    fresh = Adam([{"params": ours[0].parameters()}, {"params": ours[2].parameters()}], lr=1e-3, eps=1e-5)
    fresh.load_state_dict(theirs)
    assert fresh.param_groups[0]["lr"] == theirs["param_groups"][0]["lr"]
    assert torch.equal(fresh.state[ours[0].weight]["exp_avg"], ref_opt.state[ref[0].weight]["exp_avg"])
    for _ in range(2):
        x = torch.randn(16, 4, generator=torch.Generator().manual_seed(7))
        for net, opt in ((ours, fresh), (ref, ref_opt)):
            opt.zero_grad()
            net(x).pow(2).mean().backward()
            opt.step()
    for a, b in zip(ours.parameters(), ref.parameters()):
        assert torch.equal(a, b)
    _same_state(fresh.state_dict(), ref_opt.state_dict())


def test_clipping_where_a_gradient_is_missing_goes_through_torchs_own():
    net = torch.nn.Linear(3, 2)
    net(torch.ones(1, 3)).sum().backward()
    net.bias.grad = None
    norm = net.weight.grad.norm()
    assert torch.equal(clip_grad_norm_(list(net.parameters()), 1.0), norm) and norm > 1
    assert torch.allclose(net.weight.grad.norm(), torch.tensor(1.0))


SCRIPT = """
import sys
import torch
from marl.optim import Adam

net = torch.nn.Sequential(torch.nn.Linear(4, 8), torch.nn.Linear(8, 2))
opt = Adam(net.parameters(), lr=1e-3)
for _ in range(3):
    opt.zero_grad()
    net(torch.randn(5, 4)).sum().backward()
    opt.step()
opt.load_state_dict(opt.state_dict())
print("dynamo imported" if "torch._dynamo" in sys.modules else "no dynamo")
"""


def test_its_steps_never_import_dynamo():
    # In a fresh process: torch._dynamo takes 1-2 s to import, more than the rest of a learner's start-up
    # (a sharded learner imports it anyway: FSDP2 makes its DTensor parameters under dynamo's guard).
    out = subprocess.run([sys.executable, "-c", SCRIPT], capture_output=True, text=True, cwd=ROOT, timeout=120)
    assert out.returncode == 0, out.stderr[-3000:]
    assert out.stdout.strip() == "no dynamo", out.stdout


def test_a_step_a_grad_scaler_scales_is_torchs_own():
    # torch.amp.GradScaler hands a fused step its scale and inf flag as optimizer attributes.
    nets = []
    for cls, kw in ((Adam, {}), (torch.optim.Adam, {"fused": True})):
        torch.manual_seed(0)
        net = torch.nn.Linear(3, 2)
        opt = cls(net.parameters(), lr=1e-2, **kw)
        for i in range(3):
            opt.zero_grad()
            net(torch.ones(4, 3) * (i + 1)).pow(2).sum().backward()
            if i == 2:
                opt.grad_scale, opt.found_inf = torch.tensor(4.0), torch.tensor(0.0)
            opt.step()
        nets.append(net)
    for a, b in zip(*(n.parameters() for n in nets)):
        assert torch.equal(a, b)
