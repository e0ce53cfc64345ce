#!/usr/bin/env bash
# `loom completion bash` against the parsers (see tests/completion_test.py).
cd "$(dirname "$0")/.." && exec python3 tests/completion_test.py
