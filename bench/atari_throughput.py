"""Atari throughput, four measurements in one run, each with its ratio against a baseline of the same run.

    python bench/atari_throughput.py                        # ALE/Breakout-v5, 8 envs, ~10 s per measurement
    python bench/atari_throughput.py --game ALE/Pong-v5 --envs 16 --seconds 5
    python bench/atari_throughput.py --smoke                # tiny sizes, a fraction of a second each (CI)

The network and PPO settings are `configs/atari.toml`'s (Nature-DQN CNN on 4x84x84 uint8 frames,
128 steps per request, 4 minibatches x 4 epochs), with one agent per env copy and `--envs` copies
in all. Every process computes with one torch thread, as every marl rank does; ale_py's vector env
steps its copies in C++ threads of its own.

1. Env stepping alone, random actions: ale_py's C++ `AtariVectorEnv` (what `--wrappers atari`
   gives an `ALE/` id) against Gymnasium's `AtariPreprocessing` + `FrameStackObservation(4)` over a
   SyncVectorEnv of frameskip-1 envs (`envs.wrappers.ATARI_WRAPPERS`): the same preprocessing.
   The two are stepped in alternating rounds so that a noisy neighbour hits both alike.
2. A one-process roofline: the ale_py envs and the built-in network (built from `specs_of(cfg, info)`
   as marl builds it) in one process, no RPC. Collection: env step + forward + sampling + writing
   the step into a buffer, every step. Update: PPO minibatch steps (forward, marl's `ppo_loss`,
   backward, gradient clipping, fused Adam, as `marl.learner` does) on a batch of those frames.
   A PPO iteration of the roofline is then one batch collected plus `update_epochs` passes over it.
3. marl itself through `marl.launch.launch`: real actor processes over RPC, 1 learner, 2 actors
   with `--envs` / 2 copies each. Collection only (as bench/collect_throughput.py), then the real
   sync training loop (`marl.coordinator.Coordinator`: collect, GAE, learn, publish), timed from
   the end of its first iteration (which builds the actors) to the end of its last.
4. Bytes of one real Rollout (one actor's `RolloutWorker.collect`) as torch RPC sends it: its
   pickler's payload plus the storages of the tensors it lifts out (which TensorPipe sends as they
   are), with the frames uint8 as marl keeps them, and converted to float32.

Gymnasium's AtariPreprocessing resizes with OpenCV, which none of this project's extras installs:
without `cv2` the bench says so on the ratio line of (1) and runs the rest. The default run takes
about 1.5 minutes on 2 cores, `--smoke` about 20 s.
"""

from __future__ import annotations

import argparse
import dataclasses
import gc
import io
import math
import os
import shutil
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

import gymnasium as gym  # noqa: E402
import numpy as np  # noqa: E402
import torch  # noqa: E402

from envs import EnvError, describe  # noqa: E402
from envs.batched import make_vector  # noqa: E402
from envs.registry import resolve  # noqa: E402
from envs.wrappers import ATARI_WRAPPERS  # noqa: E402
from marl import distributions  # noqa: E402
from marl.actor import RolloutWorker  # noqa: E402
from marl.algorithms import gae, ppo_loss  # noqa: E402
from marl.config import Config, UsageError, load_toml, validate  # noqa: E402
from marl.launch import device_and_backend, exit_now, launch  # noqa: E402
from marl.logging import RunLogger  # noqa: E402
from marl.models import build_model, check_network, network_of  # noqa: E402
from marl.policies import specs_of  # noqa: E402

FRAME_SKIP = 4  # emulator frames per env step, in both env stacks
ACTORS = 2


def say(msg: str) -> None:
    """Progress, on stderr: stdout is the table."""
    print(f"atari_throughput: {msg}", file=sys.stderr, flush=True)


# --- 1. env stepping alone ---------------------------------------------------------------------

def env_rates(cfg: Config, n: int, seconds: float, seed: int) -> dict:
    """Env steps/s of ale_py's vector env and of Gymnasium's wrappers, same envs, random actions."""
    name = resolve(cfg.env)
    envs = {"ale_py": make_vector(name, n, cfg.env_kwargs, cfg.wrappers)}
    out: dict = {"gym_missing": None}
    try:
        try:
            envs["gym"] = make_vector(name, n, cfg.env_kwargs, ATARI_WRAPPERS)
        except gym.error.DependencyNotInstalled as e:
            out["gym_missing"] = " ".join(str(e).split())
        shapes = {k: v.single_observation_space.shape for k, v in envs.items()}
        if len(set(shapes.values())) != 1:
            raise RuntimeError(f"the two env stacks give different frames: {shapes}")
        rng = np.random.default_rng(seed)
        actions = rng.integers(0, envs["ale_py"].single_action_space.n, size=(256, n))
        for vec in envs.values():
            vec.reset(seed=seed)
            for i in range(3):  # warm-up
                vec.step(actions[i])
        steps = dict.fromkeys(envs, 0)
        spent = dict.fromkeys(envs, 0.0)
        rounds = 2
        for _ in range(rounds):  # alternate, so that a burst of load hits both sides alike
            for key, vec in envs.items():
                i, start = 0, time.perf_counter()
                while True:
                    vec.step(actions[i % len(actions)])
                    i += 1
                    if time.perf_counter() - start >= seconds / rounds:
                        break
                spent[key] += time.perf_counter() - start
                steps[key] += i * n
        for key in envs:
            out[key] = steps[key] / spent[key]
        out["shape"] = shapes["ale_py"]
    finally:
        for vec in envs.values():
            vec.close()
    return out


# --- 2. the one-process roofline -------------------------------------------------------------

def roofline(cfg: Config, info, n: int, seconds: float) -> dict:
    """One process: the ale_py envs + the built-in network. Collection agent-steps/s, then PPO
    minibatch updates on the last `num_steps` x n collected steps: samples/s trained."""
    (spec,) = specs_of(cfg, info)  # the one shared policy
    (leaf,) = spec.obs  # the 4x84x84 uint8 frame stack
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(cfg.seed)  # as marl.learner builds it
        model = build_model(specs_of(cfg, info), network_of(cfg))
    policy = model.policies[spec.name]
    T = cfg.num_steps
    buf = {"obs": torch.empty((T, n, *leaf.shape), dtype=getattr(torch, leaf.dtype)),
           "actions": torch.empty((T, n, *spec.action.shape), dtype=getattr(torch, spec.action.dtype)),
           **{k: torch.empty((T, n)) for k in ("logprobs", "values", "rewards")},
           **{k: torch.empty((T, n), dtype=torch.bool) for k in ("terminated", "truncated", "valid")}}
    vec = make_vector(resolve(cfg.env), n, cfg.env_kwargs, cfg.wrappers)  # the fast path, as the actors build it
    gen = torch.Generator().manual_seed(cfg.seed)
    try:
        obs, _ = vec.reset(seed=cfg.seed)
        valid = torch.ones(n, dtype=torch.bool)  # NEXT_STEP autoreset: the step after a done is no transition
        t = steps = 0
        start = None
        with torch.inference_mode():
            while True:
                if t == 3:  # warm-up over: the first forwards allocate
                    start, steps = time.perf_counter(), 0
                o = torch.from_numpy(obs)
                params, value, _ = policy({leaf.name: o}, None)
                action, logp = distributions.make(spec.action, params).sample(gen)
                i = t % T
                buf["obs"][i], buf["actions"][i], buf["logprobs"][i], buf["values"][i] = o, action, logp, value
                buf["valid"][i] = valid
                obs, rew, term, trunc, _ = vec.step(action.numpy())
                term, trunc = torch.from_numpy(term), torch.from_numpy(trunc)
                buf["rewards"][i] = torch.from_numpy(rew.astype(np.float32, copy=False)) * valid
                buf["terminated"][i], buf["truncated"][i] = term & valid, trunc & valid
                steps += int(valid.sum())
                valid = ~(term | trunc)  # as GymAgentsBatch: a done slot's next step is its reset
                t += 1
                # At least one whole batch after the warm-up, whatever --seconds says.
                if t >= 3 + T and time.perf_counter() - start >= seconds:
                    break
            collect = steps / (time.perf_counter() - start)
            _, next_value, _ = policy({leaf.name: torch.from_numpy(obs)}, None)
    finally:
        vec.close()
    order = [(t + k) % T for k in range(T)]  # the batch: the last T steps, oldest first
    b = {k: v[order] for k, v in buf.items()}
    later = torch.cat([b["values"][1:], next_value[None]])
    adv, ret = gae(b["rewards"], b["values"], next_value, b["terminated"], b["truncated"],
                   torch.where(b["truncated"], later, 0.0), cfg.gamma, cfg.gae_lambda)
    mask = b["valid"].reshape(-1)

    def flat(x):
        return x.reshape(mask.numel(), *x.shape[2:])[mask]

    data = {"obs": flat(b["obs"]), "actions": flat(b["actions"]), "logprobs": flat(b["logprobs"]),
            "values": flat(b["values"]), "advantages": flat(adv), "returns": flat(ret)}
    if cfg.norm_adv:
        data["advantages"] = (data["advantages"] - data["advantages"].mean()) / (data["advantages"].std() + 1e-8)
    update, minibatch = train_rate(cfg, spec, model, data, seconds)
    return {"collect": collect, "update": update, "minibatch": minibatch, "batch": int(mask.sum())}


def train_rate(cfg: Config, spec, model, data: dict, seconds: float) -> tuple[float, int]:
    """Samples/s of PPO minibatch steps on `data`, with the config's minibatch size, as marl.learner does them."""
    device = device_and_backend(0)[0]  # where marl's learner would compute
    model = model.to(device).train()
    data = {k: v.to(device) for k, v in data.items()}
    leaf = spec.obs[0].name
    opt = torch.optim.Adam(model.parameters(), lr=cfg.learning_rate, eps=1e-5, fused=True)  # as marl.learner
    size = data["values"].shape[0]
    K = cfg.num_minibatches
    mb = size // K
    if mb < 1:
        raise RuntimeError(f"{size} collected samples are too few for {K} minibatches; raise --seconds")
    gen = torch.Generator().manual_seed(cfg.seed)

    def step(idx: torch.Tensor) -> None:
        out = model({spec.name: ({leaf: data["obs"][idx]}, None)})  # through the PolicySet, as the learner
        pd, value, _ = out[spec.name]
        pi = distributions.make(spec.action, pd.float())
        loss, _ = ppo_loss(pi.log_prob(data["actions"][idx]), data["logprobs"][idx], data["advantages"][idx],
                           value.float(), data["values"][idx], data["returns"][idx], pi.entropy(),
                           clip_coef=cfg.clip_coef, clip_vloss=cfg.clip_vloss, vf_coef=cfg.vf_coef, ent_coef=cfg.ent_coef)
        opt.zero_grad(set_to_none=True)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), cfg.max_grad_norm)
        opt.step()

    def sync():
        if device.type == "cuda":
            torch.cuda.synchronize(device)

    step(torch.randperm(size, generator=gen)[:mb].to(device))  # warm-up: Adam's state, first allocations
    sync()
    samples, start = 0, time.perf_counter()
    while True:
        perm = torch.randperm(size, generator=gen).to(device)
        for k in range(K):
            step(perm[k * mb:(k + 1) * mb])
            samples += mb
            sync()
            if time.perf_counter() - start >= seconds:
                return samples / (time.perf_counter() - start), mb


# --- 3. marl through launch ------------------------------------------------------------------

class TimedLogger(RunLogger):
    """marl's RunLogger, its console lines kept aside, that notes when each iteration is logged."""

    def __init__(self, cfg: Config, agent_ids):
        self.lines = io.StringIO()
        super().__init__(cfg, agent_ids, out=self.lines)
        self.marks: list[tuple[float, int, dict]] = []  # (time, global step, that iteration's scalars)

    def scalars(self, values: dict, step: int) -> None:
        super().scalars(values, step)
        if "charts/SPS" in values:  # once per iteration, at its end
            self.marks.append((time.perf_counter(), step, dict(values)))


def marl_main(seconds: float, result: dict):
    """rank 0's main: actors collecting only, then the real sync training loop."""

    def rank0_main(cfg: Config, info, learner_group, device, control) -> int:
        from marl.coordinator import ActorPool, Coordinator
        from marl.learner import Learner, LearnerGroup

        pool = ActorPool(cfg, info, log=say)
        weights = build_model(specs_of(cfg, info), network_of(cfg)).state_dict()
        pool.collect(0, weights)  # warm-up: the actors build their envs, the first weights travel
        steps, busy, requests, start = 0, 0.0, 0, time.perf_counter()
        while requests < 2 or time.perf_counter() - start < seconds:
            control.stop.check()  # Ctrl-C or SIGTERM: stop here, as the coordinator does between iterations
            rollouts = pool.collect(0, weights)
            if pool.live < cfg.actors:
                return 1
            steps += sum(r.steps for r in rollouts)
            busy += max(r.collect_seconds for r in rollouts)
            requests += 1
        wall = time.perf_counter() - start
        result["collect"] = {"rate": steps / wall, "busy": busy / wall, "requests": requests}
        del pool, rollouts
        say("3/4 marl sync training (the real coordinator loop)")
        learners = LearnerGroup(Learner(cfg, info, learner_group, device))
        logger = TimedLogger(cfg, info.agent_ids)
        try:
            coordinator = Coordinator(cfg, info, learners, logger, control.clock, control.stop.check)
            res = coordinator.run()
            control.peers_lost = res.lost_actors > 0
            learners.stop()
        except BaseException:
            sys.stderr.write(logger.lines.getvalue()[-3000:])
            raise
        finally:
            logger.close()
        if res.lost_actors:
            sys.stderr.write(logger.lines.getvalue()[-3000:])
            return 1
        marks = logger.marks[1:]  # the first iteration builds the actors and sends the first weights
        (t0, s0, _), (t1, s1, _) = logger.marks[0], logger.marks[-1]
        perf = {k: sum(m[2][f"perf/{k}_seconds"] for m in marks) / len(marks) for k in ("collect", "learn", "publish")}
        result["train"] = {"rate": (s1 - s0) / (t1 - t0), "iterations": len(marks), "perf": perf,
                           "samples": sum(m[2]["perf/samples_per_update"] for m in marks) / len(marks)}
        return 0

    return rank0_main


# --- 4. bytes per rollout over RPC -----------------------------------------------------------

def _wire_bytes(t: torch.Tensor) -> int:
    """What TensorPipe sends for a CPU tensor: its storage, except that a tensor using under half of
    a storage of 8 KiB or more is cloned first (cloneSparseTensors, torch/csrc/distributed/rpc/utils.cpp)."""
    storage, useful = t.untyped_storage().nbytes(), t.numel() * t.element_size()
    return useful if storage >= 8 * 1024 and storage >= 2 * useful else storage


def rpc_bytes(obj) -> tuple[int, str]:
    """Bytes of `obj` as torch RPC serializes it, and how they were counted."""
    try:
        from torch.distributed.rpc.internal import _internal_rpc_pickler

        payload, tensors = _internal_rpc_pickler.serialize(obj)
        return len(payload) + sum(_wire_bytes(t) for t in tensors), "torch RPC's pickler (payload + tensor storages)"
    except Exception as e:  # noqa: BLE001 - a torch without RPC, or a changed internal API
        buf = io.BytesIO()
        torch.save(obj, buf)
        return buf.tell(), f"torch.save into a BytesIO as a stand-in (RPC's pickler unusable: {type(e).__name__})"


def rollout_bytes(cfg: Config, info) -> dict:
    worker = RolloutWorker(cfg, info, 0)
    try:
        weights = worker.policy.state_dict()
        rollout = worker.collect(0, weights)
    finally:
        worker.env.close()
    u8, how = rpc_bytes(rollout)
    f32_trajectories = {name: {**tr, "obs": {k: v.float() if v.dtype == torch.uint8 else v for k, v in tr["obs"].items()}}
                        for name, tr in rollout.trajectories.items()}
    f32, how32 = rpc_bytes(dataclasses.replace(rollout, trajectories=f32_trajectories))
    frames = sum(v.numel() for tr in rollout.trajectories.values() for v in tr["obs"].values())
    (tr,) = rollout.trajectories.values()  # the one shared policy
    (frames_tensor,) = tr["obs"].values()  # its one observation leaf, [T, E, n, 4, 84, 84]
    return {"uint8": u8, "float32": f32, "how": how if how == how32 else f"{how}; float32: {how32}",
            "frames_bytes": frames, "shape": tuple(frames_tensor.shape), "weights": rpc_bytes(weights)[0]}


# --- the run ---------------------------------------------------------------------------------

def main() -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--game", default="ALE/Breakout-v5", help="an ALE/ id")
    p.add_argument("--envs", type=int, default=None, help="env copies in all, over the 2 actors (default 8; 2 with --smoke)")
    p.add_argument("--seconds", type=float, default=None, help="seconds per measurement (default 10; 0.3 with --smoke)")
    p.add_argument("--smoke", action="store_true", help="tiny sizes (8 steps per request, 1 epoch), a few seconds in all: for CI")
    args = p.parse_args()
    n = args.envs if args.envs is not None else (2 if args.smoke else 8)
    seconds = args.seconds if args.seconds is not None else (0.3 if args.smoke else 10.0)
    if not args.game.startswith("ALE/"):
        p.error("--game must be an ALE/ id (ale_py's vector env is one side of the comparison)")
    if n < ACTORS or n % ACTORS:
        p.error(f"--envs must be a multiple of the {ACTORS} actors")
    if seconds <= 0:
        p.error("--seconds must be positive")
    torch.set_num_threads(1)  # as every marl rank
    base = Config(**load_toml(str(ROOT / "configs" / "atari.toml")))
    logdir = tempfile.mkdtemp(prefix="marl-atari-bench-")
    try:
        cfg = dataclasses.replace(base, env=args.game, agents=1, actors=ACTORS, envs_per_actor=n // ACTORS, learners=1,
                                  mode="sync", rollout="steps", num_steps=8 if args.smoke else base.num_steps,
                                  update_epochs=1 if args.smoke else base.update_epochs,
                                  logdir=logdir, run_name="bench", checkpoint_every=0, target_return=None)
        try:
            cfg = validate(cfg, gpus=torch.cuda.device_count())
            info = describe(cfg.env, cfg.agents, cfg.env_kwargs, cfg.obs_keys, cfg.wrappers)
        except (UsageError, EnvError) as e:
            print(f"atari_throughput: error: {e}", file=sys.stderr)
            return 2
        specs = specs_of(cfg, info)
        check_network(specs, network_of(cfg))
        params = sum(q.numel() for q in build_model(specs, network_of(cfg)).parameters())
        return run(cfg, info, n, seconds, params)
    finally:
        shutil.rmtree(logdir, ignore_errors=True)


def run(cfg: Config, info, n: int, seconds: float, params: int) -> int:
    load = os.getloadavg()[0]
    T, B = cfg.num_steps, cfg.num_steps * n
    say(f"1/4 env stepping, {n} envs, {seconds:g} s each side")
    env = env_rates(cfg, n, seconds, cfg.seed)
    say("2/4 one-process roofline: collect, then PPO updates")
    roof = roofline(cfg, info, n, seconds)
    say("4/4 bytes of one rollout")  # before launch: the actors are forked from this process
    sizes = rollout_bytes(cfg, info)
    # The roofline's PPO iteration: collect a batch, then train update_epochs passes over it.
    iter_seconds = B / roof["collect"] + cfg.update_epochs * B / roof["update"]
    roof_ppo = B / iter_seconds
    # Enough training iterations for `seconds`, at the roofline's pace, plus the first one (not timed).
    iterations = max(2, min(50, math.ceil(seconds / iter_seconds)))
    cfg = dataclasses.replace(cfg, total_steps=iterations * B + 1)
    say(f"3/4 marl via launch: {cfg.actors} actors x {cfg.envs_per_actor} envs, 1 learner, collection")
    gc.collect()  # ale_py's env threads end when their envs are freed: fork the actors from a process without them
    result: dict = {}
    code = launch(cfg, info, rank0_main=marl_main(seconds, result))
    if code != 0 or "train" not in result:
        print(f"atari_throughput: the marl run failed (exit {code})", file=sys.stderr)
        return code or 1
    col, tr = result["collect"], result["train"]

    print(f"atari_throughput: {cfg.env}, {n} envs (frame skip {FRAME_SKIP}, {'x'.join(map(str, env['shape']))} uint8 frames), "
          f"Nature CNN + {list(cfg.hidden_sizes)} MLPs ({params:,} parameters), {T} steps per request, minibatch "
          f"{roof['minibatch']}, {cfg.update_epochs} epochs | 1 torch thread per process, {os.cpu_count()} cores, "
          f"load {load:.1f} at start | {seconds:g} s per measurement")

    def row(label: str, value: float, unit: str, extra: str = "") -> None:
        print(f"   {label:<52}{value:>12,.0f} {unit}{extra}")

    print("1. env stepping alone, random actions                        env steps/s       frames/s")
    row("ale_py AtariVectorEnv (C++ threads)", env["ale_py"], "", f"  {env['ale_py'] * FRAME_SKIP:>12,.0f}")
    if env["gym_missing"] is None:
        row("Gymnasium AtariPreprocessing + FrameStack, sync", env["gym"], "", f"  {env['gym'] * FRAME_SKIP:>12,.0f}")
        print(f"   ratio ale_py / Gymnasium: {env['ale_py'] / env['gym']:.2f}")
    else:
        print(f"   ratio ale_py / Gymnasium: n/a (the Gymnasium side could not be built: {env['gym_missing']})")
    where = "GPU" if torch.cuda.is_available() else "CPU"
    print(f"2. one-process roofline: ale_py envs + the CNN, no RPC ({where} update)")
    row("collect: env step + forward + sample", roof["collect"], "agent-steps/s")
    row(f"PPO update: minibatch {roof['minibatch']}, fwd + bwd + Adam", roof["update"], "samples/s")
    row(f"PPO iteration: collect {B:,} + {cfg.update_epochs} epochs over them", roof_ppo, "agent-steps/s")
    learn_share = cfg.update_epochs * B / roof["update"] / iter_seconds
    print(f"   ratio update samples/s / collect agent-steps/s: {roof['update'] / roof['collect']:.2f} "
          f"(learning is {learn_share:.0%} of a roofline PPO iteration)")
    print(f"3. marl via launch: {cfg.actors} actors x {cfg.envs_per_actor} envs over RPC, 1 learner, sync")
    row(f"collection only ({col['requests']} requests)", col["rate"], "agent-steps/s",
        f"  (actors busy {col['busy']:.0%} of the wall time)")
    row(f"training: collect + learn + publish ({tr['iterations']} iterations)", tr["rate"], "agent-steps/s")
    perf = tr["perf"]
    learned = tr["samples"] * cfg.update_epochs / perf["learn"]  # the learner's own samples/s, minibatch steps only
    print(f"   per iteration: collect {perf['collect'] * 1e3:,.0f} ms, learn {perf['learn'] * 1e3:,.0f} ms, "
          f"publish {perf['publish'] * 1e3:,.0f} ms; the learner trains {learned:,.0f} samples/s "
          f"({learned / roof['update']:.2f}x the roofline update)")
    print(f"   ratio marl collection / roofline collect: {col['rate'] / roof['collect']:.2f}")
    print(f"   ratio marl training / roofline PPO iteration: {tr['rate'] / roof_ppo:.2f}")
    shape = "x".join(map(str, sizes["shape"]))
    print(f"4. bytes of one actor's rollout over RPC (obs {shape}), counted with {sizes['how']}")
    row("uint8 frames (as marl sends them)", sizes["uint8"], "bytes")
    row("float32 frames", sizes["float32"], "bytes")
    print(f"   frames are {sizes['frames_bytes'] / sizes['uint8']:.1%} of the uint8 rollout; a new policy's weights "
          f"add {sizes['weights']:,} bytes per actor")
    print(f"   ratio float32 / uint8: {sizes['float32'] / sizes['uint8']:.2f}")
    return 0


if __name__ == "__main__":
    code = main()
    # As train.py: every child is joined by now; skip torch's slow (and now and then aborting) teardown.
    exit_now(code)
