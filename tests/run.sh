#!/usr/bin/env bash
# Runs every test binary of a build (and of its ASan+UBSan twin unless
# LOOM_SKIP_ASAN=1) plus tests/test_*.sh, and prints one closing line
# "N passed, N failed" adding up the per-suite lines.  The tests that run a
# model run a second time on the "ref" backend (the plain reference
# kernels), so every backend passes the same golden and engine tests.  Where
# the CPU has AVX-512 BF16, the release tree's batch-invariance tests (and
# test_backend_ops) run once more with the cpu backend computing in bf16
# (LOOM_TEST_COMPUTE=bf16): a token must get the same bits alone or batched
# there too.  The golden tests are not rerun: bf16 activations land 0.02-0.2
# of the logits' std off the fixtures (docs/PERF.md), past their 1e-2.
# The test binaries run side by side, LOOM_TEST_JOBS at a time (default:
# the CPUs), the slowest first, reported in a fixed order; the shell suites
# one at a time.  The ASan twins run their randomized and repeated sweeps
# (the sampler's draws against the ops' definition, the grammar engine's
# seeds and speculative settings) shorter, since a round there costs 5-20
# times as much and checks memory, not statistics: test_rounds in
# tests/harness.h; LOOM_TEST_FULL=1 runs them whole everywhere.
set -u
build=${1:-build}
root=$(cd "$(dirname "$0")/.." && pwd)
export LOOM_FIXTURES=${LOOM_FIXTURES:-$root/tests/fixtures}
export LOOM_BUILD=$build
export ASAN_OPTIONS=${ASAN_OPTIONS:-detect_leaks=1:abort_on_error=0}
export UBSAN_OPTIONS=${UBSAN_OPTIONS:-print_stacktrace=1:halt_on_error=1}

passed=0; failed=0
# report LABEL SECONDS RC < OUTPUT: one suite's line from its output (its
# closing "name: N passed, N failed" line), failures' output above it.
report() {
    local label=$1 secs=$2 rc=$3 out line
    out=$(cat)
    line=$(printf '%s\n' "$out" | grep -E '^[A-Za-z0-9_./-]+: [0-9]+ passed, [0-9]+ failed$' | tail -n 1)
    if [ -z "$line" ]; then
        printf '%s\n' "$out" | tail -n 30
        echo "$label: crashed or printed no summary (exit $rc)"
        failed=$((failed + 1)); return
    fi
    local p f
    p=$(sed -E 's/.*: ([0-9]+) passed.*/\1/' <<<"$line")
    f=$(sed -E 's/.*passed, ([0-9]+) failed/\1/' <<<"$line")
    if [ "$rc" -ne 0 ] && [ "$f" -eq 0 ]; then f=1; fi
    [ "$f" -ne 0 ] && printf '%s\n' "$out" | grep -v ': [0-9]* passed, ' | tail -n 40
    echo "$label: $p passed, $f failed ($secs s)"
    passed=$((passed + p)); failed=$((failed + f))
}
run_suite() { # $1 = label, rest = command: runs it now
    local label=$1 out rc start=$SECONDS
    shift
    out=$("$@" 2>&1); rc=$?
    report "$label" $((SECONDS - start)) "$rc" <<<"$out"
}
# The C test binaries run LOOM_TEST_JOBS at a time (default: the CPUs; they
# are in-process, most on one thread, each in its own temporary folders);
# queue_suite adds one to the list, collect_suites starts them all, a place
# at a time, waits for them and reports them in the order they were queued.
# The suites in slow_first start first (longest-first: a long suite started
# last would run alone at the end while the other CPUs wait; measured on 2
# shared cores after the ASan sweeps were shortened: 69 s down to 13 s); the
# rest follow in their queued order.  The shell suites start servers on
# ports and run one at a time (run_suite).
jobs_max=${LOOM_TEST_JOBS:-$(nproc 2>/dev/null || echo 1)}
[ "$jobs_max" -ge 1 ] 2>/dev/null || jobs_max=1
outdir=$(mktemp -d "${TMPDIR:-/tmp}/loom-run-XXXXXX") || exit 1
trap 'rm -rf "$outdir"' EXIT
slow_first="asan/test_backend_ops asan/test_grammar_engine asan/ref/test_speculative asan/ref/test_default_model
            test_sampler test_backend_ops bf16/test_backend_ops ref/test_speculative asan/ref/test_tensor_parallel
            asan/test_grammar asan/test_sampler asan/ref/test_engine tp2/test_grammar_engine asan/test_speculative"
queued=(); queued_cmds=()
queue_suite() { # $1 = label, rest = command
    queued+=("$1")
    shift
    queued_cmds+=("$(printf '%q ' "$@")")
}
start_suite() { # $1 = index into queued
    local i=$1
    while [ "$(jobs -rp | wc -l)" -ge "$jobs_max" ]; do wait -n; done
    ( start=$SECONDS; eval "${queued_cmds[$i]}" > "$outdir/$i.out" 2>&1; rc=$?
      echo "$rc $((SECONDS - start))" > "$outdir/$i.rc" ) &
}
collect_suites() {
    local i rc secs label started=" "
    for label in $slow_first; do
        for i in "${!queued[@]}"; do
            [ "${queued[$i]}" = "$label" ] && { start_suite "$i"; started+="$i "; }
        done
    done
    for i in "${!queued[@]}"; do
        [[ "$started" == *" $i "* ]] || start_suite "$i"
    done
    wait
    for i in "${!queued[@]}"; do
        read -r rc secs < "$outdir/$i.rc" 2>/dev/null || { rc=1; secs=0; }
        report "${queued[$i]}" "$secs" "$rc" < "$outdir/$i.out"
    done
    queued=(); queued_cmds=()
}

model_tests="test_qwen35_golden test_tensor_parallel test_qwen35_shapes test_qwen35_moe test_glm4v test_vision test_image_prompt test_engine_images test_expert_layouts test_mtp test_engine test_speculative test_prefix_cache test_default_model test_quantized test_gguf test_mlx_quant test_quant4 test_fused_experts test_gdn_head_ratio"
trees=("$build")
[ "${LOOM_SKIP_ASAN:-0}" != 1 ] && trees+=("$build/asan")
for tree in "${trees[@]}"; do
    prefix=${tree#"$build"}; prefix=${prefix#/}; prefix=${prefix:+$prefix/}
    for t in "$tree"/tests/test_*; do
        [ -x "$t" ] && queue_suite "$prefix$(basename "$t")" "$t"
    done
    for name in $model_tests; do
        t="$tree/tests/$name"
        [ -x "$t" ] && queue_suite "${prefix}ref/$name" env LOOM_TEST_BACKEND=ref "$t"
    done
done
# rerun PREFIX "TESTS" VAR=VALUE...: the release tree's TESTS again under
# those environment variables, each reported as PREFIX/name.
rerun() {
    local prefix=$1 names=$2 name t
    shift 2
    for name in $names; do
        t="$build/tests/$name"
        [ -x "$t" ] && queue_suite "$prefix/$name" env "$@" "$t"
    done
}
if grep -qw avx512_bf16 /proc/cpuinfo 2>/dev/null; then
    rerun bf16 "test_backend_ops test_engine test_speculative test_prefix_cache test_engine_images" LOOM_TEST_COMPUTE=bf16
else
    echo "bf16/*: skipped (this CPU has no avx512_bf16, so the cpu backend computes in f32 only)"
fi
# tensor parallelism (issue 19): the engine tests again with every model
# split over 2 ranks (threads, the host communicator): batch invariance,
# speculative == plain greedy, prefix caching, grammars and images.
rerun tp2 "test_engine test_speculative test_prefix_cache test_grammar_engine test_engine_images test_qwen35_moe" \
    LOOM_TEST_TP=2
# expert parallelism: the engine tests that run a MoE model (the Qwen3.5-MoE
# fixture with its MTP head; GLM-4.6V's with images and prefix caching)
# again over 2 ranks holding half the experts each, whole.
rerun ep2 "test_qwen35_moe test_engine_images test_prefix_cache" LOOM_TEST_TP=2 LOOM_TEST_EP=1
# a step's sampled rows drawn on several threads (engine/presample.c, on
# by default with a GPU): seeded sampling batched == alone, n > 1,
# speculative sampling and grammars again with 2 sampling threads.
rerun sample2 "test_engine test_speculative test_grammar_engine" LOOM_SAMPLE_THREADS=2
# kernel sets (base/kernel_set.h): test_backend_ops runs every op on each set
# this CPU runs, and test_sampler the sampler's loops; the model tests run
# on the set the CPU gets.  A portable build's lower sets are forced here
# (LOOM_CPU_KERNELS) through the golden logits, the Gated DeltaNet kernels'
# own forms and a generation, so each set serves a model end to end.
for set in avx2 generic; do
    if LOOM_CPU_KERNELS=$set "$build/loom" --version >/dev/null 2>&1; then
        rerun "$set" "test_qwen35_golden test_gated_delta test_default_model" LOOM_CPU_KERNELS=$set
    else
        echo "$set/*: skipped (this build or this CPU has no $set kernel set: $build/loom --version)"
    fi
done
# int8 weights (--quantize int8): the batch-invariance tests again, every
# test model made int8 at load (test_quantized checks the logits' quality).
rerun int8 "test_engine test_speculative test_prefix_cache test_engine_images" LOOM_TEST_QUANTIZE=int8
# a reduced-vocabulary draft head (--draft-vocab): the fixtures' MTP drafts
# from the first 1024 of 2048 ids; outputs must not change.
rerun draft1024 "test_engine test_speculative test_prefix_cache" LOOM_TEST_DRAFT_VOCAB=1024
collect_suites
for t in "$root"/tests/test_*.sh; do
    [ -f "$t" ] && run_suite "$(basename "$t")" bash "$t"
done
echo "suites took $SECONDS s in all"
echo "$passed passed, $failed failed"
[ "$failed" -eq 0 ]
