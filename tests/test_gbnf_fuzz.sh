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
name=test_gbnf_fuzz.sh
. tests/fuzz_runner.sh
fuzz_prepare fuzz_gbnf
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
fuzz_run 10 -max_len=2048 -rss_limit_mb=2048
