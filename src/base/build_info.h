/* What this binary is: loom's version, the git commit it was built from,
 * the compiler, the CPU features its baseline was compiled for, its kernel
 * sets and the one that runs here, and its backends (`loom --version`,
 * GET /version). */
#ifndef LOOM_BASE_BUILD_INFO_H
#define LOOM_BASE_BUILD_INFO_H

#define LOOM_VERSION "0.1.0"

#include <stdbool.h>

#include "base/error.h"

typedef struct {
    const char *version;      /* LOOM_VERSION */
    const char *git_commit;   /* short hash, "+dirty" when the tree had changes; "unknown" outside git */
    const char *compiler;     /* "gcc 12.2.0" */
    const char *cpu_features; /* "x86_64", "x86_64 sse4.2 avx avx2 ...": what the baseline's -march enabled */
    const char *kernel_sets;  /* this build's kernel sets, worst first: "generic avx2 avx512" (base/kernel_set.h) */
    const char *cpu_kernels;  /* the set the cpu backend and the sampler run here: "avx512"; NULL when refused */
    bool cpu_kernels_forced;  /* chosen by $LOOM_CPU_KERNELS, not as the best this CPU runs */
    lm_error cpu_kernels_error; /* why cpu_kernels is NULL: a $LOOM_CPU_KERNELS refused */
    const char *backends;     /* "cpu, ref" (and "cuda" when built with nvcc) */
} lm_build_info;

void lm_build_info_get(lm_build_info *out);

#endif
