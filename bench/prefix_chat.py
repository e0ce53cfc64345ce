#!/usr/bin/env python3
"""Multi-turn chat through `loom serve`, the prefix cache on and off:
time to first token per turn (stdlib only).

usage: prefix_chat.py LOOM [--model DIR | --config FILE] [--turns 8]
                      [--system-tokens 1000] [--user-tokens 100] [--answer-tokens 100]
                      [--threads N]

Each run starts its own server (--enable-prefix-caching, then
--no-enable-prefix-caching) and plays one conversation: a system prompt,
then per turn a user message and a greedy answer of --answer-tokens
tokens (ignore_eos), every turn sending the whole conversation so far.
With --model (a folder with a tokenizer) the conversation is chat
messages of text; with --config (random weights, no tokenizer) it is
token ids through /v1/completions, each turn's prompt the last prompt,
its answer's ids and new random user ids.  TTFT is the time from sending
the request to the first streamed token.  Prints one row per turn:
prompt tokens, cached tokens, TTFT on, TTFT off."""
import argparse
import http.client
import json
import random
import re
import subprocess
import time

WORDS = ("the river carries light over stones while a patient engineer counts the small "
         "differences between what was measured and what was expected before writing").split()


def start(binary, model_args, cache, threads):
    cmd = [binary, "serve", *model_args, "--port", "0", "--served-model-name", "m", "--max-num-seqs", "2",
           "--kv-cache-tokens", "16384", "--max-model-len", "8192",
           "--enable-prefix-caching" if cache else "--no-enable-prefix-caching"]
    if threads:
        cmd += ["--threads", str(threads)]
    p = subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    while True:
        line = p.stderr.readline().decode()
        if not line:
            raise RuntimeError("server did not start")
        m = re.search(r"on http://[0-9.]+:(\d+)", line)
        if m:
            return p, int(m.group(1))


def stream(port, path, body):
    """Returns (ttft seconds, text, token ids, usage) of one streamed request."""
    body = dict(body, stream=True, stream_options={"include_usage": True}, temperature=0, ignore_eos=True)
    c = http.client.HTTPConnection("127.0.0.1", port, timeout=3600)
    t0 = time.perf_counter()
    c.request("POST", path, body=json.dumps(body), headers={"Content-Type": "application/json"})
    r = c.getresponse()
    assert r.status == 200, r.read()
    ttft, text, ids, usage = None, [], [], None
    for raw in r:
        line = raw.decode().strip()
        if not line.startswith("data: ") or line == "data: [DONE]":
            continue
        ev = json.loads(line[6:])
        if ev.get("usage"):
            usage = ev["usage"]
        for ch in ev.get("choices", []):
            piece = ch.get("delta", {}).get("content") if "delta" in ch else ch.get("text")
            got = ch.get("token_ids") or []
            if (piece or got) and ttft is None:
                ttft = time.perf_counter() - t0
            text.append(piece or "")
            ids += got
    c.close()
    return ttft, "".join(text), ids, usage


def conversation(port, args, rng):
    rows = []
    if args.model:
        words = lambda n: " ".join(rng.choice(WORDS) for _ in range(n))
        messages = [{"role": "system", "content": words(int(args.system_tokens * 0.9))}]
        for _ in range(args.turns):
            messages.append({"role": "user", "content": words(int(args.user_tokens * 0.9))})
            ttft, text, _, usage = stream(port, "/v1/chat/completions",
                                          {"model": "m", "messages": messages, "max_tokens": args.answer_tokens})
            rows.append((usage["prompt_tokens"], usage["prompt_tokens_details"]["cached_tokens"], ttft))
            messages.append({"role": "assistant", "content": text})
    else:
        prompt = [rng.randrange(1000, 100000) for _ in range(args.system_tokens)]
        for _ in range(args.turns):
            prompt += [rng.randrange(1000, 100000) for _ in range(args.user_tokens)]
            ttft, _, ids, usage = stream(port, "/v1/completions",
                                         {"model": "m", "prompt": prompt, "max_tokens": args.answer_tokens})
            rows.append((usage["prompt_tokens"], usage["prompt_tokens_details"]["cached_tokens"], ttft))
            prompt += ids
    return rows


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("loom")
    ap.add_argument("--model")
    ap.add_argument("--config")
    ap.add_argument("--turns", type=int, default=8)
    ap.add_argument("--system-tokens", type=int, default=1000)
    ap.add_argument("--user-tokens", type=int, default=100)
    ap.add_argument("--answer-tokens", type=int, default=100)
    ap.add_argument("--threads", type=int, default=0)
    args = ap.parse_args()
    model_args = ["--model", args.model] if args.model else ["--config", args.config, "--random-weights"]
    results = {}
    for cache in (True, False):
        p, port = start(args.loom, model_args, cache, args.threads)
        try:
            results[cache] = conversation(port, args, random.Random(1))
        finally:
            p.terminate()
            p.wait(timeout=60)
    print("turn  prompt  cached  ttft on (s)  ttft off (s)")
    for t, (on, off) in enumerate(zip(results[True], results[False])):
        print("%4d  %6d  %6d  %11.3f  %12.3f" % (t + 1, on[0], on[1], on[2], off[2]))
    total_on = sum(r[2] for r in results[True])
    total_off = sum(r[2] for r in results[False])
    print("sum   %22.3f  %12.3f" % (total_on, total_off))


main()
