#!/usr/bin/env bash
# GBNF grammars (guided_grammar, structured_outputs.grammar, grammar) through
# `loom serve` on the bundled model (tests/server_grammar.py): the release
# binary, then the ASan+UBSan one (quick) when built.
cd "$(dirname "$0")/.." || exit 1
. tests/lib/client_suite.sh
build=${LOOM_BUILD:-build}
run() { run_client 600 python3 tests/server_grammar.py "$@"; }
run "$build/loom" models/loom-tiny
if [ -x "$build/asan/loom" ] && [ "${LOOM_SKIP_ASAN:-0}" != 1 ]; then
    ASAN_OPTIONS=${ASAN_OPTIONS:-detect_leaks=1} run "$build/asan/loom" models/loom-tiny --quick
fi
echo "test_server_grammar.sh: $passed passed, $failed failed"
[ "$failed" -eq 0 ]
