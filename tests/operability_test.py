"""Operability of the loom command line and server (run by tests/test_operability.sh)."""
import json, os, re, shutil, socket, struct, subprocess, sys, tempfile, time, urllib.request

build = os.environ.get("LOOM_BUILD", "build")
loom = os.path.abspath(os.path.join(build, "loom"))
asan = os.path.abspath(os.path.join(build, "asan", "loom"))
tiny = os.path.abspath("models/loom-tiny")
passed = failed = 0


def check(name, ok, detail=""):
    global passed, failed
    passed, failed = passed + bool(ok), failed + (not ok)
    if not ok:
        print(f"  FAIL {name}: {str(detail)[-1500:]}", file=sys.stderr)


def run(*args, binary=loom, **kw):
    return subprocess.run([binary, *args], capture_output=True, text=True, timeout=120, **kw)


tmp = tempfile.mkdtemp(prefix="loom-ops-")
IDS = ["--ids", "1,2,3", "--max-tokens", "4", "--print-ids", "--temperature", "0"]

# --version: version, commit, compiler, CPU features, the kernel set that runs, backends
r = run("--version")
check("--version", r.returncode == 0 and re.search(r"^loom \d+\.\d+\.\d+ \(commit \S+\)", r.stdout, re.M)
      and "compiler:" in r.stdout and "cpu features:" in r.stdout and "backends: cpu, ref" in r.stdout
      and re.search(r"^cpu kernels: (generic|avx2|avx512|native) \(the best this CPU runs; built: ", r.stdout, re.M),
      r.stdout)


def kernels_of(binary):
    m = re.search(r"^cpu kernels: (\S+)", run("--version", binary=binary).stdout, re.M)
    return m.group(1) if m else "?"


kernels = kernels_of(loom)
# LOOM_CPU_KERNELS: a name that is no kernel set is refused by --version and by a command that loads a model
bad = dict(os.environ, LOOM_CPU_KERNELS="avx513")
r = run("--version", env=bad)
check("--version refuses LOOM_CPU_KERNELS=avx513", r.returncode == 1
      and "LOOM_CPU_KERNELS=avx513: not a kernel set" in r.stdout, r.stdout)
r = run("run", tiny, *IDS, env=bad)
check("run refuses LOOM_CPU_KERNELS=avx513", r.returncode != 0 and "LOOM_CPU_KERNELS=avx513" in r.stderr, r.stderr)
r = run("--version", env=dict(os.environ, LOOM_CPU_KERNELS=kernels))
check("LOOM_CPU_KERNELS names the set that runs", r.returncode == 0
      and f"cpu kernels: {kernels} (LOOM_CPU_KERNELS;" in r.stdout, r.stdout)

# the model as a positional argument, as --model, and llama-server's -m
want = run("run", "--model", tiny, *IDS).stdout
check("run --model", want.strip() != "", want)
for form in ([tiny], ["-m", tiny], [f"--model={tiny}"]):
    r = run("run", *form, *IDS)
    check(f"run {form[0][:8]}... same ids", r.returncode == 0 and r.stdout == want, r.stdout + r.stderr)
r = run("run", tiny, tiny, *IDS)
check("two model folders refused", r.returncode == 2 and "unexpected argument" in r.stderr, r.stderr)

# llama-server aliases: -c (context), -np (sequences), -t (threads) reach the engine
r = run("run", tiny, "-c", "64", "-np", "2", "-t", "1", "--ids", ",".join(["5"] * 70), "--max-tokens", "2")
check("-c 64 limits the context", r.returncode == 1 and "64" in r.stderr, r.stderr)
r = run("run", tiny, "-c", "64", "-np", "2", "-t", "1", *IDS)
check("-c -np -t accepted", r.returncode == 0 and r.stdout == want, r.stderr)

# usage errors: one line, one "loom CMD:" prefix, "see loom CMD --help"
for args in (["run", "--bogus"], ["serve", "--port", "x"], ["chat", "--top-p", "2"], ["logits", "--ids"],
             ["tokenize", "--bad"], ["render", "--date", "yesterday"], ["inspect", "a", "b"]):
    r = run(*args, input="")
    cmd = args[0]
    lines = r.stderr.strip().split("\n")
    check(f"usage error {' '.join(args)}", r.returncode == 2 and len(lines) == 1 and lines[0].startswith(f"loom {cmd}: ")
          and lines[0].count("loom ") == 2 and lines[0].endswith(f"see loom {cmd} --help"), r.stderr)

# vLLM's flags that loom covers: accepted with a note each; others refused naming loom's own
notes = ["--enable-auto-tool-choice", "--tool-call-parser", "hermes", "--reasoning-parser", "qwen3", "--dtype",
         "bfloat16", "--trust-remote-code"]
r = run("run", tiny, *notes, *IDS)
check("vLLM no-op flags accepted", r.returncode == 0 and r.stdout == want, r.stderr)
for flag in ("--enable-auto-tool-choice", "--tool-call-parser", "--reasoning-parser", "--dtype", "--trust-remote-code"):
    line = [l for l in r.stderr.split("\n") if l.startswith(f"loom run: {flag}:")]
    check(f"{flag} has a one-line note", len(line) == 1 and len(line[0]) > len(flag) + 20, r.stderr)
for args, names in ((["--dtype", "float16"], "bfloat16"), (["-ngl", "99"], "--device"), (["-hf", "Qwen/Qwen3.5-0.8B"], "--model"),
                    (["--n-predict", "8"], "--max-tokens"), (["--quantization", "fp8"], "--quantize int8")):
    r = run("serve", tiny, *args)
    check(f"{args[0]} refused naming {names}", r.returncode == 2 and names in r.stderr, r.stderr)

# --tensor-parallel-size is loom's now (issue 19): a split the heads do not divide is refused naming
# the count, and a split that divides gives the same ids (on cuda the ranks sum through NCCL)
r = run("run", tiny, "--tensor-parallel-size", "3", *IDS)
check("--tensor-parallel-size 3 refused naming the count", r.returncode == 1 and "is not a multiple of 3" in r.stderr,
      r.stderr)
r = run("run", tiny, "--tensor-parallel-size", "2", *IDS)
check("--tensor-parallel-size 2 gives the same ids", r.returncode == 0 and r.stdout == want, r.stderr)
# vLLM's --enable-expert-parallel (and -ep) is loom's too: on a dense model, or one rank, it changes
# nothing (tests/cli_test.py runs it on the MoE fixture)
for args in (["--enable-expert-parallel", "--tensor-parallel-size", "2"], ["-ep"]):
    r = run("run", tiny, *args, *IDS)
    check(f"{' '.join(args)} on the dense model gives the same ids", r.returncode == 0 and r.stdout == want, r.stderr)
r = run("run", "--help")
check("run --help lists --enable-expert-parallel", r.returncode == 0 and "--enable-expert-parallel, -ep" in r.stdout,
      r.stdout[-500:])

# the shared table's prefix-cache and precision flags: every model-loading command takes them
for cmd in ("run", "bench"):
    extra = IDS if cmd == "run" else ["--prompt-tokens", "8", "--gen-tokens", "2"]
    r = run(cmd, tiny, "--no-enable-prefix-caching", "--prefix-snapshot-bytes", "64M", "--compute-dtype", "f32", *extra)
    check(f"{cmd}: prefix-cache and --compute-dtype flags accepted", r.returncode == 0, r.stderr)
r = run("run", tiny, "--compute-dtype", "bf16", *IDS)
with open("/proc/cpuinfo") as f:
    has_bf16 = "avx512_bf16" in f.read().split()
if has_bf16:
    check("bf16 compute on the cpu runs (AVX-512 BF16 here)", r.returncode == 0, r.stderr)
else:
    check("bf16 compute on the cpu refused with a sentence", r.returncode != 0 and "avx512_bf16" in r.stderr, r.stderr)
r = run("run", tiny, "--device", "ref", "--compute-dtype", "bf16", *IDS)
check("bf16 compute on the ref backend refused with a sentence", r.returncode != 0 and "float32 only" in r.stderr, r.stderr)
r = run("run", tiny, "--compute-dtype", "fp8", *IDS)
check("--compute-dtype fp8 is a usage error", r.returncode == 2 and "f32 or bf16" in r.stderr, r.stderr)
# --quantize int8 on every model-loading command; the ref backend gives the cpu's tokens here
for cmd in ("run", "bench", "logits", "inspect"):
    extra = {"run": IDS, "bench": ["--prompt-tokens", "8", "--gen-tokens", "2"],
             "logits": ["--ids", "1,2,3", "--out", "/dev/null"], "inspect": []}[cmd]
    r = run(cmd, tiny, "--quantize", "int8", *extra)
    check(f"{cmd}: --quantize int8 accepted", r.returncode == 0, r.stderr)
r = run("bench", tiny, "--quantize", "int8", "--prompt-tokens", "8", "--gen-tokens", "2")
check("bench says the weights were made int8", "made int8" in r.stdout, r.stdout)
r = run("inspect", tiny, "--quantize", "int8")
check("inspect says the weights were made int8", "weights made int8 at load" in r.stdout, r.stdout)
r = run("run", tiny, "--quantize", "int4", *IDS)
check("--quantize int4 is a usage error", r.returncode == 2 and "int8, fp8 or none" in r.stderr, r.stderr)
r = run("run", tiny, "--prefix-snapshot-bytes", "12X", *IDS)
check("--prefix-snapshot-bytes 12X is a usage error", r.returncode == 2 and "512M" in r.stderr, r.stderr)

# --max-model-len above max_position_embeddings: refused, unless explicitly allowed
r = run("run", tiny, "--max-model-len", "100000", *IDS)
check("--max-model-len above the model's refused", r.returncode == 2 and "max_position_embeddings" in r.stderr
      and "8192" in r.stderr and "--allow-long-max-model-len" in r.stderr, r.stderr)
r = run("run", tiny, "--max-model-len", "9000", "--allow-long-max-model-len", *IDS)
check("--allow-long-max-model-len", r.returncode == 0 and r.stdout == want, r.stderr)
r = run("run", tiny, "--threads", "4096", *IDS)
check("--threads out of range", r.returncode == 2, r.stderr)
cores = os.cpu_count() or 1
r = run("run", tiny, "--threads", str(min(cores * 2, 1024)), *IDS)
check("--threads above the cores warns", r.returncode == 0 and "cores" in r.stderr, r.stderr)

# a GGUF file is a model: the same tokens as the checkpoint it was converted from,
# its prompt encoded by the tokenizer of its metadata; inspect names its format
fixtures = os.path.abspath(os.environ.get("LOOM_FIXTURES", "tests/fixtures"))
dense = os.path.join(fixtures, "models", "qwen35-dense")
dense_gguf = os.path.join(fixtures, "models", "qwen35-dense-gguf", "model-f32.gguf")
PROMPT = ["--prompt", "Hello there", "--max-tokens", "6", "--print-ids", "--temperature", "0"]
r, r_gguf = run("run", dense, *PROMPT), run("run", dense_gguf, *PROMPT)
check("run FILE.gguf: the checkpoint's tokens", r.returncode == 0 and r_gguf.returncode == 0 and r.stdout
      and r_gguf.stdout == r.stdout, r_gguf.stderr or r.stderr)
r = run("inspect", dense_gguf)
check("inspect FILE.gguf", r.returncode == 0 and "GGUF v3, architecture qwen35" in r.stdout and "F32 x71" in r.stdout,
      r.stdout + r.stderr)
r = run("run", dense_gguf, "--max-model-len", "5000", *PROMPT)
check("--max-model-len above a GGUF's context_length refused", r.returncode == 2
      and "4096 in qwen35.context_length" in r.stderr, r.stderr)
gguf_dir = os.path.join(tmp, "gguf-folder")
os.mkdir(gguf_dir)
os.symlink(dense_gguf, os.path.join(gguf_dir, "model.gguf"))
r = run("run", gguf_dir, *PROMPT)
check("run FOLDER of one .gguf", r.returncode == 0 and r.stdout == r_gguf.stdout, r.stderr)
os.symlink(dense_gguf, os.path.join(gguf_dir, "other.gguf"))
r = run("run", gguf_dir, *PROMPT)
check("a folder of two .gguf files", r.returncode == 1 and "several GGUF files" in r.stderr
      and "name one" in r.stderr, r.stderr)

# errors that teach: each names the problem and the fix
gguf = os.path.join(tmp, "model.gguf")
open(gguf, "wb").write(b"GGUF" + b"\0" * 60)
empty = os.path.join(tmp, "empty")
os.mkdir(empty)
llama = os.path.join(tmp, "llama")
os.mkdir(llama)
json.dump({"model_type": "llama", "architectures": ["LlamaForCausalLM"]}, open(os.path.join(llama, "config.json"), "w"))
corrupt = os.path.join(tmp, "corrupt")
shutil.copytree(tiny, corrupt)
with open(os.path.join(corrupt, "model.safetensors"), "r+b") as f:
    f.write(b"PK\x03\x04 not a header")
cases = [
    ("a .safetensors file", [os.path.join(tiny, "model.safetensors")], ["is a file", f"--model {tiny}"]),
    ("a malformed GGUF file", [gguf], ["model.gguf", "GGUF version 0", "versions 2 and 3"]),
    ("a folder without config.json", [empty], ["has no config.json", "checkpoint folder"]),
    ("a hub id", ["Qwen/Qwen3.5-0.8B"], ["does not download", "huggingface-cli download Qwen/Qwen3.5-0.8B"]),
    ("an unsupported architecture", [llama], ["'llama'", "LlamaForCausalLM", "qwen3_5", "glm4v_moe"]),
    ("a corrupt header", [corrupt], ["model.safetensors", "not a safetensors file", "download it again"]),
]
for name, model_args, words in cases:
    for cmd, rest in (("run", ["--prompt", "hi"]), ("serve", ["--port", "0"])):
        r = run(cmd, *model_args, *rest)
        text = r.stderr.strip()
        last = text.split("\n")[-1]  # serve logs "loading ..." first once the port is bound
        check(f"{cmd}: {name}", r.returncode == 1 and all(w in last for w in words) and "Sanitizer" not in text
              and (cmd == "serve" or len(text.split("\n")) == 1), text)
r = run("run", llama, "--prompt", "hi")
check("unsupported architecture: only what the registry lists", "llama," not in r.stderr and "mistral" not in r.stderr,
      r.stderr)

# the tokenizer commands default to the bundled model, and only need tokenizer.json
r = run("tokenize", input="Hello")
check("tokenize with the bundled model", r.returncode == 0 and r.stdout.startswith("["), r.stderr)
r = run("detokenize", input=r.stdout)
check("detokenize with the bundled model", r.returncode == 0 and r.stdout == "Hello", r.stdout + r.stderr)
r = run("render", input='{"messages": [{"role": "user", "content": "hi"}]}')
check("render with the bundled model", r.returncode == 0 and "hi" in r.stdout, r.stderr)
r = run("logits", "--ids", "1,2", "--out", os.path.join(tmp, "l.bin"))
check("logits with the bundled model", r.returncode == 0 and os.path.getsize(os.path.join(tmp, "l.bin")) > 0, r.stderr)
r = run("tokenize", empty, input="x")
check("tokenize: a folder without tokenizer.json", r.returncode == 1 and "tokenizer.json" in r.stderr, r.stderr)

# the port is bound before the weights are read: a taken port fails at once, before any
# weights are opened (the folder's weights are a FIFO: reading them would block)
fifo_model = os.path.join(tmp, "fifo")
os.mkdir(fifo_model)
for f in os.listdir(tiny):
    if f.endswith(".safetensors"):
        os.mkfifo(os.path.join(fifo_model, f))
    else:
        os.symlink(os.path.join(tiny, f), os.path.join(fifo_model, f))
taken = socket.socket()
taken.bind(("127.0.0.1", 0))
taken.listen()
port = taken.getsockname()[1]
starts = []
for _ in range(3):  # the process's own start (dynamic linking) is not loom's to spend
    t = time.monotonic()
    run("--version")
    starts.append(time.monotonic() - t)
t = time.monotonic()
try:
    r = run("serve", fifo_model, "--port", str(port))
    elapsed = time.monotonic() - t
except subprocess.TimeoutExpired:
    r, elapsed = None, 999
budget = 0.100 + min(starts)
check("a taken port fails before the weights are read", r is not None and r.returncode == 1, r and r.stderr)
check(f"... within 100 ms ({elapsed * 1000:.0f} ms, {min(starts) * 1000:.0f} ms of it process start)",
      elapsed < budget, elapsed)
if r:
    check("... said once, with the flag to change it", r.stderr.count("in use") == 1 and "--port" in r.stderr
          and str(port) in r.stderr, r.stderr)
taken.close()


# the server: startup summary, one line per request, the throughput line, /version, --host forms
def start(*args, binary=loom):
    p = subprocess.Popen([binary, "serve", "--port", "0", *args], stderr=subprocess.PIPE, text=True)
    lines = []
    while True:
        line = p.stderr.readline()
        if not line:
            return p, None, lines
        lines.append(line)
        m = re.search(r"serving \S+ on http://(\S+):(\d+)", line)
        if m:
            return p, f"http://{m.group(1)}:{m.group(2)}", lines


def stop(p):
    p.send_signal(2)
    rest = p.stderr.read()
    return p.wait(timeout=60), rest


def post(url, path, body):
    req = urllib.request.Request(url + path, data=json.dumps(body).encode(), headers={"Content-Type": "application/json"})
    return json.load(urllib.request.urlopen(req, timeout=60))


stamp = re.compile(r"^\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{3}Z (DEBUG|INFO|WARNING|ERROR) loom serve: ")
for binary in [b for b in (loom, asan) if os.path.exists(b)]:
    tag = "asan" if binary == asan else "release"
    kernels = kernels_of(binary)  # the asan tree's set is native
    p, url, head = start(tiny, "--log-stats-interval", "0.2", "--kv-cache-tokens", "4000", "-np", "3", binary=binary)
    check(f"{tag}: serve starts", url is not None, "".join(head))
    if not url:
        p.kill()
        continue
    summary = "".join(head)
    for words in (["qwen3_5", "parameters", "BF16", "loaded in", "MiB resident", "cpu backend",
                   f"{kernels} kernels", "threads"],
                  ["WARNING loom serve: the default max model length 8192 was lowered to 4000",
                   "(--kv-cache-tokens 4000)"],
                  ["KV cache: 4000 tokens (f32, 16 MiB)", "1 sequence of full length", "3 state slots"],
                  ["speculative decoding off"], ["sampling defaults:"]):
        check(f"{tag}: startup says {words[0]}", all(w in summary for w in words), summary)
    check(f"{tag}: every line timestamped", all(stamp.match(l) for l in head), head)
    version = json.load(urllib.request.urlopen(url + "/version", timeout=30))
    check(f"{tag}: GET /version", set(version) >= {"version", "git_commit", "compiler", "cpu_features", "kernel_sets",
                                                    "cpu_kernels", "backends"}
          and version["version"] in run("--version").stdout and version["cpu_kernels"] == kernels, version)
    # loom health: the containers' HEALTHCHECK probe (exit 0 on GET /health 200)
    host, port = url.split("//", 1)[1].rsplit(":", 1)
    r = run("health", "--host", host.strip("[]"), "--port", port)
    check(f"{tag}: loom health: healthy", r.returncode == 0 and r.stderr == "", r.stderr)
    out = post(url, "/v1/completions", {"prompt": "Once upon a time", "max_tokens": 24, "temperature": 0, "ignore_eos": True})
    post(url, "/v1/chat/completions", {"messages": [{"role": "user", "content": "Hi"}], "max_tokens": 3})
    try:
        post(url, "/v1/completions", {"prompt": "x", "max_tokens": 100000})
    except urllib.error.HTTPError as e:
        bad_status = e.code
    time.sleep(0.6)
    rc, rest = stop(p)
    log = rest.split("\n")
    reqs = [l for l in log if " request " in l]
    check(f"{tag}: one line per request", len(reqs) == 3, rest)
    if len(reqs) == 3:
        first = reqs[0]
        check(f"{tag}: request line fields", re.search(r"request cmpl-[0-9a-f]{32} /v1/completions 200: prompt \d+, "
                                                      r"cached \d+, output 24 tokens, first token [\d.]+ s, "
                                                      r"[\d.]+ tokens/s, [\d.]+ s, finish length", first), first)
        check(f"{tag}: chat request line", "/v1/chat/completions 200" in reqs[1], reqs[1])
        check(f"{tag}: refused request line", f"/v1/completions {bad_status}" in reqs[2], reqs[2])
    thr = [l for l in log if "throughput:" in l]
    check(f"{tag}: throughput line while busy", len(thr) >= 1 and re.search(
        r"prompt [\d.]+ tokens/s, generation [\d.]+ tokens/s, running \d+, waiting \d+, KV cache [\d.]+% used",
        thr[0]), rest)
    idle = "prompt 0.0 tokens/s, generation 0.0 tokens/s, running 0, waiting 0"
    trailing = len(thr) - next((i for i in range(len(thr) - 1, -1, -1) if idle not in thr[i]), -1) - 1
    check(f"{tag}: one line after the work stops, then silent", trailing == 1, thr)
    check(f"{tag}: stops with exit 0", rc == 0, rest)
    r = run("health", "--host", host.strip("[]"), "--port", port, "--timeout", "2")
    check(f"{tag}: loom health: a stopped server is unhealthy", r.returncode == 1 and "cannot connect" in r.stderr,
          r.stderr)

# --disable-log-requests, --disable-log-stats, --log-level warning
p, url, head = start(tiny, "--disable-log-requests", "--log-stats-interval", "0.1", "--disable-log-stats")
if url:
    post(url, "/v1/completions", {"prompt": "Hi", "max_tokens": 8})
    time.sleep(0.3)
    rc, rest = stop(p)
    check("--disable-log-requests / --disable-log-stats", " request " not in rest and "throughput" not in rest, rest)
free = socket.socket()
free.bind(("127.0.0.1", 0))
free_port = free.getsockname()[1]
free.close()
p = subprocess.Popen([loom, "serve", tiny, "--port", str(free_port), "--log-level", "warning"], stderr=subprocess.PIPE,
                     text=True)
up = False
for _ in range(300):
    try:
        up = urllib.request.urlopen(f"http://127.0.0.1:{free_port}/health", timeout=5).status == 200
        break
    except OSError:
        time.sleep(0.05)
rc, rest = stop(p)
check("--log-level warning: only warnings and errors", up and rc == 0 and " INFO " not in rest, rest)
# refused before generation (401): still one line; the other routes at debug
p, url, head = start(tiny, "--api-key", "k2", "--log-level", "debug", "--disable-log-stats")
if url:
    for path, body in (("/v1/completions", b'{"prompt": "x"}'), ("/v1/models", None)):
        try:
            urllib.request.urlopen(urllib.request.Request(url + path, data=body), timeout=30)
        except urllib.error.HTTPError:
            pass
    time.sleep(0.2)
    rc, rest = stop(p)
    check("a refused generation request is logged", re.search(r" INFO loom serve: request - /v1/completions 401", rest), rest)
    check("other routes at debug", re.search(r" DEBUG loom serve: request /v1/models 401", rest), rest)
r = run("serve", "--log-level", "loud")
check("--log-level bad", r.returncode == 2 and "debug, info, warning or error" in r.stderr, r.stderr)

# --host: IPv6 and host names
for host, shown in (("::1", "[::1]"), ("[::1]", "[::1]"), ("localhost", "localhost")):
    p, url, head = start(tiny, "--host", host)
    ok = url is not None and shown in url
    if ok:
        ok = urllib.request.urlopen(url + "/health", timeout=30).status == 200
    check(f"--host {host}", ok, "".join(head))
    if url:
        stop(p)
    else:
        p.wait()
r = run("serve", tiny, "--host", "no-such-host.invalid")
check("--host unresolvable", r.returncode == 1 and "--host" in r.stderr, r.stderr)

# sampling defaults from generation_config.json; a request's own fields win
def model_with_generation_config(name, config):
    folder = os.path.join(tmp, name)
    os.mkdir(folder)
    for f in os.listdir(tiny):
        if f != "generation_config.json":
            os.symlink(os.path.join(tiny, f), os.path.join(folder, f))
    json.dump(config, open(os.path.join(folder, "generation_config.json"), "w"))
    return folder


gen = model_with_generation_config("gen", {"temperature": 0.0, "top_k": 1})
p, url, head = start(gen, "--seed", "5")
check("generation_config.json in the summary",
      any("sampling defaults: temperature 0, top-p 1, top-k 1, min-p 0, repetition penalty 1 (from " in l
          and "generation_config.json: temperature 0, top_k 1; the rest loom's fallback" in l for l in head), head)
if url:
    body = {"prompt": "Once upon a time", "max_tokens": 16, "ignore_eos": True}
    a = post(url, "/v1/completions", body)["choices"][0]["text"]
    b = post(url, "/v1/completions", dict(body, temperature=0))["choices"][0]["text"]
    hot = {post(url, "/v1/completions", dict(body, temperature=5, top_k=0, seed=s))["choices"][0]["text"] for s in (1, 2)}
    check("defaults apply to fields a request leaves out", a == b, (a, b))
    check("a request's own fields win", len(hot) == 2 and a not in hot, hot)
    stop(p)
fallback = "temperature 1, top-p 1, top-k -1, min-p 0, repetition penalty 1"
p, url, head = start(gen, "--generation-config", "vllm")
check("--generation-config vllm: loom's fallback",
      any(f"sampling defaults: {fallback} (--generation-config vllm" in l for l in head), head)
if url:
    stop(p)
else:
    p.wait()

# serve, run and chat start from the same sampling values: generation_config.json's where it
# gives them, else one fallback (OpenAI's and vLLM's); seeded, the three draw the same tokens
sampled = model_with_generation_config("sampled", {"temperature": 0.9, "top_p": 0.8, "top_k": 20, "min_p": 0.05,
                                                   "repetition_penalty": 1.3})
values = "temperature 0.9, top-p 0.8, top-k 20, min-p 0.05, repetition penalty 1.3"
as_flags = ["--temperature", "0.9", "--top-p", "0.8", "--top-k", "20", "--min-p", "0.05", "--repetition-penalty", "1.3"]
prompt_args = ["--prompt", "Once upon a time", "--raw", "--seed", "7", "--max-tokens", "12", "--ignore-eos"]
run_config = run("run", sampled, *prompt_args)
run_flags = run("run", tiny, *prompt_args, *as_flags)
run_fallback = run("run", tiny, *prompt_args)
run_fallback_flags = run("run", tiny, *prompt_args, "--temperature", "1", "--top-p", "1", "--top-k", "-1",
                         "--min-p", "0", "--repetition-penalty", "1")
check("run: generation_config.json's values are the defaults",
      run_config.returncode == 0 and run_config.stdout.strip() and run_config.stdout == run_flags.stdout,
      (run_config.stdout, run_flags.stdout, run_config.stderr))
check("run: without one, the fallback", run_fallback.returncode == 0 and run_fallback.stdout == run_fallback_flags.stdout
      and run_fallback.stdout != run_config.stdout, (run_fallback.stdout, run_fallback_flags.stdout))
r = run("run", sampled, *prompt_args, "--generation-config", "vllm")
check("run --generation-config vllm: the fallback", r.returncode == 0 and r.stdout == run_fallback.stdout, r.stdout)
r = run("run", tiny, *prompt_args, "--generation-config", sampled)
check("run --generation-config DIR: that folder's", r.returncode == 0 and r.stdout == run_config.stdout, r.stdout)
r = run("run", sampled, *prompt_args, "--temperature", "0")
greedy = run("run", tiny, *prompt_args, "--temperature", "0", "--top-p", "0.8", "--top-k", "20", "--min-p", "0.05",
             "--repetition-penalty", "1.3")
check("run: a flag wins over generation_config.json", r.returncode == 0 and r.stdout == greedy.stdout
      and r.stdout != run_config.stdout, (r.stdout, greedy.stdout))
chat_config = run("chat", sampled, "--seed", "7", "--max-tokens", "8", input="Hello\n/settings\n")
chat_flags = run("chat", tiny, "--seed", "7", "--max-tokens", "8", *as_flags, input="Hello\n")
check("chat: generation_config.json's values are the defaults",
      chat_config.returncode == 0 and f"[sampling: {values}, max tokens 8, seed 7 (defaults: from " in chat_config.stderr
      and chat_config.stdout.strip() and chat_config.stdout == chat_flags.stdout,
      (chat_config.stdout, chat_flags.stdout, chat_config.stderr))
r = run("chat", tiny, input="/settings\n")
check("chat: without one, the fallback", r.returncode == 0 and f"[sampling: {fallback}, max tokens 512" in r.stderr,
      r.stderr)
p, url, head = start(sampled)
check("serve: the same values", any(f"sampling defaults: {values} (from " in l for l in head), head)
if url:
    text = post(url, "/v1/completions", {"prompt": "Once upon a time", "max_tokens": 12, "seed": 7,
                                         "ignore_eos": True})["choices"][0]["text"]
    check("serve: a request without sampling fields draws what run draws", text == run_config.stdout.strip("\n"),
          (text, run_config.stdout))
    answer = post(url, "/v1/chat/completions", {"messages": [{"role": "user", "content": "Hello"}], "max_tokens": 8,
                                                "seed": 7})["choices"][0]["message"]["content"]
    check("serve: a chat request without sampling fields answers what chat answers",
          answer == chat_config.stdout.strip("\n"), (answer, chat_config.stdout))
    # chat --url leaves the fields no flag sets to the server (its generation_config.json)
    r = subprocess.run([loom, "chat", "--url", url, "--seed", "7", "--max-tokens", "8"], input="Hello\n/settings\n",
                       capture_output=True, text=True, timeout=120)
    check("chat --url: the server's defaults", r.returncode == 0 and r.stdout == chat_config.stdout
          and "top-p the server's" in r.stderr, (r.stdout, r.stderr))
    stop(p)

# loom chat --url: the conversation goes to a running loom serve, history included
p, url, head = start(tiny, "--api-key", "k1")
if url:
    r = subprocess.run([loom, "chat", "--url", url, "--api-key", "k1", "--temperature", "0", "--max-tokens", "8"],
                       input="Hello!\nWho are you?\n", capture_output=True, text=True, timeout=120)
    rc, rest = stop(p)
    prompts = [int(m) for m in re.findall(r"/v1/chat/completions 200: prompt (\d+)", rest)]
    check("chat --url answers each message", r.returncode == 0 and len([l for l in r.stdout.split("\n") if l.strip()]) == 2,
          r.stdout + r.stderr)
    check("chat --url sends the history", len(prompts) == 2 and prompts[1] > prompts[0] + 8, rest)
r = run("chat", "--url", "http://127.0.0.1:1", input="")
check("chat --url: nothing there", r.returncode == 1 and "cannot connect" in r.stderr, r.stderr)

shutil.rmtree(tmp, ignore_errors=True)
print(f"test_operability.sh: {passed} passed, {failed} failed")
sys.exit(1 if failed else 0)
