#!/usr/bin/env bash
# `loom serve` prepares requests on a fixed pool of threads fed by a bounded
# queue (tests/server_pool.py): many more concurrent requests than threads,
# on every route the pool serves, each answered as alone, and a clean
# SIGTERM; the ASan+UBSan build too when built.  The pool's queue itself
# (full: refused, never a hang; stop: drained) is tests/test_prepare_pool.c.
cd "$(dirname "$0")/.." || exit 1
build=${LOOM_BUILD:-build}
model=${LOOM_FIXTURES:-tests/fixtures}/models/qwen35-dense
[ -d "$model" ] || { echo "test_server_pool.sh: no fixture model at $model (LOOM_FIXTURES)"; echo "test_server_pool.sh: 0 passed, 1 failed"; exit 1; }
asan=()
if [ -x "$build/asan/loom" ] && [ "${LOOM_SKIP_ASAN:-0}" != 1 ]; then asan=("$build/asan/loom"); fi
out=$(ASAN_OPTIONS=${ASAN_OPTIONS:-detect_leaks=1} timeout 400 python3 tests/server_pool.py "$build/loom" "$model" "${asan[@]}" 2>&1)
printf '%s\n' "$out" | grep -v ' passed, ' | tail -n 40
line=$(printf '%s\n' "$out" | grep -E ': [0-9]+ passed, [0-9]+ failed$' | tail -n 1)
if [ -z "$line" ]; then echo "test_server_pool.sh: 0 passed, 1 failed"; exit 1; fi
passed=$(sed -E 's/.*: ([0-9]+) passed.*/\1/' <<<"$line")
failed=$(sed -E 's/.*passed, ([0-9]+) failed/\1/' <<<"$line")
echo "test_server_pool.sh: $passed passed, $failed failed"
[ "$failed" -eq 0 ]
