#!/usr/bin/env bash
# `loom chat`, `loom serve` and the default-model lookup, on the bundled models/loom-tiny,
# with the release and the ASan binaries:
#  - the conversation is kept (the second prompt holds the first exchange),
#    /reset forgets it but keeps --system, EOF ends with exit 0;
#  - Ctrl-C (SIGINT) during an answer stops it and the chat goes on (the
#    partial answer stays in the history); at the prompt it only prints a hint;
#  - an over-long input line is refused, the chat goes on;
#  - a full context drops the oldest exchange;
#  - without --model, run/chat/bench find the bundled model from any working
#    directory, LOOM_MODEL overrides it, a bad LOOM_MODEL is a clear error;
#  - bench --prompt-file errors; bench --json-schema (and its refusals);
#  - `loom serve` with no flags serves it as "loom-tiny" and completes
#    "Once upon a time" with English (what `make run` does).
cd "$(dirname "$0")/.." || exit 1
export LOOM_BUILD=${LOOM_BUILD:-build}
exec python3 - <<'EOF'
import os, re, signal, subprocess, sys, tempfile, time

build = os.environ["LOOM_BUILD"]
binaries = [os.path.abspath(b) for b in (os.path.join(build, "loom"), os.path.join(build, "asan", "loom"))
            if os.path.exists(b)]
model = os.path.abspath("models/loom-tiny")
passed = failed = 0


def check(name, ok, detail=""):
    global passed, failed
    passed, failed = passed + bool(ok), failed + (not ok)
    if not ok:
        print(f"  FAIL {name}: {str(detail)[-1500:]}", file=sys.stderr)


fixtures = os.environ.get("LOOM_FIXTURES", "tests/fixtures")


def chat(binary, lines, *args, env=None, cwd=None):
    r = subprocess.run([binary, "chat", "--temperature", "0", "--max-tokens", "12", *args],
                       input="".join(l + "\n" for l in lines), capture_output=True, text=True, timeout=300,
                       env=env, cwd=cwd)
    return r


def prompts_of(stderr):
    return re.findall(r"--- prompt \(\d+ tokens\) ---\n(.*?)\n--- end of prompt ---", stderr, re.S)


class Session:
    """A chat process fed through a pipe, read without blocking."""

    def __init__(self, binary, *args):
        self.p = subprocess.Popen([binary, "chat", "--temperature", "0", *args], stdin=subprocess.PIPE,
                                  stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        os.set_blocking(self.p.stdout.fileno(), False)
        os.set_blocking(self.p.stderr.fileno(), False)
        self.out = self.err = ""

    def send(self, line):
        self.p.stdin.write(line + "\n")
        self.p.stdin.flush()

    def pump(self):
        for name in ("out", "err"):
            stream = self.p.stdout if name == "out" else self.p.stderr
            try:
                chunk = stream.read()
            except (BlockingIOError, TypeError):
                chunk = None
            if chunk:
                setattr(self, name, getattr(self, name) + chunk)

    def wait_for(self, pred, seconds=60):
        end = time.time() + seconds
        while time.time() < end:
            self.pump()
            if pred():
                return True
            time.sleep(0.02)
        return False

    def close(self):
        self.p.stdin.close()
        try:
            rc = self.p.wait(timeout=120)
        except subprocess.TimeoutExpired:
            self.p.kill()
            rc = -9
        self.pump()
        return rc


for binary in binaries:
    tag = "asan" if "/asan/" in binary else "release"

    # history, /reset, --system
    r = chat(binary, ["Hello!", "Who are you?", "/reset", "Thanks."], "--show-prompt", "--system", "Answer briefly.")
    ps = prompts_of(r.stderr)
    check(f"{tag}: exit 0", r.returncode == 0, r.stderr)
    check(f"{tag}: three prompts", len(ps) == 3, r.stderr)
    if len(ps) == 3:
        check(f"{tag}: system first", all(p.startswith("<|im_start|>system\nAnswer briefly.<|im_end|>") for p in ps), ps)
        check(f"{tag}: history kept", "Hello!" in ps[1] and ps[1].count("<|im_start|>assistant") == 2
              and "Who are you?" in ps[1], ps[1])
        check(f"{tag}: reset forgets", "Hello!" not in ps[2] and "Who are you?" not in ps[2] and "Thanks." in ps[2], ps[2])
        first_answer = r.stdout.split("\n")[0]
        check(f"{tag}: the answer is in the history", first_answer and first_answer in ps[1], (first_answer, ps[1]))
    check(f"{tag}: three answers", len([l for l in r.stdout.split("\n") if l.strip()]) >= 3, r.stdout)
    check(f"{tag}: reset acknowledged", "[conversation cleared]" in r.stderr, r.stderr)

    # Ctrl-C during an answer stops it; the chat goes on; at the prompt: a hint
    s = Session(binary, "--ignore-eos", "--max-tokens", "100000", "--show-prompt")
    s.send("Tell me a story.")
    got_text = s.wait_for(lambda: len(s.out) > 40)
    check(f"{tag}: streams before the end", got_text, s.err)
    s.p.send_signal(signal.SIGINT)
    stopped = s.wait_for(lambda: "[stopped]" in s.err)
    check(f"{tag}: Ctrl-C stops the answer", stopped and s.p.poll() is None, s.err)
    partial = s.out
    s.p.send_signal(signal.SIGINT)
    check(f"{tag}: Ctrl-C at the prompt gives a hint", s.wait_for(lambda: "/exit" in s.err) and s.p.poll() is None,
          s.err)
    s.send("/exit")
    rc = s.close()
    check(f"{tag}: exit 0 after /exit", rc == 0, s.err)

    s = Session(binary, "--ignore-eos", "--max-tokens", "100000", "--show-prompt")
    s.send("Tell me a story.")
    s.wait_for(lambda: len(s.out) > 40)
    s.p.send_signal(signal.SIGINT)
    s.wait_for(lambda: "[stopped]" in s.err)
    said = s.out.strip()
    s.p.stdin.write("Thanks.\n")
    s.p.stdin.flush()
    s.wait_for(lambda: s.err.count("--- end of prompt ---") == 2)
    s.p.send_signal(signal.SIGINT)
    s.wait_for(lambda: s.err.count("[stopped]") == 2)
    rc = s.close()
    ps = prompts_of(s.err)
    check(f"{tag}: partial answer kept", len(ps) == 2 and said[:30] in ps[1], (said[:60], ps[-1:]))
    check(f"{tag}: EOF exits 0", rc == 0, s.err)

    # an over-long line is refused
    r = chat(binary, ["a" * 70000, "Hello!"])
    check(f"{tag}: long line refused", r.returncode == 0 and "longer than" in r.stderr
          and len([l for l in r.stdout.split("\n") if l.strip()]) == 1, r.stderr)

    # a full context drops the oldest exchange
    r = chat(binary, ["Tell me about the sea and the ships that sail on it.", "What does whale mean?",
                      "Who wrote Moby-Dick?"], "--max-model-len", "64", "--max-tokens", "16", "--show-prompt")
    ps = prompts_of(r.stderr)
    check(f"{tag}: oldest exchange dropped", r.returncode == 0 and "oldest exchange was dropped" in r.stderr
          and len(ps) >= 3 and "the sea" not in ps[-1], r.stderr)

    # /image: the bundled model takes none; a vision fixture keeps the image with its message
    r = chat(binary, ["/image " + os.path.join(fixtures, "models", "qwen35-dense", "image0.png"), "Hello!"])
    check(f"{tag}: /image on a text model", r.returncode == 0 and "takes no images" in r.stderr, r.stderr)
    vision = os.path.join(fixtures, "models", "qwen35-dense")
    r = chat(binary, ["/image " + os.path.join(vision, "image0.png"), "What is it?", "And now?", "/image /nonexistent",
                      "/reset", "Hi"], "--model", vision, "--show-prompt")
    ps = prompts_of(r.stderr)
    marker = "<|vision_start|><|image_pad|><|vision_end|>"
    check(f"{tag}: /image attaches to the next message and stays in the history",
          r.returncode == 0 and "image attached" in r.stderr and len(ps) == 3 and ps[0].count(marker) == 1
          and ps[1].count(marker) == 1 and marker not in ps[2] and "/nonexistent" in r.stderr
          and "Sanitizer" not in r.stderr, r.stderr)

# the default model, from another working directory
binary = binaries[0]
elsewhere = tempfile.mkdtemp(prefix="loom-cwd-")
r = subprocess.run([binary, "run", "--prompt", "Hello!", "--max-tokens", "4", "--temperature", "0"], capture_output=True,
                   text=True, cwd=elsewhere, timeout=120)
check("run finds the bundled model from any directory", r.returncode == 0 and r.stdout.strip(), r.stderr)
r = subprocess.run([binary, "run", "--prompt", "Hello!", "--max-tokens", "4"], capture_output=True, text=True,
                   env=dict(os.environ, LOOM_MODEL=elsewhere), timeout=60)
check("a LOOM_MODEL without config.json is an error", r.returncode == 1 and "LOOM_MODEL" in r.stderr, r.stderr)
r = subprocess.run([binary, "run", "--prompt", "Hello!", "--max-tokens", "4", "--raw"], capture_output=True,
                   text=True, env=dict(os.environ, LOOM_MODEL=model), cwd=elsewhere, timeout=60)
check("LOOM_MODEL is used", r.returncode == 0, r.stderr)
lonely = os.path.join(elsewhere, "loom")
os.symlink(binary, lonely)  # /proc/self/exe resolves the link: still finds the model
r = subprocess.run([lonely, "chat"], input="", capture_output=True, text=True, cwd=elsewhere, timeout=60)
check("chat through a symlink finds the model", r.returncode == 0, r.stderr)
import shutil
copy = os.path.join(elsewhere, "copy")
os.mkdir(copy)
shutil.copy(binary, os.path.join(copy, "loom"))
r = subprocess.run([os.path.join(copy, "loom"), "chat"], input="", capture_output=True, text=True,
                   cwd=elsewhere, timeout=60)
check("no model anywhere: a clear error", r.returncode == 1 and "default model loom-tiny was not found" in r.stderr
      and "LOOM_MODEL" in r.stderr, r.stderr)

# bench --prompt-file
prompts = os.path.join(elsewhere, "prompts.txt")
open(prompts, "w").write("Once upon a time\n\nCall me Ishmael.\\nSome years ago\n")
r = subprocess.run([binary, "bench", "--concurrency", "2", "--requests", "2", "--gen-tokens", "4",
                    "--prompt-file", prompts], capture_output=True, text=True, timeout=120)
check("bench --prompt-file", r.returncode == 0 and "prompts: 2 from" in r.stdout, r.stdout + r.stderr)
r = subprocess.run([binary, "bench", "--concurrency", "1", "--prompt-file", prompts + ".missing"],
                   capture_output=True, text=True, timeout=60)
check("bench: missing prompt file", r.returncode == 1 and "cannot open" in r.stderr, r.stderr)
r = subprocess.run([binary, "bench", "--concurrency", "1", "--chat"], capture_output=True, text=True, timeout=60)
check("bench: --chat needs --prompt-file", r.returncode == 2, r.stderr)

# bench --json-schema: each level unconstrained and constrained, with the grammar's time
schema = os.path.join(elsewhere, "schema.json")
open(schema, "w").write('{"type":"object","properties":{"a":{"type":"string"}},"required":["a"]}')
r = subprocess.run([binary, "bench", "--concurrency", "2", "--requests", "2", "--gen-tokens", "6", "--rounds", "1",
                    "--json-schema", schema], capture_output=True, text=True, timeout=120)
check("bench --json-schema", r.returncode == 0 and "concurrency   2 (schema):" in r.stdout and
      re.search(r"grammar: [1-9][0-9]* masks", r.stdout) and "medians of 1 rounds" in r.stdout, r.stdout + r.stderr)
open(schema, "w").write('{"type":"object","$recursiveRef":"#"}')
r = subprocess.run([binary, "bench", "--concurrency", "1", "--json-schema", schema], capture_output=True, text=True,
                   timeout=60)
check("bench: an unsupported schema is refused by name", r.returncode == 1 and "$recursiveRef" in r.stderr, r.stderr)
r = subprocess.run([binary, "bench", "--json-schema", schema], capture_output=True, text=True, timeout=60)
check("bench: --json-schema needs --concurrency", r.returncode == 2, r.stderr)

# malformed numbers are refused with exit 2 and the option named
for args in (["run", "--prompt", "hi", "--temperature", "abc"], ["run", "--prompt", "hi", "--top-p", "1.5"],
             ["run", "--prompt", "hi", "--repetition-penalty", "0"], ["chat", "--top-p", "x"],
             ["chat", "--temperature", "-1"], ["chat", "--seed", "-3"],
             ["bench", "--concurrency", "1", "--temperature", "hot"]):
    r = subprocess.run([binary, *args], input="", capture_output=True, text=True, timeout=60)
    check(f"refused: {' '.join(args)}", r.returncode == 2 and args[-2] in r.stderr, r.stderr)

# loom serve with no flags (make run): the bundled model, English out
import json, urllib.request
srv = subprocess.Popen([binary, "serve", "--port", "0"], stderr=subprocess.PIPE, text=True, cwd=elsewhere)
port = None
for _ in range(200):
    line = srv.stderr.readline()
    m = re.search(r"serving (\S+) on http://127.0.0.1:(\d+)", line)
    if m:
        name, port = m.group(1), int(m.group(2))
        break
check("serve starts with no flags", port is not None and name == "loom-tiny", line)
if port:
    models = json.load(urllib.request.urlopen(f"http://127.0.0.1:{port}/v1/models", timeout=30))
    check("/v1/models lists loom-tiny", [m["id"] for m in models["data"]] == ["loom-tiny"], models)
    req = urllib.request.Request(f"http://127.0.0.1:{port}/v1/completions", data=json.dumps(
        {"model": "loom-tiny", "prompt": "Once upon a time", "max_tokens": 32, "temperature": 0}).encode(),
        headers={"Content-Type": "application/json"})
    text = json.load(urllib.request.urlopen(req, timeout=60))["choices"][0]["text"]
    words = re.findall(r"[A-Za-z]+", text)
    common = {"the", "a", "and", "of", "to", "was", "in", "is", "it", "that", "he", "she", "i", "had", "were"}
    english = len(words) >= 12 and sum(w.lower() in common for w in words) >= 4 \
        and sum(w.isalpha() for w in text.split()) >= len(text.split()) // 2
    check("'Once upon a time' continues in English", english, text)
srv.send_signal(signal.SIGINT)
check("serve stops on SIGINT with exit 0", srv.wait(timeout=30) == 0)
shutil.rmtree(elsewhere)
print(f"test_default_model_cli: {passed} passed, {failed} failed")
EOF
