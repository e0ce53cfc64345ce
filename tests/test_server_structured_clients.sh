#!/usr/bin/env bash
# Structured outputs through the client libraries (tests/node/server_structured_clients.mjs):
# openai v6 chat.completions.parse / responses.parse with zod schemas and the
# AI SDK's generateObject (chat completions and Responses providers), on the
# bundled model at temperature 1 over several seeds: every output validates.
# The release binary, then the ASan+UBSan one (when built) with the quick subset.
# LOOM_SERVE_ARGS adds server flags.
cd "$(dirname "$0")/.." || exit 1
build=${LOOM_BUILD:-build}
passed=0; failed=0
for pkg in openai zod ai @ai-sdk/openai; do
    if [ ! -d "tests/node/node_modules/$pkg" ]; then
        echo "test_server_structured_clients.sh: the npm package $pkg is missing (tools/install-deps.sh --test)"
        echo "test_server_structured_clients.sh: 0 passed, 1 failed"; exit 1
    fi
done
run() {
    local out line
    out=$(timeout 600 node tests/node/server_structured_clients.mjs "$@" 2>&1)
    line=$(printf '%s\n' "$out" | grep -E ': [0-9]+ passed, [0-9]+ failed$' | tail -n 1)
    if [ -z "$line" ]; then printf '%s\n' "$out" | tail -n 30; failed=$((failed + 1)); return; fi
    printf '%s\n' "$out" | grep -v ' passed, ' | tail -n 30
    passed=$((passed + $(sed -E 's/.*: ([0-9]+) passed.*/\1/' <<<"$line")))
    failed=$((failed + $(sed -E 's/.*passed, ([0-9]+) failed/\1/' <<<"$line")))
}
run "$build/loom" models/loom-tiny
if [ -x "$build/asan/loom" ] && [ "${LOOM_SKIP_ASAN:-0}" != 1 ]; then
    ASAN_OPTIONS=${ASAN_OPTIONS:-detect_leaks=1} run "$build/asan/loom" models/loom-tiny --quick
fi
echo "test_server_structured_clients.sh: $passed passed, $failed failed"
[ "$failed" -eq 0 ]
