#!/usr/bin/env python3
"""tests/http_probe.py — raw HTTP/1.1 over a real socket, for the transport tests of
`kmrun serve --listen` (tests/lua/test_http.lua, tests/lua/test_service.lua). Standard library
only. Writes what happened as JSON to OUT: {"status", "headers", "body", "lines", "error"}.

  http_probe.py OUT ADDR METHOD PATH [--body FILE] [--token T] [--mode MODE] [--read-lines N]
    ADDR: HOST:PORT or unix:PATH
    MODE: normal | slow (one byte a second) | garbage (random bytes, no HTTP) |
          stream-drop (read N lines of a streamed answer, then hang up) |
          stall (send the headers of a 1 MB body, then nothing)
"""
import argparse, json, os, socket, sys, time


def connect(addr, timeout):
    if addr.startswith("unix:"):
        s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        s.settimeout(timeout)
        s.connect(addr[5:])
    else:
        host, port = addr.rsplit(":", 1)
        s = socket.create_connection((host, int(port)), timeout=timeout)
    return s


def request_bytes(a, body):
    head = f"{a.method} {a.path} HTTP/1.1\r\nHost: kmrun\r\nConnection: close\r\n"
    if a.token:
        head += f"Authorization: Bearer {a.token}\r\n"
    if body is not None:
        head += f"Content-Type: application/json\r\nContent-Length: {len(body)}\r\n"
    return head.encode() + b"\r\n" + (body or b"")


def read_all(s):
    chunks = []
    while True:
        try:
            b = s.recv(65536)
        except socket.timeout:
            break
        except OSError:
            break
        if not b:
            break
        chunks.append(b)
    return b"".join(chunks)


def dechunk(data):
    out, i = b"", 0
    while i < len(data):
        j = data.find(b"\r\n", i)
        if j < 0:
            break
        n = int(data[i:j].split(b";")[0] or b"0", 16)
        if n == 0:
            break
        out += data[j + 2:j + 2 + n]
        i = j + 2 + n + 2
    return out


def parse(raw):
    head, _, body = raw.partition(b"\r\n\r\n")
    lines = head.decode("latin-1").split("\r\n")
    status = int(lines[0].split()[1]) if lines and len(lines[0].split()) > 1 else None
    headers = {}
    for ln in lines[1:]:
        k, _, v = ln.partition(":")
        headers[k.strip().lower()] = v.strip()
    if headers.get("transfer-encoding", "").lower() == "chunked":
        body = dechunk(body)
    return status, headers, body.decode("utf-8", "replace")


def main():
    p = argparse.ArgumentParser()
    p.add_argument("out"); p.add_argument("addr"); p.add_argument("method"); p.add_argument("path")
    p.add_argument("--body"); p.add_argument("--token"); p.add_argument("--mode", default="normal")
    p.add_argument("--read-lines", type=int, default=1); p.add_argument("--timeout", type=float, default=60)
    a = p.parse_args()
    body = open(a.body, "rb").read() if a.body else None
    res = {"status": None, "headers": {}, "body": "", "error": None}
    t0 = time.time()
    try:
        s = connect(a.addr, a.timeout)
        data = request_bytes(a, body)
        if a.mode == "garbage":
            s.sendall(os.urandom(4096) + b"\r\n\r\n")
        elif a.mode == "slow":
            for i in range(len(data)):
                s.sendall(data[i:i + 1])
                time.sleep(1)
        elif a.mode == "stall":
            head = data.split(b"\r\n\r\n")[0].replace(b"Content-Length: %d" % len(body), b"Content-Length: 1000000")
            s.sendall(head + b"\r\n\r\n" + body[:10])
        else:
            try:
                s.sendall(data)
            except OSError:  # answered (413, 401) and closed before the body was read: read the answer
                pass
        if a.mode == "stream-drop":
            got = b""
            while True:
                b = s.recv(4096)
                if not b:
                    break
                got += b
                if b"\r\n\r\n" in got and got.split(b"\r\n\r\n", 1)[1].count(b"}\n") >= a.read_lines:
                    break
            res["body"] = got.decode("utf-8", "replace")
            s.close()
        else:
            res["status"], res["headers"], res["body"] = parse(read_all(s))
            s.close()
    except Exception as e:  # a closed connection is an answer too
        res["error"] = f"{type(e).__name__}: {e}"
    res["seconds"] = time.time() - t0
    with open(a.out + ".tmp", "w") as f:
        json.dump(res, f)
    os.replace(a.out + ".tmp", a.out)


if __name__ == "__main__":
    main()
