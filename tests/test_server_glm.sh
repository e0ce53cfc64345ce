#!/usr/bin/env bash
# `loom serve` on the GLM-4.6V fixture through the openai SDK
# (tests/node/server_glm.mjs): the glm46v-moe checkpoint with the published
# GLM-V chat template (tests/data/templates/glm-ocr.jinja, see the README
# there) in place of the fixture's simplified one.
cd "$(dirname "$0")/.." || exit 1
build=${LOOM_BUILD:-build}
fixture=${LOOM_FIXTURES:-tests/fixtures}/models/glm46v-moe
name=test_server_glm.sh
if [ ! -d tests/node/node_modules/openai ]; then
    echo "$name: the openai SDK is missing (npm install --prefix tests/node)"
    echo "$name: 0 passed, 1 failed"; exit 1
fi
dir=$(mktemp -d) || exit 1
trap 'rm -rf "$dir"' EXIT
for f in "$fixture"/*; do ln -s "$(cd "$(dirname "$f")" && pwd)/$(basename "$f")" "$dir/"; done
rm -f "$dir/chat_template.jinja"
cp tests/data/templates/glm-ocr.jinja "$dir/chat_template.jinja"
out=$(timeout 120 node tests/node/server_glm.mjs "$build/loom" "$dir" 2>&1); rc=$?
printf '%s\n' "$out" | tail -n 30
line=$(printf '%s\n' "$out" | grep -E '^server_glm: [0-9]+ passed, [0-9]+ failed$' | tail -n 1)
[ -n "$line" ] || { echo "$name: 0 passed, 1 failed"; exit 1; }
echo "$name: ${line#server_glm: }"
exit $rc
