#!/usr/bin/env bash
# The cuda checks written in session 14 but not yet run on a GPU, from a built tree (make; make tests benches
# cuda-probe), on a machine with one NVIDIA Hopper GPU; about 6 minutes, 9 with the llama.cpp pair:
#   int8      the staged int8 kernel (LOOM_CUDA_Q8_STAGED=1): the op test's products in both computes,
#             cuda_gemv's bit comparison with the default int8 kernel (every line must say "same"),
#             9B-shape decode with --quantize int8 against it and bf16, test_engine / test_speculative /
#             test_quantized with int8 weights, memcheck of the int8 op tests
#   prefetch  LOOM_CUDA_PREFETCH=16|32 (a decode product's first weights prefetched into L2) against none,
#             9B-shape decode, and test_engine / test_speculative with it on
#   llama     llama.cpp's CUDA build beside loom on one random 9B-shape checkpoint (decode tg128 and a 4096-token
#             prefill); LLAMA_BENCH names its llama-bench, GGUF_PY its gguf-py folder (docs/PERF.md: how to build)
#
#   tools/cuda_check.sh [int8] [prefetch] [llama]      (default: int8 prefetch)
# BUILD (default build), CONFIGS (default ../shared/bench-configs), LOOM_FIXTURES as the tests.
set -u
cd "$(dirname "$0")/.."
B=${BUILD:-build}
CONFIGS=${CONFIGS:-../shared/bench-configs}
PARTS=${*:-int8 prefetch}
R="--device cuda --random-weights --config $CONFIGS/qwen3.5-9b-shape.json --prompt-tokens 64 --gen-tokens 96"
log() { echo "== $(date +%H:%M:%S) $*"; }
t() { # label, env..., test binary: its last line
  local label=$1; shift
  timeout 300 env LOOM_TEST_BACKEND=cuda "$@" > /tmp/cuda_check_$label.log 2>&1
  echo "$label rc=$?: $(tail -1 /tmp/cuda_check_$label.log)"
}
decode() { # label, env...: the decode and roofline lines of one bench run
  local label=$1; shift
  echo "$label: $(env "$@" 2>&1 | grep -E '^(decode|roofline)|rror' | tr '\n' ' ')"
}
nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv,noheader
$B/cuda_probe 2>&1 | tail -2
for part in $PARTS; do
  case $part in
  int8)
    log int8
    t ops_f32 LOOM_CUDA_Q8_STAGED=1 LOOM_TEST_ONLY=matmul $B/tests/test_backend_ops
    t ops_bf16 LOOM_CUDA_Q8_STAGED=1 LOOM_TEST_COMPUTE=bf16 LOOM_TEST_ONLY=matmul $B/tests/test_backend_ops
    CUDA_GEMV_INT8=1 $B/bench/cuda_gemv staged,unstaged 5
    for round in 1 2; do
      decode "staged int8" LOOM_CUDA_Q8_STAGED=1 $B/loom bench $R --quantize int8
      decode "two-byte int8" $B/loom bench $R --quantize int8
      decode "bf16" $B/loom bench $R
    done
    t engine_int8 LOOM_CUDA_Q8_STAGED=1 LOOM_TEST_QUANTIZE=int8 $B/tests/test_engine
    t speculative_int8 LOOM_CUDA_Q8_STAGED=1 LOOM_TEST_QUANTIZE=int8 $B/tests/test_speculative
    t quantized LOOM_CUDA_Q8_STAGED=1 $B/tests/test_quantized
    t memcheck_int8 LOOM_CUDA_Q8_STAGED=1 LOOM_TEST_ONLY=matmul compute-sanitizer --tool memcheck \
      --error-exitcode 1 $B/tests/test_backend_ops ;;
  prefetch)
    log prefetch
    for round in 1 2; do
      for mb in 0 16 32; do decode "prefetch $mb MB" LOOM_CUDA_PREFETCH=$mb $B/loom bench $R; done
    done
    t engine_prefetch LOOM_CUDA_PREFETCH=16 $B/tests/test_engine
    t speculative_prefetch LOOM_CUDA_PREFETCH=16 $B/tests/test_speculative ;;
  llama)
    log llama
    [ -x "${LLAMA_BENCH:-}" ] && [ -d "${GGUF_PY:-}" ] || { echo "llama: set LLAMA_BENCH and GGUF_PY"; continue; }
    W=${WORK:-/tmp/cuda_check}; mkdir -p $W
    [ -f $W/q9b/config.json ] || $B/bench/make_random_checkpoint $CONFIGS/qwen3.5-9b-shape.json $W/q9b | tail -1
    [ -f $W/q9b.gguf ] || PYTHONPATH=$GGUF_PY python3 tools/llama_compare/hf_to_gguf.py $W/q9b $W/q9b.gguf \
      --tokenizer models/loom-tiny | tail -1
    for round in 1 2; do
      "$LLAMA_BENCH" -m $W/q9b.gguf -ngl 99 -fa 1 -r 3 -p 0 -n 128 2>&1 | grep -E '^\||rror' | tail -1
      decode "loom f32 compute" $B/loom bench $W/q9b --device cuda --prompt-tokens 64 --gen-tokens 128
      decode "loom bf16 compute" $B/loom bench $W/q9b --device cuda --prompt-tokens 64 --gen-tokens 128 --compute-dtype bf16
    done
    "$LLAMA_BENCH" -m $W/q9b.gguf -ngl 99 -fa 1 -r 3 -p 4096 -n 0 -b 2048 -ub 2048 2>&1 | grep -E '^\||rror' | tail -1
    echo "loom prefill: $($B/loom bench $W/q9b --device cuda --prompt-tokens 4096 --gen-tokens 2 --compute-dtype bf16 2>&1 | grep -E '^prefill|rror')" ;;
  *) echo "cuda_check: unknown part $part (int8, prefetch, llama)"; exit 2 ;;
  esac
done
log end
