"""kmrun_client against a real `kmrun serve --listen` (started by tests/lua/test_python_client.lua,
which passes KMRUN_URL, KMRUN_TOKEN_FILE and KMRUN_TREE), and against small stand-in servers for
what a healthy kmrun does not do on demand (429 and 503 answers, an endpoint that is down)."""
import asyncio
import http.server
import json
import os
import tempfile
import threading
import unittest

from kmrun_client import AsyncClient, Client, KmrunError, load_endpoints

URL = os.environ["KMRUN_URL"]
TOKEN_FILE = os.environ["KMRUN_TOKEN_FILE"]
TREE = os.environ["KMRUN_TREE"]


def starter(task):
    d = os.path.join(TREE, "tasks", task, "starter")
    return {"kernel_cu": open(os.path.join(d, "kernel.cu")).read(), "launch_lua": open(os.path.join(d, "launch.lua")).read()}


def variant(task, tag):
    c = starter(task)
    c["kernel_cu"] += f"\n// {tag}\n"
    return {"task": task, "candidate": c}


class Real(unittest.TestCase):
    def setUp(self):
        self.c = Client(URL, token_file=TOKEN_FILE)

    def test_evaluate_in_order(self):
        reqs = [variant("l1_relu", "a"), {"task": "l1_relu", "completion": "no code"}, variant("l1_gelu", "b")]
        vs = self.c.evaluate(reqs, reward="fast_p")
        self.assertEqual([v["index"] for v in vs], [0, 1, 2])
        self.assertEqual([v["status"] for v in vs], ["compiled", "no_code", "compiled"])
        self.assertTrue(all(v["cause"] == "candidate" and v["reward_preset"] == "fast_p" for v in vs))
        self.assertEqual(vs[0]["judged"], "compile_only")

    def test_stream_and_async(self):
        reqs = [variant("l1_relu", f"s{i}") for i in range(4)]
        got = sorted(v["index"] for v in self.c.stream(reqs))
        self.assertEqual(got, [0, 1, 2, 3])

        async def go():
            async with AsyncClient(URL, token_file=TOKEN_FILE) as a:
                vs = await a.evaluate([variant("l1_relu", "async")])
                streamed = [v async for v in a.stream([variant("l1_sigmoid", "as1"), variant("l1_sigmoid", "as2")])]
                return vs, streamed
        vs, streamed = asyncio.run(go())
        self.assertEqual(vs[0]["status"], "compiled")
        self.assertEqual(sorted(v["index"] for v in streamed), [0, 1])

    def test_jobs(self):
        h = self.c.submit([variant("l1_relu", "job1"), variant("l1_gelu", "job2")])
        for _ in range(100):
            p = self.c.poll(h)
            if p["done"]:
                break
        self.assertTrue(p["done"])
        self.assertEqual([v["status"] for v in p["verdicts"]], ["compiled", "compiled"])

    def test_tasks_health_metrics(self):
        ids = {t["id"] for t in self.c.tasks()}
        self.assertIn("l1_relu", ids)
        self.assertEqual(self.c.health()[0]["kind"], "compile_only")
        self.assertIn("kmrun_evaluations_per_second", self.c.metrics()[0])

    def test_refused_requests_raise(self):
        with self.assertRaises(KmrunError) as e:
            self.c.evaluate([{"task": "no_such_task", "completion": "x"}])
        self.assertEqual(e.exception.status, 400)
        with self.assertRaises(KmrunError) as e:
            Client(URL, token="wrong-wrong-wrong-wrong").health()
        self.assertEqual(e.exception.status, 401)

    def test_endpoints_spread_by_task_with_one_down(self):
        with tempfile.NamedTemporaryFile("w", suffix=".json", delete=False) as f:
            json.dump({"endpoints": [{"url": URL, "token_file": TOKEN_FILE},
                                     {"url": "http://127.0.0.1:9", "token_file": TOKEN_FILE}]}, f)
        eps = load_endpoints(f.name)
        os.unlink(f.name)
        c = Client(eps, retries=1, backoff=0.01)
        tasks = ["l1_relu", "l1_gelu", "l1_sigmoid", "l1_softmax", "l1_softplus", "l1_layernorm"]
        where = {t: c.endpoint_for(t).url for t in tasks}
        self.assertEqual(len(set(where.values())), 2, where)  # both endpoints get tasks
        self.assertEqual(where, {t: c.endpoint_for(t).url for t in tasks})  # stable
        vs = c.evaluate([variant(t, "spread") for t in tasks])
        self.assertEqual([v["status"] for v in vs], ["compiled"] * len(tasks))  # the dead one's went on


class Flaky(http.server.BaseHTTPRequestHandler):
    answers = []

    def do_POST(self):
        self.rfile.read(int(self.headers["Content-Length"]))
        code = Flaky.answers.pop(0) if Flaky.answers else 200
        self.send_response(code)
        if code != 200:
            self.send_header("Retry-After", "0")
            body = b'{"error":"busy"}'
        else:
            body = b'{"verdicts":[{"index":0,"status":"compiled","cause":"candidate","reward":0.1}]}'
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, *a):
        pass


class Retries(unittest.TestCase):
    def test_429_and_503_are_retried(self):
        srv = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Flaky)
        threading.Thread(target=srv.serve_forever, daemon=True).start()
        url = f"http://127.0.0.1:{srv.server_address[1]}"
        try:
            Flaky.answers = [429, 503, 429]
            vs = Client(url, backoff=0.01).evaluate([{"task": "t", "completion": "x"}])
            self.assertEqual(vs[0]["status"], "compiled")
            self.assertEqual(Flaky.answers, [])
            Flaky.answers = [429] * 5
            with self.assertRaises(KmrunError) as e:
                Client(url, retries=2, backoff=0.01).evaluate([{"task": "t", "completion": "x"}])
            self.assertEqual(e.exception.status, 429)
        finally:
            srv.shutdown()

    def test_token_file_others_can_read_is_refused(self):
        with tempfile.NamedTemporaryFile("w", delete=False) as f:
            f.write("secret-secret-secret\n")
        os.chmod(f.name, 0o644)
        with self.assertRaises(KmrunError):
            Client("http://127.0.0.1:9", token_file=f.name)
        os.chmod(f.name, 0o600)
        self.assertEqual(Client("http://127.0.0.1:9", token_file=f.name).endpoints[0].token, "secret-secret-secret")
        os.unlink(f.name)


if __name__ == "__main__":
    unittest.main()
