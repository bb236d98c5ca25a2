"""kmrun as verl's reward function (verl's `custom_reward_function`).

verl calls a reward function per sample, compute_score(data_source, solution_str,
ground_truth, extra_info), or, with its batch reward manager, once per batch with lists:
compute_score(data_sources, solution_strs, ground_truths, extra_infos). Both are here; the
batch form sends the whole batch to the judge at once (GRPO's groups judged together, identical
candidates once). Point verl at this file's function:

    custom_reward_function:
      path: <site-packages>/kmrun_client/verl.py
      name: compute_score_batch          # with reward_model.reward_manager=batch

The task of a sample is extra_info["task"] (and extra_info["precision"]), else ground_truth
(a task id, or JSON {"task": ..., "precision": ...}). The server comes from KMRUN_ENDPOINTS (an
endpoints file) or KMRUN_URL, with KMRUN_TOKEN_FILE; the preset from KMRUN_REWARD
(default weighted). Each result is a dict: "score" (the reward; 0.0 where the cause is infra,
with "kmrun_infra" 1.0 so the trainer can mask that sample) and the verdict's parts, which
verl keeps as reward_extra_info.
"""
import json
import os

from .client import Client

_client = None


def client():
    """The client this process uses (made once from the environment)."""
    global _client
    if _client is None:
        eps = os.environ.get("KMRUN_ENDPOINTS")
        if eps:
            _client = Client.from_endpoints_file(eps)
        else:
            _client = Client(os.environ.get("KMRUN_URL", "http://127.0.0.1:8470"))
    return _client


def _request(solution_str, ground_truth, extra_info):
    info = extra_info or {}
    task, precision = info.get("task"), info.get("precision")
    if task is None:
        task = ground_truth
        if isinstance(ground_truth, str) and ground_truth.lstrip().startswith("{"):
            gt = json.loads(ground_truth)
            task, precision = gt.get("task"), gt.get("precision", precision)
        elif isinstance(ground_truth, dict):
            task, precision = ground_truth.get("task"), ground_truth.get("precision", precision)
    r = {"task": task, "completion": solution_str}
    if precision:
        r["precision"] = precision
    return r


def result(v):
    """A verdict as verl's score dict."""
    parts = v.get("reward_components") or {}
    infra = v.get("cause") == "infra"
    return {
        "score": 0.0 if infra or v.get("reward") is None else float(v["reward"]),
        "kmrun_infra": 1.0 if infra else 0.0,
        "kmrun_status": v.get("status"),
        "format": float(parts.get("format", 0)),
        "compiled": float(parts.get("compiled", 0)),
        "correct": float(parts.get("correct", 0)),
        "speedup": float(parts.get("speedup_eager") or parts.get("speedup") or 0.0),
        "compile_only": 1.0 if v.get("judged") == "compile_only" else 0.0,
    }


def compute_score_batch(data_sources, solution_strs, ground_truths, extra_infos=None, reward=None, deadline_s=None, **kw):
    extra_infos = extra_infos if extra_infos is not None else [None] * len(solution_strs)
    reqs = [_request(s, g, e) for s, g, e in zip(solution_strs, ground_truths, extra_infos)]
    verdicts = client().evaluate(reqs, reward=reward or os.environ.get("KMRUN_REWARD"), deadline_s=deadline_s)
    return [result(v) for v in verdicts]


def compute_score(data_source, solution_str, ground_truth, extra_info=None, **kw):
    """verl's per-sample form (one request per call; prefer the batch form)."""
    return compute_score_batch([data_source], [solution_str], [ground_truth], [extra_info], **kw)[0]
