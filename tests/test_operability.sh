#!/usr/bin/env bash
# What a new user types and sees (tests/operability_test.py): the model as
# an argument, llama-server aliases, vLLM flags with their notes, refused
# flags and settings, teaching errors for --model, --version, the port bound
# before the weights load, the server's log lines, --host forms, sampling
# defaults from generation_config.json.
cd "$(dirname "$0")/.." && exec python3 tests/operability_test.py
