#!/usr/bin/env bash
# Alternating loom / llama.cpp runs on the same weights, for docs/PERF.md's
# "CPU: loom beside llama.cpp" section (issue 20). Each round runs every
# engine once per cell, one run at a time, and writes each run's output with
# the load average before it to OUT/THREADS/CELL/ENGINE.ROUND.txt;
# tools/llama_compare/summarize.py turns the folder into the tables.
#
# Usage (from the loom checkout, after `make` and the conversion):
#   tools/llama_compare/bench_pairs.sh THREADS ROUNDS OUT [CELL...]
# Cells: pp512 pp2048 tg batched (default: all four).
# Environment (defaults in brackets):
#   LOOM      loom binary                        [build/loom]
#   LLAMA_BIN llama.cpp's build/bin              [/work/llama-work/src/build/bin]
#   CKPT      the checkpoint folder loom reads   [/work/llama-work/q08b]
#   GGUF_BF16 its GGUF conversion                [/work/llama-work/gguf/q08b-bf16.gguf]
#   GGUF_Q8   llama-quantize's Q8_0 of it        [/work/llama-work/gguf/q08b-q8_0.gguf]
#   FIRST     the first round's number, to add rounds to a folder [1]
#   QUIET     before each run, wait until the CPUs were this % idle over 3 s
#             and no other benchmark runs (a shared machine)            [70]
#   MAXWAIT   ... but no longer than this many seconds, then run anyway [240]
set -u
T=${1:?threads}
ROUNDS=${2:?rounds}
OUT=${3:?output folder}
shift 3
CELLS=${*:-pp512 pp2048 tg batched}
LOOM=${LOOM:-build/loom}
LLAMA_BIN=${LLAMA_BIN:-/work/llama-work/src/build/bin}
CKPT=${CKPT:-/work/llama-work/q08b}
GGUF_BF16=${GGUF_BF16:-/work/llama-work/gguf/q08b-bf16.gguf}
GGUF_Q8=${GGUF_Q8:-/work/llama-work/gguf/q08b-q8_0.gguf}

QUIET=${QUIET:-70}
MAXWAIT=${MAXWAIT:-240}

# idle_percent: the CPUs' idle share over the next 3 seconds, from /proc/stat.
idle_percent() {
    local a b
    read -ra a < /proc/stat
    sleep 3
    read -ra b < /proc/stat
    local total=0 i
    for i in 1 2 3 4 5 6 7 8; do total=$((total + b[i] - a[i])); done
    echo $(( total > 0 ? 100 * (b[4] - a[4]) / total : 0 ))
}

# wait_quiet: until the machine is quiet (QUIET) or MAXWAIT has passed;
# prints what it saw.
wait_quiet() {
    local waited=0 idle others
    while :; do
        idle=$(idle_percent)
        others=$(pgrep -fc 'loom[^ ]* bench|llama-bench|llama-batched-bench|ops-bench/|bench/membw' || true)
        if [ "$idle" -ge "$QUIET" ] && [ "$others" -eq 0 ]; then break; fi
        if [ "$waited" -ge "$MAXWAIT" ]; then break; fi
        waited=$((waited + 3))
    done
    echo "waited ${waited}s: idle ${idle}% over 3 s, ${others} other benchmark processes"
}

# run CELL ENGINE ROUND COMMAND...: one run, its output and load average kept.
run() {
    local cell=$1 engine=$2 round=$3
    shift 3
    local dir="$OUT/t$T/$cell"
    mkdir -p "$dir"
    local f="$dir/$engine.$round.txt"
    local quiet
    quiet=$(wait_quiet)
    {
        echo "# $(date -u +%FT%TZ) $(uptime)"
        echo "# $quiet"
        echo "# $*"
        "$@" 2>&1
        echo "# exit $? $(date -u +%FT%TZ) $(uptime)"
    } > "$f"
    echo "$cell $engine $round: $(grep -E 'tokens/s|avg_ts|^\|' "$f" | tail -2 | tr '\n' ' ' | cut -c1-160)"
}

loom() { "$LOOM" bench "$CKPT" --threads "$T" "$@"; }
llama_bench() { "$LLAMA_BIN/llama-bench" -t "$T" -r 1 -o json "$@"; }

for r in $(seq "${FIRST:-1}" "$ROUNDS"); do
    for cell in $CELLS; do
        case $cell in
        pp512)
            run pp512 loom-bf16 "$r" loom --compute-dtype bf16 --prompt-tokens 512 --gen-tokens 2
            run pp512 llama-bf16 "$r" llama_bench -m "$GGUF_BF16" -p 512 -n 0
            run pp512 loom-f32 "$r" loom --compute-dtype f32 --prompt-tokens 512 --gen-tokens 2
            ;;
        pp2048)
            run pp2048 loom-bf16 "$r" loom --compute-dtype bf16 --prompt-tokens 2048 --gen-tokens 2 \
                --max-batch-tokens 2048
            run pp2048 llama-bf16 "$r" llama_bench -m "$GGUF_BF16" -p 2048 -n 0
            run pp2048 loom-f32 "$r" loom --compute-dtype f32 --prompt-tokens 2048 --gen-tokens 2 \
                --max-batch-tokens 2048
            ;;
        tg)
            run tg loom-f32 "$r" loom --compute-dtype f32 --prompt-tokens 128 --gen-tokens 33 --bandwidth 40
            run tg llama-bf16 "$r" llama_bench -m "$GGUF_BF16" -p 0 -n 32 -d 128
            run tg loom-int8 "$r" loom --quantize int8 --prompt-tokens 128 --gen-tokens 33 --bandwidth 40
            run tg llama-q8_0 "$r" llama_bench -m "$GGUF_Q8" -p 0 -n 32 -d 128
            run tg loom-bf16 "$r" loom --compute-dtype bf16 --prompt-tokens 128 --gen-tokens 33 --bandwidth 40
            ;;
        batched)
            # Same work on both: B prompts of 32 tokens prefilled, then 32
            # decode steps of B tokens (loom: 33 output tokens a request, the
            # first from the prefill's logits).
            for c in 4 16; do
                run batched loom-bf16-c$c "$r" loom --compute-dtype bf16 --concurrency $c --requests $c \
                    --prompt-tokens 32 --gen-tokens 33
            done
            run batched llama-bf16 "$r" "$LLAMA_BIN/llama-batched-bench" -m "$GGUF_BF16" -t "$T" -tb "$T" \
                -c 2048 -npp 32 -ntg 32 -npl 4,16
            for c in 4 16; do
                run batched loom-f32-c$c "$r" loom --compute-dtype f32 --concurrency $c --requests $c \
                    --prompt-tokens 32 --gen-tokens 33
            done
            ;;
        *) echo "bench_pairs.sh: unknown cell $cell (pp512 pp2048 tg batched)" >&2; exit 2 ;;
        esac
    done
done
