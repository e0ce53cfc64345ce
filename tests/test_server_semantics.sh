#!/usr/bin/env bash
# What `loom serve` answers to hostile or unusual clients (tests/node/server_semantics.mjs):
# the release binary, then the ASan+UBSan binary (when built) with an API key.
cd "$(dirname "$0")/.." || exit 1
. tests/lib/client_suite.sh
build=${LOOM_BUILD:-build}
model=${LOOM_FIXTURES:-tests/fixtures}/models/qwen35-dense
if [ ! -d tests/node/node_modules/openai ]; then
    echo "test_server_semantics.sh: the openai SDK is missing (npm install --prefix tests/node)"
    echo "test_server_semantics.sh: 0 passed, 1 failed"; exit 1
fi
run() { run_client 300 node tests/node/server_semantics.mjs "$@"; }
run "$build/loom" "$model"
if [ -x "$build/asan/loom" ] && [ "${LOOM_SKIP_ASAN:-0}" != 1 ]; then
    ASAN_OPTIONS=${ASAN_OPTIONS:-detect_leaks=1} run "$build/asan/loom" "$model" --api-key test-key
fi
echo "test_server_semantics.sh: $passed passed, $failed failed"
[ "$failed" -eq 0 ]
