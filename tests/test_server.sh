#!/usr/bin/env bash
# End-to-end tests of `loom serve` with the openai npm SDK (tests/node/server_e2e.mjs):
# the release binary with the full suite, then the ASan+UBSan binary (when
# built) with an API key and fewer concurrent clients.  LOOM_SERVE_ARGS adds
# server flags (LOOM_SERVE_ARGS="--device cuda" on a machine with a GPU).
cd "$(dirname "$0")/.." || exit 1
. tests/lib/client_suite.sh
build=${LOOM_BUILD:-build}
model=${LOOM_FIXTURES:-tests/fixtures}/models/qwen35-dense
if [ ! -d tests/node/node_modules/openai ]; then
    echo "test_server.sh: the openai SDK is missing (npm install --prefix tests/node)"
    echo "test_server.sh: 0 passed, 1 failed"; exit 1
fi
run() { run_client 120 node tests/node/server_e2e.mjs "$@"; }
run "$build/loom" "$model"
if [ -x "$build/asan/loom" ] && [ "${LOOM_SKIP_ASAN:-0}" != 1 ]; then
    ASAN_OPTIONS=${ASAN_OPTIONS:-detect_leaks=1} run "$build/asan/loom" "$model" --api-key test-key --quick
fi
echo "test_server.sh: $passed passed, $failed failed"
[ "$failed" -eq 0 ]
