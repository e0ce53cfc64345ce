#!/usr/bin/env bash
# A bounded libFuzzer run of fuzz/fuzz_tokenizer (ASan+UBSan), seeded with
# the Qwen3 encode cases, a small tokenizer.json and a tokenizer_config.json.
# Fails on any crash, sanitizer report or broken invariant.  Skipped (0 passed,
# 0 failed) when the fuzz build is absent (`make fuzzers` builds it; `make
# test` does).  LOOM_FUZZ_SECONDS sets the length (default 30).
set -u
root=$(cd "$(dirname "$0")/.." && pwd)
cd "$root"
export LOOM_FIXTURES=${LOOM_FIXTURES:-$root/tests/fixtures}
name=test_tokenizer_fuzz.sh
. tests/fuzz_runner.sh
fuzz_prepare fuzz_tokenizer
python3 - "$LOOM_FIXTURES" "$work/corpus" <<'PY'
import json, sys
fixtures, out = sys.argv[1], sys.argv[2]
cases = json.load(open(f"{fixtures}/tokenizers/qwen3/encode_cases.json", encoding="utf-8"))
for i, c in enumerate(cases):
    open(f"{out}/enc{i}", "wb").write(bytes([2 * i % 192]) + c["text"].encode())
    open(f"{out}/dec{i}", "wb").write(bytes([192]) + b"".join(x.to_bytes(4, "little") for x in c["ids"][:64]))
tiny = ('{"added_tokens":[{"id":5,"content":"<x>","special":true,"lstrip":true}],"normalizer":{"type":"NFC"},'
        '"pre_tokenizer":{"type":"Sequence","pretokenizers":[{"type":"Split","pattern":{"Regex":"\\\\s+|\\\\w+"},'
        '"behavior":"MergedWithNext","invert":false},{"type":"ByteLevel","add_prefix_space":true}]},'
        '"decoder":{"type":"ByteLevel"},"model":{"type":"BPE","vocab":{"a":0,"b":1,"\\u0120":2,"ab":3},"merges":["a b"]}}')
open(f"{out}/load0", "wb").write(bytes([224]) + tiny.encode())
open(f"{out}/cfg0", "wb").write(bytes([240]) + open(f"{fixtures}/models/qwen35-dense/tokenizer_config.json", "rb").read())
PY
fuzz_run 30 -max_len=2048 -rss_limit_mb=3072
