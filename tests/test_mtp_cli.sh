#!/usr/bin/env bash
# `loom logits --mtp` on the qwen35-dense fixture: [T-1, V] float32 equal to
# the fixture's p0.mtp_logits within 1e-4 of their std, clear errors, and a
# checkpoint copy lacking one MTP tensor: the model runs, --mtp says which tensor;
# --draft-vocab (a reduced-vocabulary draft head) keeps greedy output.
cd "$(dirname "$0")/.." || exit 1
export LOOM_BUILD=${LOOM_BUILD:-build}
export LOOM_FIXTURES=${LOOM_FIXTURES:-tests/fixtures}
exec python3 - <<'EOF'
import json, os, shutil, struct, subprocess, sys, tempfile

build, fixtures = os.environ["LOOM_BUILD"], os.environ["LOOM_FIXTURES"]
model = os.path.join(fixtures, "models", "qwen35-dense")
binaries = [b for b in (os.path.join(build, "loom"), os.path.join(build, "asan", "loom")) if os.path.exists(b)]
passed = failed = 0


def check(name, ok, detail=""):
    global passed, failed
    passed, failed = passed + bool(ok), failed + (not ok)
    if not ok:
        print(f"  FAIL {name}: {detail}", file=sys.stderr)


def tensors(path, wanted):
    blob = open(path, "rb").read()
    n = struct.unpack("<Q", blob[:8])[0]
    header = json.loads(blob[8:8 + n])
    out = {}
    for k in wanted:
        v = header[k]
        b, e = v["data_offsets"]
        raw = blob[8 + n + b:8 + n + e]
        out[k] = struct.unpack(f"<{len(raw) // 4}{ {'F32': 'f', 'I32': 'i'}[v['dtype']] }", raw)
    return out


ref = tensors(os.path.join(model, "reference.safetensors"), ["p0.input_ids", "p0.mtp_logits"])
V = json.load(open(os.path.join(model, "config.json")))["text_config"]["vocab_size"]
ids = ref["p0.input_ids"]
tmp = tempfile.mkdtemp(prefix="loom-mtp-cli-")

# a copy of the checkpoint whose MTP shard lacks one tensor
dropped = "mtp.layers.0.self_attn.k_proj.weight"
broken = os.path.join(tmp, "broken")
os.mkdir(broken)
for f in ("config.json", "model.safetensors"):
    os.symlink(os.path.abspath(os.path.join(model, f)), os.path.join(broken, f))
blob = open(os.path.join(model, "model-mtp.safetensors"), "rb").read()
n = struct.unpack("<Q", blob[:8])[0]
header, body, kept, data = json.loads(blob[8:8 + n]), blob[8 + n:], {}, b""
for k, v in header.items():
    if k in ("__metadata__", dropped):
        continue
    b, e = v["data_offsets"]
    kept[k] = dict(v, data_offsets=[len(data), len(data) + e - b])
    data += body[b:e]
text = json.dumps(kept).encode()
text += b" " * (-len(text) % 8)
open(os.path.join(broken, "model-mtp.safetensors"), "wb").write(struct.pack("<Q", len(text)) + text + data)
index = json.load(open(os.path.join(model, "model.safetensors.index.json")))
del index["weight_map"][dropped]
json.dump(index, open(os.path.join(broken, "model.safetensors.index.json"), "w"))
check("binaries exist", binaries, build)
for loom in binaries:
    tag = os.path.relpath(loom, build)
    out = os.path.join(tmp, "mtp.bin")
    r = subprocess.run([loom, "logits", "--mtp", "--model", model, "--ids", ",".join(map(str, ids)),
                        "--out", out], capture_output=True, text=True, timeout=300)
    check(f"{tag} --mtp exit", r.returncode == 0, r.stderr)
    if r.returncode == 0:
        data = open(out, "rb").read()
        T = len(ids)
        check(f"{tag} --mtp size", len(data) == 4 * (T - 1) * V, len(data))
        got = struct.unpack(f"<{len(data) // 4}f", data)
        want = ref["p0.mtp_logits"]
        mean = sum(want) / len(want)
        std = (sum((w - mean) ** 2 for w in want) / len(want)) ** 0.5
        err = max(abs(a - b) for a, b in zip(got, want)) / std if len(got) == len(want) else float("inf")
        check(f"{tag} --mtp values", err < 1e-4, f"normalized error {err:.3g}")
    r = subprocess.run([loom, "logits", "--mtp", "--model", model, "--ids", "5", "--out", out],
                       capture_output=True, text=True, timeout=300)
    check(f"{tag} --mtp one id", r.returncode == 1 and "at least 2 ids" in r.stderr, r.stderr)
    r = subprocess.run([loom, "logits", "--mtp", "--model", broken, "--ids", "5,6", "--out", out],
                       capture_output=True, text=True, timeout=300)
    check(f"{tag} --mtp without the head", r.returncode == 1 and dropped in r.stderr
          and "MTP head not loaded" in r.stderr and "ERROR: AddressSanitizer" not in r.stderr, r.stderr)
    r = subprocess.run([loom, "logits", "--model", broken, "--ids", "5,6", "--out", out],
                       capture_output=True, text=True, timeout=300)
    check(f"{tag} logits without the head", r.returncode == 0, r.stderr)
    r = subprocess.run([loom, "inspect", "--model", broken], capture_output=True, text=True, timeout=300)
    check(f"{tag} inspect without the head", r.returncode == 0 and dropped in r.stdout, r.stdout)
    r = subprocess.run([loom, "logits", "--help"], capture_output=True, text=True, timeout=60)
    check(f"{tag} --help mentions --mtp", r.returncode == 0 and "--mtp" in r.stdout, r.stdout)
    # --draft-vocab: greedy output as plain greedy's, the bench's bytes line
    # names the cut, bad values are usage errors
    plain = subprocess.run([loom, "run", "--model", model, "--ids", ",".join(map(str, ids)), "--max-tokens", "16",
                            "--temperature", "0"], capture_output=True, text=True, timeout=300)
    for dv in ("1024", "full", "auto", "7"):
        r = subprocess.run([loom, "run", "--model", model, "--ids", ",".join(map(str, ids)), "--max-tokens", "16",
                            "--temperature", "0", "--speculative-tokens", "2", "--draft-vocab", dv],
                           capture_output=True, text=True, timeout=300)
        check(f"{tag} run --draft-vocab {dv}", r.returncode == 0 and plain.returncode == 0 and r.stdout == plain.stdout
              and "speculative: K=2" in r.stderr, r.stdout + r.stderr + plain.stdout)
    for bad in ("0", "-3", "bogus", "16777217"):
        r = subprocess.run([loom, "run", "--model", model, "--ids", "1", "--draft-vocab", bad],
                           capture_output=True, text=True, timeout=60)
        check(f"{tag} bad --draft-vocab {bad}", r.returncode == 2 and "--draft-vocab" in r.stderr, r.stderr)
    r = subprocess.run([loom, "bench", model, "--concurrency", "1", "--requests", "1", "--prompt-tokens", "8",
                        "--gen-tokens", "4", "--speculative-tokens", "2", "--draft-vocab", "1024"],
                       capture_output=True, text=True, timeout=300)
    check(f"{tag} bench bytes line", r.returncode == 0 and f"(1024 of {V} ids;" in r.stdout, r.stdout + r.stderr)
    # inspect reports the head
    r = subprocess.run([loom, "inspect", "--model", model], capture_output=True, text=True, timeout=300)
    check(f"{tag} inspect mtp", r.returncode == 0 and "mtp head: loaded" in r.stdout, r.stdout)
shutil.rmtree(tmp, ignore_errors=True)
print(f"test_mtp_cli.sh: {passed} passed, {failed} failed")
sys.exit(1 if failed else 0)
EOF
