#!/usr/bin/env bash
# On a machine with a GPU: the cuda matmul op tests (every weight format
# against the float64 oracle, batch invariance) in f32 and in bf16 compute,
# then bench/cuda_matvec (decode products of every format at the 9B shapes,
# as a share of the copy rate measured in the same run), and int8 / FP8
# once more through their earlier 4-row-block kernels.  Builds nothing:
# build first with `make CUDA=1 -j$(nproc) $B/tests/test_backend_ops
# $B/bench/cuda_matvec` (B = LOOM_BUILD, default build).
#
# usage: tools/gpu/matvec_run.sh [rounds (default 20)] [formats (cuda_matvec's list)]
# Exits non-zero when an op test fails; the bench's lines go to stdout.
set -u
root=$(cd "$(dirname "$0")/../.." && pwd)
cd "$root" || exit 2
B=${LOOM_BUILD:-build}
for bin in "$B/tests/test_backend_ops" "$B/bench/cuda_matvec"; do
    [ -x "$bin" ] || { echo "matvec_run: $bin is not built (make CUDA=1 $bin)" >&2; exit 2; }
done
nvidia-smi --query-gpu=name,memory.total,clocks.max.sm,clocks.max.mem --format=csv,noheader 2>/dev/null || true
status=0
# the matmul tests only (LOOM_TEST_ONLY: names containing "matmul")
for compute in f32 bf16; do
    echo "== test_backend_ops, matmul tests, $compute compute"
    if ! LOOM_CUDA_GEMV_1BYTE=staged LOOM_TEST_ONLY=matmul LOOM_TEST_COMPUTE=$compute LOOM_FIXTURES=${LOOM_FIXTURES:-tests/fixtures} \
        "$B/tests/test_backend_ops"; then
        status=1
    fi
done
echo "== test_backend_ops, embed tests (the scalar ggml reader), f32 compute"
LOOM_TEST_ONLY=embed LOOM_TEST_COMPUTE=f32 "$B/tests/test_backend_ops" || status=1
echo "== bench/cuda_matvec (int8, FP8 through the staged kernels)"
LOOM_CUDA_GEMV_1BYTE=staged "$B/bench/cuda_matvec" "${1:-20}" ${2:+"$2"} || status=1
# the 1-byte formats through the kernels they had before (4-row blocks), to compare
echo "== bench/cuda_matvec int8,fp8 through the 4-row blocks (the default)"
"$B/bench/cuda_matvec" "${1:-20}" int8,fp8 || status=1
exit $status
