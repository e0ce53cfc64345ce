#!/usr/bin/env bash
# Images in chat completions through the openai SDK (tests/node/server_images.mjs):
# `loom serve` on the qwen35-dense and glm46v-moe fixtures (their image0.png
# as a data: URI and as a file under --allowed-local-media-path, usage,
# the image cache, refusals), and on the bundled text-only loom-tiny (image
# parts refused); the release binary, then the ASan+UBSan one (when built).
cd "$(dirname "$0")/.." || exit 1
. tests/lib/client_suite.sh
build=${LOOM_BUILD:-build}
fixtures=${LOOM_FIXTURES:-tests/fixtures}/models
name=test_server_images.sh
if [ ! -d tests/node/node_modules/openai ]; then
    echo "$name: the openai SDK is missing (npm install --prefix tests/node)"
    echo "$name: 0 passed, 1 failed"; exit 1
fi
run() { run_client 300 node tests/node/server_images.mjs "$@"; }
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
