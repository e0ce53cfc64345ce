#!/usr/bin/env bash
# JSON schemas as users write them, validated by python3-jsonschema (issue
# 52): tools/jsonschemabench.py on tests/data/jsonschema/cases.json (each
# schema compiles, no invalid instance is accepted, no valid one refused,
# every sampled answer validates), then, where the data are at hand
# (LOOM_JSONSCHEMABENCH: a checkout or bare git dir of
# guidance-ai/jsonschemabench; LOOM_SCHEMA_TEST_SUITE: of
# json-schema-org/JSON-Schema-Test-Suite), a fixed sample of 5 schemas per
# JSONSchemaBench subset and the draft2020-12 suite: not one sampled answer
# may break its schema.  The full runs are the tool's (docs/PERF.md).
cd "$(dirname "$0")/.." || exit 1
build=${LOOM_BUILD:-build}
passed=0; failed=0
step() { # LABEL COMMAND...
    local label=$1 out
    shift
    if out=$("$@" 2>&1); then passed=$((passed + 1)); else
        failed=$((failed + 1)); echo "FAIL $label"; printf '%s\n' "$out" | tail -n 20
    fi
}
[ -x "$build/bench/json_schema_check" ] || make --no-print-directory -s BUILD="$build" "$build/bench/json_schema_check" >/dev/null
tool() { python3 tools/jsonschemabench.py --build "$build" "$@"; }
step cases tool --cases tests/data/jsonschema/cases.json --samples 20 --strict-valid
bench=${LOOM_JSONSCHEMABENCH:-/work/.mirror/guidance-ai+jsonschemabench/repo}
suite=${LOOM_SCHEMA_TEST_SUITE:-/work/.mirror/json-schema-org+JSON-Schema-Test-Suite/repo}
if [ -e "$bench" ]; then step jsonschemabench tool --bench "$bench" --sample 5 --samples 3
else echo "jsonschemabench: skipped (set LOOM_JSONSCHEMABENCH)"; fi
if [ -e "$suite" ]; then step test-suite tool --suite "$suite" --samples 3
else echo "JSON-Schema-Test-Suite: skipped (set LOOM_SCHEMA_TEST_SUITE)"; fi
echo "test_grammar_schema_cases.sh: $passed passed, $failed failed"
[ "$failed" -eq 0 ]
