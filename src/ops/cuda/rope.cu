// Rotary embedding, every mode of lm_rope_params (ops.h): interleaved or
// contiguous sections, rotate-half or interleaved pairs, partial rot_dim,
// the vision towers' 2-D mode; the chunks of pairs and the rotation are
// rope.h's.
#include <stdint.h>
#include <string.h>

#include "ops/cuda/launch.h"
#include "ops/cuda/rope.h"

extern "C" {
int lm_rope_section_of(const lm_rope_params *rope, int i); // ops/ref/reference.c
float lm_rope_inv_freq(const lm_rope_params *rope, int i);
}

#define THREADS 256

void lm_cuda_rope_chunk(const lm_rope_params *rope, int first, lm_rope_chunk *c) {
    int half = rope->rot_dim / 2;
    memset(c, 0, sizeof *c);
    c->half = half;
    c->pair_interleaved = rope->pair_interleaved;
    c->first = first;
    c->count = half - first < LM_ROPE_CHUNK ? half - first : LM_ROPE_CHUNK;
    for (int j = 0; j < c->count; j++) {
        c->inv_freq[j] = lm_rope_inv_freq(rope, first + j);
        c->section[j] = (uint8_t)lm_rope_section_of(rope, first + j);
    }
}

// One block per token: the chunk's cos/sin once, then every head's pairs.
__global__ static void rope_kernel(float *x, int n_heads, int head_dim, const int32_t *positions,
                                   const lm_rope_chunk c) {
    lm_cuda_let_next_then_wait();
    __shared__ float cs[LM_ROPE_CHUNK], sn[LM_ROPE_CHUNK];
    int64_t t = blockIdx.x;
    lm_rope_angles(c, positions + t * 3, cs, sn);
    __syncthreads();
    for (int e = threadIdx.x; e < n_heads * c.count; e += blockDim.x) {
        int h = e / c.count, j = e % c.count;
        lm_rope_rotate(x + (t * n_heads + h) * head_dim, c, cs, sn, j);
    }
}

extern "C" void lm_cuda_rope(lm_backend *be, lm_mem x, int n, int n_heads, int head_dim, lm_mem positions,
                             const lm_rope_params *rope) {
    int half = rope->rot_dim / 2;
    if (n <= 0 || n_heads <= 0 || half <= 0) return;
    lm_rope_chunk c;
    for (int first = 0; first < half; first += LM_ROPE_CHUNK) {
        lm_cuda_rope_chunk(rope, first, &c);
        lm_cuda_launch(be, "rope", rope_kernel, n, THREADS, 0, lm_cuda_f32(x), n_heads, head_dim,
                       lm_cuda_i32(positions), c);
    }
}
