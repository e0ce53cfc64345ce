/* What this binary is: loom's version, the git commit it was built from,
 * the compiler, the CPU features it was compiled for and its backends
 * (`loom --version`, GET /version). */
#ifndef LOOM_BASE_BUILD_INFO_H
#define LOOM_BASE_BUILD_INFO_H

#define LOOM_VERSION "0.1.0"

typedef struct {
    const char *version;      /* LOOM_VERSION */
    const char *git_commit;   /* short hash, "+dirty" when the tree had changes; "unknown" outside git */
    const char *compiler;     /* "gcc 12.2.0" */
    const char *cpu_features; /* "avx2 fma f16c", what -march enabled */
    const char *backends;     /* "cpu, ref" (and "cuda" when built with nvcc) */
} lm_build_info;

void lm_build_info_get(lm_build_info *out);

#endif
