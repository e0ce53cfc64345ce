#!/usr/bin/env python3
"""Compare two float32 [T, V] logit files (loom logits / llama_logits output).

Usage:
    python3 tools/llama_compare/compare_logits.py REF OTHER --vocab V [--rows all|last]

REF is raw float32 (as `loom logits --out` writes), or FILE.safetensors:NAME
for a tensor of a safetensors file (e.g. a fixture's reference.safetensors:p0.logits).
Prints, per compared position, max |OTHER - REF| divided by the standard
deviation of REF's row (the measure docs/PERF.md uses), and whether the argmax
agrees; then the largest over the positions.
"""

import argparse
import json
import struct
import sys

import numpy as np


def load(spec, vocab):
    if ".safetensors:" in spec:
        path, name = spec.split(".safetensors:", 1)
        path += ".safetensors"
        with open(path, "rb") as f:
            (n,) = struct.unpack("<Q", f.read(8))
            header = json.loads(f.read(n))
            if name not in header:
                sys.exit(f"error: {path} has no tensor {name}")
            info = header[name]
            if info["dtype"] != "F32":
                sys.exit(f"error: {path}:{name} is {info['dtype']}, not F32")
            begin, end = info["data_offsets"]
            f.seek(8 + n + begin)
            return np.frombuffer(f.read(end - begin), dtype=np.float32).reshape(info["shape"])
    a = np.fromfile(spec, dtype=np.float32)
    if a.size % vocab:
        sys.exit(f"error: {spec}: {a.size} floats is not a whole number of rows of {vocab}")
    return a.reshape(-1, vocab)


def main():
    p = argparse.ArgumentParser()
    p.add_argument("ref")
    p.add_argument("other")
    p.add_argument("--vocab", type=int, required=True)
    p.add_argument("--rows", choices=["all", "last"], default="all")
    args = p.parse_args()
    ref, other = load(args.ref, args.vocab), load(args.other, args.vocab)
    if ref.shape != other.shape:
        sys.exit(f"error: shapes differ: {ref.shape} and {other.shape}")
    rows = range(ref.shape[0]) if args.rows == "all" else [ref.shape[0] - 1]
    worst = 0.0
    agree = 0
    for t in rows:
        r, o = ref[t].astype(np.float64), other[t].astype(np.float64)
        d = float(np.max(np.abs(o - r)) / np.std(r))
        same = int(np.argmax(r)) == int(np.argmax(o))
        agree += same
        worst = max(worst, d)
        print(f"position {t}: max|diff|/std {d:.4f}  std {np.std(r):.4f}  argmax {'same' if same else 'differs'}")
    print(f"largest max|diff|/std over {len(rows)} positions: {worst:.4f}; argmax agrees on {agree}/{len(rows)}")


if __name__ == "__main__":
    main()
