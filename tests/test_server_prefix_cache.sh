#!/usr/bin/env bash
# Prefix caching through `loom serve` on the bundled model
# (tests/server_prefix_cache.py): cache on == cache off under a concurrent
# multi-turn load, cached_tokens in usage and /metrics, and no block or
# snapshot left after POST /reset_prefix_cache; the release binary, then
# the ASan+UBSan one when built.
cd "$(dirname "$0")/.." || exit 1
. tests/lib/client_suite.sh
build=${LOOM_BUILD:-build}
run() { run_client 600 python3 tests/server_prefix_cache.py "$@"; }
run "$build/loom" models/loom-tiny
if [ -x "$build/asan/loom" ] && [ "${LOOM_SKIP_ASAN:-0}" != 1 ]; then
    ASAN_OPTIONS=${ASAN_OPTIONS:-detect_leaks=1} run "$build/asan/loom" models/loom-tiny
fi
echo "test_server_prefix_cache.sh: $passed passed, $failed failed"
[ "$failed" -eq 0 ]
