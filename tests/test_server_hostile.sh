#!/usr/bin/env bash
# `loom serve` under hostile clients and shutdowns (tests/server_hostile.py):
# graceful SIGTERM with 50 streams, 1,500 idle plus slow-header and slow-body
# connections, the connection limit, 16 MiB bodies and RSS, the HTTP rules,
# and a malformed-request corpus against the ASan+UBSan build when built.
# Loopback only; about 30 s.
cd "$(dirname "$0")/.." || exit 1
build=${LOOM_BUILD:-build}
model=${LOOM_FIXTURES:-tests/fixtures}/models/qwen35-dense
[ -d "$model" ] || { echo "test_server_hostile.sh: no fixture model at $model (LOOM_FIXTURES)"; echo "test_server_hostile.sh: 0 passed, 1 failed"; exit 1; }
ulimit -n 8192 2>/dev/null || ulimit -n "$(ulimit -Hn)" 2>/dev/null
asan=()
if [ -x "$build/asan/loom" ] && [ "${LOOM_SKIP_ASAN:-0}" != 1 ]; then asan=(--asan "$build/asan/loom"); fi
out=$(ASAN_OPTIONS=${ASAN_OPTIONS:-detect_leaks=1} timeout 170 python3 tests/server_hostile.py "$build/loom" "$model" "${asan[@]}" 2>&1)
printf '%s\n' "$out" | grep -v ' passed, ' | tail -n 40
line=$(printf '%s\n' "$out" | grep -E ': [0-9]+ passed, [0-9]+ failed$' | tail -n 1)
if [ -z "$line" ]; then echo "test_server_hostile.sh: 0 passed, 1 failed"; exit 1; fi
passed=$(sed -E 's/.*: ([0-9]+) passed.*/\1/' <<<"$line")
failed=$(sed -E 's/.*passed, ([0-9]+) failed/\1/' <<<"$line")
echo "test_server_hostile.sh: $passed passed, $failed failed"
[ "$failed" -eq 0 ]
