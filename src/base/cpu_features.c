#include "base/cpu_features.h"

#if defined(__x86_64__) && defined(__GNUC__)
#include <cpuid.h>
#include <stddef.h>
#include <stdint.h>

#define BIT(reg, n) ((((reg) >> (n)) & 1u) != 0)

/* XCR0: which register state the OS saves on a context switch. */
static uint64_t os_saved_state(void) {
    uint32_t lo, hi;
    __asm__ volatile("xgetbv" : "=a"(lo), "=d"(hi) : "c"(0));
    return ((uint64_t)hi << 32) | lo;
}

lm_cpu_features lm_cpu_features_detect(void) {
    lm_cpu_features f = {0};
    unsigned a, b, c, d;
    if (!__get_cpuid(1, &a, &b, &c, &d)) return f;
    bool sse3 = BIT(c, 0), ssse3 = BIT(c, 9), fma = BIT(c, 12), sse41 = BIT(c, 19), sse42 = BIT(c, 20),
         popcnt = BIT(c, 23), xsave = BIT(c, 26), osxsave = BIT(c, 27), avx = BIT(c, 28), f16c = BIT(c, 29);
    uint64_t xcr0 = xsave && osxsave ? os_saved_state() : 0;
    bool ymm_saved = (xcr0 & 0x06) == 0x06; /* SSE and AVX state */
    bool zmm_saved = (xcr0 & 0xE6) == 0xE6; /* and opmask, ZMM_Hi256, Hi16_ZMM */

    unsigned max_sub = 0, b7 = 0, a7_1 = 0;
    if (__get_cpuid_max(0, NULL) >= 7) {
        __cpuid_count(7, 0, max_sub, b7, c, d);
        if (max_sub >= 1) __cpuid_count(7, 1, a7_1, b, c, d);
    }
    bool avx2 = BIT(b7, 5), avx512f = BIT(b7, 16), avx512dq = BIT(b7, 17), avx512cd = BIT(b7, 28),
         avx512bw = BIT(b7, 30), avx512vl = BIT(b7, 31), avx512bf16 = BIT(a7_1, 5);

    f.avx2 = sse3 && ssse3 && sse41 && sse42 && popcnt && avx && avx2 && fma && f16c && ymm_saved;
    f.avx512 = f.avx2 && avx512f && avx512bw && avx512vl && avx512dq && avx512cd && zmm_saved;
    f.avx512_bf16 = f.avx512 && avx512bf16;
    return f;
}

#else

lm_cpu_features lm_cpu_features_detect(void) { return (lm_cpu_features){0}; }

#endif
