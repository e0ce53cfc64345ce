#!/usr/bin/env bash
# Differential test of loom's chat-template engine against python3-jinja2
# configured as transformers configures it (tests/jinja_diff.py): every
# feature case, the fixture models' and tests/data/templates' templates over sets of conversations,
# and seeded random expressions.  Prints "test_jinja_diff.sh: N passed, N failed".
# LOOM_JINJA_DIFF_RANDOM sets the number of random expressions (default 300).
set -u
root=$(cd "$(dirname "$0")/.." && pwd)
cd "$root"
build=${LOOM_BUILD:-build}
fixtures=${LOOM_FIXTURES:-$root/tests/fixtures}
name=test_jinja_diff.sh

fail() { echo "$name: $1"; echo "$name: 0 passed, 1 failed"; exit 1; }
python3 -c 'import jinja2' 2>/dev/null || fail "python3-jinja2 is not installed (tools/install-deps.sh --test installs it)"
[ -x "$build/loom" ] || fail "$build/loom is missing (run make)"

out=$(python3 tests/jinja_diff.py "$build/loom" "$fixtures" --random "${LOOM_JINJA_DIFF_RANDOM:-300}" 2>&1)
rc=$?
printf '%s\n' "$out" | grep -v '^jinja_diff: ' | tail -n 60
line=$(printf '%s\n' "$out" | grep -E '^jinja_diff: [0-9]+ passed, [0-9]+ failed$' | tail -n 1)
[ -n "$line" ] || fail "tests/jinja_diff.py printed no summary (exit $rc)"
echo "$name: ${line#jinja_diff: }"
exit $rc
