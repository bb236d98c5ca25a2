#!/usr/bin/env python3
"""A reset/step loop over KernelEnv with a scripted "model": the first reply has no code,
the second is the task's starter. Needs a running `kmrun serve --listen` (KMRUN_URL,
KMRUN_TOKEN_FILE).

    python3 examples/env_loop.py [KMRUN_TREE]
"""
import os
import sys

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))
from kmrun_client import Client  # noqa: E402
from kmrun_client.env import KernelEnv  # noqa: E402

tree = sys.argv[1] if len(sys.argv) > 1 else "."
kernel = open(os.path.join(tree, "tasks/l1_relu/starter/kernel.cu")).read()
launch = open(os.path.join(tree, "tasks/l1_relu/starter/launch.lua")).read()
replies = ["Let me think about it first.", f"```cuda\n{kernel}\n```\n```lua\n{launch}\n```"]

env = KernelEnv(Client(os.environ.get("KMRUN_URL", "http://127.0.0.1:8470")), tasks=["l1_relu"], max_turns=4)
obs, info = env.reset(seed=0)
print(f"task {info['task']}: prompt of {len(obs)} characters")
for turn, reply in enumerate(replies, 1):
    obs, reward, terminated, truncated, info = env.step(reply)
    v = info["verdict"]
    print(f"turn {turn}: {v['status']} (cause {v['cause']}, judged {v['judged']}) reward {reward:.2f}"
          f" terminated={terminated} truncated={truncated}")
    if terminated or truncated:
        break
assert terminated, "the starter ends the episode"
