#!/usr/bin/env bash
# End-to-end tests of loom's Anthropic Messages API (/v1/messages,
# /v1/messages/count_tokens) with the @anthropic-ai/sdk npm package
# (tests/node/server_messages.mjs), and what the Anthropic and OpenAI SDKs
# make of loom's errors, request ids and /v1/models
# (tests/node/server_sdk_errors.mjs): the release binary with the full
# suites, then the ASan+UBSan binary (when built) with the quick subset.
# LOOM_SERVE_ARGS adds server flags (LOOM_SERVE_ARGS="--device cuda").
cd "$(dirname "$0")/.." || exit 1
. tests/lib/client_suite.sh
build=${LOOM_BUILD:-build}
model=${LOOM_FIXTURES:-tests/fixtures}/models/qwen35-dense
if [ ! -d tests/node/node_modules/@anthropic-ai/sdk ]; then
    echo "test_server_messages.sh: the Anthropic SDK is missing (npm ci --prefix tests/node)"
    echo "test_server_messages.sh: 0 passed, 1 failed"; exit 1
fi
run() { run_client 180 node tests/node/server_messages.mjs "$@"; }
errors() { run_client 120 node tests/node/server_sdk_errors.mjs "$@"; }
run "$build/loom" "$model"
errors "$build/loom" "$model"
if [ -x "$build/asan/loom" ] && [ "${LOOM_SKIP_ASAN:-0}" != 1 ]; then
    ASAN_OPTIONS=${ASAN_OPTIONS:-detect_leaks=1} run "$build/asan/loom" "$model" --api-key asan-key --quick
    ASAN_OPTIONS=${ASAN_OPTIONS:-detect_leaks=1} errors "$build/asan/loom" "$model" --api-key asan-key
fi
echo "test_server_messages.sh: $passed passed, $failed failed"
[ "$failed" -eq 0 ]
