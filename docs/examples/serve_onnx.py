"""Play a policy exported by `python -m marl.export` with onnxruntime, NumPy and Gymnasium alone (no marl,
no torch): what a game engine, a robot or a server does with the file.

    python -m marl.export runs/<run> --out policy.onnx
    python docs/examples/serve_onnx.py policy.onnx --env CartPole-v1 --episodes 5

The file's metadata says what it takes: its inputs (the observation's leaves by name, "action_mask"
where the policy takes one, "state" for a recurrent network) and the recurrent state's size. Its first
output is the action the env takes, batch first.
"""

from __future__ import annotations

import argparse
import json

import gymnasium as gym
import numpy as np
import onnxruntime


def leaf(obs, name: str) -> np.ndarray:
    """One input of the network from a Gymnasium observation: the whole of a plain space ("obs"), else
    the Dict's entry at the keys the name joins with "."."""
    if name == "obs":
        return np.asarray(obs)
    for key in name.split("."):
        obs = obs[key]
    return np.asarray(obs)


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
    types = {i.name: i.type for i in session.get_inputs()}  # e.g. tensor(float), tensor(uint8), tensor(int64)
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
                if name == "state":
                    feed[name] = state
                elif name == "action_mask":
                    feed[name] = np.asarray(info["action_mask"] if "action_mask" in info else obs["action_mask"], bool)[None]
                else:
                    dtype = {"tensor(uint8)": np.uint8, "tensor(int64)": np.int64}.get(types[name], np.float32)
                    feed[name] = leaf(obs, name).astype(dtype)[None]  # a batch of one
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
