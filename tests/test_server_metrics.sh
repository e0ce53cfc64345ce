#!/usr/bin/env bash
# /metrics under vLLM's names through `loom serve` on the bundled model
# (tests/server_metrics.py): valid Prometheus text, vLLM's families, types,
# labels and buckets, and values that move (request_success by
# finished_reason, the latency histograms, requests running and waiting
# with --max-num-seqs 1); the release binary, then the ASan+UBSan one when
# built.
cd "$(dirname "$0")/.." || exit 1
. tests/lib/client_suite.sh
build=${LOOM_BUILD:-build}
run() { run_client 180 python3 tests/server_metrics.py "$@"; }
run "$build/loom" models/loom-tiny
if [ -x "$build/asan/loom" ] && [ "${LOOM_SKIP_ASAN:-0}" != 1 ]; then
    ASAN_OPTIONS=${ASAN_OPTIONS:-detect_leaks=1} run "$build/asan/loom" models/loom-tiny
fi
echo "test_server_metrics.sh: $passed passed, $failed failed"
[ "$failed" -eq 0 ]
