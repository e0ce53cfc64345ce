#!/usr/bin/env bash
# Structured outputs (response_format, structured_outputs, guided_*) and
# forced tool calls through `loom serve` on the bundled model
# (tests/server_structured.py, validated by python3-jsonschema): the release
# binary, then the ASan+UBSan one (quick) when built.
cd "$(dirname "$0")/.." || exit 1
build=${LOOM_BUILD:-build}
passed=0; failed=0
run() {
    local out line
    out=$(timeout 600 python3 tests/server_structured.py "$@" 2>&1)
    line=$(printf '%s\n' "$out" | grep -E '^server_structured: [0-9]+ passed, [0-9]+ failed$' | tail -n 1)
    if [ -z "$line" ]; then printf '%s\n' "$out" | tail -n 30; failed=$((failed + 1)); return; fi
    printf '%s\n' "$out" | grep -v ' passed, ' | tail -n 30
    passed=$((passed + $(sed -E 's/.*: ([0-9]+) passed.*/\1/' <<<"$line")))
    failed=$((failed + $(sed -E 's/.*passed, ([0-9]+) failed/\1/' <<<"$line")))
}
run "$build/loom" models/loom-tiny
if [ -x "$build/asan/loom" ] && [ "${LOOM_SKIP_ASAN:-0}" != 1 ]; then
    ASAN_OPTIONS=${ASAN_OPTIONS:-detect_leaks=1} run "$build/asan/loom" models/loom-tiny --quick
fi
echo "test_server_structured.sh: $passed passed, $failed failed"
[ "$failed" -eq 0 ]
