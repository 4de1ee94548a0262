"""Play a policy exported by `python -m marl.export` with onnxruntime, NumPy and Gymnasium alone (no marl,
no torch): what a game engine, a robot or a server does with the file.

    python -m marl.export runs/<run> --out policy.onnx
    python docs/examples/serve_onnx.py policy.onnx --env CartPole-v1 --episodes 5

The file's metadata says what it takes: its inputs (the observation's leaves by name, with the shape
and dtype of each, "agent_id" where the run had --agent-id-input, "action_mask" where the policy takes
one, "recurrent_state" for a recurrent network) and the recurrent state's size. Its first output is the
action the env takes, batch first.
"""

from __future__ import annotations

import argparse
import json

import gymnasium as gym
import numpy as np
import onnxruntime


def leaf(obs, name: str, shape: list[int], dtype: str) -> np.ndarray:
    """One input of the network from a Gymnasium observation, a batch of one: the whole of a plain space
    ("obs"), else the Dict's (or Tuple's) entry at the keys the name joins with ".", in the leaf's shape
    (MultiDiscrete and MultiBinary flat) and dtype."""
    if name != "obs":
        for key in name.split("."):
            obs = obs[int(key)] if isinstance(obs, tuple) else obs[key]
    return np.asarray(obs).reshape(1, *shape).astype(dtype)


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("policy", help="an ONNX file written by python -m marl.export")
    p.add_argument("--env", default="CartPole-v1")
    p.add_argument("--episodes", type=int, default=5)
    p.add_argument("--seed", type=int, default=0, help="the first episode's reset seed")
    p.add_argument("--json", action="store_true", help="print {\"returns\": [...]} instead")
    args = p.parse_args()

    session = onnxruntime.InferenceSession(args.policy, providers=["CPUExecutionProvider"])
    meta = session.get_modelmeta().custom_metadata_map
    leaves = {x["name"]: x for x in json.loads(meta["marl.leaves"])}
    state_size = int(meta["marl.state_size"])
    env = gym.make(args.env)
    returns = []
    for episode in range(args.episodes):
        obs, info = env.reset(seed=args.seed if episode == 0 else None)
        state = np.zeros((1, state_size), np.float32)  # a recurrent policy starts each episode from zeros
        done, total = False, 0.0
        while not done:
            feed = {}
            for name in json.loads(meta["marl.inputs"]):
                if name == "recurrent_state":
                    feed[name] = state
                elif name == "action_mask":
                    feed[name] = np.asarray(info["action_mask"] if "action_mask" in info else obs["action_mask"], bool)[None]
                elif name == "agent_id":
                    feed[name] = np.zeros(1, np.int64)  # the policy's first agent: a single-agent env has one
                else:
                    feed[name] = leaf(obs, name, leaves[name]["shape"], leaves[name]["dtype"])
            action, _params, *rest = session.run(None, feed)
            if state_size:
                state = rest[0]
            obs, reward, terminated, truncated, info = env.step(action[0])
            total += float(reward)
            done = terminated or truncated
        returns.append(total)
    if args.json:
        print(json.dumps({"returns": returns}))
    else:
        print(f"{args.env}: mean return {np.mean(returns):.1f} over {len(returns)} episodes ({returns})")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
