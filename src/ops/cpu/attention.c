/* Paged-KV attention on the cpu backend.
 *
 * One task per (token, kv head): the query heads of a GQA group read the
 * same keys and values, so the task walks the token's context once, a block
 * of KEY_BLOCK keys at a time, and every head of the group uses that block
 * while it is in L1.  Softmax is online (running max m and sum l per head,
 * float32): for each key block, scores s = q·k·scale, m' = max(m, s),
 * acc = acc·e^(m-m') + Σ e^(s-m')·v.  The output rows themselves hold acc,
 * so nothing is allocated.  Each (token, head) is computed by the same code
 * whatever the task split, so results do not depend on the thread count. */
#include <math.h>
#include <stdint.h>
#include <string.h>

#include "base/simd.h"
#include "ops/cpu/kernels.h"

#define KEY_BLOCK 16
#define MAX_GROUP 64 /* query heads per kv head handled in one pass */

void lm_cpu_kv_write(const lm_host_kv_layer *kv, const float *k, const float *v, int n,
                     const int32_t *slots) {
    /* a few KB per token: plain copies */
    int64_t row = (int64_t)kv->n_kv_heads * kv->head_dim;
    for (int t = 0; t < n; t++) {
        memcpy(kv->k + (int64_t)slots[t] * row, k + (int64_t)t * row, (size_t)row * sizeof(float));
        memcpy(kv->v + (int64_t)slots[t] * row, v + (int64_t)t * row, (size_t)row * sizeof(float));
    }
}

typedef struct {
    float *out;
    const float *q;
    const lm_host_kv_layer *kv;
    const lm_host_attention_batch *b;
} attention_job;

/* s[j] = (q · k_j) · scale for the keys of one block.  Four keys share each
 * load of q (loads, not FMAs, bound this loop).  Each key has one
 * accumulator walked over d in order, so a score does not depend on how the
 * keys were grouped. */
static void block_scores(float *s, const float *q, const float *const *krows, int nkeys, int D,
                         float scale) {
    int j = 0;
    for (; j + 4 <= nkeys; j += 4) {
        const float *k0 = krows[j], *k1 = krows[j + 1], *k2 = krows[j + 2], *k3 = krows[j + 3];
        lm_vf a0 = lm_vf_zero(), a1 = lm_vf_zero(), a2 = lm_vf_zero(), a3 = lm_vf_zero();
        int d = 0;
        for (; d + LM_VF_WIDTH <= D; d += LM_VF_WIDTH) {
            lm_vf qv = lm_vf_load(q + d);
            a0 = lm_vf_fma(qv, lm_vf_load(k0 + d), a0);
            a1 = lm_vf_fma(qv, lm_vf_load(k1 + d), a1);
            a2 = lm_vf_fma(qv, lm_vf_load(k2 + d), a2);
            a3 = lm_vf_fma(qv, lm_vf_load(k3 + d), a3);
        }
        if (d < D) {
            int count = D - d;
            lm_vf qv = lm_vf_load_part(q + d, count);
            a0 = lm_vf_fma(qv, lm_vf_load_part(k0 + d, count), a0);
            a1 = lm_vf_fma(qv, lm_vf_load_part(k1 + d, count), a1);
            a2 = lm_vf_fma(qv, lm_vf_load_part(k2 + d, count), a2);
            a3 = lm_vf_fma(qv, lm_vf_load_part(k3 + d, count), a3);
        }
        s[j] = lm_vf_reduce_add(a0) * scale;
        s[j + 1] = lm_vf_reduce_add(a1) * scale;
        s[j + 2] = lm_vf_reduce_add(a2) * scale;
        s[j + 3] = lm_vf_reduce_add(a3) * scale;
    }
    for (; j < nkeys; j++) {
        const float *k0 = krows[j];
        lm_vf a0 = lm_vf_zero();
        int d = 0;
        for (; d + LM_VF_WIDTH <= D; d += LM_VF_WIDTH)
            a0 = lm_vf_fma(lm_vf_load(q + d), lm_vf_load(k0 + d), a0);
        if (d < D)
            a0 = lm_vf_fma(lm_vf_load_part(q + d, D - d), lm_vf_load_part(k0 + d, D - d), a0);
        s[j] = lm_vf_reduce_add(a0) * scale;
    }
}

/* acc = acc·corr + Σ_j p[j]·v_j over one key block.  Dims go VALUE_CHUNK
 * vectors at a time, held in registers across the block's keys, so each
 * broadcast of p[j] feeds VALUE_CHUNK FMAs. */
#define VALUE_CHUNK 8
static void accumulate_values(float *acc, float corr, const float *p, const float *const *vrows,
                              int nkeys, int D) {
    lm_vf vcorr = lm_vf_set1(corr);
    int d = 0;
    for (; d + VALUE_CHUNK * LM_VF_WIDTH <= D; d += VALUE_CHUNK * LM_VF_WIDTH) {
        lm_vf a[VALUE_CHUNK];
        LM_PRAGMA_UNROLL
        for (int c = 0; c < VALUE_CHUNK; c++)
            a[c] = lm_vf_mul(lm_vf_load(acc + d + c * LM_VF_WIDTH), vcorr);
        for (int j = 0; j < nkeys; j++) {
            lm_vf pj = lm_vf_set1(p[j]);
            const float *vj = vrows[j] + d;
            LM_PRAGMA_UNROLL
            for (int c = 0; c < VALUE_CHUNK; c++)
                a[c] = lm_vf_fma(pj, lm_vf_load(vj + c * LM_VF_WIDTH), a[c]);
        }
        LM_PRAGMA_UNROLL
        for (int c = 0; c < VALUE_CHUNK; c++) lm_vf_store(acc + d + c * LM_VF_WIDTH, a[c]);
    }
    for (; d < D; d += LM_VF_WIDTH) { /* the last dims, one vector at a time */
        int count = D - d < LM_VF_WIDTH ? D - d : LM_VF_WIDTH;
        lm_vf a = lm_vf_mul(lm_vf_load_part(acc + d, count), vcorr);
        for (int j = 0; j < nkeys; j++)
            a = lm_vf_fma(lm_vf_set1(p[j]), lm_vf_load_part(vrows[j] + d, count), a);
        lm_vf_store_part(acc + d, a, count);
    }
}

/* The k and v rows of kv head kvh for context positions [j0, j0 + nkeys). */
static void key_rows(const attention_job *job, const int32_t *table, int kvh, int j0, int nkeys,
                     const float **krows, const float **vrows) {
    const lm_host_kv_layer *kv = job->kv;
    int64_t kv_row = (int64_t)kv->n_kv_heads * kv->head_dim;
    for (int j = 0; j < nkeys; j++) {
        int pos = j0 + j;
        int64_t slot = (int64_t)table[pos / kv->block_size] * kv->block_size + pos % kv->block_size;
        krows[j] = kv->k + slot * kv_row + (int64_t)kvh * kv->head_dim;
        vrows[j] = kv->v + slot * kv_row + (int64_t)kvh * kv->head_dim;
    }
}

/* Decode reads the cache once, in short rows scattered over the pool:
 * prefetching the next key block hides most of the memory latency. */
static void prefetch_row(const float *row, int D) {
#if defined(__GNUC__)
    for (int d = 0; d < D; d += 64 / (int)sizeof(float)) __builtin_prefetch(row + d);
#else
    (void)row;
    (void)D;
#endif
}

static void attention_task(void *ctx, int task, int n_tasks) {
    (void)n_tasks;
    const attention_job *job = ctx;
    const lm_host_attention_batch *b = job->b;
    int D = b->head_dim, group = b->n_heads / b->n_kv_heads;
    int t = task / b->n_kv_heads, kvh = task % b->n_kv_heads;
    const int32_t *table = b->block_tables + (int64_t)b->token_seq[t] * b->table_stride;
    int len = b->ctx_len[t];

    for (int g0 = 0; g0 < group; g0 += MAX_GROUP) {
        int ng = group - g0 < MAX_GROUP ? group - g0 : MAX_GROUP;
        int h0 = kvh * group + g0;
        float m[MAX_GROUP], l[MAX_GROUP];
        for (int g = 0; g < ng; g++) {
            m[g] = -INFINITY;
            l[g] = 0;
            memset(job->out + ((int64_t)t * b->n_heads + h0 + g) * D, 0, sizeof(float) * (size_t)D);
        }
        for (int j0 = 0; j0 < len; j0 += KEY_BLOCK) {
            int nkeys = len - j0 < KEY_BLOCK ? len - j0 : KEY_BLOCK;
            const float *krows[KEY_BLOCK], *vrows[KEY_BLOCK];
            key_rows(job, table, kvh, j0, nkeys, krows, vrows);
            if (j0 + KEY_BLOCK < len) { /* start fetching the next block from memory */
                int next = len - j0 - KEY_BLOCK < KEY_BLOCK ? len - j0 - KEY_BLOCK : KEY_BLOCK;
                const float *knext[KEY_BLOCK], *vnext[KEY_BLOCK];
                key_rows(job, table, kvh, j0 + KEY_BLOCK, next, knext, vnext);
                for (int j = 0; j < next; j++) {
                    prefetch_row(knext[j], D);
                    prefetch_row(vnext[j], D);
                }
            }
            for (int g = 0; g < ng; g++) {
                const float *qh = job->q + ((int64_t)t * b->n_heads + h0 + g) * D;
                float s[KEY_BLOCK] = {0}, p[KEY_BLOCK];
                block_scores(s, qh, krows, nkeys, D, b->scale);
                float block_max = -INFINITY;
                for (int j = 0; j < nkeys; j++) block_max = s[j] > block_max ? s[j] : block_max;
                float new_m = m[g] > block_max ? m[g] : block_max;
                float corr = m[g] == -INFINITY ? 0.0f : lm_exp_scalar(m[g] - new_m);
                float sum = 0;
                for (int j0v = 0; j0v < nkeys; j0v += LM_VF_WIDTH) {
                    int count = nkeys - j0v < LM_VF_WIDTH ? nkeys - j0v : LM_VF_WIDTH;
                    lm_vf e =
                        lm_vf_exp(lm_vf_sub(lm_vf_load_part(s + j0v, count), lm_vf_set1(new_m)));
                    lm_vf_store_part(p + j0v, e, count);
                }
                for (int j = 0; j < nkeys; j++) sum += p[j];
                l[g] = l[g] * corr + sum;
                m[g] = new_m;
                accumulate_values(job->out + ((int64_t)t * b->n_heads + h0 + g) * D, corr, p, vrows,
                                  nkeys, D);
            }
        }
        for (int g = 0; g < ng; g++) {
            float *oh = job->out + ((int64_t)t * b->n_heads + h0 + g) * D;
            float inv = l[g] > 0 ? 1.0f / l[g] : 0.0f; /* empty context: zeros */
            for (int d = 0; d < D; d++) oh[d] *= inv;
        }
    }
}

void lm_cpu_attention(lm_pool *pool, float *out, const float *q, const lm_host_kv_layer *kv,
                      const lm_host_attention_batch *batch) {
    if (batch->n_tokens <= 0) return;
    attention_job job = {out, q, kv, batch};
    lm_pool_run(pool, batch->n_tokens * batch->n_kv_heads, attention_task, &job);
}
