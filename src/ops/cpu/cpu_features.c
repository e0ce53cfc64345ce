#include "ops/cpu/cpu_features.h"

lm_cpu_features lm_cpu_features_detect(void) {
    lm_cpu_features f = {0};
#if defined(__x86_64__) && defined(__GNUC__)
    /* __builtin_cpu_supports checks CPUID and, for AVX-512, that XCR0 has the
     * zmm state enabled by the OS. */
    __builtin_cpu_init();
    f.avx512_bf16 = __builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512bw") &&
                    __builtin_cpu_supports("avx512vl") && __builtin_cpu_supports("avx512bf16");
#endif
    return f;
}
