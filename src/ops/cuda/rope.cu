// Rotary embedding, every mode of lm_rope_params (ops.h): interleaved or
// contiguous sections, rotate-half or interleaved pairs, partial rot_dim,
// the vision towers' 2-D mode.
//
// The frequencies and the position component of each pair come from the
// host, from the reference's own lm_rope_inv_freq / lm_rope_section_of:
// the device's powf may differ from the host's by an ulp, and at positions
// of thousands an ulp of inv_freq is a visible angle.  They travel in the
// kernel's parameters, CHUNK pairs per launch (one launch for rot_dim up to
// 2·CHUNK, the released models' case).  The angle is float32 as the
// reference computes it, then cosf/sinf (full range reduction: no
// fast-math).
#include <stdint.h>
#include <string.h>

#include "ops/cuda/launch.h"

extern "C" {
int lm_rope_section_of(const lm_rope_params *rope, int i); // ops/ref/reference.c
float lm_rope_inv_freq(const lm_rope_params *rope, int i);
}

#define THREADS 256
#define CHUNK 512

struct rope_chunk {
    float inv_freq[CHUNK];
    uint8_t section[CHUNK];
    int first, count; // pairs [first, first + count) of this launch
    int half;         // rot_dim / 2
    int pair_interleaved;
};

// One block per token: the chunk's cos/sin once, then every head's pairs.
__global__ static void rope_kernel(float *x, int n_heads, int head_dim, const int32_t *positions,
                                   const rope_chunk c) {
    lm_cuda_let_next_then_wait();
    __shared__ float cs[CHUNK], sn[CHUNK];
    int64_t t = blockIdx.x;
    const int32_t *pos = positions + t * 3;
    for (int j = threadIdx.x; j < c.count; j += blockDim.x) {
        float angle = (float)pos[c.section[j]] * c.inv_freq[j];
        cs[j] = cosf(angle);
        sn[j] = sinf(angle);
    }
    __syncthreads();
    for (int e = threadIdx.x; e < n_heads * c.count; e += blockDim.x) {
        int h = e / c.count, j = e % c.count, i = c.first + j;
        float *xh = x + (t * n_heads + h) * head_dim;
        int a = c.pair_interleaved ? 2 * i : i;
        int b = c.pair_interleaved ? 2 * i + 1 : i + c.half;
        float xa = xh[a], xb = xh[b];
        xh[a] = xa * cs[j] - xb * sn[j];
        xh[b] = xb * cs[j] + xa * sn[j];
    }
}

extern "C" void lm_cuda_rope(lm_backend *be, lm_mem x, int n, int n_heads, int head_dim, lm_mem positions,
                             const lm_rope_params *rope) {
    int half = rope->rot_dim / 2;
    if (n <= 0 || n_heads <= 0 || half <= 0) return;
    rope_chunk c;
    memset(&c, 0, sizeof c); // every byte is a kernel argument the queue compares (launch.h)
    c.half = half;
    c.pair_interleaved = rope->pair_interleaved;
    for (int first = 0; first < half; first += CHUNK) {
        c.first = first;
        c.count = half - first < CHUNK ? half - first : CHUNK;
        for (int j = 0; j < c.count; j++) {
            c.inv_freq[j] = lm_rope_inv_freq(rope, first + j);
            c.section[j] = (uint8_t)lm_rope_section_of(rope, first + j);
        }
        lm_cuda_launch(be, "rope", rope_kernel, n, THREADS, 0, lm_cuda_f32(x), n_heads, head_dim,
                       lm_cuda_i32(positions), c);
    }
}
