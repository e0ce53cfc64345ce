"""A newcomer's first hour (issue 47), end to end against build/loom:
what the build builds, --device cuda where it cannot run, /health while the
weights load and the progress line on a terminal, the names a request may
give its model, and the context limit against the KV pool.  Run by
tests/test_newcomer.sh; loopback only, about 20 s (one random 0.8B-shape
load is the deliberately slow one)."""
import json, os, re, socket, subprocess, sys, tempfile, time, urllib.error, urllib.request

root = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
os.chdir(root)
build = os.environ.get("LOOM_BUILD", "build")
loom = os.path.join(build, "loom")
fixtures = os.environ.get("LOOM_FIXTURES", "tests/fixtures")
dense = os.path.join(fixtures, "models", "qwen35-dense")
tiny = "models/loom-tiny"
passed = failed = 0


def check(name, ok, detail=""):
    global passed, failed
    if ok:
        passed += 1
    else:
        failed += 1
        print(f"  FAIL {name}: {str(detail)[-1500:]}", file=sys.stderr)


def run(args, **kw):
    return subprocess.run(args, capture_output=True, text=True, timeout=300, **kw)


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def http(port, path, body=None, timeout=30):
    data = json.dumps(body).encode() if body is not None else None
    req = urllib.request.Request(f"http://127.0.0.1:{port}{path}", data=data,
                                 headers={"Content-Type": "application/json"} if data else {})
    try:
        with urllib.request.urlopen(req, timeout=timeout) as r:
            return r.status, r.read().decode()
    except urllib.error.HTTPError as e:
        return e.code, e.read().decode()
    except (urllib.error.URLError, ConnectionError, socket.timeout) as e:
        return None, str(e)


def wait_ready(port, proc, seconds=120):
    """Polls /health; returns the statuses seen (with bodies) until 200."""
    seen = []
    end = time.time() + seconds
    while time.time() < end and proc.poll() is None:
        code, body = http(port, "/health", timeout=5)
        if code is not None:
            seen.append((code, body))
            if code == 200:
                return seen
        time.sleep(0.05)
    return seen


def stop(proc):
    proc.terminate()
    try:
        proc.wait(timeout=30)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.wait()


version = run([loom, "--version"]).stdout
has_cuda = "cuda" in version.split("backends", 1)[-1].splitlines()[0] if "backends" in version else False

# --- the build: CPU only without a GPU, CUDA=1 asks for it; make run installs no test packages
gpu_here = any(re.fullmatch(r"nvidia\d+", n) for n in os.listdir("/dev"))
dry = run(["make", "-n", "-B", "BUILD=/tmp/loom-newcomer-dry", "/tmp/loom-newcomer-dry/loom"])
check("make builds no cuda without a GPU", gpu_here or "nvcc" not in dry.stdout, dry.stdout[-400:])
if run(["sh", "-c", "command -v nvcc"]).returncode == 0:
    dry = run(["make", "-n", "-B", "CUDA=1", "BUILD=/tmp/loom-newcomer-dry", "/tmp/loom-newcomer-dry/loom"])
    check("make CUDA=1 builds the cuda backend", "nvcc" in dry.stdout and "-DLOOM_HAVE_CUDA" in dry.stdout,
          dry.stdout[-400:])
dry = run(["make", "-n", "run"])
check("make run installs the running deps only", "install-deps.sh" in dry.stdout and "--test" not in dry.stdout,
      dry.stdout)
run_pkgs = set(run(["tools/install-deps.sh", "--list"]).stdout.split())
test_pkgs = set(run(["tools/install-deps.sh", "--list", "--test"]).stdout.split())
check("running needs no test packages", "libmicrohttpd-dev" in run_pkgs and not run_pkgs & {"clang", "python3-jinja2"},
      run_pkgs)
check("the tests' packages", {"clang", "python3-jinja2", "systemd"} <= test_pkgs, test_pkgs)

# --- --device cuda where it cannot run: exit 1 (not 2) and what was found
r = run([loom, "run", "--model", tiny, "--device", "cuda", "--prompt", "hi", "--max-tokens", "1"])
if has_cuda:
    check("--device cuda, no GPU: exit 1", gpu_here or r.returncode == 1, (r.returncode, r.stderr))
    check("--device cuda, no GPU: says what it found",
          gpu_here or re.search(r"no NVIDIA (GPU found|driver here)|driver is too old", r.stderr), r.stderr)
else:
    check("--device cuda, built without: exit 1", r.returncode == 1, (r.returncode, r.stderr))
    check("--device cuda, built without: how to build it", "make CUDA=1" in r.stderr, r.stderr)
# the CUDA tree `make test` builds where nvcc is (no GPU here: it must say so)
cuda_loom = os.path.join(build, "cuda", "loom")
if os.path.exists(cuda_loom) and not gpu_here:
    r = run([cuda_loom, "run", "--model", tiny, "--device", "cuda", "--prompt", "hi", "--max-tokens", "1"])
    check("cuda build, no GPU: exit 1", r.returncode == 1, (r.returncode, r.stderr))
    check("cuda build, no GPU: what it found", re.search(r"no NVIDIA (GPU found|driver here)|driver is too old",
                                                        r.stderr), r.stderr)
r = run([loom, "run", "--model", tiny, "--device", "tpu", "--prompt", "hi"])
check("--device tpu is a usage error", r.returncode == 2 and "unknown backend 'tpu'" in r.stderr, r.stderr)

# --- the context limit against the pool and the positions
r = run([loom, "run", "--model", tiny, "--max-model-len", "2048", "--kv-cache-tokens", "1000", "--prompt", "hi",
         "--max-tokens", "1"])
check("explicit length over the pool: exit 1", r.returncode == 1, (r.returncode, r.stderr))
check("explicit length over the pool: the numbers and the flags",
      all(w in r.stderr for w in ("2048", "1000", "--kv-cache-tokens", "--max-model-len")), r.stderr)
r = run([loom, "run", "--model", tiny, "--kv-cache-tokens", "100", "--prompt", "Once", "--max-tokens", "2",
         "--temperature", "0"])
check("default length lowered to the pool", r.returncode == 0 and "lowered to 100" in r.stderr,
      (r.returncode, r.stderr))
positions = json.load(open(os.path.join(tiny, "config.json"))).get("max_position_embeddings")
r = run([loom, "run", "--model", tiny, "--max-model-len", str(positions * 2), "--prompt", "hi"])
check("length over the positions: usage error naming them",
      r.returncode == 2 and str(positions) in r.stderr and "--allow-long-max-model-len" in r.stderr, r.stderr)

# --- /health while the weights load (a random 0.8B shape takes seconds to make), progress on a terminal
port = free_port()
log = tempfile.NamedTemporaryFile(prefix="loom-newcomer-", suffix=".log", delete=False).name
serve = [loom, "serve", "--config", "bench/configs/qwen3.5-0.8b-shape.json", "--random-weights", "--port", str(port),
         "--max-model-len", "256", "--kv-cache-tokens", "512", "--max-num-seqs", "2"]
# `script` gives loom a terminal for stderr (the progress line's condition)
cmd = "LOOM_PROGRESS=1 " + " ".join(serve)  # from the first byte: this load may take under a second
p = subprocess.Popen(["script", "-qfec", cmd, log], stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL,
                     stderr=subprocess.DEVNULL)
models_while_loading = None
end = time.time() + 60
while time.time() < end and models_while_loading is None and p.poll() is None:
    code, body = http(port, "/health", timeout=5)
    if code == 503:
        models_while_loading = http(port, "/v1/models", timeout=5)
    elif code is None:
        time.sleep(0.05)
    else:
        break
check("API routes while loading: 503 saying so", models_while_loading is not None and
      models_while_loading[0] == 503 and "loading" in models_while_loading[1], models_while_loading)
seen = wait_ready(port, p)
check("health answers while loading", len(seen) >= 2, seen)
if seen:
    first_code, first_body = seen[0]
    check("loading: 503", first_code == 503, seen[:3])
    try:
        status = json.loads(first_body).get("status")
    except ValueError:
        status = None
    check("loading: {\"status\":\"loading\"}", status == "loading", first_body)
    check("ready: 200", seen[-1][0] == 200, seen[-3:])
stop(p)
text = open(log, errors="replace", newline="").read()
os.unlink(log)
check("progress line on a terminal", re.search(r"\r\x1b\[Kloading: making random weights [0-9.]+ [MG]B", text), text[:900])
check("says when it became ready", re.search(r"ready: serving loom-random on http://127\.0\.0\.1:\d+ \([0-9.]+ s after start\)",
                                              text), text[-800:])

# --- the model's names; stderr a pipe: no progress line
def serve_fixture(model, *flags):
    port = free_port()
    proc = subprocess.Popen([loom, "serve", "--model", model, "--port", str(port), *flags], stdout=subprocess.DEVNULL,
                            stderr=subprocess.PIPE, text=True)
    return port, proc


port, p = serve_fixture(tiny)
seen = wait_ready(port, p)
if seen and seen[-1][0] == 200:
    for name in ("loom-tiny", "models/loom-tiny"):
        code, body = http(port, "/v1/completions", {"model": name, "prompt": "Once upon a time", "max_tokens": 2})
        check(f"model named {name!r}", code == 200, body)
    code, body = http(port, "/v1/chat/completions",
                      {"model": "loom-tiny", "messages": [{"role": "user", "content": "Hello!"}], "max_tokens": 2})
    check("the README's chat curl", code == 200, body)
    code, body = http(port, "/v1/completions", {"model": "gpt-4", "prompt": "x", "max_tokens": 1})
    check("unknown model: 404 listing the names", code == 404 and "loom-tiny" in body and "models/loom-tiny" in body,
          (code, body))
else:
    check("loom-tiny server ready", False, seen)
stop(p)
err = p.stderr.read()
check("stderr not a terminal: no progress line", "\r" not in err and "ready: serving" in err, err[-600:])

port, p = serve_fixture(dense + "/", "--served-model-name", "first,second", "-a", "third")
seen = wait_ready(port, p)
if seen and seen[-1][0] == 200:
    for name in ("first", "second", "third", dense, "qwen35-dense"):
        code, body = http(port, "/v1/completions", {"model": name, "prompt": [1, 2, 3], "max_tokens": 1})
        ok = code == 200 and json.loads(body).get("model") == "first"
        check(f"alias {name!r} served, answered as the first", ok, (code, body))
    code, body = http(port, "/v1/models")
    ids = [m["id"] for m in json.loads(body)["data"]] if code == 200 else []
    check("/v1/models lists the served names", ids == ["first", "second", "third"], ids)
    code, body = http(port, "/v1/models/third")
    check("/v1/models/{alias}", code == 200 and json.loads(body)["id"] == "third", body)
else:
    check("fixture server ready", False, seen)
stop(p)
p.stderr.read()

print(f"test_newcomer.sh: {passed} passed, {failed} failed")
sys.exit(1 if failed else 0)
