"""The synchronous client: one or several kmrun serve endpoints, requests spread by task.

An endpoint is "http://HOST:PORT" or "unix:/path/to.sock". Several endpoints (one server per
node, e.g. from the Slurm script's endpoints file) share the work by task: a task always goes
to the same endpoint (its reference and baselines stay warm there); an endpoint that cannot be
reached passes its tasks to the next. 429 and 503 answers are retried after the server's
Retry-After (or an exponential backoff with jitter), as are refused connections.
"""
import hashlib
import http.client
import json
import os
import queue
import random
import socket
import threading
import time
import zlib

DEFAULT_TIMEOUT = 3600.0


class KmrunError(Exception):
    """A request the server refused (status, its error text) or could not be made."""

    def __init__(self, message, status=None, body=None):
        super().__init__(message)
        self.status = status
        self.body = body


class _UnixConnection(http.client.HTTPConnection):
    def __init__(self, path, timeout):
        super().__init__("localhost", timeout=timeout)
        self._path = path

    def connect(self):
        s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        s.settimeout(self.timeout)
        s.connect(self._path)
        self.sock = s


def _read_token(path):
    path = os.path.expanduser(path)
    st = os.stat(path)
    if st.st_mode & 0o077:
        raise KmrunError(f"{path}: a token file must be readable by its owner only (chmod 600)")
    for line in open(path, encoding="utf-8"):
        line = line.strip()
        if line and not line.startswith("#"):
            return line.split()[-1]  # "SECRET" or "NAME SECRET"
    raise KmrunError(f"{path}: no token in it")


class Endpoint:
    """One server: its address and token."""

    def __init__(self, url, token=None, token_file=None, timeout=DEFAULT_TIMEOUT):
        self.url = url.rstrip("/")
        if token is None and token_file:
            token = _read_token(token_file)
        self.token = token
        self.timeout = timeout

    def __repr__(self):
        return f"Endpoint({self.url!r})"

    def _connect(self):
        if self.url.startswith("unix:"):
            return _UnixConnection(self.url[5:], self.timeout)
        rest = self.url.split("://", 1)[-1]
        host, _, port = rest.partition(":")
        return http.client.HTTPConnection(host, int(port or 80), timeout=self.timeout)

    def open(self, method, path, body=None):
        """Sends one request; returns (connection, response) with the body unread."""
        conn = self._connect()
        headers = {"Accept": "application/json"}
        data = None
        if body is not None:
            data = json.dumps(body).encode()
            headers["Content-Type"] = "application/json"
        if self.token:
            headers["Authorization"] = "Bearer " + self.token
        conn.request(method, path, body=data, headers=headers)
        return conn, conn.getresponse()


def load_endpoints(path, token=None, token_file=None):
    """An endpoints file: JSON {"endpoints": [{"url", "token_file"?}, ...]} (what the Slurm
    script writes) or one URL a line."""
    text = open(os.path.expanduser(path), encoding="utf-8").read()
    out = []
    try:
        doc = json.loads(text)
    except ValueError:
        doc = None
    if isinstance(doc, dict):
        for e in doc.get("endpoints", []):
            out.append(Endpoint(e["url"], token=token, token_file=e.get("token_file") or token_file))
    else:
        for line in text.splitlines():
            line = line.strip()
            if line and not line.startswith("#"):
                out.append(Endpoint(line, token=token, token_file=token_file))
    if not out:
        raise KmrunError(f"{path}: no endpoint in it")
    return out


class Client:
    """Client(url | [urls] | [Endpoint], token=, token_file=, retries=8, backoff=0.5)."""

    def __init__(self, endpoints, token=None, token_file=None, retries=8, backoff=0.5, timeout=DEFAULT_TIMEOUT):
        if isinstance(endpoints, (str, Endpoint)):
            endpoints = [endpoints]
        token = token or os.environ.get("KMRUN_TOKEN")
        token_file = token_file or os.environ.get("KMRUN_TOKEN_FILE")
        self.endpoints = [e if isinstance(e, Endpoint) else Endpoint(e, token, token_file, timeout) for e in endpoints]
        self.retries = retries
        self.backoff = backoff

    @classmethod
    def from_endpoints_file(cls, path, **kw):
        return cls(load_endpoints(path, kw.pop("token", None), kw.pop("token_file", None)), **kw)

    # ---- transport ----------------------------------------------------------------

    def _wait(self, attempt, retry_after):
        if retry_after:
            try:
                return min(float(retry_after), 60.0)
            except ValueError:
                pass
        return min(self.backoff * (2 ** attempt), 30.0) * (0.5 + random.random())

    def _request(self, ep, method, path, body=None, stream=False):
        """-> (conn, response) for a 2xx answer; retries 429/503 and refused connections."""
        last = None
        for attempt in range(self.retries + 1):
            try:
                conn, resp = ep.open(method, path, body)
            except (ConnectionError, socket.timeout, FileNotFoundError, OSError) as e:
                last = KmrunError(f"{ep.url}: {e}")
                time.sleep(self._wait(attempt, None))
                continue
            if resp.status in (429, 503):
                text = resp.read().decode("utf-8", "replace")
                conn.close()
                last = KmrunError(f"{ep.url}{path}: {resp.status} {text.strip()}", resp.status, text)
                time.sleep(self._wait(attempt, resp.getheader("Retry-After")))
                continue
            if resp.status >= 400:
                text = resp.read().decode("utf-8", "replace")
                conn.close()
                try:
                    msg = json.loads(text).get("error", text)
                except ValueError:
                    msg = text
                raise KmrunError(f"{ep.url}{path}: {resp.status} {msg}", resp.status, text)
            return conn, resp
        raise last

    def _json(self, ep, method, path, body=None):
        conn, resp = self._request(ep, method, path, body)
        try:
            return json.loads(resp.read())
        finally:
            conn.close()

    # ---- spreading by task -----------------------------------------------------------

    def endpoint_for(self, task):
        """The endpoint a task goes to (stable: a hash of its id)."""
        return self.endpoints[zlib.crc32(str(task).encode()) % len(self.endpoints)]

    def _split(self, requests):
        groups = {}
        for i, r in enumerate(requests):
            ep = self.endpoint_for(r.get("task"))
            groups.setdefault(id(ep), (ep, []))[1].append(i)
        return list(groups.values())

    @staticmethod
    def _body(requests, idx, deadline_s, reward, fresh, stream):
        b = {"requests": [requests[i] for i in idx], "stream": stream}
        if deadline_s is not None:
            b["deadline_s"] = deadline_s
        if reward is not None:
            b["reward"] = reward
        if fresh:
            b["fresh"] = True
        return b

    def _fallbacks(self, ep):
        i = self.endpoints.index(ep)
        return self.endpoints[i:] + self.endpoints[:i]

    def _evaluate_on(self, ep, body):
        last = None
        for e in self._fallbacks(ep):
            try:
                return self._json(e, "POST", "/v1/evaluate", body)["verdicts"]
            except KmrunError as err:
                if err.status is not None:
                    raise
                last = err
        raise last

    # ---- the API ------------------------------------------------------------------

    def evaluate(self, requests, deadline_s=None, reward=None, fresh=False):
        """Verdicts for requests ({task, candidate: {kernel_cu, launch_lua, params}} or
        {task, completion}), in their order."""
        requests = list(requests)
        out = [None] * len(requests)
        errors = []

        def run(ep, idx):
            try:
                for i, v in zip(idx, self._evaluate_on(ep, self._body(requests, idx, deadline_s, reward, fresh, False))):
                    v["index"] = i
                    out[i] = v
            except KmrunError as e:
                errors.append(e)

        groups = self._split(requests)
        if len(groups) == 1:
            run(*groups[0])
        else:
            threads = [threading.Thread(target=run, args=g) for g in groups]
            for t in threads:
                t.start()
            for t in threads:
                t.join()
        if errors:
            raise errors[0]
        return out

    def stream(self, requests, deadline_s=None, reward=None, fresh=False):
        """Verdicts as they finish (each with its request's index), from every endpoint."""
        requests = list(requests)
        q = queue.Queue()
        groups = self._split(requests)

        def run(ep, idx):
            try:
                conn, resp = self._request(ep, "POST", "/v1/evaluate",
                                           self._body(requests, idx, deadline_s, reward, fresh, True))
                try:
                    for line in resp:
                        line = line.strip()
                        if line:
                            v = json.loads(line)
                            v["index"] = idx[v["index"]]
                            q.put(v)
                finally:
                    conn.close()
            except Exception as e:  # handed to the caller's thread
                q.put(e)
            q.put(None)

        for g in groups:
            threading.Thread(target=run, args=g, daemon=True).start()
        left = len(groups)
        while left:
            v = q.get()
            if v is None:
                left -= 1
            elif isinstance(v, Exception):
                raise v
            else:
                yield v

    def submit(self, requests, deadline_s=None, reward=None, fresh=False):
        """A job: {endpoint -> job id, ...} handle for poll and cancel."""
        requests = list(requests)
        handle = {"n": len(requests), "parts": []}
        for ep, idx in self._split(requests):
            r = self._json(ep, "POST", "/v1/jobs", self._body(requests, idx, deadline_s, reward, fresh, False))
            handle["parts"].append({"endpoint": ep, "job": r["job"], "index": idx})
        return handle

    def _gather(self, handle, method):
        out, done = [None] * handle["n"], True
        for p in handle["parts"]:
            view = self._json(p["endpoint"], method, "/v1/jobs/" + p["job"])
            done = done and view["done"]
            for i, v in zip(p["index"], view["verdicts"]):
                if v is not None:
                    v["index"] = i
                out[i] = v
        return {"done": done, "verdicts": out, "judged": sum(v is not None for v in out), "total": handle["n"]}

    def poll(self, handle):
        """{done, verdicts (None where not judged yet), judged, total}."""
        return self._gather(handle, "GET")

    def cancel(self, handle):
        """Cancels a job: its unjudged requests come back not_judged."""
        return self._gather(handle, "DELETE")

    def tasks(self):
        seen, out = set(), []
        for ep in self.endpoints:
            for t in self._json(ep, "GET", "/v1/tasks")["tasks"]:
                if t["id"] not in seen:
                    seen.add(t["id"])
                    out.append(t)
        return out

    def health(self):
        return [self._json(ep, "GET", "/v1/health") for ep in self.endpoints]

    def metrics(self):
        out = []
        for ep in self.endpoints:
            conn, resp = self._request(ep, "GET", "/metrics")
            out.append(resp.read().decode())
            conn.close()
        return out


def content_id(request):
    """A request's digest on this side (a cache key for a trainer's own bookkeeping)."""
    return hashlib.sha256(json.dumps(request, sort_keys=True).encode()).hexdigest()
