#!/usr/bin/env bash
# Forced and strict tool calls in each call form a chat template writes
# (tests/server_tools_forms.py, validated by python3-jsonschema) on the
# random-weights fixtures: qwen35-dense as it is (Qwen3's JSON form), the
# same weights with tests/data/tool-forms/qwen35-xml.jinja (Qwen3.5's XML
# parameters) and glm46v-moe with GLM-4.6's template
# (tests/data/templates/glm-4.6.jinja); the model folders are made here of
# symbolic links to the fixtures' files.  The release binary, then the
# ASan+UBSan one (quick) when built.
cd "$(dirname "$0")/.." || exit 1
. tests/lib/client_suite.sh
build=${LOOM_BUILD:-build}
fixtures=${LOOM_FIXTURES:-tests/fixtures}
tmp=$(mktemp -d "${TMPDIR:-/tmp}/loom-tool-forms-XXXXXX") || exit 1
trap 'rm -rf "$tmp"' EXIT
# model_with_template NAME FIXTURE TEMPLATE: $tmp/NAME, the fixture's files but its template
model_with_template() {
    mkdir -p "$tmp/$1"
    for f in "$fixtures/models/$2"/*; do
        [ "$(basename "$f")" = chat_template.jinja ] || ln -s "$(realpath "$f")" "$tmp/$1/"
    done
    cp "$3" "$tmp/$1/chat_template.jinja"
}
model_with_template xml qwen35-dense tests/data/tool-forms/qwen35-xml.jinja
model_with_template glm glm46v-moe tests/data/templates/glm-4.6.jinja
run() {
    run_client 900 python3 tests/server_tools_forms.py "$1" "$fixtures/models/qwen35-dense" json "${@:2}"
    run_client 900 python3 tests/server_tools_forms.py "$1" "$tmp/xml" xml "${@:2}"
    run_client 900 python3 tests/server_tools_forms.py "$1" "$tmp/glm" glm "${@:2}"
}
run "$build/loom"
if [ -x "$build/asan/loom" ] && [ "${LOOM_SKIP_ASAN:-0}" != 1 ]; then
    ASAN_OPTIONS=${ASAN_OPTIONS:-detect_leaks=1} run "$build/asan/loom" --quick
fi
echo "test_server_tools_forms.sh: $passed passed, $failed failed"
[ "$failed" -eq 0 ]
