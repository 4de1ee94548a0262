"""A trained policy as a file that plays without marl: `python -m marl.export runs/<run> --format onnx|torchscript`.

Each policy of the run's `policy.pt` becomes one graph of plain tensors (`Acting`):

    inputs:  the observation's leaves in the policy's order, named as marl names them ("obs" for a
             plain space, a Dict's or Tuple's keys joined by "."), batch first, with the env's
             values (a Discrete leaf's own index, its start included) in the shape and dtype the
             metadata's `marl.leaves` gives (uint8 frames stay uint8, indices int64, MultiDiscrete
             and MultiBinary leaves flat); "agent_id" (int64, the agent's index within its policy)
             where the run had --agent-id-input; "action_mask" (bool [B, choices]) where the policy
             takes one; "recurrent_state" [B, state_size] for a recurrent network: zeros where an
             episode starts (the built-in network's holds its actor's state, then its critic's,
             which a step carries through unchanged).
    outputs: "action": the deterministic action as the env takes it (the most likely choice, the
             tanh squash or Beta scaling applied, Box actions clipped to the bounds, index offsets
             added back, in the env's shape); "params": what marl's distribution is built from
             (logits, illegal ones at the lowest float; a Gaussian's mean then log-std; a
             tanh-Gaussian's mean then its unbounded log-std, before marl.distributions.tanh_gaussian
             bounds it; a Beta's raw alphas then betas; a Q-network's Q-values then epsilon);
             "recurrent_state_out": a recurrent network's state after the step.

The observation normaliser (`--norm-obs`) is inside the graph. ONNX goes through torch's
TorchScript-based exporter (opset 17), which writes GRU and LSTM as ONNX's own operators;
TorchScript through `torch.jit.trace`. After writing, the file is run (onnxruntime, or
`torch.jit.load`) on random observations beside marl's own forward and the largest difference is
printed; a file that differs by more than `TOLERANCE` is deleted and refused. The ONNX file also
holds its inputs, outputs, leaves and action space as metadata (`marl.*`). A user's network that
ONNX cannot express is refused in one line naming the operator, exit code 2.
"""

from __future__ import annotations

import argparse
import json
import math
import re
import sys
import warnings
from pathlib import Path

import torch
from torch import nn

from marl import distributions
from marl.config import UsageError, _Parser, unknown_flag
from marl.distributions.categorical import masked
from marl.policies import PolicySpec

FORMATS = ("onnx", "torchscript")
SUFFIX = {"onnx": ".onnx", "torchscript": ".ts.pt"}
OPSET = 17
CHECK_BATCH = 16  # random inputs the written file is run on beside marl's forward
TOLERANCE = 1e-4  # the largest |difference| to marl's own forward an exported file may show
EXTRA = "pip install -e '.[export]'"
EXTRA_NAMES = ("action_mask", "recurrent_state", "action", "params", "recurrent_state_out")


class ExportError(UsageError):
    """A policy that cannot be exported as asked; one line naming why and the fix."""


class Acting(nn.Module):
    """One policy's deterministic step as a module of positional tensors (the module docstring's
    inputs and outputs), built on the policy's own `act`: what evaluation runs, nothing rewritten."""

    def __init__(self, policy: nn.Module, spec: PolicySpec):
        super().__init__()
        self.policy, self.spec = policy, spec
        self.leaves = [leaf.name for leaf in spec.obs]
        self.state_size = policy.state_size
        taken = sorted(set(self.leaves) & set(EXTRA_NAMES))
        if taken:
            raise ExportError(f"policy {spec.name!r}: an observation key is named {taken[0]!r}, which the exported "
                              f"file names one of its own inputs or outputs ({', '.join(EXTRA_NAMES)}); rename the key")

    @property
    def input_names(self) -> list[str]:
        return [*self.leaves, *(["action_mask"] if self.spec.mask else []),
                *(["recurrent_state"] if self.state_size else [])]

    @property
    def output_names(self) -> list[str]:
        return ["action", "params", *(["recurrent_state_out"] if self.state_size else [])]

    def forward(self, *inputs: torch.Tensor) -> tuple[torch.Tensor, ...]:
        obs = {leaf.name: leaf.kind_class.read_tensor(leaf, x) for leaf, x in zip(self.spec.obs, inputs)}
        rest = list(inputs[len(self.leaves):])
        mask = rest.pop(0) if self.spec.mask else None
        state = rest.pop(0) if self.state_size else None
        batch = inputs[0].shape[0]
        # One step from the state given: the caller zeroes it where an episode starts, so nothing starts here.
        starts = torch.zeros(batch, dtype=torch.bool) if self.state_size else None
        params, state = self.policy.act(obs, state, starts)
        params = params.float()
        dist = distributions.make(self.spec.action, params, mask)
        action = self.spec.action.space.to_env_tensor(self.spec.action, dist.to_env(dist.mode()))
        if mask is not None:
            n = self.spec.action.mask_size
            params = torch.cat([masked(params[..., :n], mask), params[..., n:]], dim=-1)
        return (action, params, state) if self.state_size else (action, params)

    def example(self, batch: int, generator: torch.Generator) -> tuple[torch.Tensor, ...]:
        """Random inputs: the env's values of every leaf's kind (indices from their start), masks with a
        legal choice in every categorical, a random state."""
        obs = [leaf.kind_class.example(leaf, (batch,), generator) for leaf in self.spec.obs]
        obs = [x + torch.tensor(leaf.start).reshape(leaf.shape) if any(leaf.start) else x
               for leaf, x in zip(self.spec.obs, obs)]
        extra = []
        if self.spec.mask:
            mask = torch.rand(batch, self.spec.action.mask_size, generator=generator) < 0.6
            first = 0
            for n in self.spec.action.nvec:  # at least the group's first choice legal where none is
                mask[:, first] |= ~mask[:, first:first + n].any(-1)
                first += n
            extra.append(mask)
        if self.state_size:
            extra.append(torch.randn(batch, self.state_size, generator=generator))
        return (*obs, *extra)

    def metadata(self) -> dict[str, str]:
        """Plain JSON strings (non-finite bounds as "inf", "-inf")."""
        a = self.spec.action
        bound = lambda xs: json.dumps([x if math.isfinite(x) else str(x) for x in xs])  # noqa: E731
        leaves = [{"name": leaf.name, "shape": list(leaf.shape), "dtype": leaf.dtype} for leaf in self.spec.obs]
        return {"marl.policy": self.spec.name, "marl.inputs": json.dumps(self.input_names),
                "marl.outputs": json.dumps(self.output_names), "marl.leaves": json.dumps(leaves),
                "marl.action_space": a.describe(), "marl.distribution": a.kind, "marl.state_size": str(self.state_size),
                "marl.action_low": bound(a.low), "marl.action_high": bound(a.high)}


def unsupported_op(error: Exception) -> str:
    """The operator an ONNX export stopped at, from torch's message ("" if it names none)."""
    found = re.search(r"operator '([\w:.]+)'", str(error))
    return found.group(1) if found else ""


def write_onnx(acting: Acting, example: tuple[torch.Tensor, ...], out: Path) -> None:
    try:
        import onnx
    except ImportError:
        raise ExportError(f"--format onnx needs the onnx package: {EXTRA}") from None
    names = acting.input_names + acting.output_names
    axes = {name: {0: "batch"} for name in names}
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")  # the tracer's notes on Python values it folded into the graph
            torch.onnx.export(acting, example, str(out), input_names=acting.input_names, output_names=acting.output_names,
                              dynamic_axes=axes, opset_version=OPSET, dynamo=False)
    except Exception as e:  # noqa: BLE001 - the exporter raises several kinds; the op named is the answer
        op = unsupported_op(e)
        what = f"operator {op}" if op else f"{type(e).__name__}: {' '.join(str(e).split())[:200]}"
        raise ExportError(f"policy {acting.spec.name!r} cannot be written as ONNX (opset {OPSET}): {what}; "
                          f"use --format torchscript, or an equivalent op in the network") from None
    model = onnx.load(str(out))
    for key, value in acting.metadata().items():
        model.metadata_props.add(key=key, value=value)
    onnx.save(model, str(out))


def write_torchscript(acting: Acting, example: tuple[torch.Tensor, ...], out: Path) -> None:
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")  # the tracer's notes, and torch.jit's deprecation in favour of torch.export
            traced = torch.jit.trace(acting, example, check_trace=False)
            torch.jit.save(traced, str(out), _extra_files={"marl.json": json.dumps(acting.metadata())})
    except Exception as e:  # noqa: BLE001 - a user's forward may raise anything under the tracer
        raise ExportError(f"policy {acting.spec.name!r} cannot be traced to TorchScript: {type(e).__name__}: "
                          f"{' '.join(str(e).split())[:200]}") from None


def run_exported(path: Path, fmt: str, inputs: tuple[torch.Tensor, ...], names: list[str]) -> list[torch.Tensor]:
    """The exported file's outputs on `inputs`: onnxruntime for ONNX, torch.jit.load for TorchScript."""
    if fmt == "torchscript":
        with torch.no_grad(), warnings.catch_warnings():
            warnings.simplefilter("ignore", DeprecationWarning)  # torch 2.13 points to torch.export; the format is asked for
            return list(torch.jit.load(str(path))(*inputs))
    try:
        import onnxruntime
    except ImportError:
        raise ExportError(f"checking the ONNX file needs onnxruntime: {EXTRA}") from None
    try:
        session = onnxruntime.InferenceSession(str(path), providers=["CPUExecutionProvider"])
        return [torch.from_numpy(x) for x in session.run(None, {n: x.numpy() for n, x in zip(names, inputs)})]
    except Exception as e:  # noqa: BLE001 - onnxruntime's own errors: the file does not run
        raise ExportError(f"{path} does not run in onnxruntime: {' '.join(str(e).split())[:200]}") from None


def largest_difference(ours: tuple[torch.Tensor, ...], theirs: list[torch.Tensor]) -> float:
    """max |ours - theirs| over every output (actions and parameters alike): equal values (infinities
    and lowest floats included) differ by 0, a NaN on one side only or a missing output by inf."""
    if len(ours) != len(theirs):
        return math.inf
    worst = 0.0
    for a, b in zip(ours, theirs):
        if a.shape != b.shape:
            return math.inf
        a, b = a.double(), b.double()
        diff = torch.where((a == b) | (a.isnan() & b.isnan()), 0.0, (a - b).abs())
        worst = max(worst, float(diff.nan_to_num(nan=math.inf).max()) if a.numel() else 0.0)
    return worst


def export_file(policy: nn.Module, spec: PolicySpec, fmt: str, out: Path, check_batch: int = CHECK_BATCH,
                  seed: int = 0) -> tuple[float, Acting]:
    """Write one policy to `out` in `fmt`, run the file beside marl's forward on `check_batch`
    random inputs -> the largest difference of their outputs, and the module that was written."""
    acting = Acting(policy, spec).eval()
    generator = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        (write_onnx if fmt == "onnx" else write_torchscript)(acting, acting.example(2, generator), out)
        inputs = acting.example(check_batch, generator)
        ours = acting(*inputs)
    try:
        diff = largest_difference(ours, run_exported(out, fmt, inputs, acting.input_names))
    except ExportError:
        out.unlink(missing_ok=True)
        raise
    if not diff <= TOLERANCE:
        out.unlink(missing_ok=True)
        raise ExportError(f"policy {spec.name!r} as {fmt} differs from marl's own forward by {diff:.1e} (more than "
                          f"{TOLERANCE:.0e}) on {check_batch} random inputs, e.g. where the network branches on its "
                          f"input, which a traced graph freezes; the file is not kept")
    return diff, acting


def outputs_for(run_dir: Path, fmt: str, out: str, names: list[str]) -> dict[str, Path]:
    """Where each policy goes: `out` (its stem suffixed with -<policy> where there are several), or the run directory."""
    if not out:
        base = run_dir / f"policy{SUFFIX[fmt]}"
    else:
        base = Path(out)
    if len(names) == 1:
        return {names[0]: base}
    suffix = "".join(base.suffixes) or SUFFIX[fmt]
    stem = base.name[: len(base.name) - len("".join(base.suffixes))] if base.suffixes else base.name
    return {n: base.with_name(f"{stem}-{n}{suffix}") for n in names}


def build_parser() -> argparse.ArgumentParser:
    p = _Parser(prog="python -m marl.export", description=__doc__, allow_abbrev=False,
                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("run_dir", help="a run directory that train.py wrote (its policy.pt), e.g. runs/CartPole-v1__1__1796000000")
    p.add_argument("--format", choices=FORMATS, default="onnx")
    p.add_argument("--out", default="", help="the file to write (default: policy.onnx or policy.ts.pt in the run "
                   "directory); with several policies, one file each, named FILE-<policy>")
    p.add_argument("--policy", default="", help="only this policy (default: every policy of the run)")
    return p


def main(argv: list[str] | None = None) -> int:
    from marl.models import ModelError
    from marl.policy_file import load_policy

    parser = build_parser()
    try:
        args, unknown = parser.parse_known_args(argv)
        if unknown:
            raise unknown_flag(parser, unknown[0].split("=", 1)[0]) if unknown[0].startswith("--") else \
                UsageError(f"unexpected argument {unknown[0]!r}: one run directory (see --help)")
        run_dir = Path(args.run_dir)
        if not (run_dir / "policy.pt").is_file():
            raise UsageError(f"{run_dir} has no policy.pt; give a run directory that train.py wrote (under --logdir)")
        torch.set_num_threads(1)
        try:
            model, specs, _ = load_policy(run_dir / "policy.pt")
        except ModelError as e:
            raise UsageError(f"{run_dir}/policy.pt: {e}") from None
        names = [s.name for s in specs]
        if args.policy and args.policy not in names:
            raise UsageError(f"--policy {args.policy}: the run's policies are {', '.join(names)}")
        chosen = [s for s in specs if not args.policy or s.name == args.policy]
        for spec, path in zip(chosen, outputs_for(run_dir, args.format, args.out, [s.name for s in chosen]).values()):
            path.parent.mkdir(parents=True, exist_ok=True)
            diff, acting = export_file(model.policies[spec.name], spec, args.format, path)
            print(f"{path}: policy {spec.name!r} as {args.format} | inputs {', '.join(acting.input_names)} | "
                  f"outputs {', '.join(acting.output_names)} | max |diff| to marl's forward {diff:.1e} on "
                  f"{CHECK_BATCH} random inputs")
    except UsageError as e:
        print(f"error: {e}", file=sys.stderr)
        return 2
    return 0


if __name__ == "__main__":
    sys.exit(main())
