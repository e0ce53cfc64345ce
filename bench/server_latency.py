#!/usr/bin/env python3
"""Loopback latency of `loom serve`'s HTTP path, stdlib only.

usage: server_latency.py LOOM MODEL [N]

Starts the server on a free port, then with one keep-alive connection:
N GET /health, N small POST /v1/completions (max_tokens 1), and 20
streaming completions (time to the first SSE byte).  Prints median and
p90 per kind in milliseconds, and requests per second."""
import http.client
import json
import re
import subprocess
import sys
import time


def start(binary, model):
    p = subprocess.Popen([binary, "serve", "--model", model, "--port", "0", "--served-model-name", "m"],
                         stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    while True:
        line = p.stderr.readline().decode()
        if not line:
            raise RuntimeError("server did not start")
        m = re.search(r"on http://[0-9.]+:(\d+)", line)
        if m:
            return p, int(m.group(1))


def stats(name, xs):
    xs = sorted(xs)
    med, p90 = xs[len(xs) // 2], xs[int(len(xs) * 0.9)]
    print("%-28s n=%-4d median %.3f ms  p90 %.3f ms  (%.0f req/s)"
          % (name, len(xs), med * 1e3, p90 * 1e3, len(xs) / sum(xs)))


def main():
    binary, model = sys.argv[1], sys.argv[2]
    n = int(sys.argv[3]) if len(sys.argv) > 3 else 200
    p, port = start(binary, model)
    try:
        c = http.client.HTTPConnection("127.0.0.1", port, timeout=30)
        for _ in range(20):  # warm up
            c.request("GET", "/health")
            c.getresponse().read()
        ts = []
        for _ in range(n):
            t = time.perf_counter()
            c.request("GET", "/health")
            c.getresponse().read()
            ts.append(time.perf_counter() - t)
        stats("GET /health keep-alive", ts)
        body = json.dumps({"prompt": "hi", "max_tokens": 1})
        ts = []
        for _ in range(n):
            t = time.perf_counter()
            c.request("POST", "/v1/completions", body=body, headers={"Content-Type": "application/json"})
            r = c.getresponse()
            r.read()
            assert r.status == 200, r.status
            ts.append(time.perf_counter() - t)
        stats("POST /v1/completions (1 tok)", ts)
        body = json.dumps({"prompt": "hi", "max_tokens": 4, "stream": True})
        ts = []
        for _ in range(20):
            t = time.perf_counter()
            c.request("POST", "/v1/completions", body=body, headers={"Content-Type": "application/json"})
            r = c.getresponse()
            r.read1(1)
            ts.append(time.perf_counter() - t)
            r.read()
        stats("stream: time to first byte", ts)
        c.close()
    finally:
        p.terminate()
        p.wait()


if __name__ == "__main__":
    main()
