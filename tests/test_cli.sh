#!/usr/bin/env bash
# Command-line end-to-end checks (see tests/cli_test.py).
cd "$(dirname "$0")/.." && exec python3 tests/cli_test.py
