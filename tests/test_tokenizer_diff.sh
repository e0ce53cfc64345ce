#!/usr/bin/env bash
# Differential test of loom's tokenizer against the Rust tokenizers library
# (npm @anush008/tokenizers, installed into tests/node on first use) on
# generated text and random ids, for the real Qwen3 tokenizer and two fixture
# model tokenizers.  Prints "test_tokenizer_diff.sh: N passed, N failed".
set -u
root=$(cd "$(dirname "$0")/.." && pwd)
cd "$root"
build=${LOOM_BUILD:-build}
fixtures=${LOOM_FIXTURES:-$root/tests/fixtures}
name=test_tokenizer_diff.sh

fail() { echo "$name: $1"; echo "$name: 0 passed, 1 failed"; exit 1; }

command -v node >/dev/null 2>&1 || fail "node is not installed (tools/install-deps.sh --test installs it)"
[ -x "$build/loom" ] || fail "$build/loom is missing (run make)"
if [ ! -d tests/node/node_modules/@anush008/tokenizers ]; then
    npm ci --prefix tests/node --silent --no-audit --no-fund >/dev/null 2>&1 ||
        npm install --prefix tests/node --silent --no-audit --no-fund >/dev/null 2>&1 ||
        fail "cannot install the npm reference tokenizer into tests/node"
fi
exec node tests/node/diff_test.js --loom "$build/loom" --name "$name" --cases "${LOOM_TOKENIZER_DIFF_CASES:-300}" \
    "$fixtures/tokenizers/qwen3" "$fixtures/models/glm46v-moe" "$fixtures/models/qwen35-dense"
