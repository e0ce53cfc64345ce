#!/usr/bin/env bash
# Prefix caching through `loom serve` on the bundled model
# (tests/server_prefix_cache.py): cache on == cache off under a concurrent
# multi-turn load, cached_tokens in usage and /metrics, and no block or
# snapshot left after POST /reset_prefix_cache; the release binary, then
# the ASan+UBSan one when built.
cd "$(dirname "$0")/.." || exit 1
build=${LOOM_BUILD:-build}
passed=0; failed=0
run() {
    local out line
    out=$(timeout 600 python3 tests/server_prefix_cache.py "$@" 2>&1)
    line=$(printf '%s\n' "$out" | grep -E '^server_prefix_cache: [0-9]+ passed, [0-9]+ failed$' | tail -n 1)
    if [ -z "$line" ]; then printf '%s\n' "$out" | tail -n 30; failed=$((failed + 1)); return; fi
    printf '%s\n' "$out" | grep -v ' passed, ' | tail -n 30
    passed=$((passed + $(sed -E 's/.*: ([0-9]+) passed.*/\1/' <<<"$line")))
    failed=$((failed + $(sed -E 's/.*passed, ([0-9]+) failed/\1/' <<<"$line")))
}
run "$build/loom" models/loom-tiny
if [ -x "$build/asan/loom" ] && [ "${LOOM_SKIP_ASAN:-0}" != 1 ]; then
    ASAN_OPTIONS=${ASAN_OPTIONS:-detect_leaks=1} run "$build/asan/loom" models/loom-tiny
fi
echo "test_server_prefix_cache.sh: $passed passed, $failed failed"
[ "$failed" -eq 0 ]
