#!/usr/bin/env python3
"""The batch reward function verl's batch reward manager calls, run on a GRPO-sized group:
four replies of a model for one task (two good, one that does not compile, one with no
code), scored in one request. Needs a running `kmrun serve --listen` (KMRUN_URL or
KMRUN_ENDPOINTS, KMRUN_TOKEN_FILE).

    python3 examples/verl_reward.py [KMRUN_TREE]      # KMRUN_TREE: where tasks/ is (for the replies)
"""
import json
import os
import sys

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))
from kmrun_client.verl import compute_score_batch, compute_score  # noqa: E402

tree = sys.argv[1] if len(sys.argv) > 1 else "."
kernel = open(os.path.join(tree, "tasks/l1_relu/starter/kernel.cu")).read()
launch = open(os.path.join(tree, "tasks/l1_relu/starter/launch.lua")).read()
good = f"Here is my kernel.\n```cuda\n{kernel}\n```\n```lua\n{launch}\n```\n"
variant = good.replace("```\n```lua", "// variant\n```\n```lua")
broken = good.replace("```\n```lua", "this is not C++;\n```\n```lua")
replies = [good, variant, broken, "I am not sure how to write this."]
scores = compute_score_batch(["kmrun"] * 4, replies, ["l1_relu"] * 4, [{"task": "l1_relu"}] * 4)
for reply, s in zip(["good", "variant", "broken", "no code"], scores):
    print(f"{reply:8s} {json.dumps(s, sort_keys=True)}")
single = compute_score("kmrun", good, json.dumps({"task": "l1_relu"}))
print("single  ", json.dumps(single, sort_keys=True))
assert scores[0]["compiled"] == 1.0 and scores[2]["compiled"] == 0.0 and scores[3]["format"] == 0.0
assert all(s["kmrun_infra"] == 0.0 for s in scores)
