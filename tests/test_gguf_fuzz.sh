#!/usr/bin/env bash
# A bounded libFuzzer run of fuzz/fuzz_gguf (ASan+UBSan): the GGUF reader
# and what reads its metadata (the Qwen3.5 config, the tokenizer and chat
# template), seeded with a small qwen35 GGUF written here by the format's
# spec (metadata of every type, a vocabulary, merges, a template, two
# tensors) and the head of a fixture written by llama.cpp's gguf-py, with a
# dictionary of the keys and type ids, in 512 MB and no allocation over
# 64 MB.  Fails on any crash, sanitizer report, timeout, running out of
# memory or broken invariant.  Skipped (0 passed, 0 failed) when the fuzz
# build is absent (`make fuzzers` builds it).  LOOM_FUZZ_SECONDS sets the
# length (default 15).
set -u
root=$(cd "$(dirname "$0")/.." && pwd)
cd "$root"
fixtures=${LOOM_FIXTURES:-$root/tests/fixtures}
name=test_gguf_fuzz.sh
. tests/fuzz_runner.sh
fuzz_prepare fuzz_gguf
head -c 65536 "$fixtures/models/qwen35-dense-gguf/model-q4_0.gguf" > "$work/corpus/fixture-head" || fuzz_seed_failed "no GGUF fixture under $fixtures"
python3 - "$work/corpus/spec" <<'PY' || fuzz_seed_failed "could not write the seed"
import struct, sys
def s(x): b = x.encode(); return struct.pack("<Q", len(b)) + b
def kv(key, t, payload): return s(key) + struct.pack("<I", t) + payload
def arr(t, items): return struct.pack("<IQ", t, len(items)) + b"".join(items)
u32 = lambda v: struct.pack("<I", v)
kvs = [
    kv("general.architecture", 8, s("qwen35")),
    kv("general.alignment", 4, u32(32)),
    kv("qwen35.block_count", 4, u32(1)), kv("qwen35.embedding_length", 4, u32(32)),
    kv("qwen35.feed_forward_length", 4, u32(32)), kv("qwen35.attention.head_count", 4, u32(2)),
    kv("qwen35.attention.head_count_kv", 4, u32(1)), kv("qwen35.attention.key_length", 4, u32(16)),
    kv("qwen35.attention.layer_norm_rms_epsilon", 6, struct.pack("<f", 1e-6)),
    kv("qwen35.rope.dimension_count", 4, u32(4)), kv("qwen35.rope.dimension_sections", 9, arr(5, [u32(1)] * 4)),
    kv("qwen35.ssm.conv_kernel", 4, u32(4)), kv("qwen35.ssm.state_size", 4, u32(8)),
    kv("qwen35.ssm.group_count", 4, u32(1)), kv("qwen35.ssm.time_step_rank", 4, u32(2)),
    kv("qwen35.ssm.inner_size", 4, u32(16)), kv("qwen35.full_attention_interval", 4, u32(1)),
    kv("tokenizer.ggml.model", 8, s("gpt2")), kv("tokenizer.ggml.pre", 8, s("qwen2")),
    kv("tokenizer.ggml.tokens", 9, arr(8, [s(t) for t in ["H", "e", "l", "o", "He", "ll", "<|im_end|>", "Ġ"]])),
    kv("tokenizer.ggml.token_type", 9, arr(5, [u32(1)] * 6 + [u32(3), u32(1)])),
    kv("tokenizer.ggml.merges", 9, arr(8, [s("H e"), s("l l")])),
    kv("tokenizer.ggml.eos_token_id", 4, u32(6)), kv("tokenizer.ggml.add_bos_token", 7, b"\0"),
    kv("tokenizer.chat_template", 8, s("{% for m in messages %}{{ m.content }}{% endfor %}")),
]
tensors = [s("token_embd.weight") + struct.pack("<IQQIQ", 2, 32, 8, 0, 0),
           s("output_norm.weight") + struct.pack("<IQIQ", 1, 32, 0, 1024)]
head = b"GGUF" + struct.pack("<IQQ", 3, len(tensors), len(kvs)) + b"".join(kvs) + b"".join(tensors)
head += b"\0" * (-len(head) % 32)
open(sys.argv[1], "wb").write(head + b"\0" * (1024 + 128))
PY
cat > "$work/dict" <<'DICT'
"GGUF"
"general.architecture"
"general.alignment"
"qwen35"
"qwen35moe"
"tokenizer.ggml.tokens"
"tokenizer.ggml.merges"
"tokenizer.ggml.token_type"
"tokenizer.chat_template"
"blk.0."
"\x08\x00\x00\x00"
"\x09\x00\x00\x00"
"\x0c\x00\x00\x00"
"\xff\xff\xff\xff\xff\xff\xff\xff"
DICT
fuzz_run 15 -max_len=65536 -rss_limit_mb=512 -malloc_limit_mb=64
