"""A kernel-writing environment of the Gymnasium / OpenEnv shape, judged by kmrun.

    env = KernelEnv(Client(url), tasks=["l1_relu"], max_turns=4)
    obs, info = env.reset(seed=0)                  # obs: the prompt a model sees (text)
    obs, reward, terminated, truncated, info = env.step(model_reply)

An episode is one task: reset picks it (options={"task": id}, else one of `tasks` by the
seed) and returns its prompt; each step sends the model's reply (a completion: fenced cuda and
lua blocks) to the judge and returns the verdict's feedback as the next observation. It
terminates when the candidate is correct (or, on a judge without a GPU, compiles: the server
judges compile-only there and says so); it is truncated after max_turns. info holds the
verdict; info["masked"] is True where its cause is infra (the reward is then 0.0 and says
nothing about the reply: mask that step).
"""
import random

from .client import Client


class KernelEnv:
    def __init__(self, client, tasks=None, max_turns=4, reward="weighted"):
        self.client = client if isinstance(client, Client) else Client(client)
        self._catalog = {t["id"]: t for t in self.client.tasks()}
        self.tasks = list(tasks) if tasks else sorted(self._catalog)
        self.max_turns = max_turns
        self.reward = reward
        self.task = None
        self.turn = 0

    @staticmethod
    def prompt_text(entry):
        msgs = entry.get("prompt") or []
        return "\n\n".join(m.get("content", "") for m in msgs if m.get("role") != "system") or entry["id"]

    def reset(self, seed=None, options=None):
        rng = random.Random(seed)
        options = options or {}
        self.task = options.get("task") or rng.choice(self.tasks)
        self.turn = 0
        entry = self._catalog[self.task]
        return self.prompt_text(entry), {"task": self.task, "messages": entry.get("prompt")}

    def step(self, action):
        if self.task is None:
            raise RuntimeError("call reset() first")
        self.turn += 1
        v = self.client.evaluate([{"task": self.task, "completion": action}], reward=self.reward)[0]
        masked = v.get("cause") == "infra"
        reward = 0.0 if masked or v.get("reward") is None else float(v["reward"])
        done_status = "compiled" if v.get("judged") == "compile_only" else "correct"
        terminated = v.get("status") == done_status
        truncated = not terminated and self.turn >= self.max_turns
        obs = f"Verdict: {v.get('status')}.\n{v.get('feedback') or ''}"
        return obs, reward, terminated, truncated, {"verdict": v, "masked": masked, "turn": self.turn}

    def close(self):
        pass
