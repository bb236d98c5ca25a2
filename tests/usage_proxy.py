#!/usr/bin/env python3
"""A recording proxy on loopback for the real-model test (Python 3 standard library only).

    python3 tests/usage_proxy.py PORT_FILE UPSTREAM_BASE --log FILE [--idle SECONDS]

Listens on 127.0.0.1 (an ephemeral port, written to PORT_FILE atomically) and forwards every
GET and POST to UPSTREAM_BASE (e.g. http://127.0.0.1:8080), unchanged both ways. For each
POST it appends one JSON line to FILE, written before the answer goes back:
    {"path", "status", "max_tokens", "tool_choice", "usage": the server's own usage object
     or null, "finish_reason", "tool_calls": how many, "error": the server's error text or null}
so a test can hold a client's accounting against the server's own numbers, and see every
status the server answered. Exits after --idle seconds (default 300) without a request.
"""
import json
import os
import sys
import threading
import time
import urllib.error
import urllib.request
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

UPSTREAM = None
LOG = None
LOCK = threading.Lock()
LAST = [time.monotonic()]


class Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"

    def log_message(self, fmt, *args):
        pass

    def forward(self, method, body=None):
        LAST[0] = time.monotonic()
        headers = {k: v for k, v in self.headers.items() if k.lower() not in ("host", "content-length", "expect")}
        req = urllib.request.Request(UPSTREAM + self.path, data=body, method=method, headers=headers)
        try:
            with urllib.request.urlopen(req, timeout=3600) as r:
                status, data, ctype = r.status, r.read(), r.headers.get("Content-Type", "application/json")
        except urllib.error.HTTPError as e:
            status, data, ctype = e.code, e.read(), e.headers.get("Content-Type", "application/json")
        except OSError as e:
            status, data, ctype = 502, json.dumps({"error": {"message": f"proxy: {e}"}}).encode(), "application/json"
        LAST[0] = time.monotonic()
        return status, data, ctype

    def reply(self, status, data, ctype):
        self.send_response(status)
        self.send_header("Content-Type", ctype)
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        try:
            self.wfile.write(data)
        except (BrokenPipeError, ConnectionResetError):
            pass

    def do_GET(self):
        self.reply(*self.forward("GET"))

    def do_POST(self):
        n = int(self.headers.get("Content-Length") or 0)
        body = self.rfile.read(n) if n else b""
        status, data, ctype = self.forward("POST", body)
        entry = {"path": self.path, "status": status, "max_tokens": None, "tool_choice": None, "usage": None,
                 "finish_reason": None, "tool_calls": 0, "error": None}
        try:
            sent = json.loads(body)
            entry["max_tokens"], entry["tool_choice"] = sent.get("max_tokens"), sent.get("tool_choice")
        except (ValueError, AttributeError):
            pass
        try:
            obj = json.loads(data)
            if isinstance(obj, dict):
                entry["usage"] = obj.get("usage")
                choices = obj.get("choices") or [{}]
                if isinstance(choices[0], dict):
                    entry["finish_reason"] = choices[0].get("finish_reason")
                    entry["tool_calls"] = len((choices[0].get("message") or {}).get("tool_calls") or [])
                err = obj.get("error")
                if err is not None:
                    entry["error"] = err.get("message") if isinstance(err, dict) else str(err)
        except ValueError:
            entry["error"] = data[:300].decode("utf-8", "replace")
        with LOCK:
            with open(LOG, "a", encoding="utf-8") as f:
                f.write(json.dumps(entry) + "\n")
        self.reply(status, data, ctype)


def main():
    global UPSTREAM, LOG
    args = sys.argv[1:]
    if len(args) < 2:
        sys.exit("usage: usage_proxy.py PORT_FILE UPSTREAM_BASE --log FILE [--idle SECONDS]")
    port_file, UPSTREAM = args[0], args[1].rstrip("/")
    idle, i = 300.0, 2
    while i < len(args):
        if args[i] == "--log":
            LOG = args[i + 1]
        elif args[i] == "--idle":
            idle = float(args[i + 1])
        else:
            sys.exit(f"unknown argument {args[i]}")
        i += 2
    if not LOG:
        sys.exit("--log FILE is required")
    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    server.daemon_threads = True

    def watchdog():
        while True:
            time.sleep(1)
            if time.monotonic() - LAST[0] > idle:
                os._exit(0)

    threading.Thread(target=watchdog, daemon=True).start()
    tmp = port_file + ".tmp"
    with open(tmp, "w") as f:
        f.write(str(server.server_address[1]))
    os.replace(tmp, port_file)
    server.serve_forever(poll_interval=0.2)


if __name__ == "__main__":
    main()
