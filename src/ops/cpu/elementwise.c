/* Norms, rotary embedding and elementwise activations on the cpu backend.
 *
 * At decode these see one token (a few thousand floats): they run on the
 * calling thread, vectorised.  Past PARALLEL_MIN_ELEMS elements (prefill)
 * the work is split over the pool by whole rows / tokens / contiguous
 * ranges, and every element is computed by the same code whatever the split,
 * so results do not depend on the thread count. */
#include <math.h>
#include <stdint.h>

#include "base/simd.h"
#include "ops/cpu/kernels.h"
#include "ops/ref/reference.h"

#define PARALLEL_MIN_ELEMS 32768
/* Elementwise ranges are cut at multiples of this (a whole number of vectors). */
#define RANGE_ALIGN 64
/* RoPE frequencies handled per pass (bounds the stack tables). */
#define ROPE_CHUNK 128

/* Tasks for `elems` elements of work spread over `units` independent units. */
static int task_count(lm_pool *pool, int64_t elems, int64_t units) {
    int threads = lm_pool_size(pool);
    if (threads <= 1 || elems < PARALLEL_MIN_ELEMS || units < 2) return 1;
    int64_t tasks = (int64_t)threads * 4;
    return (int)(tasks < units ? tasks : units);
}

static LM_ALWAYS_INLINE lm_vf vf_sigmoid(lm_vf x) {
    lm_vf one = lm_vf_set1(1.0f);
    return lm_vf_div(one, lm_vf_add(one, lm_vf_exp(lm_vf_sub(lm_vf_zero(), x))));
}

static LM_ALWAYS_INLINE lm_vf vf_silu(lm_vf x) {
    return lm_vf_div(x, lm_vf_add(lm_vf_set1(1.0f), lm_vf_exp(lm_vf_sub(lm_vf_zero(), x))));
}

static float sum_squares(const float *x, int dim) {
    lm_vf a0 = lm_vf_zero(), a1 = lm_vf_zero();
    int i = 0;
    for (; i + 2 * LM_VF_WIDTH <= dim; i += 2 * LM_VF_WIDTH) {
        lm_vf v0 = lm_vf_load(x + i), v1 = lm_vf_load(x + i + LM_VF_WIDTH);
        a0 = lm_vf_fma(v0, v0, a0);
        a1 = lm_vf_fma(v1, v1, a1);
    }
    for (; i < dim; i += LM_VF_WIDTH) {
        int count = dim - i < LM_VF_WIDTH ? dim - i : LM_VF_WIDTH;
        lm_vf v = lm_vf_load_part(x + i, count);
        a0 = lm_vf_fma(v, v, a0);
    }
    return lm_vf_reduce_add(lm_vf_add(a0, a1));
}

/* ---- row norms ---- */

typedef struct {
    float *out;
    const float *x, *z, *weight;
    int rows, dim;
    float eps, scale;
} norm_job;

/* out = x * inv * w [* silu(z)] over one row */
static LM_ALWAYS_INLINE void scale_row(float *out, const float *x, const float *z, const float *w,
                                       int dim, float inv, bool gated) {
    lm_vf vinv = lm_vf_set1(inv);
    int i = 0;
    for (; i + LM_VF_WIDTH <= dim; i += LM_VF_WIDTH) {
        lm_vf v = lm_vf_mul(lm_vf_mul(lm_vf_load(x + i), vinv), lm_vf_load(w + i));
        if (gated) v = lm_vf_mul(v, vf_silu(lm_vf_load(z + i)));
        lm_vf_store(out + i, v);
    }
    if (i < dim) {
        int count = dim - i;
        lm_vf v = lm_vf_mul(lm_vf_mul(lm_vf_load_part(x + i, count), vinv),
                            lm_vf_load_part(w + i, count));
        if (gated) v = lm_vf_mul(v, vf_silu(lm_vf_load_part(z + i, count)));
        lm_vf_store_part(out + i, v, count);
    }
}

static LM_ALWAYS_INLINE void rmsnorm_rows(const norm_job *j, int task, int n_tasks, bool gated) {
    long begin, end;
    lm_split_range(j->rows, n_tasks, task, &begin, &end);
    for (long r = begin; r < end; r++) {
        int64_t off = (int64_t)r * j->dim;
        float inv = 1.0f / sqrtf(sum_squares(j->x + off, j->dim) / (float)j->dim + j->eps);
        scale_row(j->out + off, j->x + off, gated ? j->z + off : NULL, j->weight, j->dim, inv,
                  gated);
    }
}

static void rmsnorm_task(void *ctx, int task, int n_tasks) {
    rmsnorm_rows(ctx, task, n_tasks, false);
}
static void gated_rmsnorm_task(void *ctx, int task, int n_tasks) {
    rmsnorm_rows(ctx, task, n_tasks, true);
}

void lm_cpu_rmsnorm(lm_pool *pool, float *out, const float *x, const float *w, int rows, int dim,
                    float eps) {
    norm_job j = {.out = out, .x = x, .weight = w, .rows = rows, .dim = dim, .eps = eps};
    lm_pool_run(pool, task_count(pool, (int64_t)rows * dim, rows), rmsnorm_task, &j);
}

void lm_cpu_gated_rmsnorm(lm_pool *pool, float *out, const float *x, const float *z,
                          const float *w, int rows, int dim, float eps) {
    norm_job j = {.out = out, .x = x, .z = z, .weight = w, .rows = rows, .dim = dim, .eps = eps};
    lm_pool_run(pool, task_count(pool, (int64_t)rows * dim, rows), gated_rmsnorm_task, &j);
}

static void l2norm_task(void *ctx, int task, int n_tasks) {
    const norm_job *j = ctx;
    long begin, end;
    lm_split_range(j->rows, n_tasks, task, &begin, &end);
    for (long r = begin; r < end; r++) {
        float *xr = j->out + (int64_t)r * j->dim;
        lm_vf f = lm_vf_set1(1.0f / sqrtf(sum_squares(xr, j->dim) + j->eps) * j->scale);
        int i = 0;
        for (; i + LM_VF_WIDTH <= j->dim; i += LM_VF_WIDTH)
            lm_vf_store(xr + i, lm_vf_mul(lm_vf_load(xr + i), f));
        if (i < j->dim)
            lm_vf_store_part(xr + i, lm_vf_mul(lm_vf_load_part(xr + i, j->dim - i), f), j->dim - i);
    }
}

void lm_cpu_l2norm_scale(lm_pool *pool, float *x, int rows, int dim, float eps, float scale) {
    norm_job j = {.out = x, .rows = rows, .dim = dim, .eps = eps, .scale = scale};
    lm_pool_run(pool, task_count(pool, (int64_t)rows * dim, rows), l2norm_task, &j);
}

/* ---- LayerNorm (model-spec B4): mean, then the biased variance of x - mean ---- */

typedef struct {
    float *out;
    const float *x, *weight, *bias;
    int rows, dim;
    float eps;
} layernorm_job;

static float row_sum(const float *x, int dim) {
    lm_vf a0 = lm_vf_zero(), a1 = lm_vf_zero();
    int i = 0;
    for (; i + 2 * LM_VF_WIDTH <= dim; i += 2 * LM_VF_WIDTH) {
        a0 = lm_vf_add(a0, lm_vf_load(x + i));
        a1 = lm_vf_add(a1, lm_vf_load(x + i + LM_VF_WIDTH));
    }
    for (; i < dim; i += LM_VF_WIDTH) {
        int count = dim - i < LM_VF_WIDTH ? dim - i : LM_VF_WIDTH;
        a0 = lm_vf_add(a0, lm_vf_load_part(x + i, count));
    }
    return lm_vf_reduce_add(lm_vf_add(a0, a1));
}

static float centred_sum_squares(const float *x, int dim, float mean) {
    lm_vf m = lm_vf_set1(mean), a0 = lm_vf_zero();
    int i = 0;
    for (; i + LM_VF_WIDTH <= dim; i += LM_VF_WIDTH) {
        lm_vf v = lm_vf_sub(lm_vf_load(x + i), m);
        a0 = lm_vf_fma(v, v, a0);
    }
    float tail = 0; /* the last dims one by one (a partial load would count -mean for the rest) */
    for (; i < dim; i++) tail += (x[i] - mean) * (x[i] - mean);
    return lm_vf_reduce_add(a0) + tail;
}

static void layernorm_task(void *ctx, int task, int n_tasks) {
    const layernorm_job *j = ctx;
    long begin, end;
    lm_split_range(j->rows, n_tasks, task, &begin, &end);
    for (long r = begin; r < end; r++) {
        const float *x = j->x + (int64_t)r * j->dim;
        float *y = j->out + (int64_t)r * j->dim;
        float mean = row_sum(x, j->dim) / (float)j->dim;
        float inv = 1.0f / sqrtf(centred_sum_squares(x, j->dim, mean) / (float)j->dim + j->eps);
        lm_vf vm = lm_vf_set1(mean), vinv = lm_vf_set1(inv);
        for (int i = 0; i < j->dim; i += LM_VF_WIDTH) {
            int count = j->dim - i < LM_VF_WIDTH ? j->dim - i : LM_VF_WIDTH;
            lm_vf v = lm_vf_mul(lm_vf_sub(lm_vf_load_part(x + i, count), vm), vinv);
            v = lm_vf_fma(v, lm_vf_load_part(j->weight + i, count), lm_vf_load_part(j->bias + i, count));
            lm_vf_store_part(y + i, v, count);
        }
    }
}

void lm_cpu_layernorm(lm_pool *pool, float *out, const float *x, const float *weight,
                      const float *bias, int rows, int dim, float eps) {
    if (rows <= 0 || dim <= 0) return;
    layernorm_job j = {out, x, weight, bias, rows, dim, eps};
    lm_pool_run(pool, task_count(pool, (int64_t)rows * dim, rows), layernorm_task, &j);
}

/* ---- rotary embedding ---- */

typedef struct {
    float *x;
    int n, n_heads, head_dim;
    const int32_t *positions;
    const lm_rope_params *rope;
} rope_job;

static void rope_task(void *ctx, int task, int n_tasks) {
    const rope_job *j = ctx;
    const lm_rope_params *rp = j->rope;
    int half = rp->rot_dim / 2;
    long begin, end;
    lm_split_range(j->n, n_tasks, task, &begin, &end);
    float inv_freq[ROPE_CHUNK], c[ROPE_CHUNK], s[ROPE_CHUNK];
    int section[ROPE_CHUNK];
    for (int f0 = 0; f0 < half; f0 += ROPE_CHUNK) {
        int nf = half - f0 < ROPE_CHUNK ? half - f0 : ROPE_CHUNK;
        /* once per call (per chunk): the frequencies and their position component */
        for (int i = 0; i < nf; i++) {
            int f = f0 + i;
            inv_freq[i] = lm_rope_inv_freq(rp, f);
            section[i] = lm_rope_section_of(rp, f);
        }
        for (long t = begin; t < end; t++) {
            const int32_t *pos = j->positions + t * 3;
            for (int i = 0; i < nf; i++) { /* once per token: the angles */
                float angle = (float)pos[section[i]] * inv_freq[i];
                c[i] = cosf(angle);
                s[i] = sinf(angle);
            }
            for (int h = 0; h < j->n_heads; h++) {
                float *xh = j->x + ((int64_t)t * j->n_heads + h) * j->head_dim;
                if (rp->pair_interleaved) {
                    float *xp = xh + 2 * f0;
                    for (int i = 0; i < nf; i++) {
                        float xa = xp[2 * i], xb = xp[2 * i + 1];
                        xp[2 * i] = xa * c[i] - xb * s[i];
                        xp[2 * i + 1] = xb * c[i] + xa * s[i];
                    }
                    continue;
                }
                float *xa = xh + f0, *xb = xh + f0 + half;
                int i = 0;
                for (; i < nf; i += LM_VF_WIDTH) {
                    int count = nf - i < LM_VF_WIDTH ? nf - i : LM_VF_WIDTH;
                    lm_vf va = lm_vf_load_part(xa + i, count), vb = lm_vf_load_part(xb + i, count);
                    lm_vf vc = lm_vf_load_part(c + i, count), vs = lm_vf_load_part(s + i, count);
                    lm_vf_store_part(xa + i, lm_vf_sub(lm_vf_mul(va, vc), lm_vf_mul(vb, vs)),
                                     count);
                    lm_vf_store_part(xb + i, lm_vf_add(lm_vf_mul(vb, vc), lm_vf_mul(va, vs)),
                                     count);
                }
            }
        }
    }
}

void lm_cpu_rope(lm_pool *pool, float *x, int n, int n_heads, int head_dim,
                 const int32_t *positions, const lm_rope_params *rope) {
    if (rope->rot_dim < 2) return;
    rope_job j = {x, n, n_heads, head_dim, positions, rope};
    int64_t work = (int64_t)n * n_heads * rope->rot_dim;
    lm_pool_run(pool, task_count(pool, work, n), rope_task, &j);
}

/* ---- GELU, in place ---- */

typedef struct {
    float *x;
    int64_t n;
    lm_gelu_kind kind;
} gelu_job;

/* tanh form: 0.5·x·(1 + tanh(u)) = x·sigmoid(2u), u = sqrt(2/pi)·(x + 0.044715·x³),
 * vectorised through exp; the erf form element by element with libm's erff. */
static void gelu_task(void *ctx, int task, int n_tasks) {
    const gelu_job *j = ctx;
    long begin, end;
    int64_t chunks = (j->n + RANGE_ALIGN - 1) / RANGE_ALIGN;
    lm_split_range(chunks, n_tasks, task, &begin, &end);
    int64_t b = begin * RANGE_ALIGN, e = end * RANGE_ALIGN < j->n ? end * RANGE_ALIGN : j->n;
    if (j->kind == LM_GELU_ERF) {
        for (int64_t i = b; i < e; i++) j->x[i] = lm_ref_gelu_scalar(j->x[i], LM_GELU_ERF);
        return;
    }
    lm_vf c1 = lm_vf_set1(-2.0f * 0.7978845608028654f), c3 = lm_vf_set1(0.044715f);
    lm_vf one = lm_vf_set1(1.0f);
    for (int64_t i = b; i < e; i += LM_VF_WIDTH) {
        int count = e - i < LM_VF_WIDTH ? (int)(e - i) : LM_VF_WIDTH;
        lm_vf x = lm_vf_load_part(j->x + i, count);
        lm_vf inner = lm_vf_fma(lm_vf_mul(c3, x), lm_vf_mul(x, x), x); /* x + 0.044715 x³ */
        lm_vf y = lm_vf_div(x, lm_vf_add(one, lm_vf_exp(lm_vf_mul(c1, inner))));
        lm_vf_store_part(j->x + i, y, count);
    }
}

void lm_cpu_gelu(lm_pool *pool, float *x, int64_t n, lm_gelu_kind kind) {
    if (n <= 0) return;
    gelu_job j = {x, n, kind};
    lm_pool_run(pool, task_count(pool, n, (n + RANGE_ALIGN - 1) / RANGE_ALIGN), gelu_task, &j);
}

/* ---- elementwise ---- */

typedef enum { OP_SILU_MUL, OP_SIGMOID_MUL, OP_ADD } binary_op;

typedef struct {
    float *out;
    const float *a, *b;
    int64_t n;
    binary_op op;
} binary_job;

static LM_ALWAYS_INLINE lm_vf apply(binary_op op, lm_vf a, lm_vf b) {
    switch (op) {
    case OP_SILU_MUL:
        return lm_vf_mul(vf_silu(a), b); /* a = gate, b = up */
    case OP_SIGMOID_MUL:
        return lm_vf_mul(b, vf_sigmoid(a)); /* a = gate, b = x */
    default:
        return lm_vf_add(a, b); /* a = x, b = y */
    }
}

static LM_ALWAYS_INLINE void binary_range(const binary_job *j, binary_op op, int64_t begin,
                                          int64_t end) {
    int64_t i = begin;
    for (; i + LM_VF_WIDTH <= end; i += LM_VF_WIDTH)
        lm_vf_store(j->out + i, apply(op, lm_vf_load(j->a + i), lm_vf_load(j->b + i)));
    if (i < end) {
        int count = (int)(end - i);
        lm_vf_store_part(
            j->out + i,
            apply(op, lm_vf_load_part(j->a + i, count), lm_vf_load_part(j->b + i, count)), count);
    }
}

static void binary_task(void *ctx, int task, int n_tasks) {
    const binary_job *j = ctx;
    long begin, end;
    int64_t chunks = (j->n + RANGE_ALIGN - 1) / RANGE_ALIGN;
    lm_split_range(chunks, n_tasks, task, &begin, &end);
    int64_t b = begin * RANGE_ALIGN, e = end * RANGE_ALIGN < j->n ? end * RANGE_ALIGN : j->n;
    switch (j->op) { /* one instantiation per op, so the switch leaves the loop */
    case OP_SILU_MUL:
        binary_range(j, OP_SILU_MUL, b, e);
        break;
    case OP_SIGMOID_MUL:
        binary_range(j, OP_SIGMOID_MUL, b, e);
        break;
    case OP_ADD:
        binary_range(j, OP_ADD, b, e);
        break;
    }
}

static void run_binary(lm_pool *pool, float *out, const float *a, const float *b, int64_t n,
                       binary_op op) {
    if (n <= 0) return;
    binary_job j = {out, a, b, n, op};
    lm_pool_run(pool, task_count(pool, n, (n + RANGE_ALIGN - 1) / RANGE_ALIGN),
                binary_task, &j);
}

void lm_cpu_silu_mul(lm_pool *pool, float *out, const float *gate, const float *up, int64_t n) {
    run_binary(pool, out, gate, up, n, OP_SILU_MUL);
}

void lm_cpu_sigmoid_mul(lm_pool *pool, float *x, const float *gate, int64_t n) {
    run_binary(pool, x, gate, x, n, OP_SIGMOID_MUL);
}

void lm_cpu_add(lm_pool *pool, float *x, const float *y, int64_t n) {
    run_binary(pool, x, x, y, n, OP_ADD);
}
