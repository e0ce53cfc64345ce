#!/usr/bin/env bash
# A newcomer's first hour: build, device errors, /health while loading,
# model names, the context limit (see tests/newcomer_test.py).
cd "$(dirname "$0")/.." && exec python3 tests/newcomer_test.py
