/* What the CPU the process runs on offers, found at run time with CPUID and
 * XGETBV (x86-64; elsewhere every field is false).  Each field says whether
 * a kernel set's code may run here (base/kernel_set.h): the CPU has every
 * instruction the compiler was allowed for it, and the OS saves the register
 * state those instructions use.  A plain value: callers keep it (the cpu
 * backend object), nothing here is global. */
#ifndef LOOM_BASE_CPU_FEATURES_H
#define LOOM_BASE_CPU_FEATURES_H

#include <stdbool.h>

typedef struct {
    /* SSE3, SSSE3, SSE4.1, SSE4.2, POPCNT, AVX, AVX2, FMA and F16C, with the
     * OS saving the ymm state: what the avx2 kernel set is compiled for. */
    bool avx2;
    /* avx2 plus AVX-512 F, BW, VL, DQ and CD, with the OS saving the zmm and
     * opmask state: what the avx512 kernel set is compiled for. */
    bool avx512;
    /* avx512 plus AVX-512 BF16 (vdpbf16ps, vcvtne2ps2bf16): what bf16
     * compute (cpu/matmul_bf16.c, cpu/attention_bf16.c) needs. */
    bool avx512_bf16;
} lm_cpu_features;

lm_cpu_features lm_cpu_features_detect(void);

#endif
