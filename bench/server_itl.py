#!/usr/bin/env python3
"""The inter-token latency `loom serve` adds over its engine, stdlib only.

usage: server_itl.py LOOM [--config FILE | --model DIR] [--streams N]
                          [--tokens N] [--prompt-tokens N] [--rounds N]

1. `loom bench ... --concurrency N --requests N`: the engine's own time per
   output token with N requests in flight (no HTTP).
2. `loom serve` on the same model, and N streaming /v1/completions clients
   at once (asyncio, raw sockets, one connection each), each told to write
   --tokens tokens (ignore_eos); every SSE event's arrival is timed.
3. Prints the clients' time per output token (per stream: (last - first) /
   (tokens - 1), averaged as loom bench averages it), the gaps between
   events (median, p90, p99, max) and the difference to the engine's.

The default model is bench/configs/qwen3.5-0.8b-shape.json with random
weights (no tokenizer: prompts are token ids, the output token_ids).  Run it
on an idle machine: both halves share the cores with nothing else."""
import argparse
import asyncio
import json
import re
import subprocess
import sys
import time


def model_args(a):
    return ["--config", a.config, "--random-weights"] if not a.model else [a.model]


def engine_tpot(a):
    cmd = [a.loom, "bench", *model_args(a), "--concurrency", str(a.streams), "--requests", str(a.streams),
           "--prompt-tokens", str(a.prompt_tokens), "--gen-tokens", str(a.tokens), "--max-num-seqs", str(a.streams)]
    out = subprocess.run(cmd, check=True, capture_output=True, text=True).stdout
    m = re.search(r"time per output token ([0-9.]+) ms", out)
    if not m:
        sys.exit("server_itl.py: no 'time per output token' in loom bench's output:\n" + out)
    return float(m.group(1))


def start_server(a):
    cmd = [a.loom, "serve", *model_args(a), "--port", "0", "--served-model-name", "m",
           "--max-num-seqs", str(max(a.streams, 1))]
    p = subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    while True:
        line = p.stderr.readline().decode()
        if not line:
            sys.exit("server_itl.py: the server did not start (%s)" % " ".join(cmd))
        m = re.search(r"http://[0-9.]+:(\d+)", line)
        if m:
            return p, int(m.group(1))


async def stream(port, body, start):
    """Arrival times (perf_counter) of the SSE events carrying tokens."""
    await start.wait()
    r, w = await asyncio.open_connection("127.0.0.1", port)
    w.write(("POST /v1/completions HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
             "Content-Length: %d\r\n\r\n" % len(body)).encode() + body)
    await w.drain()
    times, buf = [], b""
    while True:
        chunk = await r.read(65536)
        if not chunk:
            break
        now = time.perf_counter()
        buf += chunk
        while b"\n\n" in buf:
            event, buf = buf.split(b"\n\n", 1)
            line = event.split(b"data: ", 1)[-1]
            if line.startswith(b"[DONE]"):
                w.close()
                return times
            try:
                doc = json.loads(line[line.index(b"{"):]) if b"{" in line else None
            except ValueError:
                continue
            if doc and doc.get("choices") and (doc["choices"][0].get("token_ids") or doc["choices"][0].get("text")):
                times.append(now)
    w.close()
    return times


async def clients(a, port):
    prompt = [(7 * i + 11) % 1000 + 10 for i in range(a.prompt_tokens)]
    start = asyncio.Event()
    tasks = []
    for k in range(a.streams):
        body = json.dumps({"model": "m", "prompt": prompt[k % 7:] + prompt[:k % 7], "max_tokens": a.tokens,
                           "ignore_eos": True, "temperature": 0, "stream": True}).encode()
        tasks.append(asyncio.ensure_future(stream(port, body, start)))
    await asyncio.sleep(0.2)
    start.set()
    return await asyncio.gather(*tasks)


def pct(xs, q):
    return xs[min(len(xs) - 1, int(len(xs) * q))]


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("loom")
    ap.add_argument("--config", default="bench/configs/qwen3.5-0.8b-shape.json")
    ap.add_argument("--model", help="a model folder instead of --config with random weights")
    ap.add_argument("--streams", type=int, default=64)
    ap.add_argument("--tokens", type=int, default=64)
    ap.add_argument("--prompt-tokens", type=int, default=32)
    ap.add_argument("--rounds", type=int, default=2, help="rounds of N streams (the first warms up)")
    a = ap.parse_args()
    engine = engine_tpot(a)
    p, port = start_server(a)
    try:
        for rnd in range(a.rounds):
            runs = asyncio.run(clients(a, port))
            short = [len(t) for t in runs if len(t) < 2]
            tpots = [(t[-1] - t[0]) / (len(t) - 1) for t in runs if len(t) > 1]
            gaps = sorted(y - x for t in runs for x, y in zip(t, t[1:]))
            if not tpots:
                sys.exit("server_itl.py: no stream got two tokens")
            served = 1e3 * sum(tpots) / len(tpots)
            print("round %d: %d streams x %d tokens%s: engine %.2f ms/token, served %.2f ms/token, added %+.3f ms; "
                  "gaps median %.2f p90 %.2f p99 %.2f max %.2f ms"
                  % (rnd + 1, a.streams, a.tokens, " (%d short)" % len(short) if short else "", engine, served,
                     served - engine, 1e3 * pct(gaps, 0.5), 1e3 * pct(gaps, 0.9), 1e3 * pct(gaps, 0.99),
                     1e3 * gaps[-1]))
    finally:
        p.terminate()
        p.wait()


if __name__ == "__main__":
    main()
