#!/usr/bin/env python3
"""/metrics under vLLM's names, through `loom serve` (stdlib only).

usage: server_metrics.py LOOM MODEL

The whole exposition must be valid Prometheus text (a strict parser below:
one HELP and TYPE per family, before its samples, samples of a family
together, well-formed labels, cumulative histogram buckets ending in +Inf ==
_count).  The vLLM families routers and autoscalers read must be there with
vLLM's types, labels (model_name, engine) and histogram buckets, and their
values must move: a request counts in vllm:request_success_total under its
finished_reason (length, stop, abort) and in the TTFT / ITL / e2e
histograms; with --max-num-seqs 1 and two long streams open,
vllm:num_requests_running is 1, vllm:num_requests_waiting is 1 and the KV
cache is in use; when the clients hang up both gauges return to 0.
Prints "server_metrics: N passed, N failed"."""
import http.client
import json
import os
import re
import socket
import subprocess
import sys
import tempfile
import time

passed = failed = 0


def check(ok, what):
    global passed, failed
    if ok:
        passed += 1
    else:
        failed += 1
        print("FAIL", what, flush=True)
    return ok


# --- a strict parser of the Prometheus text format (version 0.0.4) ---------

NAME = r"[a-zA-Z_:][a-zA-Z0-9_:]*"
LABEL = r'([a-zA-Z_][a-zA-Z0-9_]*)="((?:[^"\\\n]|\\["\\n])*)"'
SAMPLE = re.compile(r"^(%s)(?:\{(.*)\})? (\S+)$" % NAME)
SUFFIXES = {"counter": [""], "gauge": [""], "histogram": ["_bucket", "_sum", "_count"], "untyped": [""]}


def parse_labels(text, where):
    labels, rest = {}, text
    while rest:
        m = re.match(LABEL, rest)
        if not m:
            raise ValueError("%s: bad labels {%s}" % (where, text))
        if m.group(1) in labels:
            raise ValueError("%s: label %s twice" % (where, m.group(1)))
        labels[m.group(1)] = m.group(2)
        rest = rest[m.end():]
        if rest.startswith(","):
            rest = rest[1:]
        elif rest:
            raise ValueError("%s: bad labels {%s}" % (where, text))
    return labels


def parse_exposition(text):
    """{family: {"type", "help", "samples": [(name, labels, value)]}}; raises
    ValueError on anything a strict scraper (Go's expfmt) would refuse."""
    families, current, closed = {}, None, set()
    for n, line in enumerate(text.split("\n"), 1):
        where = "line %d (%r)" % (n, line[:80])
        if not line:
            continue
        m = re.match(r"^# (HELP|TYPE) (%s) ?(.*)$" % NAME, line)
        if m:
            kind, name, rest = m.groups()
            if name in closed:
                raise ValueError("%s: family %s appears twice" % (where, name))
            fam = families.setdefault(name, {"type": None, "help": None, "samples": []})
            if fam["samples"]:
                raise ValueError("%s: %s after the family's samples" % (where, kind))
            key = kind.lower()
            if fam[key] is not None:
                raise ValueError("%s: second %s for %s" % (where, kind, name))
            if kind == "TYPE" and rest not in SUFFIXES:
                raise ValueError("%s: unknown type %s" % (where, rest))
            fam[key] = rest
            if current and current != name:
                closed.add(current)
            current = name
            continue
        if line.startswith("#"):
            continue
        m = SAMPLE.match(line)
        if not m:
            raise ValueError("%s: not a sample" % where)
        sample, labels, value = m.group(1), parse_labels(m.group(2) or "", where), float(m.group(3))
        owner = None
        for name, fam in families.items():
            if fam["type"] and any(sample == name + s for s in SUFFIXES[fam["type"]]):
                owner = name
        if owner is None or owner != current:
            raise ValueError("%s: sample outside its family's block (TYPE first, samples together)" % where)
        families[owner]["samples"].append((sample, labels, value))
    for name, fam in families.items():
        if fam["type"] == "histogram":
            check_histogram(name, fam["samples"])
    return families


def check_histogram(name, samples):
    buckets = [(l["le"], v) for s, l, v in samples if s == name + "_bucket"]
    count = [v for s, _, v in samples if s == name + "_count"]
    if not buckets or buckets[-1][0] != "+Inf" or len(count) != 1 or buckets[-1][1] != count[0]:
        raise ValueError("%s: buckets must end in +Inf equal to _count" % name)
    bounds = [float(le) for le, _ in buckets]
    if bounds != sorted(bounds) or any(b[1] > a[1] for a, b in zip(buckets[1:], buckets)):
        raise ValueError("%s: bounds ascending, counts cumulative" % name)


# --- the server -------------------------------------------------------------

class Server:
    def __init__(self, binary, model, *flags):
        self.log = tempfile.NamedTemporaryFile(prefix="loom-metrics-", suffix=".log")
        self.proc = subprocess.Popen([binary, "serve", "--model", model, "--port", "0", "--served-model-name",
                                      "tiny", *flags], stdout=subprocess.DEVNULL, stderr=self.log)
        deadline = time.time() + 60
        while time.time() < deadline:
            m = re.search(r"on http://[0-9.]+:(\d+)", open(self.log.name).read())
            if m:
                self.port = int(m.group(1))
                return
            if self.proc.poll() is not None:
                break
            time.sleep(0.05)
        raise RuntimeError("server did not start: " + open(self.log.name).read()[-2000:])

    def stop(self):
        self.proc.terminate()
        return self.proc.wait(timeout=30)

    def post(self, path, body):
        c = http.client.HTTPConnection("127.0.0.1", self.port, timeout=120)
        c.request("POST", path, body=json.dumps(body), headers={"Content-Type": "application/json"})
        r = c.getresponse()
        data = r.read()
        c.close()
        return r.status, json.loads(data)

    def metrics(self):
        c = http.client.HTTPConnection("127.0.0.1", self.port, timeout=30)
        c.request("GET", "/metrics")
        r = c.getresponse()
        text = r.read().decode()
        c.close()
        return r.getheader("Content-Type"), text

    def open_stream(self, body):
        """A streaming request on a raw socket, left open (close it to hang up)."""
        s = socket.create_connection(("127.0.0.1", self.port), timeout=60)
        data = json.dumps(body).encode()
        s.sendall(b"POST /v1/completions HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
                  b"Content-Length: %d\r\n\r\n%s" % (len(data), data))
        return s


def value(families, name, **labels):
    """The one sample of `name` whose labels include `labels`."""
    fam = families.get(re.sub(r"_(bucket|sum|count)$", "", name)) or families.get(name)
    if not fam:
        return None
    hits = [v for s, l, v in fam["samples"] if s == name and all(l.get(k) == x for k, x in labels.items())]
    return hits[0] if len(hits) == 1 else None


invalid_seen = set()


def scrape(server):
    """The parsed exposition; an invalid one fails once per distinct error."""
    content_type, text = server.metrics()
    try:
        return parse_exposition(text), content_type
    except ValueError as e:
        if str(e) not in invalid_seen:
            invalid_seen.add(str(e))
            check(False, "the exposition is valid Prometheus text: %s" % e)
        return {}, content_type


def wait_for(server, predicate, seconds):
    """Scrapes until predicate(metrics) holds or the time is up; the last scrape."""
    deadline = time.time() + seconds
    while True:
        m, _ = scrape(server)
        if predicate(m) or time.time() > deadline:
            return m
        time.sleep(0.02)


GAUGES = ["vllm:num_requests_running", "vllm:num_requests_waiting", "vllm:kv_cache_usage_perc",
          "vllm:gpu_cache_usage_perc"]
COUNTERS = ["vllm:prompt_tokens_total", "vllm:generation_tokens_total", "vllm:request_success_total",
            "vllm:num_preemptions_total", "vllm:prefix_cache_queries_total", "vllm:prefix_cache_hits_total",
            "vllm:gpu_prefix_cache_queries_total", "vllm:gpu_prefix_cache_hits_total"]
# vLLM's buckets (vllm/v1/metrics/loggers.py), as its exporter writes le.
HISTOGRAMS = {
    "vllm:time_to_first_token_seconds": "0.001 0.005 0.01 0.02 0.04 0.06 0.08 0.1 0.25 0.5 0.75 1.0 2.5 5.0 7.5 "
                                        "10.0 20.0 40.0 80.0 160.0 640.0 2560.0",
    "vllm:inter_token_latency_seconds": "0.01 0.025 0.05 0.075 0.1 0.15 0.2 0.3 0.4 0.5 0.75 1.0 2.5 5.0 7.5 10.0 "
                                        "20.0 40.0 80.0",
    "vllm:e2e_request_latency_seconds": "0.3 0.5 0.8 1.0 1.5 2.0 2.5 5.0 10.0 15.0 20.0 30.0 40.0 50.0 60.0 120.0 "
                                        "240.0 480.0 960.0 1920.0 7680.0",
}
LABELS = {"model_name": "tiny", "engine": "0"}


def test_names(server):
    m, content_type = scrape(server)
    check(content_type and content_type.startswith("text/plain; version=0.0.4"), "content type: %s" % content_type)
    for name, kind in [(g, "gauge") for g in GAUGES] + [(c, "counter") for c in COUNTERS] + \
                      [(h, "histogram") for h in HISTOGRAMS] + [("vllm:cache_config_info", "gauge")]:
        fam = m.get(name)
        if not check(fam is not None, "%s is exported" % name):
            continue
        check(fam["type"] == kind and fam["help"], "%s: TYPE %s with a HELP: %s" % (name, kind, fam))
        if name != "vllm:cache_config_info":
            check(all({k: l.get(k) for k in LABELS} == LABELS for _, l, _ in fam["samples"]),
                  "%s carries model_name and engine: %s" % (name, fam["samples"][:2]))
    for name, bounds in HISTOGRAMS.items():
        les = [l["le"] for s, l, _ in m.get(name, {"samples": []})["samples"] if s == name + "_bucket"]
        check(les == bounds.split() + ["+Inf"], "%s has vLLM's buckets: %s" % (name, les))
    reasons = sorted(l["finished_reason"] for _, l, _ in m.get("vllm:request_success_total", {"samples": []})["samples"])
    check(reasons == ["abort", "error", "length", "stop"], "finished_reason values: %s" % reasons)
    info = m.get("vllm:cache_config_info", {"samples": [(None, {}, None)]})["samples"][0]
    check(info[2] == 1 and info[1].get("num_gpu_blocks") == str(int(value(m, "loom_kv_cache_blocks_total") or -1))
          and int(info[1].get("block_size", "0")) > 0 and info[1].get("enable_prefix_caching") == "True",
          "vllm:cache_config_info: %s" % (info,))
    check(value(m, "vllm:num_requests_running") == 0 and value(m, "vllm:num_requests_waiting") == 0 and
          value(m, "vllm:kv_cache_usage_perc") == 0, "idle: nothing running, waiting or held")
    check(value(m, "loom_num_requests_running") == 0 and "loom_request_success_total" in m,
          "loom's own names are still there")


def test_values_move(server):
    m0, _ = scrape(server)
    status, r = server.post("/v1/completions", {"model": "tiny", "prompt": "Hello there", "max_tokens": 6,
                                                "temperature": 0})
    check(status == 200 and r["choices"][0]["finish_reason"] == "length", "greedy completion: %s" % r)
    # the engine publishes its token counts when its step ends, which may be
    # just after the response went out
    m1 = wait_for(server, lambda m: (value(m, "vllm:generation_tokens_total") or 0) -
                  (value(m0, "vllm:generation_tokens_total") or 0) >= 6, 5)
    d = lambda name, **l: (value(m1, name, **l) or 0) - (value(m0, name, **l) or 0)
    check(d("vllm:request_success_total", finished_reason="length") == 1 and
          d("vllm:request_success_total", finished_reason="stop") == 0,
          "a max_tokens end counts as length: %s" % d("vllm:request_success_total", finished_reason="length"))
    check(d("vllm:prompt_tokens_total") == r["usage"]["prompt_tokens"] and
          d("vllm:generation_tokens_total") == r["usage"]["completion_tokens"] == 6,
          "token counters rise by the usage: %s %s" % (d("vllm:prompt_tokens_total"), r["usage"]))
    check(d("vllm:time_to_first_token_seconds_count") == 1 and d("vllm:e2e_request_latency_seconds_count") == 1 and
          d("vllm:inter_token_latency_seconds_count") == 5,
          "one TTFT and one e2e observation, five inter-token gaps: %s %s %s" % (
              d("vllm:time_to_first_token_seconds_count"), d("vllm:e2e_request_latency_seconds_count"),
              d("vllm:inter_token_latency_seconds_count")))
    check(0 < d("vllm:time_to_first_token_seconds_sum") <= d("vllm:e2e_request_latency_seconds_sum"),
          "TTFT within the request's latency")
    check(d("vllm:prefix_cache_queries_total") == d("vllm:gpu_prefix_cache_queries_total") > 0,
          "prefix cache queries counted under both names")

    # a stop string the greedy text holds ends the next request as "stop"
    text = r["choices"][0]["text"]
    stop = text[len(text) // 2:len(text) // 2 + 1]
    status, r2 = server.post("/v1/completions", {"model": "tiny", "prompt": "Hello there", "max_tokens": 6,
                                                 "temperature": 0, "stop": [stop]})
    m2, _ = scrape(server)
    check(status == 200 and r2["choices"][0]["finish_reason"] == "stop" and
          (value(m2, "vllm:request_success_total", finished_reason="stop") or 0) -
          (value(m1, "vllm:request_success_total", finished_reason="stop") or 0) == 1,
          "a stop string's end counts as stop: %r %s" % (stop, r2))


def test_gauges_under_load(server):
    m0, _ = scrape(server)
    long_stream = {"model": "tiny", "prompt": "Once upon a time", "max_tokens": 4000, "ignore_eos": True,
                   "stream": True}
    first = server.open_stream(long_stream)
    head = b""
    while b"data:" not in head:
        chunk = first.recv(4096)
        if not chunk:
            break
        head += chunk
    check(b"data:" in head, "the first stream started: %r" % head[:200])
    m = wait_for(server, lambda m: value(m, "vllm:num_requests_running") == 1, 10)
    check(value(m, "vllm:num_requests_running") == 1 and value(m, "vllm:num_requests_waiting") == 0,
          "one stream: running 1, waiting 0: %s %s" % (value(m, "vllm:num_requests_running"),
                                                      value(m, "vllm:num_requests_waiting")))
    second = server.open_stream(long_stream)  # --max-num-seqs 1: it queues behind the first
    m = wait_for(server, lambda m: value(m, "vllm:num_requests_waiting") == 1, 10)
    check(value(m, "vllm:num_requests_running") == 1, "one stream running: %s" % value(m, "vllm:num_requests_running"))
    check(value(m, "vllm:num_requests_waiting") == 1, "one waiting: %s" % value(m, "vllm:num_requests_waiting"))
    usage = value(m, "vllm:kv_cache_usage_perc")
    check(usage is not None and 0 < usage < 1 and usage == value(m, "vllm:gpu_cache_usage_perc") and
          abs(usage - value(m, "loom_kv_cache_usage_perc")) < 1e-9,
          "KV cache in use, the same under all three names: %s" % usage)
    first.close()
    second.close()
    m = wait_for(server, lambda m: value(m, "vllm:num_requests_running") == 0 and
                 value(m, "vllm:num_requests_waiting") == 0 and
                 (value(m, "vllm:request_success_total", finished_reason="abort") or 0) -
                 (value(m0, "vllm:request_success_total", finished_reason="abort") or 0) == 2, 60)
    check(value(m, "vllm:num_requests_running") == 0 and value(m, "vllm:num_requests_waiting") == 0,
          "both gauges back to 0 after the clients hung up")
    aborts = (value(m, "vllm:request_success_total", finished_reason="abort") or 0) - \
        (value(m0, "vllm:request_success_total", finished_reason="abort") or 0)
    check(aborts == 2, "the two hung-up streams count as abort: %s" % aborts)
    check(value(m, "vllm:kv_cache_usage_perc") == 0, "no KV block held afterwards")


def main():
    binary, model = sys.argv[1], sys.argv[2]
    server = Server(binary, model, "--max-num-seqs", "1")
    try:
        test_names(server)
        test_values_move(server)
        test_gauges_under_load(server)
    finally:
        check(server.stop() == 0, "the server exits 0 on SIGTERM")
    print("server_metrics: %d passed, %d failed" % (passed, failed))
    return 0 if failed == 0 else 1


if __name__ == "__main__":
    sys.exit(main())
