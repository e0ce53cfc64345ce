#!/usr/bin/env bash
# Trains, exports and checks loom's default model on the GPU machine.
#
#   tools/default_model/device_run.sh CORPUS LOOM_BINARY OUTDIR [train.py options]
#
# CORPUS is gather_corpus.py's corpus.jsonl.xz, LOOM_BINARY a loom build that
# runs there (for check_logits.py). OUTDIR receives the exported folder
# loom-tiny/, train_log.jsonl, train.txt and check/ (check_logits.py's output).
set -euo pipefail
corpus=$1 loom=$2 out=$3
shift 3
here=$(cd "$(dirname "$0")" && pwd)
mkdir -p "$out"
export PYTHONUNBUFFERED=1
nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv,noheader || true
python3 -c 'import torch, transformers, tokenizers; print("torch", torch.__version__, "transformers",
transformers.__version__, "tokenizers", tokenizers.__version__)'
python3 "$here/train.py" --corpus "$corpus" --out "$out/loom-tiny" --log "$out/train_log.jsonl" "$@" \
    2>&1 | tee "$out/train.txt"
python3 "$here/check_logits.py" --model "$out/loom-tiny" --loom "$loom" --out "$out/check" 2>&1 |
    tee "$out/check.txt"
