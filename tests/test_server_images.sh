#!/usr/bin/env bash
# Images in chat completions through the openai SDK (tests/node/server_images.mjs):
# `loom serve` on the qwen35-dense and glm46v-moe fixtures (their image0.png
# as a data: URI and as a file under --allowed-local-media-path, usage,
# the image cache, refusals), and on the bundled text-only loom-tiny (image
# parts refused); the release binary, then the ASan+UBSan one (when built).
cd "$(dirname "$0")/.." || exit 1
build=${LOOM_BUILD:-build}
fixtures=${LOOM_FIXTURES:-../shared/fixtures}/models
name=test_server_images.sh
passed=0; failed=0
if [ ! -d tests/node/node_modules/openai ]; then
    echo "$name: the openai SDK is missing (npm install --prefix tests/node)"
    echo "$name: 0 passed, 1 failed"; exit 1
fi
run() {
    local out line
    out=$(timeout 300 node tests/node/server_images.mjs "$@" 2>&1)
    line=$(printf '%s\n' "$out" | grep -E ': [0-9]+ passed, [0-9]+ failed$' | tail -n 1)
    if [ -z "$line" ]; then printf '%s\n' "$out" | tail -n 30; failed=$((failed + 1)); return; fi
    printf '%s\n' "$out" | grep -v ' passed, ' | tail -n 30
    passed=$((passed + $(sed -E 's/.*: ([0-9]+) passed.*/\1/' <<<"$line")))
    failed=$((failed + $(sed -E 's/.*passed, ([0-9]+) failed/\1/' <<<"$line")))
}
for m in qwen35-dense glm46v-moe; do run "$build/loom" "$fixtures/$m"; done
run "$build/loom" models/loom-tiny --image "$fixtures/qwen35-dense/image0.png"
if [ -x "$build/asan/loom" ] && [ "${LOOM_SKIP_ASAN:-0}" != 1 ]; then
    for m in qwen35-dense glm46v-moe; do
        ASAN_OPTIONS=${ASAN_OPTIONS:-detect_leaks=1} run "$build/asan/loom" "$fixtures/$m"
    done
    ASAN_OPTIONS=${ASAN_OPTIONS:-detect_leaks=1} run "$build/asan/loom" models/loom-tiny \
        --image "$fixtures/qwen35-dense/image0.png"
fi
echo "$name: $passed passed, $failed failed"
[ "$failed" -eq 0 ]
