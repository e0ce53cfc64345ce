# Sourced by the tests/test_server_*.sh wrappers: runs client suites (a
# node or python program against `loom serve` that prints "NAME: N
# passed, N failed" last) and adds up their counts in passed / failed.
passed=0; failed=0

# run_client SECONDS COMMAND...: one suite, killed after SECONDS; a suite
# that prints no summary line counts as one failure, with its last lines.
run_client() {
    local seconds=$1 out line
    shift
    out=$(timeout "$seconds" "$@" 2>&1)
    line=$(printf '%s\n' "$out" | grep -E ': [0-9]+ passed, [0-9]+ failed$' | tail -n 1)
    if [ -z "$line" ]; then printf '%s\n' "$out" | tail -n 30; failed=$((failed + 1)); return; fi
    printf '%s\n' "$out" | grep -v ' passed, ' | tail -n 30
    passed=$((passed + $(sed -E 's/.*: ([0-9]+) passed.*/\1/' <<<"$line")))
    failed=$((failed + $(sed -E 's/.*passed, ([0-9]+) failed/\1/' <<<"$line")))
}
