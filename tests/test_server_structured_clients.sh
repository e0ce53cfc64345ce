#!/usr/bin/env bash
# Structured outputs through the client libraries (tests/node/server_structured_clients.mjs):
# openai v6 chat.completions.parse / responses.parse with zod schemas and the
# AI SDK's generateObject (chat completions and Responses providers), on the
# bundled model at temperature 1 over several seeds: every output validates.
# The release binary, then the ASan+UBSan one (when built) with the quick subset.
# LOOM_SERVE_ARGS adds server flags.
cd "$(dirname "$0")/.." || exit 1
. tests/lib/client_suite.sh
build=${LOOM_BUILD:-build}
for pkg in openai zod ai @ai-sdk/openai; do
    if [ ! -d "tests/node/node_modules/$pkg" ]; then
        echo "test_server_structured_clients.sh: the npm package $pkg is missing (tools/install-deps.sh --test)"
        echo "test_server_structured_clients.sh: 0 passed, 1 failed"; exit 1
    fi
done
run() { run_client 600 node tests/node/server_structured_clients.mjs "$@"; }
run "$build/loom" models/loom-tiny
if [ -x "$build/asan/loom" ] && [ "${LOOM_SKIP_ASAN:-0}" != 1 ]; then
    ASAN_OPTIONS=${ASAN_OPTIONS:-detect_leaks=1} run "$build/asan/loom" models/loom-tiny --quick
fi
echo "test_server_structured_clients.sh: $passed passed, $failed failed"
[ "$failed" -eq 0 ]
