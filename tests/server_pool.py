#!/usr/bin/env python3
"""`loom serve` prepares requests on a fixed pool of threads (server/
prepare_pool.c), not a thread each: many more concurrent requests than
preparation threads, on every route the pool serves (chat blocking and
streamed, completions, Anthropic's messages, Responses, /tokenize,
/v1/messages/count_tokens), each answer the same as the request's answer
alone; then a SIGTERM stops the server cleanly (exit 0, and no ASan report
on the ASan build).  Stdlib only, loopback only.

usage: server_pool.py LOOM MODEL [LOOM_ASAN]
Prints "server_pool.py: N passed, M failed"."""
import http.client
import json
import os
import re
import signal
import subprocess
import sys
import threading
import time

PASSED = 0
FAILED = 0
CONCURRENT = 40  # ten times the default 4 preparation threads


def check(ok, what):
    global PASSED, FAILED
    if ok:
        PASSED += 1
    else:
        FAILED += 1
        print("FAIL: " + what, flush=True)
    return ok


class Server:
    def __init__(self, binary, model, *args):
        e = dict(os.environ)
        e.pop("LOOM_API_KEY", None)
        e.pop("VLLM_API_KEY", None)
        self.stderr = []
        self.proc = subprocess.Popen([binary, "serve", "--model", model, "--port", "0", "--served-model-name", "m",
                                      *args], stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, env=e)
        self.port = None
        deadline = time.time() + 120
        while time.time() < deadline:
            line = self.proc.stderr.readline().decode("utf-8", "replace")
            if not line:
                break
            self.stderr.append(line)
            m = re.search(r"on http://[0-9.]+:(\d+)", line)
            if m:
                self.port = int(m.group(1))
                break
        if self.port is None:
            raise RuntimeError("server did not start: " + "".join(self.stderr))
        self.reader = threading.Thread(target=self._drain, daemon=True)
        self.reader.start()

    def _drain(self):
        for line in self.proc.stderr:
            self.stderr.append(line.decode("utf-8", "replace"))

    def stop(self, timeout=60):
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
        try:
            rc = self.proc.wait(timeout)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()
            rc = None
        self.reader.join(5)
        return rc


def post(port, path, body, timeout=120, headers=None):
    """(status, body); with a dict as headers, the response's headers are put in it."""
    c = http.client.HTTPConnection("127.0.0.1", port, timeout=timeout)
    try:
        c.request("POST", path, body=json.dumps(body).encode(), headers={"Content-Type": "application/json"})
        r = c.getresponse()
        if headers is not None:
            headers.update({k.lower(): v for k, v in r.getheaders()})
        return r.status, r.read()
    except Exception as e:  # noqa: BLE001 - reported by the caller
        return None, repr(e).encode()
    finally:
        c.close()


def wait_ready(port, seconds=120):
    deadline = time.time() + seconds
    while time.time() < deadline:
        c = http.client.HTTPConnection("127.0.0.1", port, timeout=5)
        try:
            c.request("GET", "/health")
            if c.getresponse().status == 200:
                return True
        except Exception:  # noqa: BLE001 - still loading
            pass
        finally:
            c.close()
        time.sleep(0.2)
    return False


VOLATILE = {"id", "created", "created_at", "completed_at", "usage", "system_fingerprint", "call_id", "item_id", "sequence_number"}


def stable(v):
    """The answer without what differs from run to run (ids, times, usage:
    the prefix cache changes cached_tokens)."""
    if isinstance(v, dict):
        return {k: stable(x) for k, x in v.items() if k not in VOLATILE}
    if isinstance(v, list):
        return [stable(x) for x in v]
    return v


def answer_of(path, stream, status, body):
    if status != 200:
        return ("status", status, body[:200])
    text = body.decode("utf-8", "replace")
    if not stream:
        return json.dumps(stable(json.loads(text)), sort_keys=True)
    events = []
    for line in text.split("\n"):
        if line.startswith("data: "):
            data = line[6:]
            events.append(data if data == "[DONE]" else stable(json.loads(data)))
    return json.dumps(events, sort_keys=True)


def requests():
    """(path, body, stream) for every route the pool serves, greedy."""
    out = []
    for k in range(3):
        words = "tell me about the number %d" % k
        msgs = [{"role": "user", "content": words}]
        out.append(("/v1/chat/completions", {"model": "m", "messages": msgs, "max_tokens": 6, "temperature": 0}, False))
        out.append(("/v1/chat/completions", {"model": "m", "messages": msgs, "max_tokens": 6, "temperature": 0,
                                             "stream": True}, True))
        out.append(("/v1/completions", {"model": "m", "prompt": words, "max_tokens": 6, "temperature": 0}, False))
        out.append(("/v1/messages", {"model": "m", "messages": msgs, "max_tokens": 6, "temperature": 0}, False))
        out.append(("/v1/responses", {"model": "m", "input": words, "max_output_tokens": 6, "temperature": 0}, False))
        out.append(("/tokenize", {"model": "m", "prompt": words}, False))
        out.append(("/v1/messages/count_tokens", {"model": "m", "messages": msgs}, False))
    return out


def burst(port, reqs):
    """CONCURRENT clients at once, client i sending reqs[i % len(reqs)]:
    ([(status, body, headers)] by client (None: unanswered), whether all
    were answered, seconds taken)."""
    got = [None] * CONCURRENT
    gate = threading.Barrier(CONCURRENT)

    def client(i):
        p, b, _ = reqs[i % len(reqs)]
        try:
            gate.wait(30)
        except threading.BrokenBarrierError:
            pass
        h = {}
        status, body = post(port, p, b, headers=h)
        got[i] = (status, body, h)

    threads = [threading.Thread(target=client, args=(i,)) for i in range(CONCURRENT)]
    start = time.time()
    for t in threads:
        t.start()
    for t in threads:
        t.join(180)
    return got, not any(t.is_alive() for t in threads), time.time() - start


def run(binary, model, label):
    server = Server(binary, model)
    try:
        if not check(wait_ready(server.port), label + ": /health answers 200"):
            return
        reqs = requests()
        alone = [answer_of(p, s, *post(server.port, p, b)) for p, b, s in reqs]
        check(all(not isinstance(a, tuple) for a in alone),
              label + ": every request alone answers 200: %s" % [a for a in alone if isinstance(a, tuple)][:3])
        replies, answered, took = burst(server.port, reqs)
        got = [answer_of(reqs[i % len(reqs)][0], reqs[i % len(reqs)][2], *g[:2]) if g else None
               for i, g in enumerate(replies)]
        wrong = [(reqs[i % len(reqs)][0], got[i], alone[i % len(reqs)]) for i in range(CONCURRENT)
                 if got[i] != alone[i % len(reqs)]]
        check(not wrong, label + ": %d concurrent requests (more than the preparation threads) answer as alone; "
              "%d differ, the first: %s" % (CONCURRENT, len(wrong), str(wrong[:1])[:600]))
        check(answered, label + ": every concurrent request was answered (%.1f s)" % took)
    finally:
        rc = server.stop()
        log = "".join(server.stderr)
        check(rc == 0, label + ": SIGTERM stops the server with exit 0 (got %s)" % rc)
        check("Sanitizer" not in log and "runtime error" not in log,
              label + ": no sanitizer report: " + log[log.find("Sanitizer") - 200:][:1500] if "Sanitizer" in log
              else label + ": no sanitizer report")


def run_tiny_queue(binary, model, label):
    """One preparation thread and room for one waiting request: a burst gets
    answers as alone or clean 503s with Retry-After, never a hang."""
    server = Server(binary, model, "--prepare-threads", "1", "--prepare-queue", "1")
    try:
        if not check(wait_ready(server.port), label + ": /health answers 200 (tiny queue)"):
            return
        reqs = [r for r in requests() if r[0] in ("/v1/chat/completions", "/v1/messages")]
        alone = [answer_of(p, s, *post(server.port, p, b)) for p, b, s in reqs]
        replies, answered, _ = burst(server.port, reqs)
        got = [g + (answer_of(reqs[i % len(reqs)][0], reqs[i % len(reqs)][2], *g[:2]),) if g else None
               for i, g in enumerate(replies)]
        check(answered, label + ": every request of the burst was answered (tiny queue)")
        bad, refused = [], 0
        for i, g in enumerate(got):
            if g is None:
                continue
            status, body, h, answer = g
            if status == 503:
                refused += 1
                try:
                    shaped = "error" in json.loads(body) or json.loads(body).get("type") == "error"
                except ValueError:
                    shaped = False
                if h.get("retry-after") != "1" or not shaped:
                    bad.append(("503 without Retry-After or a JSON error", h.get("retry-after"), body[:200]))
            elif answer != alone[i % len(reqs)]:
                bad.append((status, str(answer)[:200]))
        said = label + ": %d of %d answered as alone, %d refused with 503 + Retry-After; wrong: %s" % (
            CONCURRENT - refused - len(bad), CONCURRENT, refused, bad[:2])
        check(not bad, said)
        print(said, flush=True)
    finally:
        rc = server.stop()
        check(rc == 0, label + ": SIGTERM stops the tiny-queue server with exit 0 (got %s)" % rc)


def main():
    if len(sys.argv) < 3:
        print(__doc__)
        print("server_pool.py: 0 passed, 1 failed")
        return 1
    run(sys.argv[1], sys.argv[2], "release")
    run_tiny_queue(sys.argv[1], sys.argv[2], "release")
    if len(sys.argv) > 3:
        run(sys.argv[3], sys.argv[2], "asan")
    print("server_pool.py: %d passed, %d failed" % (PASSED, FAILED))
    return 0 if FAILED == 0 else 1


if __name__ == "__main__":
    sys.exit(main())
