#!/usr/bin/env bash
# Installs the Debian packages loom builds and runs with, when missing; with
# --test also those of the test suite and its npm packages (tests/node);
# --build is the plain set by name (the container images' build stage: no
# clang, Python or Node).
# Safe to run repeatedly: it does nothing when everything is present.
# --list [--test] prints the packages instead.
set -euo pipefail
cd "$(dirname "$0")/.."

install_test_npm() {
    [ -f tests/node/package.json ] || return 0
    local pkg complete=1
    for pkg in openai @anush008/tokenizers @anthropic-ai/sdk zod ai @ai-sdk/openai; do
        [ -d "tests/node/node_modules/$pkg" ] || complete=0
    done
    [ "$complete" = 1 ] && return 0
    echo "loom: installing the test suite's npm packages into tests/node" >&2
    npm ci --prefix tests/node --no-audit --no-fund --silent >/dev/null 2>&1 ||
        npm install --prefix tests/node --no-audit --no-fund --silent >/dev/null
}

# What building and running loom needs (`make`, `make run`) ...
packages=(build-essential pkg-config libcjson-dev libpcre2-dev libutf8proc-dev
          libmicrohttpd-dev libhttp-parser-dev libpng-dev libjpeg-dev libwebp-dev libedit-dev zlib1g-dev
          libsqlite3-dev)
# ... and what only the test suite needs (`make test`): the Jinja and JSON
# Schema oracles, clang for the libFuzzer tree, systemd-analyze for
# contrib/loom.service, python3-yaml for contrib/kubernetes's manifests, node
# for the client-library suites.
if [ "${1:-}" = --test ] || [ "${2:-}" = --test ]; then
    packages+=(python3-jinja2 python3-jsonschema clang libclang-rt-14-dev systemd python3-yaml)
    command -v node >/dev/null 2>&1 || packages+=(nodejs npm)
fi
# --list [--test]: print the packages (one a line) and install nothing.
if [ "${1:-}" = --list ]; then printf '%s\n' "${packages[@]}"; exit 0; fi

missing=()
for p in "${packages[@]}"; do
    dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
if [ ${#missing[@]} -eq 0 ]; then
    [ "${1:-}" = --test ] && install_test_npm
    exit 0
fi

echo "loom: installing missing packages: ${missing[*]}" >&2
if [ "$(id -u)" -ne 0 ]; then
    if command -v sudo >/dev/null 2>&1; then SUDO=sudo; else
        echo "loom: run as root: apt-get install -y ${missing[*]}" >&2; exit 1
    fi
else
    SUDO=
fi
$SUDO apt-get update -qq
DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
[ "${1:-}" = --test ] && install_test_npm
exit 0
