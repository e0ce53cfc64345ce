#!/usr/bin/env bash
# A bounded libFuzzer run of fuzz/fuzz_jinja (ASan+UBSan) seeded with the
# fixture chat templates and the feature templates of tests/jinja_diff.py,
# with a dictionary of Jinja syntax.  Fails on any crash, sanitizer report,
# timeout or broken invariant.  Skipped (0 passed, 0 failed) when the fuzz
# build is absent (`make fuzzers` builds it; `make test` does).
# LOOM_FUZZ_SECONDS sets the length (default 15).
set -u
root=$(cd "$(dirname "$0")/.." && pwd)
cd "$root"
fixtures=${LOOM_FIXTURES:-$root/tests/fixtures}
name=test_jinja_fuzz.sh
. tests/fuzz_runner.sh
fuzz_prepare fuzz_jinja
python3 - "$fixtures" "$work" <<'PY' || fuzz_seed_failed "cannot build the seed corpus"
import json, os, sys
sys.path.insert(0, "tests")
import jinja_diff
fixtures, work = sys.argv[1], sys.argv[2]
n = 0
for _, tpl, ctx in jinja_diff.FEATURES:
    data = tpl.encode() + (b"\0" + json.dumps(ctx).encode() if ctx else b"")
    open(f"{work}/corpus/feature{n}", "wb").write(data)
    n += 1
for name, tpl, _ in jinja_diff.fixture_templates(fixtures):
    open(f"{work}/corpus/model_{name}", "wb").write(tpl.encode())
words = ["{%", "%}", "{{", "}}", "{#", "#}", "{%-", "-%}", "{{-", "-}}", "{%+", "+%}", "for ", " in ", "endfor", "if ",
         "elif ", "else", "endif", "set ", "endset", "macro ", "endmacro", "call", "endcall", "filter ", "endfilter",
         "with ", "endwith", "raw", "endraw", "break", "continue", "generation", "namespace(", "loop.index0", "loop.last",
         "loop.previtem", "messages", "message.content", "tools", "|tojson", "|items", "|length", "|join(", "|trim",
         " is defined", " is none", " is string", " is mapping", " not ", " and ", " or ", "~", "[::-1]", ".split(",
         ".startswith(", "raise_exception(", "range(", "caller()", "'", "\"", "\\n", "\0{\"messages\": []}"]
def dict_entry(word):  # libFuzzer dictionary syntax: "..." with \xNN escapes
    return '"' + "".join(c if 32 <= ord(c) < 127 and c not in '\\"' else "\\x%02x" % ord(c) for c in word) + '"'
with open(f"{work}/dict", "w") as f:
    for w in words:
        f.write(dict_entry(w) + "\n")
PY
export LOOM_FIXTURES=$fixtures
fuzz_run 15 -max_len=4096 -rss_limit_mb=2048
