# The common part of the tests/test_*_fuzz.sh scripts, sourced by each:
# find the fuzzer (skip with "0 passed, 0 failed" when the fuzz build is
# absent: `make fuzzers` builds it, `make test` does), make a work folder
# with a corpus/ for the seeds, and run one bounded libFuzzer session that
# fails on any crash, sanitizer report, timeout, running out of memory or
# broken invariant, printing the failing input's hex.
#
#   name=test_x_fuzz.sh; . tests/fuzz_runner.sh; fuzz_prepare fuzz_x
#   ... write seeds into "$work/corpus" (and a dictionary into "$work/dict") ...
#   fuzz_run DEFAULT_SECONDS [libFuzzer flags ...]
#
# LOOM_BUILD picks the build tree, LOOM_FUZZ_SECONDS the length.

# Sets $fuzzer and $work (removed on exit); exits 0 when the fuzzer is not built.
fuzz_prepare() {
    fuzzer=${LOOM_BUILD:-build}/fuzz/fuzz/$1
    if [ ! -x "$fuzzer" ]; then
        echo "$name: $fuzzer not built (make fuzzers); skipped"
        echo "$name: 0 passed, 0 failed"
        exit 0
    fi
    work=$(mktemp -d)
    trap 'rm -rf "$work"' EXIT
    mkdir -p "$work/corpus"
}

# Ends the script with a failure when its seeds could not be made.
fuzz_seed_failed() {
    echo "$name: $1"
    echo "$name: 0 passed, 1 failed"
    exit 1
}

# Runs the fuzzer for LOOM_FUZZ_SECONDS (default $1) over the corpus, with
# $work/dict as dictionary when the script wrote one; the remaining
# arguments are the script's own limits (-max_len, -rss_limit_mb, ...).
fuzz_run() {
    local seconds=${LOOM_FUZZ_SECONDS:-$1}
    shift
    local dict=()
    [ -f "$work/dict" ] && dict=(-dict="$work/dict")
    if "$fuzzer" -max_total_time="$seconds" -timeout=20 "$@" "${dict[@]}" -artifact_prefix="$work/" \
            -print_final_stats=1 "$work/corpus" >"$work/log" 2>&1; then
        grep -E "^(stat::number_of_executed_units|stat::peak_rss_mb|Done)" "$work/log" | tail -n 3
        echo "$name: 1 passed, 0 failed"
        exit 0
    fi
    tail -n 40 "$work/log"
    local f
    for f in "$work"/crash-* "$work"/leak-* "$work"/timeout-* "$work"/oom-*; do
        [ -f "$f" ] && { echo "input that failed ($f), hex:"; xxd "$f" | head -n 20; }
    done
    echo "$name: 0 passed, 1 failed"
    exit 1
}
