#!/usr/bin/env python3
"""bench/service_bench.py — the trainer's side of bench/service_bench.sh: candidates
(bench/service_cands.lua's JSON) sent at once from kmrun_client to a running
`kmrun serve --listen`, and what came back measured. Standard library only.

Usage: python3 bench/service_bench.py MODE --url URL --token-file F --cands FILE [options] --out OUT.json
  MODE batch  every candidate in one batch, streamed, --repeat times (each file a new tag):
              batch latency (first request sent to last verdict), each verdict's latency,
              statuses by cause, evaluations per GPU-hour (--gpus)
  MODE fault  --total N evaluations in batches of --batch, resent until answered (a server
              restart loses a batch in flight); counts infrastructure events charged to a
              candidate: a candidate meant to be correct that came back other than correct
              (compile-only: compiled) with cause candidate, or a verdict missing
  MODE soak   --total N evaluations in batches of --batch; samples --pids' RSS (with their
              children) and the GPUs' memory (nvidia-smi) after each batch
"""
import argparse
import json
import os
import subprocess
import sys
import time

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "python"))
from kmrun_client import Client, KmrunError  # noqa: E402


def pct(xs, q):
    xs = sorted(xs)
    if not xs:
        return None
    return xs[min(len(xs) - 1, max(0, int(round(q * (len(xs) - 1)))))]


def by_cause(verdicts):
    out = {}
    for v in verdicts:
        if v is None:
            key = "missing"
        else:
            key = f"{v.get('cause')}:{v.get('status')}"
        out[key] = out.get(key, 0) + 1
    return dict(sorted(out.items()))


def requests_of(cands, reward="fast_p"):
    return [{"task": c["task"], "candidate": c["candidate"], "reward": reward} for c in cands]


def load(path):
    return json.load(open(path))


def run_batch(client, cands, deadline_s=None):
    """One batch, streamed: (seconds, verdicts in order, each verdict's latency)."""
    reqs = requests_of(cands)
    out, lat = [None] * len(reqs), []
    t0 = time.time()
    for v in client.stream(reqs, deadline_s=deadline_s):
        out[v["index"]] = v
        lat.append(time.time() - t0)
    return time.time() - t0, out, lat


def mode_batch(a, client):
    files = a.cands.split(",")
    batches = []
    for i in range(a.repeat):
        cands = load(files[i % len(files)])
        secs, verdicts, lat = run_batch(client, cands, a.deadline_s)
        new = sum(1 for v in verdicts if v and not v.get("cached") and not v.get("shared"))
        # meant correct and judged correct, or meant buggy and judged not correct
        agree = sum(1 for c, v in zip(cands, verdicts) if v and (v.get("status") == "correct") == (c["expect"] == "correct"))
        batches.append({"seconds": secs, "n": len(cands), "new": new, "agree_with_expect": agree,
                        "verdict_latency_p50": pct(lat, 0.5), "verdict_latency_p99": pct(lat, 0.99),
                        "by_cause": by_cause(verdicts),
                        "statuses": [v.get("status") if v else None for v in verdicts]})
        print(f"batch {i + 1}/{a.repeat}: {len(cands)} candidates in {secs:.2f} s; {by_cause(verdicts)}", flush=True)
    secs = [b["seconds"] for b in batches]
    total_new = sum(b["new"] for b in batches)
    res = {"mode": "batch", "batches": batches, "batch_latency_p50": pct(secs, 0.5), "batch_latency_p99": pct(secs, 0.99),
           "evaluations_per_gpu_hour": total_new / (sum(secs) * a.gpus / 3600.0) if secs else None,
           "gpus": a.gpus, "health": client.health()}
    return res


def mode_fault(a, client):
    cands = load(a.cands)
    sent, answered, charged, missing, batches = 0, 0, [], 0, 0
    statuses = {}
    i = 0
    while sent < a.total:
        chunk = [cands[(i + k) % len(cands)] for k in range(min(a.batch, a.total - sent))]
        i += len(chunk)
        for attempt in range(20):
            try:
                verdicts = client.evaluate(requests_of(chunk), deadline_s=a.deadline_s)
                break
            except (KmrunError, OSError, ConnectionError) as e:  # the server restarted under us
                print(f"batch {batches + 1}: {e}; sent again", flush=True)
                time.sleep(1)
        else:
            verdicts = [None] * len(chunk)
        batches += 1
        sent += len(chunk)
        for c, v in zip(chunk, verdicts):
            if v is None:
                missing += 1
                continue
            answered += 1
            key = f"{v.get('cause')}:{v.get('status')}"
            statuses[key] = statuses.get(key, 0) + 1
            good = v.get("status") == ("compiled" if v.get("judged") == "compile_only" else "correct")
            if c["expect"] == "correct" and v.get("cause") == "candidate" and not good:
                charged.append({"task": c["task"], "status": v.get("status"), "feedback": (v.get("feedback") or "")[:300]})
        print(f"fault: {sent}/{a.total} sent, {answered} answered, {len(charged)} charged wrongly", flush=True)
    return {"mode": "fault", "sent": sent, "answered": answered, "missing": missing,
            "infra_charged_to_candidate": len(charged), "charged": charged[:50], "statuses": dict(sorted(statuses.items()))}


def rss_kb(pid):
    """RSS of pid and its descendants, in kB."""
    total = 0
    try:
        kids = subprocess.run(["pgrep", "-P", str(pid)], capture_output=True, text=True).stdout.split()
    except FileNotFoundError:
        kids = []
    for p in [str(pid)] + kids:
        try:
            for line in open(f"/proc/{p}/status"):
                if line.startswith("VmRSS:"):
                    total += int(line.split()[1])
        except OSError:
            pass
    return total


def gpu_mem_mib():
    try:
        out = subprocess.run(["nvidia-smi", "--query-gpu=memory.used", "--format=csv,noheader,nounits"],
                             capture_output=True, text=True, timeout=20).stdout
        return sum(int(x) for x in out.split())
    except (FileNotFoundError, subprocess.TimeoutExpired, ValueError):
        return None


def mode_soak(a, client):
    cands = load(a.cands)
    pids = [int(p) for p in a.pids.split(",") if p] if a.pids else []
    samples, done, i = [], 0, 0
    while done < a.total:
        chunk = [cands[(i + k) % len(cands)] for k in range(min(a.batch, a.total - done))]
        i += len(chunk)
        client.evaluate(requests_of(chunk), fresh=True)
        done += len(chunk)
        samples.append({"evaluations": done, "rss_kb": sum(rss_kb(p) for p in pids), "gpu_mib": gpu_mem_mib()})
        print(f"soak: {done}/{a.total}; {samples[-1]}", flush=True)
    warm = [s for s in samples if s["evaluations"] >= a.warmup] or samples

    def growth(key):
        xs = [s[key] for s in warm if s[key] is not None]
        if len(xs) < 2 or not xs[0]:
            return None
        return (xs[-1] - xs[0]) / xs[0]
    return {"mode": "soak", "evaluations": done, "samples": samples, "rss_growth": growth("rss_kb"),
            "gpu_memory_growth": growth("gpu_mib"), "warmup": a.warmup}


def main():
    p = argparse.ArgumentParser(prog="bench/service_bench.py", description=__doc__.split("\n\n")[0],
                                usage="python3 bench/service_bench.py {batch,fault,soak} --url URL --cands FILE --out OUT.json [options]")
    p.add_argument("mode", choices=["batch", "fault", "soak"])
    p.add_argument("--url", required=True)
    p.add_argument("--token-file")
    p.add_argument("--cands", required=True, help="a candidates file (batch: several, comma-separated, one per repeat)")
    p.add_argument("--out", required=True)
    p.add_argument("--repeat", type=int, default=5)
    p.add_argument("--gpus", type=int, default=1)
    p.add_argument("--total", type=int, default=2000)
    p.add_argument("--batch", type=int, default=200)
    p.add_argument("--deadline-s", type=float)
    p.add_argument("--pids", default="")
    p.add_argument("--warmup", type=int, default=1000)
    a = p.parse_args()
    client = Client(a.url, token_file=a.token_file, retries=30, backoff=0.5)
    res = {"batch": mode_batch, "fault": mode_fault, "soak": mode_soak}[a.mode](a, client)
    with open(a.out, "w") as f:
        json.dump(res, f, indent=1)
    print(json.dumps({k: v for k, v in res.items() if k not in ("batches", "samples", "charged", "health")}))


if __name__ == "__main__":
    main()
