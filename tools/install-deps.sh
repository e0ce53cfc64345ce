#!/usr/bin/env bash
# Installs the Debian packages loom builds and tests with, when missing.
# Safe to run repeatedly: it does nothing when everything is present.
set -euo pipefail

packages=(build-essential pkg-config libcjson-dev libpcre2-dev libutf8proc-dev
          libmicrohttpd-dev python3-jinja2 clang libclang-rt-14-dev)
command -v node >/dev/null 2>&1 || packages+=(nodejs npm)

missing=()
for p in "${packages[@]}"; do
    dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
[ ${#missing[@]} -eq 0 ] && exit 0

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
