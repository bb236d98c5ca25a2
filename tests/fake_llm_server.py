#!/usr/bin/env python3
"""A fake model server on loopback for km.llm's tests (Python 3 standard library only).

    python3 tests/fake_llm_server.py PORT_FILE [--log FILE] [--idle SECONDS] [--context N]

Binds 127.0.0.1 on an ephemeral port, writes the port to PORT_FILE (atomically), and serves
    POST /v1/chat/completions   OpenAI chat completions
    POST /v1/messages           Anthropic Messages
    GET  /v1/models             one model, "fake-model" (with max_model_len = N under --context N)
    GET  /requests              every request received so far, as a JSON list
    DELETE /requests            forgets them
until killed, or until nothing arrives for --idle seconds (default 120), so a test run can
never leave it behind. With --log, each request is also appended to FILE as one JSON line
before it is answered, so a test can read what the client sent without an HTTP client, and
the usage of every answer it served goes to FILE.usage (one JSON line each), so a test can
check a client's token accounting against the server's own sums.

With --context N the server behaves like a real one with an N-token window: a request whose
prompt tokens plus max_tokens pass N is answered 400 ("Requested tokens (X) exceed context
window of N"), and a reply longer than max_tokens is cut to max_tokens words with
finish_reason "length" (that cut happens without --context too).

What a request gets is chosen by [[directives]] in the text of the LAST user message:
    [[fault:429:retry-after=1]]  429 with Retry-After: 1 the first time, then success
    [[fault:500x2]]              500 twice, then success (any status; default once)
    [[fault:reset]]              close the connection without an answer (once by default)
    [[fault:hang]]               answer nothing for 60 s (or :s=N); always, unless xN
    [[fault:truncated]]          the first half of a valid JSON body (Content-Length matches)
    [[fault:invalid]]            an HTML page with status 200
    [[fault:empty]]              choices: [] (Anthropic: content: [])
    [[reply:TEXT]]  [[reasoning:TEXT]]  [[tool:NAME:JSON_ARGS]]  [[delay:SECONDS]]
    [[script:PATH]]              (anywhere in the conversation) the k-th request gets entry k
                                 of the JSON list in PATH: a reply, or {reply, reasoning, tools,
                                 raw_tools, filler}: raw_tools = [[name, "arguments text as is"]],
                                 filler = N appends N words of prose
    [[auth]]                     401 unless the key is "sk-test-key"
    [[echo-key]]                 error bodies and the reply quote the key the client sent
                                 (as careless servers do), to test that the client scrubs it
Fault counters are kept per directive text, so [[fault:500x2:t=a]] and [[fault:500x2:t=b]]
count separately. Usage: prompt_tokens = words in all message texts of the request,
completion_tokens = words in the reply. Recorded headers say whether a key was sent and
whether it was the test key; key values are never recorded.
"""
import json
import os
import re
import socket
import struct
import sys
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

TEST_KEY = "sk-test-key"
DIRECTIVE = re.compile(r"\[\[(.*?)\]\]", re.S)


class State:
    def __init__(self, log_path, context=None):
        self.context = context
        self.lock = threading.Lock()
        self.counters = {}
        self.requests = []
        self.log_path = log_path
        self.last_activity = time.monotonic()
        self.serial = 0

    def count(self, key):
        with self.lock:
            self.counters[key] = self.counters.get(key, 0) + 1
            return self.counters[key]

    def served(self, usage):
        if self.log_path:
            with self.lock:
                with open(self.log_path + ".usage", "a", encoding="utf-8") as f:
                    f.write(json.dumps(usage) + "\n")

    def record(self, entry):
        with self.lock:
            self.serial += 1
            entry["seq"] = self.serial
            self.requests.append(entry)
            if self.log_path:
                with open(self.log_path, "a", encoding="utf-8") as f:
                    f.write(json.dumps(entry) + "\n")
                    f.flush()
            return self.serial


STATE = None


def text_of(content):
    """The text of an OpenAI or Anthropic content value (string or list of blocks)."""
    if content is None:
        return ""
    if isinstance(content, str):
        return content
    parts = []
    if isinstance(content, list):
        for block in content:
            if isinstance(block, str):
                parts.append(block)
            elif isinstance(block, dict):
                for k in ("text", "thinking"):
                    if isinstance(block.get(k), str):
                        parts.append(block[k])
                if block.get("type") == "tool_result":
                    parts.append(text_of(block.get("content")))
                if block.get("type") == "tool_use":
                    parts.append(json.dumps(block.get("input")))
    return " ".join(parts)


def words(s):
    return len(s.split())


def parse_fault(d):
    """fault:KIND[xN][:opt=val...] -> (kind, times or None, {opt: val})."""
    parts = d.split(":")
    m = re.fullmatch(r"(\w+?)(?:x(\d+))?", parts[1] if len(parts) > 1 else "")
    if not m:
        return None, None, {}
    opts = {}
    for p in parts[2:]:
        k, _, v = p.partition("=")
        opts[k] = v
    return m.group(1), int(m.group(2)) if m.group(2) else None, opts


class Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"  # keep-alive, so the client's connection reuse is exercised
    server_version = "fake-llm/1"

    def log_message(self, fmt, *args):  # quiet: test output is TAP
        pass

    # ---- plumbing ----

    def send_json(self, status, obj, extra_headers=None, raw=None, ctype="application/json"):
        body = raw if raw is not None else json.dumps(obj).encode()
        self.send_response(status)
        self.send_header("Content-Type", ctype)
        self.send_header("Content-Length", str(len(body)))
        for k, v in (extra_headers or {}).items():
            self.send_header(k, v)
        self.end_headers()
        try:
            self.wfile.write(body)
            self.wfile.flush()
        except (BrokenPipeError, ConnectionResetError):
            pass

    def do_GET(self):
        STATE.last_activity = time.monotonic()
        if self.path == "/requests":
            with STATE.lock:
                data = list(STATE.requests)
            self.send_json(200, data)
        elif self.path.rstrip("/").endswith("/models"):
            model = {"id": "fake-model", "object": "model", "owned_by": "kmrun-tests"}
            if STATE.context:
                model["max_model_len"] = STATE.context
            self.send_json(200, {"object": "list", "data": [model]})
        else:
            self.send_json(404, {"error": {"message": "no such path"}})

    def do_DELETE(self):
        if self.path == "/requests":
            with STATE.lock:
                STATE.requests.clear()
            self.send_json(200, {"ok": True})
        else:
            self.send_json(404, {"error": {"message": "no such path"}})

    def do_POST(self):
        STATE.last_activity = time.monotonic()
        n = int(self.headers.get("Content-Length") or 0)
        raw = self.rfile.read(n) if n else b""
        anthropic = self.path.rstrip("/").endswith("/v1/messages")
        if not anthropic and not self.path.rstrip("/").endswith("/chat/completions"):
            self.send_json(404, {"error": {"message": "no such path: " + self.path}})
            return
        try:
            body = json.loads(raw)
        except ValueError:
            body = None
        if anthropic:
            presented = self.headers.get("x-api-key")
        else:
            auth = self.headers.get("Authorization") or ""
            presented = auth[7:] if auth.startswith("Bearer ") else (auth or None)
        STATE.record({
            "path": self.path,
            "body": body if body is not None else raw.decode("utf-8", "replace"),
            "headers": {
                "authorization_sent": self.headers.get("Authorization") is not None,
                "x_api_key_sent": self.headers.get("x-api-key") is not None,
                "key_is_test_key": presented == TEST_KEY,
                "anthropic_version": self.headers.get("anthropic-version"),
                "content_type": self.headers.get("Content-Type"),
                "expect": self.headers.get("Expect"),
            },
        })
        if not isinstance(body, dict) or not isinstance(body.get("messages"), list):
            self.error(400, "request body must be a JSON object with a messages list", anthropic)
            return
        self.answer(body, anthropic, presented)

    def error(self, status, message, anthropic, headers=None):
        if anthropic:
            obj = {"type": "error", "error": {"type": "api_error", "message": message}}
        else:
            obj = {"error": {"message": message, "type": "server_error", "code": status}}
        self.send_json(status, obj, headers)

    def reset(self):
        # SO_LINGER 0: close() sends RST, the way a crashed proxy drops a connection.
        try:
            self.connection.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
        except OSError:
            pass
        self.close_connection = True
        try:
            self.connection.close()
        except OSError:
            pass

    # ---- the model ----

    def answer(self, body, anthropic, presented):
        messages = body["messages"]
        last_user = ""
        for m in reversed(messages):
            if isinstance(m, dict) and m.get("role") == "user":
                last_user = text_of(m.get("content"))
                break
        directives = DIRECTIVE.findall(last_user)
        echo_key = "echo-key" in directives
        key_note = f" (key sent: {presented})" if echo_key and presented else ""

        if "auth" in directives and presented != TEST_KEY:
            self.error(401, f"Incorrect API key provided: {presented}", anthropic)
            return

        reply, reasoning, tools, delay = None, None, [], 0.0

        # [[script:PATH]] anywhere in the conversation: the k-th request naming PATH gets the
        # k-th entry of the JSON list in PATH (the last one repeats). An entry is a reply
        # string, or {"reply": ..., "reasoning": ..., "tools": [[name, {args}], ...]}. This
        # drives multi-turn strategies (a buggy first answer, a fixed second one).
        script = None
        for m in messages:
            if isinstance(m, dict) and m.get("role") in ("user", "system"):
                found = re.search(r"\[\[script:([^\]]+)\]\]", text_of(m.get("content")))
                if found:
                    script = found.group(1)
                    break
        if script:
            k = STATE.count("script:" + script)
            with open(script, encoding="utf-8") as f:
                entries = json.load(f)
            entry = entries[min(k, len(entries)) - 1]
            if isinstance(entry, str):
                reply = entry
            else:
                reply = entry.get("reply")
                reasoning = entry.get("reasoning")
                for name, args in entry.get("tools", []):
                    tools.append((name, json.dumps(args)))
                for name, args in entry.get("raw_tools", []):
                    tools.append((name, args))
                if entry.get("filler"):
                    reply = (reply or "") + " " + " ".join(["word"] * int(entry["filler"]))
        for d in directives:
            if d.startswith("reply:"):
                reply = d[len("reply:"):]
            elif d.startswith("reasoning:"):
                reasoning = d[len("reasoning:"):]
            elif d.startswith("tool:"):
                _, name, args = d.split(":", 2)
                tools.append((name, args))
            elif d.startswith("delay:"):
                delay = float(d[len("delay:"):])

        for d in directives:
            if not d.startswith("fault:"):
                continue
            kind, times, opts = parse_fault(d)
            k = STATE.count(d)
            if kind and kind.isdigit():
                if k <= (times or 1):
                    headers = {"Retry-After": opts["retry-after"]} if "retry-after" in opts else None
                    self.error(int(kind), f"injected fault {d}{key_note}", anthropic, headers)
                    return
            elif kind == "reset":
                if k <= (times or 1):
                    self.reset()
                    return
            elif kind in ("hang", "truncated", "invalid", "empty"):
                if times is not None and k > times:
                    continue
                if kind == "hang":
                    time.sleep(float(opts.get("s", 60)))
                    try:
                        self.error(504, "hung on purpose", anthropic)
                    except OSError:
                        pass
                    return
                if kind == "invalid":
                    self.send_json(200, None, raw=b"<html><body><h1>502 Bad Gateway</h1></body></html>",
                                   ctype="text/html")
                    return
                if kind == "empty":
                    obj = self.build(body, anthropic, "", None, [], empty=True)
                    self.send_json(200, obj)
                    return
                if kind == "truncated":
                    full = json.dumps(self.build(body, anthropic, reply or "cut", None, [])).encode()
                    self.send_json(200, None, raw=full[: len(full) // 2])
                    return

        if STATE.context:
            need = self.prompt_tokens(body) + int(body.get("max_tokens") or 0)
            if need > STATE.context:
                # as OpenAI and llama-cpp-python answer it: a 400 with code context_length_exceeded
                self.send_json(400, {"error": {"message": f"Requested tokens ({need}) exceed context window of {STATE.context}",
                                               "type": "invalid_request_error", "code": "context_length_exceeded"}})
                return
        if delay:
            time.sleep(delay)
        if reply is None and tools:
            reply = ""  # a turn that only calls tools
        if reply is None:
            head = DIRECTIVE.sub("", last_user).strip()[:60]
            reply = (f"echo: {head}\n```cuda\nextern \"C\" __global__ void k(float *y) "
                     f"{{ y[0] = {words(last_user)}.0f; }}\n```")
        if echo_key and presented:
            reply += f" (your key is {presented})"
        self.send_json(200, self.build(body, anthropic, reply, reasoning, tools))

    def prompt_tokens(self, body):
        texts = [text_of(m.get("content")) for m in body["messages"] if isinstance(m, dict)]
        if isinstance(body.get("system"), (str, list)):
            texts.append(text_of(body["system"]))
        return sum(words(t) for t in texts)

    def build(self, body, anthropic, reply, reasoning, tools, empty=False):
        prompt_tokens = self.prompt_tokens(body)
        finish = None
        limit = int(body.get("max_tokens") or 0)
        if limit and words(reply) > limit:  # cut, as a server does at max_tokens
            reply = " ".join(reply.split()[:limit])
            finish = "length"
        completion_tokens = words(reply)
        STATE.served({"prompt_tokens": prompt_tokens, "completion_tokens": completion_tokens})
        model = body.get("model") or "fake-model"
        if anthropic:
            content = []
            if reasoning is not None:
                content.append({"type": "thinking", "thinking": reasoning, "signature": "sig"})
            if reply:
                content.append({"type": "text", "text": reply})
            for i, (name, args) in enumerate(tools):
                content.append({"type": "tool_use", "id": f"toolu_{i + 1}", "name": name,
                                "input": json.loads(args)})
            return {
                "id": "msg_fake", "type": "message", "role": "assistant", "model": model,
                "content": [] if empty else content,
                "stop_reason": "max_tokens" if finish else ("tool_use" if tools else "end_turn"),
                "stop_sequence": None,
                "usage": {"input_tokens": prompt_tokens, "output_tokens": completion_tokens},
            }
        choices = []
        for i in range(int(body.get("n") or 1)):
            text = reply if i == 0 or not reply else f"{reply} [choice {i + 1}]"
            msg = {"role": "assistant", "content": text if text or not tools else None}
            if reasoning is not None:
                msg["reasoning_content"] = reasoning
            if tools:
                msg["tool_calls"] = [
                    {"id": f"call_{k + 1}", "type": "function",
                     "function": {"name": name, "arguments": args}}
                    for k, (name, args) in enumerate(tools)
                ]
            choices.append({"index": i, "message": msg,
                            "finish_reason": finish or ("tool_calls" if tools else "stop")})
        usage = {"prompt_tokens": prompt_tokens, "completion_tokens": completion_tokens,
                 "total_tokens": prompt_tokens + completion_tokens}
        if reasoning is not None:
            usage["completion_tokens_details"] = {"reasoning_tokens": words(reasoning)}
        return {
            "id": "chatcmpl-fake", "object": "chat.completion", "created": int(time.time()),
            "model": model, "choices": [] if empty else choices, "usage": usage,
        }


def main():
    global STATE
    args = sys.argv[1:]
    if not args:
        sys.exit("usage: fake_llm_server.py PORT_FILE [--log FILE] [--idle SECONDS] [--context N]")
    port_file, log_path, idle, context = args[0], None, 120.0, None
    i = 1
    while i < len(args):
        if args[i] == "--log":
            log_path = args[i + 1]
            i += 2
        elif args[i] == "--idle":
            idle = float(args[i + 1])
            i += 2
        elif args[i] == "--context":
            context = int(args[i + 1])
            i += 2
        else:
            sys.exit(f"unknown argument {args[i]}")
    STATE = State(log_path, context)
    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    server.daemon_threads = True

    def watchdog():
        while True:
            time.sleep(0.5)
            if time.monotonic() - STATE.last_activity > idle:
                os._exit(0)

    threading.Thread(target=watchdog, daemon=True).start()
    tmp = port_file + ".tmp"
    with open(tmp, "w") as f:
        f.write(str(server.server_address[1]))
    os.replace(tmp, port_file)
    try:
        server.serve_forever(poll_interval=0.1)
    except KeyboardInterrupt:
        pass


if __name__ == "__main__":
    main()
