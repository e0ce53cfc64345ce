#!/usr/bin/env bash
# A bounded libFuzzer run of fuzz/fuzz_gbnf (ASan+UBSan) seeded with the
# grammars of tests/data/gbnf and a few small ones, with a dictionary of
# GBNF syntax.  Fails on any crash, sanitizer report, timeout or broken
# invariant.  Skipped (0 passed, 0 failed) when the fuzz build is absent
# (`make fuzzers` builds it; `make test` does).  LOOM_FUZZ_SECONDS sets the
# length (default 10).
set -u
root=$(cd "$(dirname "$0")/.." && pwd)
cd "$root"
build=${LOOM_BUILD:-build}
name=test_gbnf_fuzz.sh
fuzzer=$build/fuzz/fuzz/fuzz_gbnf
if [ ! -x "$fuzzer" ]; then
    echo "$name: $fuzzer not built (make fuzzers); skipped"
    echo "$name: 0 passed, 0 failed"
    exit 0
fi
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
mkdir -p "$work/corpus"
cp tests/data/gbnf/*.gbnf "$work/corpus/"
n=0
for g in 'root ::= ("yes" | "no") "."' 'root ::= "(" root ")" | [a-z]*' 'root ::= [^\n\u2028]{1,3} . x
x ::= ("a"? "b"*)* | "\U0001F600"' 'root ::= e
e ::= t ("+" t)*
t ::= [0-9]+ | "(" e ")"'; do
    printf '%s' "$g" > "$work/corpus/small$n"; n=$((n + 1))
done
# libFuzzer's dictionary syntax: "..." with \\, \" and \xNN escapes
cat > "$work/dict" <<'DICT'
"::="
"root"
"|"
"("
")"
"*"
"+"
"?"
"{2}"
"{1,3}"
"{0,}"
"["
"]"
"[^"
"-"
"."
"\""
"\\"
"\\x41"
"\\u00e9"
"\\U0001F600"
"\\n"
"#"
"a-z"
"\x0a"
" "
DICT
if "$fuzzer" -max_total_time="${LOOM_FUZZ_SECONDS:-10}" -max_len=2048 -timeout=20 -rss_limit_mb=2048 \
        -dict="$work/dict" -artifact_prefix="$work/" -print_final_stats=1 "$work/corpus" >"$work/log" 2>&1; then
    grep -E "^(stat::number_of_executed_units|Done)" "$work/log" | tail -n 2
    echo "$name: 1 passed, 0 failed"
else
    tail -n 40 "$work/log"
    for f in "$work"/crash-* "$work"/leak-* "$work"/timeout-* "$work"/oom-*; do
        [ -f "$f" ] && { echo "input that failed ($f), hex:"; xxd "$f" | head -n 20; }
    done
    echo "$name: 0 passed, 1 failed"
    exit 1
fi
