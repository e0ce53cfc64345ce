#include "base/build_info.h"

#include "base/kernel_set.h"

#ifndef LOOM_GIT_COMMIT
#define LOOM_GIT_COMMIT "unknown"
#endif

#define STRINGIFY_(x) #x
#define STRINGIFY(x) STRINGIFY_(x)

#if defined(__clang__)
#define COMPILER "clang " __clang_version__
#elif defined(__GNUC__)
#define COMPILER "gcc " STRINGIFY(__GNUC__) "." STRINGIFY(__GNUC_MINOR__) "." STRINGIFY(__GNUC_PATCHLEVEL__)
#else
#define COMPILER "unknown compiler"
#endif

/* Each feature the compiler was told it may use, space-separated. */
static const char cpu_features[] = ""
#if defined(__x86_64__)
                                   "x86_64"
#elif defined(__aarch64__)
                                   "aarch64"
#endif
#ifdef __SSE4_2__
                                   " sse4.2"
#endif
#ifdef __AVX__
                                   " avx"
#endif
#ifdef __AVX2__
                                   " avx2"
#endif
#ifdef __FMA__
                                   " fma"
#endif
#ifdef __F16C__
                                   " f16c"
#endif
#ifdef __AVX512F__
                                   " avx512f"
#endif
#ifdef __AVX512BF16__
                                   " avx512bf16"
#endif
#ifdef __ARM_NEON
                                   " neon"
#endif
    ;

void lm_build_info_get(lm_build_info *out) {
    out->version = LOOM_VERSION;
    out->git_commit = LOOM_GIT_COMMIT;
    out->compiler = COMPILER;
    out->cpu_features = cpu_features;
    out->kernel_sets = lm_kernel_sets_built();
    lm_kernel_set set;
    lm_error_clear(&out->cpu_kernels_error);
    out->cpu_kernels = lm_kernel_set_for_process(&set, &out->cpu_kernels_forced, &out->cpu_kernels_error) == LM_OK
                           ? lm_kernel_set_name(set)
                           : NULL;
#ifdef LOOM_HAVE_CUDA
    out->backends = "cpu, ref, cuda";
#else
    out->backends = "cpu, ref";
#endif
}
