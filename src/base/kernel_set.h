/* The kernel sets of this build, and which one runs.
 *
 * The host SIMD code -- the cpu backend's kernels (src/ops/cpu/) and the
 * sampler's vector loops (engine/sampler_vectors.c) -- is compiled once per
 * kernel set, and each set's objects are merged into one object whose only
 * global symbol is that set's descriptor (the Makefile's KERNEL_SETS;
 * src/ops/cpu/README.md, "Kernel sets").  The sets:
 *
 *   generic  plain C (base/simd.h's generic path): any CPU
 *   avx2     AVX2 + FMA + F16C (simd.h's AVX2 path)
 *   avx512   AVX-512 F/BW/VL/DQ/CD (the AVX-512 paths; bf16 compute)
 *   native   -march=native (make PORTABLE=0, the sanitizer trees), alone
 *
 * A portable x86-64 build has generic, avx2 and avx512; a PORTABLE=0 build
 * has native only; a portable build elsewhere (aarch64) has generic only.
 * The Makefile passes this build's sets as LM_KERNEL_SETS, X(name) each,
 * worst first.  Which set runs is chosen when a cpu backend or a sampler
 * scratch is made: $LOOM_CPU_KERNELS when set (refused when it names no set
 * of this build, or one this CPU cannot run), else the best this CPU runs. */
#ifndef LOOM_BASE_KERNEL_SET_H
#define LOOM_BASE_KERNEL_SET_H

#include <stdbool.h>

#include "base/cpu_features.h"
#include "base/error.h"

#ifndef LM_KERNEL_SETS
#error "LM_KERNEL_SETS is not defined: build with the Makefile, which names this build's kernel sets"
#endif

typedef enum {
    LM_KERNEL_SET_GENERIC,
    LM_KERNEL_SET_AVX2,
    LM_KERNEL_SET_AVX512,
    LM_KERNEL_SET_NATIVE,
} lm_kernel_set;
#define LM_KERNEL_SET_COUNT 4

/* From a set's name in LM_KERNEL_SETS to its value, for tables indexed by
 * set: `#define X(s) [LM_KERNEL_SET_ID(s)] = &descriptor_##s,`. */
#define LM_KERNEL_SET_ID(s) LM_KERNEL_SET_ID_(s)
#define LM_KERNEL_SET_ID_(s) LM_KERNEL_SET_ID_##s
#define LM_KERNEL_SET_ID_generic LM_KERNEL_SET_GENERIC
#define LM_KERNEL_SET_ID_avx2 LM_KERNEL_SET_AVX2
#define LM_KERNEL_SET_ID_avx512 LM_KERNEL_SET_AVX512
#define LM_KERNEL_SET_ID_native LM_KERNEL_SET_NATIVE

/* The environment variable that forces a set. */
#define LM_KERNEL_SET_ENV "LOOM_CPU_KERNELS"

/* "generic", "avx2", "avx512", "native". */
const char *lm_kernel_set_name(lm_kernel_set set);
/* The sets of this build, worst first, space-separated: "generic avx2 avx512". */
const char *lm_kernel_sets_built(void);
bool lm_kernel_set_is_built(lm_kernel_set set);
/* Whether the set's code may run on a CPU offering `cpu`. */
bool lm_kernel_set_runs_on(lm_kernel_set set, const lm_cpu_features *cpu);

/* The set to run on a CPU offering `cpu`: `requested` (a set's name) when it
 * is a set of this build that the CPU runs, else the best set of this build
 * the CPU runs when `requested` is NULL or "".  Refused with a sentence
 * naming what there is: LM_ERR_INVALID when `requested` is no set of this
 * build, LM_ERR_UNSUPPORTED when the CPU cannot run it (or runs none).
 * `source` says where the request came from ("LOOM_CPU_KERNELS"), for the
 * messages. */
lm_status lm_kernel_set_choose(const char *requested, const char *source, const lm_cpu_features *cpu,
                               lm_kernel_set *out, lm_error *err);

/* lm_kernel_set_choose of $LOOM_CPU_KERNELS on the CPU this process runs on:
 * what a cpu backend, a sampler and `loom --version` use.  *forced says
 * whether the variable chose (NULL: not wanted). */
lm_status lm_kernel_set_for_process(lm_kernel_set *out, bool *forced, lm_error *err);

#endif
