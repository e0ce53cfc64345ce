#!/usr/bin/env bash
# Issue 19's acceptance on a machine with 2 or more NVIDIA GPUs, from a built tree (make; make tests):
# the NCCL communicator (test_comm: a collective captured in a graph, then the destroy that once hung),
# the split models over N ranks against the fixtures and the whole model (test_tensor_parallel), the
# engine's invariance tests with every model split (batch invariance, speculative == plain greedy,
# prefix caching, the MoE model also with expert parallelism), then the 35B-A3B and GLM-4.6V (20 of
# its 46 layers, which fit one H200) shapes at N = 1 and N, random bf16 weights, for docs/PERF.md's
# "Several GPUs" table (throughput at concurrency 1, 16, 64 and the scaling efficiency).
#
#   tools/multi_gpu_check.sh [N]          N ranks (default: 2); BUILD (default build), CONFIGS
#                                         (default bench/configs), LOOM_FIXTURES as the tests
#
# NCCL comes from libnccl.so.2 or LOOM_NCCL_LIBRARY; NVLink multicast stays off (NCCL_NVLS_ENABLE=0).
# A test that hangs is killed after 120 s and named; nothing here needs the network.
set -u
N=${1:-2}
cd "$(dirname "$0")/.."
B=${BUILD:-build}
CONFIGS=${CONFIGS:-bench/configs}
export NCCL_NVLS_ENABLE=0
GPUS=$(nvidia-smi --query-gpu=index --format=csv,noheader 2>/dev/null | wc -l)
[ "$GPUS" -ge "$N" ] || { echo "multi_gpu_check: $N ranks need $N GPUs; nvidia-smi shows $GPUS"; exit 2; }
nvidia-smi --query-gpu=index,name,memory.total --format=csv,noheader; nvidia-smi topo -m 2>/dev/null | head -4
fail=0
run() { # label, then env and command
  local label=$1; shift
  timeout 120 env LOOM_TEST_BACKEND=cuda "$@" > /tmp/multi_gpu_$label.log 2>&1; local rc=$?
  [ $rc = 124 ] && echo "$label: HUNG (killed after 120 s; /tmp/multi_gpu_$label.log)"
  echo "$label rc=$rc: $(tail -1 /tmp/multi_gpu_$label.log)"; [ $rc = 0 ] || fail=1
}
run comm $B/tests/test_comm
run tensor_parallel $B/tests/test_tensor_parallel
for t in test_engine test_speculative test_qwen35_moe test_prefix_cache; do run tp${N}_$t LOOM_TEST_TP=$N $B/tests/$t; done
run ep${N}_test_qwen35_moe LOOM_TEST_TP=$N LOOM_TEST_EP=1 $B/tests/test_qwen35_moe
[ $fail = 0 ] || { echo "multi_gpu_check: correctness failed; no benchmarks"; exit 1; }
sed 's/"num_hidden_layers": 46/"num_hidden_layers": 20/' $CONFIGS/glm-4.6v-shape.json > /tmp/glm-4.6v-20l.json
for cfg in $CONFIGS/qwen3.5-35b-a3b-shape.json /tmp/glm-4.6v-20l.json; do
  for tp in 1 $N; do
    echo "== $(basename $cfg) -tp $tp"
    $B/loom bench --device cuda --random-weights --config $cfg --max-model-len 2048 -tp $tp --compute-dtype bf16 \
      --concurrency 1,16,64 --prompt-tokens 128 --gen-tokens 64 2>&1 | grep -E "^(model|concurrency)|rror"
  done
done
