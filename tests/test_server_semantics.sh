#!/usr/bin/env bash
# What `loom serve` answers to hostile or unusual clients (tests/node/server_semantics.mjs):
# the release binary, then the ASan+UBSan binary (when built) with an API key.
cd "$(dirname "$0")/.." || exit 1
build=${LOOM_BUILD:-build}
model=${LOOM_FIXTURES:-../shared/fixtures}/models/qwen35-dense
passed=0; failed=0
if [ ! -d tests/node/node_modules/openai ]; then
    echo "test_server_semantics.sh: the openai SDK is missing (npm install --prefix tests/node)"
    echo "test_server_semantics.sh: 0 passed, 1 failed"; exit 1
fi
run() {
    local out line
    out=$(timeout 300 node tests/node/server_semantics.mjs "$@" 2>&1)
    line=$(printf '%s\n' "$out" | grep -E ': [0-9]+ passed, [0-9]+ failed$' | tail -n 1)
    if [ -z "$line" ]; then printf '%s\n' "$out" | tail -n 30; failed=$((failed + 1)); return; fi
    printf '%s\n' "$out" | grep -v ' passed, ' | tail -n 30
    passed=$((passed + $(sed -E 's/.*: ([0-9]+) passed.*/\1/' <<<"$line")))
    failed=$((failed + $(sed -E 's/.*passed, ([0-9]+) failed/\1/' <<<"$line")))
}
run "$build/loom" "$model"
if [ -x "$build/asan/loom" ] && [ "${LOOM_SKIP_ASAN:-0}" != 1 ]; then
    ASAN_OPTIONS=${ASAN_OPTIONS:-detect_leaks=1} run "$build/asan/loom" "$model" --api-key test-key
fi
echo "test_server_semantics.sh: $passed passed, $failed failed"
[ "$failed" -eq 0 ]
