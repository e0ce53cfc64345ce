#!/usr/bin/env python3
"""Prefix caching through `loom serve` (stdlib only).

usage: server_prefix_cache.py LOOM MODEL

Two servers on the same model, the prefix cache on and off, get the same
load: multi-turn chats over a shared system prompt, from four threads at
once, and repeated completions.  Greedy answers must be identical; the
cached server must report usage.prompt_tokens_details.cached_tokens on its
hits and count them in /metrics; after the load no KV block is held, and
POST /reset_prefix_cache (behind the API key) leaves every block and
snapshot free.  Prints "server_prefix_cache: N passed, N failed"."""
import http.client
import json
import re
import subprocess
import sys
import threading

passed = failed = 0


def check(ok, what):
    global passed, failed
    if ok:
        passed += 1
    else:
        failed += 1
        print("FAIL", what)


def start(binary, model, *flags):
    p = subprocess.Popen([binary, "serve", "--model", model, "--port", "0", "--served-model-name", "m",
                          "--max-num-seqs", "4", "--kv-cache-tokens", "4096", "--api-key", "k", *flags],
                         stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    while True:
        line = p.stderr.readline().decode()
        if not line:
            raise RuntimeError("server did not start")
        m = re.search(r"on http://[0-9.]+:(\d+)", line)
        if m:
            return p, int(m.group(1))


def post(port, path, body, key="k"):
    c = http.client.HTTPConnection("127.0.0.1", port, timeout=120)
    headers = {"Content-Type": "application/json"}
    if key:
        headers["Authorization"] = "Bearer " + key
    c.request("POST", path, body=json.dumps(body), headers=headers)
    r = c.getresponse()
    data = r.read()
    c.close()
    return r.status, json.loads(data) if data else None


def metrics(port):
    c = http.client.HTTPConnection("127.0.0.1", port, timeout=30)
    c.request("GET", "/metrics")
    text = c.getresponse().read().decode()
    c.close()
    out = {}
    for line in text.splitlines():
        m = re.match(r"^(loom_[a-z_]+)\{[^}]*\} ([0-9.e+-]+)$", line)
        if m:
            out[m.group(1)] = float(m.group(2))
    return out


SYSTEM = "You are a careful assistant. " * 30


def chat(port, user, turns, results):
    messages = [{"role": "system", "content": SYSTEM}]
    for t in range(turns):
        messages.append({"role": "user", "content": "%s, question %d: tell me more." % (user, t)})
        status, r = post(port, "/v1/chat/completions",
                         {"model": "m", "messages": messages, "max_tokens": 24, "temperature": 0})
        if status != 200:
            results.append((user, t, None, None))
            return
        text = r["choices"][0]["message"]["content"] or ""
        cached = r["usage"].get("prompt_tokens_details", {}).get("cached_tokens")
        results.append((user, t, text, cached))
        messages.append({"role": "assistant", "content": text})


def load(port):
    results = []
    threads = [threading.Thread(target=chat, args=(port, "user%d" % u, 3, results)) for u in range(4)]
    for th in threads:
        th.start()
    for th in threads:
        th.join()
    for i in range(3):
        status, r = post(port, "/v1/completions", {"model": "m", "prompt": SYSTEM + " Once upon a time",
                                                    "max_tokens": 8, "temperature": 0})
        results.append(("completion", i, r["choices"][0]["text"] if status == 200 else None,
                        r["usage"]["prompt_tokens_details"]["cached_tokens"] if status == 200 else None))
    return sorted(results, key=lambda x: (x[0], x[1]))


def main():
    binary, model = sys.argv[1], sys.argv[2]
    on, on_port = start(binary, model)
    off, off_port = start(binary, model, "--no-enable-prefix-caching")
    try:
        with_cache, without = load(on_port), load(off_port)
        check(len(with_cache) == len(without) == 15 and all(r[2] is not None for r in with_cache + without),
              "every request answered")
        check([r[2] for r in with_cache] == [r[2] for r in without], "answers identical with the cache on and off")
        check(all(r[3] == 0 for r in without), "no cached tokens with the cache off")
        # later chat turns resume at the last answer's end; a repeated prompt
        # marks its branch point on the second run and hits on the third
        later = [r for r in with_cache if (r[1] > 0 and r[0] != "completion") or r[1] == 2]
        check(all(r[3] is not None and r[3] > 0 for r in later), "later turns and repeats hit the cache: %s" % later)
        m = metrics(on_port)
        check(m.get("loom_prefix_cache_hits_total", 0) == sum(r[3] for r in with_cache),
              "/metrics counts the hits the responses report")
        check(m.get("loom_prefix_cache_queries_total", 0) > m.get("loom_prefix_cache_hits_total", 0) > 0,
              "queries exceed hits")
        check(m.get("loom_kv_cache_blocks_used") == 0, "no block held after the load: %s" % m)
        check(m.get("loom_kv_cache_blocks_cached", 0) > 0 and m.get("loom_prefix_snapshots_used", 0) > 0,
              "blocks and snapshots stay cached after the load")
        check(m.get("loom_prefix_snapshot_bytes_used", 0) > 0 and
              m.get("loom_prefix_snapshot_bytes_total", 0) >= m.get("loom_prefix_snapshot_bytes_used", 0),
              "snapshot bytes reported")
        status, _ = post(on_port, "/reset_prefix_cache", {}, key=None)
        check(status == 401, "the reset needs the API key (got %d)" % status)
        status, body = post(on_port, "/reset_prefix_cache", {})
        check(status == 200 and body == {"reset": True}, "reset answered %d %s" % (status, body))
        m = metrics(on_port)
        check(m.get("loom_kv_cache_blocks_used") == 0 and m.get("loom_kv_cache_blocks_cached") == 0 and
              m.get("loom_prefix_snapshots_used") == 0 and m.get("loom_prefix_snapshot_bytes_used") == 0,
              "after the reset every block and snapshot is free: %s" % m)
        m = metrics(off_port)
        check(m.get("loom_prefix_cache_queries_total") == 0 and m.get("loom_prefix_snapshots_total") == 0,
              "the cache-off server counts nothing")
    finally:
        logs = {}
        for p in (on, off):
            p.terminate()
            logs[p] = p.stderr.read().decode(errors="replace")
            p.wait(timeout=30)
    # the request log lines report the cached tokens the responses did
    logged = [int(x) for x in re.findall(r"request \S+ /v1/\S+ 200: prompt \d+, cached (\d+)", logs[on])]
    check(len(logged) == 15 and sum(logged) == sum(r[3] for r in with_cache),
          "log lines' cached tokens = usage's (%d lines, %d vs %d)" % (len(logged), sum(logged),
                                                                        sum(r[3] for r in with_cache)))
    print("server_prefix_cache: %d passed, %d failed" % (passed, failed))
    sys.exit(1 if failed else 0)


main()
