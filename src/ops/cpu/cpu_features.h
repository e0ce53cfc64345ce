/* What the CPU the process runs on offers, found at run time (the build
 * targets whatever -march says; kernels for newer instructions are compiled
 * with target attributes and only called when the CPU has them).  The result
 * lives in the cpu backend object, not in a global. */
#ifndef LOOM_OPS_CPU_CPU_FEATURES_H
#define LOOM_OPS_CPU_CPU_FEATURES_H

#include <stdbool.h>

typedef struct {
    /* AVX-512 F/BW/VL plus BF16 (vdpbf16ps, vcvtne2ps2bf16), with the OS
     * saving the zmm state: what matmul_bf16.c needs. */
    bool avx512_bf16;
} lm_cpu_features;

lm_cpu_features lm_cpu_features_detect(void);

#endif
