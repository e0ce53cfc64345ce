#!/usr/bin/env bash
# `make install DESTDIR=... PREFIX=/usr`: the installed binary finds the
# installed bundled model (from any directory), and the man page, bash
# completion and license are in place; `make uninstall` removes them.
# contrib/loom.service passes `systemd-analyze verify` when systemd is
# installed (tools/install-deps.sh --test installs it); contrib/kubernetes's
# manifests hold together (tests/kubernetes_manifests.py, python3-yaml).
cd "$(dirname "$0")/.." || exit 1
build=${LOOM_BUILD:-build}
passed=0; failed=0
check() { # $1 = name, $2 = status
    if [ "$2" -eq 0 ]; then passed=$((passed + 1)); else failed=$((failed + 1)); echo "  FAIL $1"; fi
}
dest=$(mktemp -d /tmp/loom-install-XXXXXX)
out=$(make --no-print-directory install BUILD="$build" DESTDIR="$dest" PREFIX=/usr 2>&1)
check "make install: $out" $?
for f in usr/bin/loom usr/share/loom/models/loom-tiny/config.json usr/share/loom/models/loom-tiny/model.safetensors \
         usr/share/man/man1/loom.1 usr/share/bash-completion/completions/loom usr/share/doc/loom/LICENSE; do
    [ -s "$dest/$f" ]; check "installed $f" $?
done
text=$(cd / && "$dest/usr/bin/loom" run --prompt Hi --max-tokens 4 --temperature 0 2>&1)
check "the installed loom runs the installed model: $text" $?
[ -n "$text" ]; check "it wrote something" $?
man -l "$dest/usr/share/man/man1/loom.1" >/dev/null 2>&1 || ! command -v man >/dev/null; check "man page renders" $?
bash -c "source '$dest/usr/share/bash-completion/completions/loom' && COMP_WORDS=('$dest/usr/bin/loom' serve --max-n); COMP_CWORD=2; _loom && [[ \" \${COMPREPLY[*]} \" == *' --max-num-seqs '* ]]"
check "bash completion completes serve's flags" $?
cmp -s "$dest/usr/share/bash-completion/completions/loom" <("$dest/usr/bin/loom" completion bash)
check "the installed completion is what the installed loom writes (loom completion bash)" $?
make --no-print-directory uninstall DESTDIR="$dest" PREFIX=/usr >/dev/null 2>&1
[ ! -e "$dest/usr/bin/loom" ] && [ ! -e "$dest/usr/share/loom" ]; check "make uninstall" $?
rm -rf "$dest"
if command -v systemd-analyze >/dev/null; then
    unit=$(mktemp -d /tmp/loom-unit-XXXXXX)
    # verify checks that ExecStart's binary exists: point it at this build's
    sed "s|/usr/local/bin/loom|$(cd "$build" && pwd)/loom|" contrib/loom.service > "$unit/loom.service"
    msg=$(systemd-analyze verify "$unit/loom.service" 2>&1)
    [ -z "$(printf '%s\n' "$msg" | grep -i 'loom.service')" ]; check "systemd-analyze verify contrib/loom.service: $msg" $?
    rm -rf "$unit"
else
    echo "test_install.sh: systemd-analyze not installed: contrib/loom.service not verified"
fi
# contrib/kubernetes: the manifests parse and hold together (probes on
# /health, ports, the GPU variant), and loom serve takes loom.yaml's flags.
if python3 -c 'import yaml' 2>/dev/null; then
    out=$(python3 tests/kubernetes_manifests.py "$build/loom" 2>&1)
    check "contrib/kubernetes manifests: $out" $?
else
    echo "test_install.sh: python3-yaml not installed: contrib/kubernetes not checked"
fi
echo "test_install.sh: $passed passed, $failed failed"
[ "$failed" -eq 0 ]
