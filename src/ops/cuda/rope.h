/* The rotary embedding's pieces that rope (rope.cu) and attention_prepare
 * (attention_prepare.cu) share, so both rotate with the same bits.
 * Private to src/ops/cuda.
 *
 * The frequencies and the position component of each pair come from the
 * host, from the reference's own lm_rope_inv_freq / lm_rope_section_of:
 * the device's powf may differ from the host's by an ulp, and at positions
 * of thousands an ulp of inv_freq is a visible angle.  They travel in the
 * kernel's parameters, LM_ROPE_CHUNK pairs a launch (one launch for rot_dim
 * up to 2·LM_ROPE_CHUNK, the released models' case).  The angle is float32
 * as the reference computes it, then cosf/sinf (full range reduction: no
 * fast-math). */
#ifndef LOOM_OPS_CUDA_ROPE_H
#define LOOM_OPS_CUDA_ROPE_H

#include <stdint.h>

#include "ops/ops.h"

#define LM_ROPE_CHUNK 512

typedef struct {
    float inv_freq[LM_ROPE_CHUNK];
    uint8_t section[LM_ROPE_CHUNK];
    int first, count; /* pairs [first, first + count) */
    int half;         /* rot_dim / 2 */
    int pair_interleaved;
} lm_rope_chunk;

/* The chunk of pairs from `first` (zeroed first: every byte is a kernel
 * argument the queue compares). */
void lm_cuda_rope_chunk(const lm_rope_params *rope, int first, lm_rope_chunk *c);

#ifdef __CUDACC__
/* cos and sin of the chunk's angles at a token's position (pos: its 3
 * components), into cs[j], sn[j] for j < c.count, by the block's threads;
 * the caller synchronises before reading them. */
__device__ __forceinline__ static void lm_rope_angles(const lm_rope_chunk &c, const int32_t *pos, float *cs,
                                                      float *sn) {
    for (int j = threadIdx.x; j < c.count; j += blockDim.x) {
        float angle = (float)pos[c.section[j]] * c.inv_freq[j];
        cs[j] = cosf(angle);
        sn[j] = sinf(angle);
    }
}

/* Pair j of the chunk in one head's row xh, in place.  The products and
 * the difference are rounded one by one (no fused multiply-add), so every
 * kernel that rotates gets these bits. */
__device__ __forceinline__ static void lm_rope_rotate(float *xh, const lm_rope_chunk &c, const float *cs,
                                                      const float *sn, int j) {
    int i = c.first + j;
    int a = c.pair_interleaved ? 2 * i : i;
    int b = c.pair_interleaved ? 2 * i + 1 : i + c.half;
    float xa = xh[a], xb = xh[b];
    xh[a] = __fsub_rn(__fmul_rn(xa, cs[j]), __fmul_rn(xb, sn[j]));
    xh[b] = __fadd_rn(__fmul_rn(xb, cs[j]), __fmul_rn(xa, sn[j]));
}
#endif

#endif
