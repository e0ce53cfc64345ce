/* The descriptor of the kernel set this file is compiled into:
 * lm_cpu_kernels_<LM_KERNEL_SET> (the Makefile compiles src/ops/cpu/ once
 * per set, with -DLM_KERNEL_SET=<set> and the set's -m flags). */
#include "ops/cpu/cpu_kernels.h"

#include "base/simd.h"
#include "ops/cpu/kernels.h"

#ifndef LM_KERNEL_SET
#error "LM_KERNEL_SET is not defined: the Makefile compiles this file once per kernel set"
#endif

#define DESCRIPTOR_(s) lm_cpu_kernels_##s
#define DESCRIPTOR(s) DESCRIPTOR_(s)

const lm_cpu_kernels DESCRIPTOR(LM_KERNEL_SET) = {
    .set = LM_KERNEL_SET_ID(LM_KERNEL_SET),
#if defined(LM_SIMD_AVX512)
    .avx512 = true,
#else
    .avx512 = false,
#endif
    .ops = &lm_cpu_backend_ops,
    .gdn_recurrent = lm_gdn_recurrent,
    .gdn_chunked = lm_gdn_chunked,
    .gdn_conv1d_silu = lm_gdn_conv1d_silu,
    .gated_delta_rule = lm_cpu_gated_delta_rule,
    .causal_conv1d_silu = lm_cpu_causal_conv1d_silu,
    .attention = lm_cpu_attention,
    .attention_bf16_takes = lm_cpu_attention_bf16_takes,
    .attention_bf16 = lm_cpu_attention_bf16,
};
