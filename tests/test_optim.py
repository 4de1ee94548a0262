"""marl.optim.Adam: torch's fused Adam step for step, without importing torch._dynamo."""

from __future__ import annotations

import subprocess
import sys

import torch

from marl.optim import Adam
from tests.conftest import ROOT


def _trained(opt_cls, **kw) -> tuple[torch.nn.Module, torch.optim.Optimizer]:
    torch.manual_seed(0)
    net = torch.nn.Sequential(torch.nn.Linear(4, 8), torch.nn.Tanh(), torch.nn.Linear(8, 2))
    opt = opt_cls([{"params": net[0].parameters()}, {"params": net[2].parameters()}], lr=1e-2, eps=1e-5, **kw)
    gen = torch.Generator().manual_seed(1)
    for _ in range(5):
        opt.zero_grad()
        net(torch.randn(16, 4, generator=gen)).pow(2).mean().backward()
        opt.step()
    return net, opt


def test_the_steps_and_the_state_are_torchs_fused_adams_exactly():
    ours, ours_opt = _trained(Adam)
    ref, ref_opt = _trained(torch.optim.Adam, fused=True)
    for a, b in zip(ours.parameters(), ref.parameters()):
        assert torch.equal(a, b)
    mine, theirs = ours_opt.state_dict(), ref_opt.state_dict()
    assert mine["param_groups"] == theirs["param_groups"]
    for k in theirs["state"]:
        for name, v in theirs["state"][k].items():
            assert torch.equal(mine["state"][k][name], v), (k, name)
    # Loading torch's state makes ours continue as torch's does.
    fresh = Adam([{"params": ours[0].parameters()}, {"params": ours[2].parameters()}], lr=1e-3, eps=1e-5)
    fresh.load_state_dict(theirs)
    assert fresh.param_groups[0]["lr"] == 1e-2 and torch.equal(fresh.state[ours[0].weight]["exp_avg"],
                                                               ref_opt.state[ref[0].weight]["exp_avg"])


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
