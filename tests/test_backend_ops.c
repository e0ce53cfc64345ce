/* Every op of the backend table (ops/ops.h), memory ops included, on every
 * backend of the build, in the spirit of ggml's test-backend-ops.
 *
 * Each check makes random inputs on the host, computes the expected result
 * here (float64 where the op reduces, plain C where it moves data), then on
 * each backend: uploads the inputs, poisons the outputs with NaN (bytes
 * 0xFF), runs the op, downloads and compares by normalized error
 * max |got - want| / max |want|.  A NaN left in an output (an element the
 * op skipped) counts as an infinite error; test_poison_catches_broken_ops
 * makes sure of that with deliberately broken ops.  Backends of one family
 * (cpu with 1 and 2 threads) must also agree bit for bit.
 *
 * Shapes: one token and 130 tokens; the test fixture's widths (hidden 64,
 * head_dim 32, linear heads 2 key / 4 value of 16); the released models'
 * widths (hidden 1024-4096, head_dim 256 and 128, linear heads 16 key /
 * 32 value of 128) with a few rows each; odd sizes around vector widths.
 *
 * The cuda backend (builds with LOOM_HAVE_CUDA) runs every check too when
 * a GPU is present: skipped with one line without one, and per op while its
 * table still has holes (NEED).  Its float32 kernels meet TOLERANCE; its
 * matmul rounds activations to 16 bits, so matmul and moe_experts over
 * bf16/f16 weights are measured by ‖got − want‖ / ‖want‖ < BF16_TOLERANCE.
 * It is a bitwise family of its own.
 *
 * Adding a backend is one line of `backend_list`. */
#include <math.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/bf16.h"
#include "base/ggml_quant.h"
#include "base/quant.h"
#include "harness.h"
#include "ops/backend_kinds.h"
#include "ops/cpu/cpu_backend.h"
#include "base/cpu_features.h"
#include "base/kernel_set.h"
#include "ops/cuda/fused_ops.h" /* the fused kernels checked against their parts */
#include "ops/ops.h"
#include "ops/ref/reference.h"

#define TOLERANCE 1e-5
/* The cuda matmul rounds its activations to bf16 (f16 for f16 weights)
 * on the way into the tensor cores: ‖got − want‖ / ‖want‖ below this. */
#define BF16_TOLERANCE 1e-2
/* FP8_B128 weights under cuda's bf16 compute, 9+ rows: the FP8 tensor
 * cores, activations rounded to E4M3 per 128 (3 mantissa bits: about 2.5%
 * rms of each value, so of each sum) — measured the same way. */
#define FP8_ACTIVATION_TOLERANCE 6e-2

/* ------------------------------------------------------------ backends */

static const struct {
    const char *name; /* for lm_backend_create; also the bitwise family */
    int threads;
} backend_list[] = {
    {"cpu", 1},
    {"cpu", 2},
    {"ref", 1},
#ifdef LOOM_HAVE_CUDA
    /* Opened with lm_backend_cuda_create, not by name: its table may still
     * have holes, and the checks skip the ops it lacks.  Without a GPU it
     * is skipped (one line). */
    {"cuda", 0},
#endif
};
#define N_LISTED (int)(sizeof backend_list / sizeof backend_list[0])
/* After those, the cpu backend once more on each other kernel set of the
 * build that this CPU runs (base/kernel_set.h: a portable build's avx2 and
 * generic sets next to the avx512 one it picks here): every check runs on
 * every set, against the same float64 references and tolerances.  Each is
 * a bitwise family of its own (the sets' vector widths differ). */
#define N_BACKENDS (N_LISTED + LM_KERNEL_SET_COUNT)
static const char *const kernel_set_family[LM_KERNEL_SET_COUNT] = {
    [LM_KERNEL_SET_GENERIC] = "cpu-generic",
    [LM_KERNEL_SET_AVX2] = "cpu-avx2",
    [LM_KERNEL_SET_AVX512] = "cpu-avx512",
    [LM_KERNEL_SET_NATIVE] = "cpu-native",
};

/* A backend's fused kernels (ops/cuda/fused_ops.h), each checked bit for
 * bit against the parts it replaces: cuda's own, a broken set for the
 * self-check (test_poison_catches_broken_ops), none (all NULL) for the
 * host backends, whose checks then run the parts twice. */
typedef struct {
    void (*matmul_group)(lm_backend *be, lm_mem x, int n, const lm_matmul_out *outs, int count);
    bool (*matmul_swiglu)(lm_backend *be, lm_mem y, lm_mem x, int n, const lm_matrix *gate, const lm_matrix *up);
    bool (*normed_matmul_group)(lm_backend *be, const lm_normed_input *in, int n, const lm_matmul_out *outs,
                                int count);
    bool (*normed_matmul_swiglu)(lm_backend *be, lm_mem y, const lm_normed_input *in, int n, const lm_matrix *gate,
                                 const lm_matrix *up);
    bool (*matmul_add)(lm_backend *be, lm_mem y, lm_mem x, int n, const lm_matrix *w);
    bool (*matmul_gated_add)(lm_backend *be, lm_mem y, lm_mem x, lm_mem x_up, int n, const lm_matrix *w, lm_mem gate,
                             lm_mem other);
    void (*add_rmsnorm)(lm_backend *be, lm_mem out, lm_mem h, lm_mem delta, lm_mem weight, int rows, int dim,
                        float eps);
    bool (*gated_attention)(lm_backend *be, lm_mem out, lm_mem q, lm_mem gates, const lm_kv_layer *kv,
                            const lm_attention_batch *batch);
    bool (*gdn_prepare)(lm_backend *be, const lm_gdn_prepare_args *a);
    bool (*attention_prepare)(lm_backend *be, const lm_attention_prepare_args *a);
    bool (*gated_delta_rule_norm)(lm_backend *be, const lm_delta_rule_norm_args *a);
} fused_kernels;

static const fused_kernels no_fused_kernels = {0};
#ifdef LOOM_HAVE_CUDA
static const fused_kernels cuda_fused_kernels = {
    .matmul_group = lm_cuda_matmul_group,
    .matmul_swiglu = lm_cuda_matmul_swiglu,
    .normed_matmul_group = lm_cuda_normed_matmul_group,
    .normed_matmul_swiglu = lm_cuda_normed_matmul_swiglu,
    .matmul_add = lm_cuda_matmul_add,
    .matmul_gated_add = lm_cuda_matmul_gated_add,
    .add_rmsnorm = lm_cuda_add_rmsnorm,
    .gated_attention = lm_cuda_gated_attention,
    .gdn_prepare = lm_cuda_gdn_prepare,
    .attention_prepare = lm_cuda_attention_prepare,
    .gated_delta_rule_norm = lm_cuda_gated_delta_rule_norm,
};
#endif

typedef struct {
    lm_backend *be[N_BACKENDS];
    const fused_kernels *fused[N_BACKENDS]; /* NULL: none */
    char label[N_BACKENDS][32];
    const char *family[N_BACKENDS]; /* bitwise agreement is checked inside a family */
    int n;
    lm_backend *dropped[N_BACKENDS]; /* lacking an op of the test: closed at the end */
    int n_dropped;
} backends;

/* LOOM_TEST_COMPUTE=bf16: a backend that offers bf16 compute uses it
 * (false, with a message, when it refuses). */
static bool set_test_compute(lm_backend *be, lm_error *err) {
    const char *compute = getenv("LOOM_TEST_COMPUTE");
    return !compute || !be->ops->set_compute_dtype || lm_backend_set_compute(be, compute, err) == LM_OK;
}

static bool open_other_kernel_sets(backends *b) {
    const char *chosen = b->n > 0 ? lm_backend_cpu_kernels(b->be[0]) : NULL;
    lm_cpu_features cpu = lm_cpu_features_detect();
    for (int s = 0; s < LM_KERNEL_SET_COUNT && chosen; s++) {
        const char *name = lm_kernel_set_name((lm_kernel_set)s);
        if (!lm_kernel_set_is_built((lm_kernel_set)s) || !lm_kernel_set_runs_on((lm_kernel_set)s, &cpu) ||
            strcmp(name, chosen) == 0)
            continue;
        lm_error err = {0};
        lm_backend *be = NULL;
        if (lm_backend_cpu_create_with_kernels(2, name, &be, &err) != LM_OK) {
            fprintf(stderr, "cannot create the cpu backend on its %s kernels: %s\n", name, err.message);
            return false;
        }
        if (!set_test_compute(be, &err)) { /* bf16 compute: the avx512 set only */
            lm_backend_destroy(be);
            continue;
        }
        b->be[b->n] = be;
        b->family[b->n] = kernel_set_family[s];
        snprintf(b->label[b->n], sizeof b->label[b->n], "%s/%dt", kernel_set_family[s], lm_backend_threads(be));
        b->n++;
    }
    return true;
}

static bool backends_open(backends *b) {
    memset(b, 0, sizeof *b);
    for (int i = 0; i < N_LISTED; i++) {
        lm_error err = {0};
        lm_backend *be = NULL;
        lm_status st;
#ifdef LOOM_HAVE_CUDA
        if (strcmp(backend_list[i].name, "cuda") == 0) {
            st = lm_backend_cuda_create(0, &be, &err);
            if (st == LM_ERR_UNSUPPORTED) {
                static bool said;
                if (!said) printf("cuda: skipped (no GPU: %s)\n", err.message);
                said = true;
                continue;
            }
        } else
#endif
            st = lm_backend_create(backend_list[i].name, backend_list[i].threads, &be, &err);
        if (st != LM_OK) {
            fprintf(stderr, "cannot create backend %s: %s\n", backend_list[i].name, err.message);
            return false;
        }
        if (!set_test_compute(be, &err)) {
            fprintf(stderr, "backend %s: %s\n", backend_list[i].name, err.message);
            lm_backend_destroy(be);
            return false;
        }
        b->be[b->n] = be;
        b->family[b->n] = backend_list[i].name;
#ifdef LOOM_HAVE_CUDA
        if (strcmp(backend_list[i].name, "cuda") == 0) b->fused[b->n] = &cuda_fused_kernels;
#endif
        snprintf(b->label[b->n], sizeof b->label[b->n], "%s/%dt", backend_list[i].name,
                 lm_backend_threads(be));
        b->n++;
    }
    return open_other_kernel_sets(b);
}

static void backends_close(backends *b) {
    for (int i = 0; i < b->n; i++) lm_backend_destroy(b->be[i]);
    for (int i = 0; i < b->n_dropped; i++) lm_backend_destroy(b->dropped[i]);
}

/* Leaves out of this test the backends whose table lacks `op` (a backend
 * being written: the cuda one), one line each. */
static void backends_need(backends *b, const char *op, size_t offset) {
    int kept = 0;
    for (int i = 0; i < b->n; i++) {
        void (*fn)(void) = NULL;
        memcpy(&fn, (const char *)b->be[i]->ops + offset, sizeof fn);
        if (!fn) {
            printf("%s: no %s yet\n", b->family[i], op);
            b->dropped[b->n_dropped++] = b->be[i];
            continue;
        }
        b->be[kept] = b->be[i];
        b->family[kept] = b->family[i];
        memmove(b->label[kept], b->label[i], sizeof b->label[kept]);
        kept++;
    }
    b->n = kept;
}
#define NEED(bs, op) backends_need(&(bs), #op, offsetof(lm_backend_ops, op))

/* Whether backend b may round matmul activations to 16 bits for weights
 * of `dtype` (then its error is measured by rel_l2_error, BF16_TOLERANCE):
 * a backend computing in bf16 (LOOM_TEST_COMPUTE=bf16: cuda through
 * cuBLASLt for products of many rows); in f32 every backend meets the
 * float32 tolerance. */
static bool rounds_activations(const backends *bs, int b, lm_dtype dtype) {
    return strcmp(lm_backend_compute(bs->be[b]), "bf16") == 0 && dtype != LM_DTYPE_F32;
}

/* ------------------------------------------------------------ verdicts */

/* The first failure of a check, so a check can also be expected to fail. */
typedef struct {
    bool failed;
    char msg[600];
} verdict;

static void fail(verdict *v, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static void fail(verdict *v, const char *fmt, ...) {
    if (v->failed) return;
    v->failed = true;
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(v->msg, sizeof v->msg, fmt, ap);
    va_end(ap);
}

#define CHECK_VERDICT(v) CHECK_MSG(!(v).failed, "%s", (v).msg)

/* max |got - want| / max |want|; +inf when got has a non-finite value
 * where want is finite (an unwritten, NaN-poisoned element). */
static double rel_error(const float *got, const double *want, size_t n) {
    double max_want = 0, max_diff = 0;
    for (size_t i = 0; i < n; i++) {
        if (!isfinite(got[i])) return INFINITY;
        double d = fabs((double)got[i] - want[i]);
        if (d > max_diff) max_diff = d;
        if (fabs(want[i]) > max_want) max_want = fabs(want[i]);
    }
    return max_want > 0 ? max_diff / max_want : max_diff;
}

/* ‖got − want‖ / ‖want‖ (2-norms); +inf for a non-finite got. */
static double rel_l2_error(const float *got, const double *want, size_t n) {
    double diff = 0, norm = 0;
    for (size_t i = 0; i < n; i++) {
        if (!isfinite(got[i])) return INFINITY;
        double d = (double)got[i] - want[i];
        diff += d * d;
        norm += want[i] * want[i];
    }
    return norm > 0 ? sqrt(diff / norm) : sqrt(diff);
}

/* Bitwise agreement inside a family: the first backend of each family
 * keeps its output, later ones must match it. */
typedef struct {
    const char *family[N_BACKENDS];
    void *data[N_BACKENDS];
    size_t bytes[N_BACKENDS];
    int n;
} same_bits;

static void same_bits_check(same_bits *s, verdict *v, const char *family, const char *what,
                            const void *data, size_t bytes, const char *label) {
    for (int i = 0; i < s->n; i++)
        if (strcmp(s->family[i], family) == 0) {
            if (s->bytes[i] != bytes || memcmp(s->data[i], data, bytes) != 0)
                fail(v, "%s: %s differs bitwise from the first %s backend", what, label, family);
            return;
        }
    if (s->n == N_BACKENDS) return;
    s->family[s->n] = family;
    s->data[s->n] = malloc(bytes ? bytes : 1);
    if (s->data[s->n]) memcpy(s->data[s->n], data, bytes);
    s->bytes[s->n] = bytes;
    s->n++;
}

static void same_bits_free(same_bits *s) {
    for (int i = 0; i < s->n; i++) free(s->data[i]);
    s->n = 0;
}

/* ------------------------------------------------- backend memory helpers */

/* The buffers of one op run on one backend, freed together (enough for
 * the three matrices of each of 64 separately imported experts). */
#define ARENA_BUFS 256
typedef struct {
    lm_backend *be;
    lm_buffer *bufs[ARENA_BUFS];
    int n;
    bool ok;
} arena;

static arena arena_on(lm_backend *be) { return (arena){.be = be, .ok = true}; }

/* Runs the ops queued so far (a host wait): a backend that fuses a window
 * of plain ops (cuda, src/ops/cuda/fusion_plan.h) then runs the ops after
 * it as themselves, so a check's parts stay parts. */
static void run_queued(lm_backend *be) {
    lm_error err = {0};
    (void)lm_synchronize(be, &err); /* an error shows in the download after */
}

static const fused_kernels *fused_of(const backends *bs, int b) {
    return bs->fused[b] ? bs->fused[b] : &no_fused_kernels;
}

/* ---- the fused kernels' parts, in plain ops ----
 * apart: each op run on its own (a host wait after it), so a backend that
 * fuses a window of plain ops (cuda) cannot fuse them: the reference.
 * Not apart: the ops as a model writes them, intermediates discarded,
 * for the window to fuse: its lowering is checked against the same bits. */
static void after_op(lm_backend *be, bool apart) {
    if (apart) run_queued(be);
}
static void parts_matmul_group(lm_backend *be, lm_mem x, int n, const lm_matmul_out *outs, int count, bool apart) {
    for (int i = 0; i < count; i++) {
        lm_matmul(be, outs[i].y, x, n, outs[i].w);
        after_op(be, apart);
    }
}
static void parts_matmul_swiglu(lm_backend *be, lm_mem y, lm_mem up_scratch, lm_mem x, int n, const lm_matrix *gate,
                                const lm_matrix *up, bool apart) {
    lm_matmul_out outs[] = {{y, gate}, {up_scratch, up}};
    parts_matmul_group(be, x, n, outs, 2, apart);
    lm_silu_mul(be, y, y, up_scratch, (int64_t)n * gate->rows);
    lm_discard(be, up_scratch, sizeof(float) * (size_t)n * (size_t)up->rows);
    after_op(be, apart);
}
static void parts_normed_group(lm_backend *be, const lm_normed_input *in, int n, const lm_matmul_out *outs, int count,
                               bool apart) {
    lm_rmsnorm(be, in->x, in->h, in->weight, n, (int)outs[0].w->cols, in->eps);
    after_op(be, apart);
    parts_matmul_group(be, in->x, n, outs, count, apart);
}
static void parts_normed_swiglu(lm_backend *be, lm_mem y, lm_mem up_scratch, const lm_normed_input *in, int n,
                                const lm_matrix *gate, const lm_matrix *up, bool apart) {
    lm_rmsnorm(be, in->x, in->h, in->weight, n, (int)gate->cols, in->eps);
    after_op(be, apart);
    parts_matmul_swiglu(be, y, up_scratch, in->x, n, gate, up, apart);
}
static void parts_matmul_add(lm_backend *be, lm_mem y, lm_mem scratch, lm_mem x, int n, const lm_matrix *w,
                             bool apart) {
    lm_matmul(be, scratch, x, n, w);
    after_op(be, apart);
    lm_add(be, y, scratch, (int64_t)n * w->rows);
    lm_discard(be, scratch, sizeof(float) * (size_t)n * (size_t)w->rows);
    after_op(be, apart);
}
static void parts_matmul_gated_add(lm_backend *be, lm_mem y, lm_mem scratch, lm_mem x, lm_mem x_up, int n,
                                   const lm_matrix *w, lm_mem gate, lm_mem other, bool apart) {
    int64_t count = (int64_t)n * w->rows;
    if (x_up.buffer) {
        lm_silu_mul(be, x, x, x_up, (int64_t)n * w->cols);
        after_op(be, apart);
    }
    lm_matmul(be, scratch, x, n, w);
    after_op(be, apart);
    lm_sigmoid_scale_rows(be, scratch, gate, n, (int)w->rows);
    after_op(be, apart);
    lm_add(be, other, scratch, count);
    after_op(be, apart);
    lm_add(be, y, other, count);
    lm_discard(be, scratch, sizeof(float) * (size_t)count);
    lm_discard(be, other, sizeof(float) * (size_t)count);
    if (x_up.buffer) lm_discard(be, x, sizeof(float) * (size_t)n * (size_t)w->cols);
    after_op(be, apart);
}
static void parts_add_rmsnorm(lm_backend *be, lm_mem out, lm_mem h, lm_mem delta, lm_mem weight, int rows, int dim,
                              float eps, bool apart) {
    lm_add(be, h, delta, (int64_t)rows * dim);
    after_op(be, apart);
    lm_rmsnorm(be, out, h, weight, rows, dim, eps);
    after_op(be, apart);
}
static void parts_gated_attention(lm_backend *be, lm_mem out, lm_mem q, lm_mem gates, const lm_kv_layer *kv,
                                  const lm_attention_batch *batch, bool apart) {
    lm_attention(be, out, q, kv, batch);
    after_op(be, apart);
    lm_sigmoid_mul(be, out, gates, (int64_t)batch->n_tokens * batch->n_heads * batch->head_dim);
    after_op(be, apart);
}
/* conv_out: [n, conv_dim] floats for the conv's output (then dead). */
static void parts_gdn_prepare(lm_backend *be, const lm_gdn_prepare_args *a, lm_mem conv_out, bool apart) {
    int n = a->n, kd = a->Hk * a->dk, vd = a->Hv * a->dv, cd = 2 * kd + vd;
    lm_gdn_gates(be, a->beta, a->g, a->neg_exp_A, a->dt_bias, n, a->Hv);
    after_op(be, apart);
    lm_causal_conv1d_silu(be, conv_out, a->mixed, cd, a->conv_weight, a->conv_kernel, a->conv_states,
                          a->conv_slot_stride, a->seqs);
    after_op(be, apart);
    lm_copy_rows(be, a->q, kd, conv_out, cd, n, kd);
    after_op(be, apart);
    lm_copy_rows(be, a->k, kd, lm_mem_f32(conv_out, (size_t)kd), cd, n, kd);
    after_op(be, apart);
    lm_copy_rows(be, a->v, vd, lm_mem_f32(conv_out, 2 * (size_t)kd), cd, n, vd);
    after_op(be, apart);
    lm_l2norm_scale(be, a->q, n * a->Hk, a->dk, a->eps, a->q_scale);
    after_op(be, apart);
    lm_l2norm_scale(be, a->k, n * a->Hk, a->dk, a->eps, 1.0f);
    lm_discard(be, conv_out, sizeof(float) * (size_t)n * (size_t)cd);
    after_op(be, apart);
}
static void parts_attention_prepare(lm_backend *be, const lm_attention_prepare_args *a, bool apart) {
    int n = a->n, D = a->head_dim;
    lm_copy_rows(be, a->q, D, a->q_and_gate, 2 * D, n * a->n_heads, D);
    after_op(be, apart);
    lm_copy_rows(be, a->gates, D, lm_mem_f32(a->q_and_gate, (size_t)D), 2 * D, n * a->n_heads, D);
    after_op(be, apart);
    lm_rmsnorm(be, a->q, a->q, a->q_norm, n * a->n_heads, D, a->eps);
    after_op(be, apart);
    lm_rmsnorm(be, a->k, a->k, a->k_norm, n * a->n_kv_heads, D, a->eps);
    after_op(be, apart);
    lm_rope(be, a->q, n, a->n_heads, D, a->positions, a->rope);
    after_op(be, apart);
    lm_rope(be, a->k, n, a->n_kv_heads, D, a->positions, a->rope);
    after_op(be, apart);
    lm_kv_write(be, a->kv, a->k, a->v, n, a->kv_slots);
    after_op(be, apart);
}
static void parts_delta_rule_norm(lm_backend *be, const lm_delta_rule_norm_args *a, bool apart) {
    lm_gated_delta_rule(be, a->out, a->q, a->k, a->v, a->g, a->beta, a->states, a->slot_stride, a->seqs, a->Hk, a->Hv,
                        a->dk, a->dv);
    after_op(be, apart);
    lm_gated_rmsnorm(be, a->out, a->out, a->z, a->norm, a->n * a->Hv, a->dv, a->eps);
    after_op(be, apart);
}

static lm_mem arena_alloc(arena *a, size_t bytes) {
    lm_error err = {0};
    lm_buffer *b = NULL;
    if (!a->ok || a->n == ARENA_BUFS || lm_alloc(a->be, bytes, "test", &b, &err) != LM_OK) {
        a->ok = false;
        return (lm_mem){0};
    }
    a->bufs[a->n++] = b;
    return lm_mem_of(b);
}

static lm_mem arena_upload(arena *a, const void *host, size_t bytes) {
    lm_mem m = arena_alloc(a, bytes);
    if (a->ok) lm_upload(a->be, m, host, bytes);
    return m;
}
static lm_mem up_f32(arena *a, const float *host, size_t n) {
    return arena_upload(a, host, n * sizeof(float));
}
static lm_mem up_i32(arena *a, const int32_t *host, size_t n) {
    return arena_upload(a, host, n * sizeof(int32_t));
}
/* n floats of NaN (every byte 0xFF is a quiet NaN). */
static lm_mem poisoned(arena *a, size_t n) {
    lm_mem m = arena_alloc(a, n * sizeof(float));
    if (a->ok) lm_fill(a->be, m, 0xFF, n * sizeof(float));
    return m;
}

/* A KV pool of n floats as `dtype` holds them: float32, or rounded to bf16. */
static lm_mem up_pool(arena *a, const float *host, size_t n, lm_dtype dtype) {
    if (dtype != LM_DTYPE_BF16) return up_f32(a, host, n);
    uint16_t *b = malloc(sizeof(uint16_t) * (n ? n : 1));
    if (!b) {
        a->ok = false;
        return (lm_mem){0};
    }
    for (size_t i = 0; i < n; i++) b[i] = lm_f32_to_bf16(host[i]);
    lm_mem m = arena_upload(a, b, n * sizeof(uint16_t));
    free(b);
    return m;
}
/* n floats rounded to bf16 and back, as float32: a float32 pool of the
 * values a bf16 pool holds. */
static lm_mem up_rounded(arena *a, const float *host, size_t n) {
    float *r = malloc(sizeof(float) * (n ? n : 1));
    if (!r) {
        a->ok = false;
        return (lm_mem){0};
    }
    for (size_t i = 0; i < n; i++) r[i] = lm_bf16_to_f32(lm_f32_to_bf16(host[i]));
    lm_mem m = up_f32(a, r, n);
    free(r);
    return m;
}
/* Whether the pool at m (n elements of dtype) holds exactly `want` as
 * up_pool would store it. */
static bool pool_is(arena *a, lm_mem m, size_t n, lm_dtype dtype, const float *want) {
    size_t bytes = n * lm_dtype_size(dtype);
    void *host = malloc(bytes ? bytes : 1);
    lm_error err = {0};
    bool ok = host && a->ok && lm_download(a->be, host, m, bytes, &err) == LM_OK;
    for (size_t i = 0; ok && i < n; i++)
        ok = dtype == LM_DTYPE_BF16 ? ((uint16_t *)host)[i] == lm_f32_to_bf16(want[i])
                                    : memcmp((float *)host + i, want + i, sizeof(float)) == 0;
    free(host);
    return ok;
}

/* Downloads n floats into a fresh host array (NULL on failure). */
static float *down_f32(arena *a, lm_mem m, size_t n) {
    float *host = malloc(sizeof(float) * (n ? n : 1));
    lm_error err = {0};
    if (!host || !a->ok || lm_download(a->be, host, m, n * sizeof(float), &err) != LM_OK) {
        free(host);
        a->ok = false;
        return NULL;
    }
    return host;
}
static int32_t *down_i32(arena *a, lm_mem m, size_t n) {
    return (int32_t *)down_f32(a, m, n); /* same size, same bytes */
}

/* A weight matrix imported from host memory, as loaders bring weights in. */
static lm_matrix import_matrix(arena *a, const void *data, lm_dtype dtype, int64_t rows,
                               int64_t cols) {
    lm_error err = {0};
    lm_buffer *b = NULL;
    size_t bytes = lm_dtype_row_bytes(dtype, cols) * (size_t)rows;
    if (!a->ok || a->n == ARENA_BUFS ||
        lm_import_host(a->be, data, bytes, "weights", &b, &err) != LM_OK)
        a->ok = false;
    else
        a->bufs[a->n++] = b;
    return (lm_matrix){lm_mem_of(b), dtype, rows, cols};
}

static void arena_free(arena *a) {
    for (int i = 0; i < a->n; i++) lm_buffer_free(a->be, a->bufs[i]);
    a->n = 0;
}

/* ------------------------------------------------------------ host data */

typedef struct {
    uint64_t s;
} rng;

static uint64_t rng_next(rng *r) { /* xorshift64: the same data everywhere */
    r->s ^= r->s << 13;
    r->s ^= r->s >> 7;
    r->s ^= r->s << 17;
    return r->s;
}
static float rng_float(rng *r) { /* uniform in [-1, 1) */
    return (float)(rng_next(r) >> 40) / (float)(1 << 23) - 1.0f;
}
static float *random_floats(rng *r, size_t n, float scale) {
    float *p = malloc(sizeof(float) * (n ? n : 1));
    if (p)
        for (size_t i = 0; i < n; i++) p[i] = rng_float(r) * scale;
    return p;
}
static double *doubles(size_t n) { return calloc(n ? n : 1, sizeof(double)); }
static float *floats_copy(const float *x, size_t n) {
    float *y = malloc(sizeof(float) * (n ? n : 1));
    if (y) memcpy(y, x, sizeof(float) * n);
    return y;
}

static uint16_t f32_to_f16(float v) { /* |v| < 1, normal range: enough for test weights */
    float a = fabsf(v);
    uint16_t h = 0;
    if (a >= 1.0f / 16384) {
        int e;
        float m = frexpf(a, &e);
        h = (uint16_t)(((e - 1 + 15) << 10) | (uint16_t)((m * 2 - 1) * 1024));
    }
    return (uint16_t)(h | (v < 0 ? 0x8000 : 0));
}

/* Random weights of `dtype`; `values` gets them widened (exact). */
static void *random_weights(rng *r, lm_dtype dtype, size_t n, float *values) {
    size_t elem = dtype == LM_DTYPE_F32 ? 4 : 2;
    void *w = malloc(elem * (n ? n : 1));
    if (!w) return NULL;
    for (size_t i = 0; i < n; i++) {
        float v = rng_float(r) * 0.5f;
        if (dtype == LM_DTYPE_F32) {
            ((float *)w)[i] = v;
        } else if (dtype == LM_DTYPE_BF16) {
            ((uint16_t *)w)[i] = lm_f32_to_bf16(v);
            v = lm_bf16_to_f32(((uint16_t *)w)[i]);
        } else {
            ((uint16_t *)w)[i] = f32_to_f16(v);
            v = lm_f16_to_f32(((uint16_t *)w)[i]);
        }
        values[i] = v;
    }
    return w;
}

static const lm_dtype weight_dtypes[] = {LM_DTYPE_BF16, LM_DTYPE_F32, LM_DTYPE_F16};

/* Q8_0 weights [rows, cols] (cols a multiple of LM_Q8_BLOCK) quantized from
 * random floats with a few rows of wider range (so the blocks' scales
 * differ), and their dequantized values s·q (exact in float32: 8 + 8
 * significant bits) into `values`, the float64 oracle's weights. */
static void *random_q8(rng *r, int64_t rows, int64_t cols, float *values) {
    size_t row_bytes = lm_dtype_row_bytes(LM_DTYPE_Q8_0, cols);
    uint8_t *w = malloc(row_bytes * (size_t)(rows ? rows : 1));
    float *row = malloc(sizeof(float) * (size_t)(cols ? cols : 1));
    if (!w || !row) {
        free(w);
        free(row);
        return NULL;
    }
    for (int64_t o = 0; o < rows; o++) {
        for (int64_t i = 0; i < cols; i++) row[i] = rng_float(r) * (o % 5 == 0 ? 4.0f : 0.5f);
        if (o % 7 == 3 && cols > 0) memset(row, 0, sizeof(float) * (size_t)(cols < 32 ? cols : 32)); /* a zero block */
        if (!lm_q8_quantize_row(row, cols, w + (size_t)o * row_bytes)) {
            free(w);
            free(row);
            return NULL;
        }
        for (int64_t i = 0; i < cols; i++) values[o * cols + i] = lm_q8_weight_at(w + (size_t)o * row_bytes, i);
    }
    free(row);
    return w;
}

/* ggml block weights [rows, cols] (cols a multiple of the block): Q4_0,
 * Q4_1, Q5_0, Q5_1 and Q8_0 quantized from random floats by ggml's rounding
 * (lm_ggml_quantize_row; rows of wider range, a zero block), the K-quants
 * random bytes with small float16 d and dmin (every byte of their scale
 * fields is valid); `values` the weights dequantized (base/ggml_quant.h,
 * itself checked against gguf-py by test_ggml_quant), the float64 oracle's. */
static void *random_ggml(rng *r, lm_dtype dtype, int64_t rows, int64_t cols, float *values) {
    size_t row_bytes = lm_dtype_row_bytes(dtype, cols), block_bytes = lm_dtype_block_bytes(dtype);
    uint8_t *w = malloc(row_bytes * (size_t)(rows ? rows : 1));
    float *row = malloc(sizeof(float) * (size_t)(cols ? cols : 1));
    bool ok = w && row;
    for (int64_t o = 0; ok && o < rows; o++) {
        uint8_t *wr = w + (size_t)o * row_bytes;
        if (lm_ggml_can_quantize(dtype)) {
            for (int64_t i = 0; i < cols; i++) row[i] = rng_float(r) * (o % 5 == 0 ? 4.0f : 0.5f);
            if (o % 7 == 3 && cols > 0) memset(row, 0, sizeof(float) * (size_t)(cols < 32 ? cols : 32));
            ok = lm_ggml_quantize_row(dtype, row, cols, wr);
        } else {
            for (size_t i = 0; i < row_bytes; i++) wr[i] = (uint8_t)(rng_next(r) >> 56);
            for (size_t b = 0; b < row_bytes / block_bytes; b++) {
                uint8_t *block = wr + b * block_bytes;
                uint16_t d = lm_ggml_f32_to_f16(rng_float(r) * 0.004f);
                uint16_t dmin = lm_ggml_f32_to_f16(rng_float(r) * 0.004f);
                if (dtype == LM_DTYPE_GGML_Q6_K) {
                    memcpy(block + 208, &d, 2);
                } else {
                    memcpy(block, &d, 2);
                    memcpy(block + 2, &dmin, 2);
                }
            }
        }
        lm_ggml_dequantize_row(dtype, wr, values + o * cols, cols);
    }
    free(row);
    if (!ok) {
        free(w);
        return NULL;
    }
    return w;
}

/* FP8_B128 weights [rows, cols] (cols a multiple of LM_FP8_BLOCK) made by
 * lm_fp8_quantize_row from random floats, rows of three ranges so the
 * blocks' scales differ, a few values small enough for E4M3's subnormals
 * and a zero block; their values e4m3 · scale (float32) into `values`. */
static void *random_fp8(rng *r, int64_t rows, int64_t cols, float *values) {
    size_t row_bytes = lm_dtype_row_bytes(LM_DTYPE_FP8_B128, cols);
    uint8_t *w = malloc(row_bytes * (size_t)(rows ? rows : 1));
    float *row = malloc(sizeof(float) * (size_t)(cols ? cols : 1));
    bool ok = w && row;
    for (int64_t o = 0; ok && o < rows; o++) {
        for (int64_t i = 0; i < cols; i++) row[i] = rng_float(r) * (o % 5 == 0 ? 8.0f : o % 3 ? 0.5f : 0.01f);
        for (int64_t i = 7; i < cols; i += 61) row[i] *= 1e-4f; /* below 2^-6 of the block's amax / 448 */
        if (o % 7 == 3 && cols > 0) memset(row, 0, sizeof(float) * (size_t)(cols < 128 ? cols : 128));
        ok = lm_fp8_quantize_row(row, cols, w + (size_t)o * row_bytes);
        for (int64_t i = 0; ok && i < cols; i++) values[o * cols + i] = lm_fp8_weight_at(w + (size_t)o * row_bytes, cols, i);
    }
    free(row);
    if (!ok) {
        free(w);
        return NULL;
    }
    return w;
}

/* A [rows, cols] matrix of dtype, any of the four (Q8_0: random_q8),
 * FP8_B128 (random_fp8) or a ggml block format (random_ggml). */
static void *random_matrix(rng *r, lm_dtype dtype, int64_t rows, int64_t cols, float *values) {
    if (lm_ggml_is_block(dtype)) return random_ggml(r, dtype, rows, cols, values);
    if (dtype == LM_DTYPE_FP8_B128) return random_fp8(r, rows, cols, values);
    return dtype == LM_DTYPE_Q8_0 ? random_q8(r, rows, cols, values)
                                  : random_weights(r, dtype, (size_t)(rows * cols), values);
}

/* ------------------------------------------------------------ memory ops */

/* Whether a cpu backend should take bf16 compute: on a CPU with AVX-512
 * BF16, running an AVX-512 kernel set. */
static bool cpu_offers_bf16(const lm_backend *be) {
    return lm_cpu_features_detect().avx512_bf16 && lm_cpu_kernels_of(be)->avx512;
}

/* The kernel sets (base/kernel_set.h): the choice on CPUs offering more or
 * less than this one, the refusals, every set this CPU runs as a backend
 * (which the other checks then run too), and LOOM_CPU_KERNELS. */
static void test_cpu_kernel_sets(void) {
    lm_error err = {0};
    lm_kernel_set set;
    const lm_cpu_features none = {0}, avx2 = {.avx2 = true},
                          all = {.avx2 = true, .avx512 = true, .avx512_bf16 = true};
    const lm_cpu_features *cpus[] = {&none, &avx2, &all};
    /* by default: the best set of the build the CPU runs */
    for (size_t c = 0; c < sizeof cpus / sizeof cpus[0]; c++) {
        int best = -1;
        for (int s = 0; s < LM_KERNEL_SET_COUNT; s++)
            if (lm_kernel_set_is_built((lm_kernel_set)s) && lm_kernel_set_runs_on((lm_kernel_set)s, cpus[c]))
                best = s; /* the built sets rank in enum order; native comes alone */
        lm_status st = lm_kernel_set_choose(NULL, "LOOM_CPU_KERNELS", cpus[c], &set, &err);
        if (best < 0)
            CHECK_MSG(st == LM_ERR_UNSUPPORTED && strstr(err.message, "runs no kernel set"), "%s", err.message);
        else
            CHECK_MSG(st == LM_OK && (int)set == best, "cpu %zu: status %d, set %d, want %d", c, (int)st, (int)set,
                      best);
        CHECK(lm_kernel_set_choose("", "LOOM_CPU_KERNELS", cpus[c], &set, &err) == st);
    }
    /* an unknown name, and a set this build lacks: LM_ERR_INVALID naming the built ones */
    CHECK(lm_kernel_set_choose("avx513", "LOOM_CPU_KERNELS", &all, &set, &err) == LM_ERR_INVALID &&
          strstr(err.message, "LOOM_CPU_KERNELS=avx513: not a kernel set") &&
          strstr(err.message, lm_kernel_sets_built()));
    for (int s = 0; s < LM_KERNEL_SET_COUNT; s++) {
        const char *name = lm_kernel_set_name((lm_kernel_set)s);
        lm_status st = lm_kernel_set_choose(name, "LOOM_CPU_KERNELS", &none, &set, &err);
        if (!lm_kernel_set_is_built((lm_kernel_set)s))
            CHECK_MSG(st == LM_ERR_INVALID && strstr(err.message, "this build has no") &&
                          strstr(err.message, lm_kernel_sets_built()),
                      "%s: %s", name, err.message);
        else if (!lm_kernel_set_runs_on((lm_kernel_set)s, &none)) /* one the CPU cannot run */
            CHECK_MSG(st == LM_ERR_UNSUPPORTED && strstr(err.message, "this CPU cannot run"), "%s: %s", name,
                      err.message);
        else
            CHECK(st == LM_OK && set == (lm_kernel_set)s);
    }
    /* a set needs its own instructions (on top of the build's baseline) */
    CHECK(!lm_kernel_set_runs_on(LM_KERNEL_SET_AVX512, &avx2) && !lm_kernel_set_runs_on(LM_KERNEL_SET_AVX2, &none));
    for (int s = 0; s < LM_KERNEL_SET_COUNT; s++) CHECK(lm_kernel_set_runs_on((lm_kernel_set)s, &all));
    /* a cpu backend on every set this CPU runs: named, a host backend, destroyed
     * by lm_backend_destroy; bf16 compute only with an AVX-512 set */
    lm_cpu_features here = lm_cpu_features_detect();
    int runnable = 0;
    for (int s = 0; s < LM_KERNEL_SET_COUNT; s++) {
        const char *name = lm_kernel_set_name((lm_kernel_set)s);
        lm_backend *be = NULL;
        lm_status st = lm_backend_cpu_create_with_kernels(1, name, &be, &err);
        if (!lm_kernel_set_is_built((lm_kernel_set)s) || !lm_kernel_set_runs_on((lm_kernel_set)s, &here)) {
            CHECK_MSG(st != LM_OK && be == NULL && strstr(err.message, name), "%s: %s", name, err.message);
            continue;
        }
        CHECK_OK(st, &err);
        if (!be) continue;
        runnable++;
        CHECK(strcmp(lm_backend_cpu_kernels(be), name) == 0 && lm_backend_is_host(be) && lm_backend_threads(be) == 1);
        st = lm_backend_set_compute(be, "bf16", &err);
        CHECK_MSG((st == LM_OK) == (here.avx512_bf16 && lm_cpu_kernels_of(be)->avx512), "%s: %s", name, err.message);
        lm_backend_destroy(be);
    }
    CHECK(runnable >= 1);
    CHECK(lm_backend_cpu_create_with_kernels(1, "avx513", &(lm_backend *){NULL}, &err) == LM_ERR_INVALID);
    /* the checks of this test run each of them */
    backends bs;
    CHECK(backends_open(&bs));
    bool seen[LM_KERNEL_SET_COUNT] = {false};
    int cpu_sets = 0;
    for (int i = 0; i < bs.n; i++) {
        const char *name = lm_backend_cpu_kernels(bs.be[i]);
        for (int s = 0; s < LM_KERNEL_SET_COUNT && name; s++)
            if (strcmp(name, lm_kernel_set_name((lm_kernel_set)s)) == 0 && !seen[s]) {
                seen[s] = true;
                cpu_sets++;
            }
    }
    CHECK_MSG(cpu_sets == runnable || getenv("LOOM_TEST_COMPUTE"), "%d of the %d sets this CPU runs are checked",
              cpu_sets, runnable);
    /* lm_backend_create("cpu") runs LOOM_CPU_KERNELS's set, else the best */
    const char *forced = getenv(LM_KERNEL_SET_ENV);
    CHECK_OK(lm_kernel_set_for_process(&set, NULL, &err), &err);
    CHECK(!forced || !*forced || strcmp(lm_kernel_set_name(set), forced) == 0);
    lm_kernel_set best;
    CHECK_OK(lm_kernel_set_choose(NULL, "", &here, &best, &err), &err);
    CHECK((forced && *forced) || set == best);
    CHECK(bs.n > 0 && strcmp(lm_backend_cpu_kernels(bs.be[0]), lm_kernel_set_name(set)) == 0);
    backends_close(&bs);
    lm_backend *ref = NULL;
    CHECK_OK(lm_backend_create("ref", 1, &ref, &err), &err);
    CHECK(ref && lm_backend_cpu_kernels(ref) == NULL);
    lm_backend_destroy(ref);
}

static void test_backend_create_by_name(void) {
    lm_error err = {0};
    lm_backend *be = NULL;
    CHECK(lm_backend_create("tpu", 1, &be, &err) == LM_ERR_INVALID && be == NULL);
    CHECK_MSG(strstr(err.message, lm_backend_names()) != NULL, "message: %s", err.message);
#ifdef LOOM_HAVE_CUDA
    CHECK(strcmp(lm_backend_names(), "cpu, ref, cuda") == 0);
    /* a GPU-less machine or a table with holes: refused with a sentence */
    lm_status cuda = lm_backend_create("cuda", 1, &be, &err);
    if (cuda == LM_OK) lm_backend_destroy(be);
    else CHECK_MSG(cuda == LM_ERR_UNSUPPORTED && be == NULL && strstr(err.message, "cuda"), "%s", err.message);
#else
    CHECK(strcmp(lm_backend_names(), "cpu, ref") == 0);
#endif
    CHECK_OK(lm_backend_create("cpu", 2, &be, &err), &err);
    int cpu_threads = lm_backend_threads(be);
    /* compute precision: the cpu offers bf16 where the CPU has AVX-512 BF16,
     * and says why not elsewhere */
    CHECK_OK(lm_backend_set_compute(be, "f32", &err), &err);
    CHECK(strcmp(lm_backend_compute(be), "f32") == 0);
    if (cpu_offers_bf16(be)) {
        CHECK_OK(lm_backend_set_compute(be, "bf16", &err), &err);
        CHECK(strcmp(lm_backend_compute(be), "bf16") == 0);
        CHECK_OK(lm_backend_set_compute(be, "f32", &err), &err);
    } else {
        CHECK(lm_backend_set_compute(be, "bf16", &err) == LM_ERR_UNSUPPORTED && strstr(err.message, "avx512_bf16"));
    }
    CHECK(lm_backend_set_compute(be, "fp8", &err) == LM_ERR_INVALID && strstr(err.message, "f32 or bf16"));
    CHECK(strcmp(lm_backend_compute(be), "f32") == 0);
    lm_backend_destroy(be);
    CHECK_OK(lm_backend_create("ref", 4, &be, &err), &err);
    int ref_threads = lm_backend_threads(be);
    lm_backend_destroy(be);
    lm_backend_destroy(NULL);
    CHECK(cpu_threads == 2 && ref_threads == 1);
}

/* alloc (0 bytes too), buffer_size, upload at offsets, download, copy
 * between buffers, fill of a middle span, synchronize, free of NULL. */
static void check_memory_round_trips(lm_backend *be, const char *label, verdict *v) {
    lm_error err = {0};
    enum { N = 4099 };
    uint8_t src[N], back[N], want[N];
    for (int i = 0; i < N; i++) src[i] = (uint8_t)(i * 7 + 3);
    lm_buffer *a = NULL, *b = NULL, *empty = NULL;
    if (lm_alloc(be, N, "a", &a, &err) != LM_OK || lm_alloc(be, N, "b", &b, &err) != LM_OK ||
        lm_alloc(be, 0, "empty", &empty, &err) != LM_OK) {
        fail(v, "%s: alloc failed: %s", label, err.message);
        goto done;
    }
    if (lm_buffer_size(be, a) != N || lm_buffer_size(be, empty) != 0 ||
        lm_buffer_size(be, NULL) != 0)
        fail(v, "%s: buffer_size wrong", label);
    lm_upload(be, lm_mem_of(a), src, N);
    lm_upload(be, lm_mem_of(empty), src, 0);
    lm_fill(be, lm_mem_of(b), 0x5A, N);
    /* b[100, 100+3000) = a[7, 3007) */
    lm_copy(be, lm_mem_bytes(lm_mem_of(b), 100), lm_mem_bytes(lm_mem_of(a), 7), 3000);
    lm_fill(be, lm_mem_bytes(lm_mem_of(b), 4000), 0xC3, 50);
    if (lm_synchronize(be, &err) != LM_OK) fail(v, "%s: synchronize: %s", label, err.message);
    if (lm_download(be, back, lm_mem_of(a), N, &err) != LM_OK || memcmp(back, src, N) != 0)
        fail(v, "%s: upload/download round trip differs", label);
    for (int i = 0; i < N; i++)
        want[i] = i >= 100 && i < 3100 ? src[i - 100 + 7] : i >= 4000 && i < 4050 ? 0xC3 : 0x5A;
    if (lm_download(be, back, lm_mem_of(b), N, &err) != LM_OK || memcmp(back, want, N) != 0)
        fail(v, "%s: copy/fill result differs", label);
    /* a partial download at an offset */
    if (lm_download(be, back, lm_mem_bytes(lm_mem_of(a), 1000), 10, &err) != LM_OK ||
        memcmp(back, src + 1000, 10) != 0)
        fail(v, "%s: download at an offset differs", label);
    /* the f32 / i32 view helpers step by elements */
    float f[4] = {1.5f, -2, 3, 4};
    lm_upload(be, lm_mem_f32(lm_mem_of(b), 2), f, sizeof f);
    int32_t i32[2] = {0};
    float f_back[1] = {0};
    if (lm_download(be, f_back, lm_mem_bytes(lm_mem_of(b), 12), 4, &err) != LM_OK ||
        f_back[0] != -2.0f)
        fail(v, "%s: lm_mem_f32 offset wrong", label);
    lm_upload(be, lm_mem_i32(lm_mem_of(b), 1), (int32_t[]){77}, 4);
    if (lm_download(be, i32, lm_mem_of(b), 8, &err) != LM_OK || i32[1] != 77)
        fail(v, "%s: lm_mem_i32 offset wrong", label);
done:
    lm_buffer_free(be, a);
    lm_buffer_free(be, b);
    lm_buffer_free(be, empty);
    lm_buffer_free(be, NULL);
}

static void check_import_host(lm_backend *be, const char *label, verdict *v) {
    lm_error err = {0};
    float data[37];
    for (int i = 0; i < 37; i++) data[i] = (float)i * 0.25f - 3;
    lm_buffer *b = NULL, *empty = NULL;
    if (lm_import_host(be, data, sizeof data, "imported", &b, &err) != LM_OK ||
        lm_import_host(be, NULL, 0, "nothing", &empty, &err) != LM_OK) {
        fail(v, "%s: import_host failed: %s", label, err.message);
        goto done;
    }
    float back[37];
    if (lm_buffer_size(be, b) != sizeof data || lm_buffer_size(be, empty) != 0)
        fail(v, "%s: imported buffer_size wrong", label);
    if (lm_download(be, back, lm_mem_of(b), sizeof back, &err) != LM_OK ||
        memcmp(back, data, sizeof data) != 0)
        fail(v, "%s: imported bytes differ", label);
    if (!be->ops->matmul) goto done; /* a backend being written (NEED) */
    /* an op reads imported memory: y = x · wᵀ with w [1, 37] = data */
    arena a = arena_on(be);
    float x[37];
    double want = 0;
    for (int i = 0; i < 37; i++) x[i] = 1.0f / (float)(i + 1), want += (double)x[i] * data[i];
    lm_matrix w = {lm_mem_of(b), LM_DTYPE_F32, 1, 37};
    lm_mem y = poisoned(&a, 1);
    lm_matmul(be, y, up_f32(&a, x, 37), 1, &w);
    float *got = down_f32(&a, y, 1);
    if (!got || rel_error(got, &want, 1) > TOLERANCE)
        fail(v, "%s: matmul over an imported matrix wrong", label);
    free(got);
    arena_free(&a);
done:
    lm_buffer_free(be, b);
    lm_buffer_free(be, empty);
}

static void test_memory_ops(void) {
    backends bs;
    CHECK(backends_open(&bs));
    verdict v = {0};
    for (int i = 0; i < bs.n; i++) {
        check_memory_round_trips(bs.be[i], bs.label[i], &v);
        check_import_host(bs.be[i], bs.label[i], &v);
    }
    backends_close(&bs);
    CHECK_VERDICT(v);
}

/* ------------------------------------------------------------ dense */

static void check_matmul(const backends *bs, verdict *v, rng *r, lm_dtype dtype, int n,
                         int64_t rows, int64_t cols) {
    size_t nw = (size_t)(rows * cols), ny = (size_t)n * (size_t)rows;
    float *wv = malloc(sizeof(float) * (nw ? nw : 1));
    void *w = wv ? random_matrix(r, dtype, rows, cols, wv) : NULL;
    float *x = random_floats(r, (size_t)n * (size_t)cols, 2.0f);
    double *want = doubles(ny);
    if (!wv || !w || !x || !want) {
        fail(v, "out of memory");
        goto done;
    }
    for (int t = 0; t < n; t++)
        for (int64_t o = 0; o < rows; o++) {
            double acc = 0;
            for (int64_t i = 0; i < cols; i++)
                acc += (double)wv[o * cols + i] * x[(int64_t)t * cols + i];
            want[(size_t)t * rows + o] = acc;
        }
    same_bits same = {0};
    for (int b = 0; b < bs->n && !v->failed; b++) {
        if (!lm_backend_supports_weights(bs->be[b], dtype)) continue; /* refused at load */
        arena a = arena_on(bs->be[b]);
        lm_matrix m = import_matrix(&a, w, dtype, rows, cols);
        lm_mem y = poisoned(&a, ny);
        lm_matmul(a.be, y, up_f32(&a, x, (size_t)n * cols), n, &m);
        float *got = down_f32(&a, y, ny);
        if (!got) fail(v, "%s: backend memory failed", bs->label[b]);
        bool rounds = rounds_activations(bs, b, dtype);
        double e = !got ? INFINITY : rounds ? rel_l2_error(got, want, ny) : rel_error(got, want, ny);
        bool e4m3_x = rounds && dtype == LM_DTYPE_FP8_B128 && n >= 9 && strcmp(bs->family[b], "cuda") == 0;
        if (!(e < (e4m3_x ? FP8_ACTIVATION_TOLERANCE : rounds ? BF16_TOLERANCE : TOLERANCE)))
            fail(v, "matmul %s n=%d rows=%lld cols=%lld on %s: error %g%s", lm_dtype_name(dtype), n,
                 (long long)rows, (long long)cols, bs->label[b], e, rounds ? " (l2, 16-bit activations)" : "");
        if (got) same_bits_check(&same, v, bs->family[b], "matmul", got, ny * 4, bs->label[b]);
        free(got);
        arena_free(&a);
    }
    same_bits_free(&same);
done:
    free(wv);
    free(w);
    free(x);
    free(want);
}

static void test_matmul(void) {
    backends bs;
    CHECK(backends_open(&bs));
    NEED(bs, matmul);
    verdict v = {0};
    rng r = {0x1234567ull};
    /* odd shapes, every dtype, one token to 130 */
    static const int ns[] = {1, 3, 9, 130};
    static const int64_t odd[][2] = {{1, 1}, {13, 17}, {70, 1000}};
    for (size_t d = 0; d < 3; d++)
        for (size_t i = 0; i < 4; i++)
            for (size_t j = 0; j < 3; j++)
                check_matmul(&bs, &v, &r, weight_dtypes[d], ns[i], odd[j][0], odd[j][1]);
    /* the fixture's projections (hidden 64): qkv 64->160, out 64->64, mlp 64->128->64 */
    static const int64_t fixture[][2] = {{160, 64}, {64, 64}, {256, 64}, {64, 128}};
    for (size_t j = 0; j < 4; j++) {
        check_matmul(&bs, &v, &r, LM_DTYPE_BF16, 1, fixture[j][0], fixture[j][1]);
        check_matmul(&bs, &v, &r, LM_DTYPE_BF16, 130, fixture[j][0], fixture[j][1]);
    }
    /* released widths, a few output rows: hidden 1024 / 2048 / 4096 / 5120 in,
     * intermediate 3584 and 17408 in */
    static const int64_t released[][2] = {
        {96, 1024}, {64, 2048}, {48, 4096}, {32, 5120}, {64, 3584}, {16, 17408}};
    for (size_t j = 0; j < 6; j++)
        check_matmul(&bs, &v, &r, LM_DTYPE_BF16, 1 + (int)j % 4, released[j][0], released[j][1]);
    /* internal blocks of the cpu kernel: more rows than one task, cols past
     * a prefill column block, every token-tile remainder */
    check_matmul(&bs, &v, &r, LM_DTYPE_BF16, 1, 1000, 1024);
    check_matmul(&bs, &v, &r, LM_DTYPE_BF16, 1, 257, 2047);
    for (int n = 2; n <= 13; n++) check_matmul(&bs, &v, &r, LM_DTYPE_BF16, n, 53, 1100);
    check_matmul(&bs, &v, &r, LM_DTYPE_F32, 17, 300, 1537);
    check_matmul(&bs, &v, &r, LM_DTYPE_F16, 7, 100, 600);
    backends_close(&bs);
    CHECK_VERDICT(v);
}

/* Q8_0 weights (--quantize int8, FP8 checkpoints) against the float64
 * oracle on the dequantized weights, on every backend that takes them;
 * each token's row bit for bit what it is alone (batch invariance), on
 * each backend; the cpu and ref backends must take them. */
static void check_block_batch_invariance(const backends *bs, verdict *v, rng *r, lm_dtype dtype, int n,
                                         int64_t rows, int64_t cols) {
    float *wv = malloc(sizeof(float) * (size_t)(rows * cols));
    void *w = wv ? random_matrix(r, dtype, rows, cols, wv) : NULL;
    float *x = random_floats(r, (size_t)n * (size_t)cols, 2.0f);
    for (int b = 0; b < bs->n && w && x && !v->failed; b++) {
        if (!lm_backend_supports_weights(bs->be[b], dtype)) continue;
        /* cuda in bf16 compute takes cuBLASLt for 9+ rows (bf16 weights made
         * of the int8 or FP8 ones): not batch-invariant, as its bf16 products */
        if (strcmp(bs->family[b], "cuda") == 0 && rounds_activations(bs, b, dtype)) continue;
        arena a = arena_on(bs->be[b]);
        lm_matrix m = import_matrix(&a, w, dtype, rows, cols);
        lm_mem xm = up_f32(&a, x, (size_t)n * (size_t)cols), y = poisoned(&a, (size_t)n * rows);
        lm_mem alone = poisoned(&a, (size_t)rows);
        lm_matmul(a.be, y, xm, n, &m);
        float *all = down_f32(&a, y, (size_t)n * rows);
        for (int t = 0; t < n && all && !v->failed; t++) {
            lm_matmul(a.be, alone, lm_mem_f32(xm, (size_t)t * (size_t)cols), 1, &m);
            float *one = down_f32(&a, alone, (size_t)rows);
            if (!one || memcmp(one, all + (size_t)t * rows, sizeof(float) * (size_t)rows) != 0)
                fail(v, "%s matmul on %s: token %d of %d differs from the same token alone (%lldx%lld)",
                     lm_dtype_name(dtype), bs->label[b], t, n, (long long)rows, (long long)cols);
            free(one);
        }
        if (!all) fail(v, "%s: backend memory failed", bs->label[b]);
        free(all);
        arena_free(&a);
    }
    if (!w || !x) fail(v, "out of memory");
    free(wv);
    free(w);
    free(x);
}

/* The block-scaled 8-bit formats, one table row each: Q8_0 weights
 * (--quantize int8, FP8 checkpoints made int8; cpu and ref must take them)
 * and FP8_B128 (FP8 checkpoints kept FP8, --quantize fp8; cpu, ref and cuda
 * must take them), against the float64 oracle on their values, on every
 * backend that takes them: odd shapes, released widths, rows past one
 * task, every token-tile remainder; each token's row bit for bit what it
 * is alone.  FP8's widths cover its vector kernels' (cols a multiple of
 * 512, 16-byte rows) and its scalar reader's (128, 384). */
typedef struct {
    lm_dtype dtype;
    uint64_t seed;
    bool cuda_may_refuse;         /* cuda need not take it */
    int ns[5], n_ns;              /* tokens of the odd shapes */
    int64_t shapes[4][2];         /* odd shapes: rows, cols */
    int64_t released[5][2];       /* released widths, n = 1 + i % 4 tokens */
    int n_released;
    bool past_one_task;           /* 1000 rows of 1024 */
    int64_t tile_cols;            /* cols of the 53-row matrix of n = 2..13 tokens */
    int64_t invariance[2][3];     /* batch invariance: n, rows, cols */
} block_matmul_case;

static const block_matmul_case q8_case = {
    .dtype = LM_DTYPE_Q8_0, .seed = 0x5eed8ull, .cuda_may_refuse = true,
    .ns = {1, 3, 9, 130}, .n_ns = 4,
    .shapes = {{1, 32}, {13, 64}, {70, 1024}, {33, 96}},
    .released = {{96, 1024}, {64, 2048}, {48, 4096}, {64, 3584}, {16, 17408}}, .n_released = 5,
    .past_one_task = true, .tile_cols = 1088,
    .invariance = {{13, 70, 1024}, {6, 257, 96}},
};

static const block_matmul_case fp8_case = {
    .dtype = LM_DTYPE_FP8_B128, .seed = 0xf8b128ull, .cuda_may_refuse = false,
    .ns = {1, 2, 5, 9, 130}, .n_ns = 5,
    .shapes = {{1, 128}, {13, 384}, {70, 1024}, {33, 512}},
    .released = {{96, 2048}, {64, 4096}, {16, 12288}}, .n_released = 3,
    .past_one_task = false, .tile_cols = 1024,
    .invariance = {{13, 70, 1024}, {6, 257, 384}},
};

static void check_block_matmul(void *arg) {
    const block_matmul_case *c = arg;
    backends bs;
    CHECK(backends_open(&bs));
    NEED(bs, matmul);
    verdict v = {0};
    rng r = {c->seed};
    for (int i = 0; i < bs.n; i++)
        if (!c->cuda_may_refuse || strcmp(bs.family[i], "cuda") != 0)
            CHECK_MSG(lm_backend_supports_weights(bs.be[i], c->dtype), "%s takes no %s weights", bs.label[i],
                      lm_dtype_name(c->dtype));
    for (int i = 0; i < c->n_ns; i++)
        for (size_t j = 0; j < 4; j++) check_matmul(&bs, &v, &r, c->dtype, c->ns[i], c->shapes[j][0], c->shapes[j][1]);
    for (int j = 0; j < c->n_released; j++)
        check_matmul(&bs, &v, &r, c->dtype, 1 + j % 4, c->released[j][0], c->released[j][1]);
    if (c->past_one_task) check_matmul(&bs, &v, &r, c->dtype, 1, 1000, 1024);
    for (int n = 2; n <= 13; n++) check_matmul(&bs, &v, &r, c->dtype, n, 53, c->tile_cols);
    for (int i = 0; i < 2; i++)
        check_block_batch_invariance(&bs, &v, &r, c->dtype, (int)c->invariance[i][0], c->invariance[i][1],
                                     c->invariance[i][2]);
    backends_close(&bs);
    CHECK_VERDICT(v);
}

/* ggml's block formats (GGUF files: base/dtype.h, LM_DTYPE_GGML_*) against
 * the float64 oracle on their dequantized weights, on every backend that
 * takes them (every backend must take all eight): released widths (their
 * cols are whole 256-weight super-blocks), rows past one task, every
 * token-tile remainder, rows longer than the cpu kernel's column chunk
 * (17408), and each token's row bit for bit what it is alone.  cuda
 * (matmul_ggml.cu, or its scalar kernel where rows are not 16-byte
 * multiples) sums in float32 like cpu: TOLERANCE (1e-5 relative to the
 * largest output) in f32 compute; in bf16 compute its 9+ row products
 * round weights and activations to bf16 (BF16_TOLERANCE, l2). */
static const lm_dtype ggml_dtypes[] = {LM_DTYPE_GGML_Q4_0, LM_DTYPE_GGML_Q4_K, LM_DTYPE_GGML_Q6_K,
                                       LM_DTYPE_GGML_Q8_0, LM_DTYPE_GGML_Q4_1, LM_DTYPE_GGML_Q5_0,
                                       LM_DTYPE_GGML_Q5_1, LM_DTYPE_GGML_Q5_K};
#define N_GGML_DTYPES (sizeof ggml_dtypes / sizeof ggml_dtypes[0])

static void check_weights_batch_invariance(const backends *bs, verdict *v, rng *r, lm_dtype dtype,
                                           int n, int64_t rows, int64_t cols) {
    float *wv = malloc(sizeof(float) * (size_t)(rows * cols));
    void *w = wv ? random_matrix(r, dtype, rows, cols, wv) : NULL;
    float *x = random_floats(r, (size_t)n * (size_t)cols, 2.0f);
    for (int b = 0; b < bs->n && w && x && !v->failed; b++) {
        if (!lm_backend_supports_weights(bs->be[b], dtype)) continue;
        /* cuda in bf16 compute takes cuBLASLt for 9+ rows (the blocks made
         * bf16): not batch-invariant, as its bf16 products */
        if (n >= 9 && strcmp(bs->family[b], "cuda") == 0 && rounds_activations(bs, b, dtype)) continue;
        arena a = arena_on(bs->be[b]);
        lm_matrix m = import_matrix(&a, w, dtype, rows, cols);
        lm_mem xm = up_f32(&a, x, (size_t)n * (size_t)cols), y = poisoned(&a, (size_t)n * rows);
        lm_mem alone = poisoned(&a, (size_t)rows);
        lm_matmul(a.be, y, xm, n, &m);
        float *all = down_f32(&a, y, (size_t)n * rows);
        for (int t = 0; t < n && all && !v->failed; t++) {
            lm_matmul(a.be, alone, lm_mem_f32(xm, (size_t)t * (size_t)cols), 1, &m);
            float *one = down_f32(&a, alone, (size_t)rows);
            if (!one || memcmp(one, all + (size_t)t * rows, sizeof(float) * (size_t)rows) != 0)
                fail(v, "%s matmul on %s: token %d of %d differs from the same token alone (%lldx%lld)",
                     lm_dtype_name(dtype), bs->label[b], t, n, (long long)rows, (long long)cols);
            free(one);
        }
        if (!all) fail(v, "%s: backend memory failed", bs->label[b]);
        free(all);
        arena_free(&a);
    }
    if (!w || !x) fail(v, "out of memory");
    free(wv);
    free(w);
    free(x);
}

static void test_matmul_ggml(void) {
    backends bs;
    CHECK(backends_open(&bs));
    NEED(bs, matmul);
    verdict v = {0};
    rng r = {0x99a1ull};
    rng r2 = {0x99a2ull}; /* the cuda chunk widths' own draws: the others' stay as they were */
    for (int i = 0; i < bs.n; i++)
        for (size_t d = 0; d < N_GGML_DTYPES; d++)
            CHECK_MSG(lm_backend_supports_weights(bs.be[i], ggml_dtypes[d]), "%s takes no %s weights",
                      bs.label[i], lm_dtype_name(ggml_dtypes[d]));
    static const int ns[] = {1, 3, 9, 130};
    static const int64_t shapes[][2] = {{1, 256}, {13, 512}, {70, 1024}, {33, 768}};
    static const int64_t released[][2] = {{96, 1024}, {64, 2048}, {48, 4096}, {32, 5120}, {64, 3584}, {16, 17408}};
    for (size_t d = 0; d < N_GGML_DTYPES && !v.failed; d++) {
        lm_dtype dt = ggml_dtypes[d];
        for (size_t i = 0; i < 4; i++)
            for (size_t j = 0; j < 4; j++) check_matmul(&bs, &v, &r, dt, ns[i], shapes[j][0], shapes[j][1]);
        for (size_t j = 0; j < 6; j++) check_matmul(&bs, &v, &r, dt, 1 + (int)j % 4, released[j][0], released[j][1]);
        check_matmul(&bs, &v, &r, dt, 1, 1000, 1024);
        for (int n = 2; n <= 13; n++) check_matmul(&bs, &v, &r, dt, n, 53, 512);
        check_weights_batch_invariance(&bs, &v, &r, dt, 13, 70, 1024);
        check_weights_batch_invariance(&bs, &v, &r, dt, 6, 257, 512);
        check_weights_batch_invariance(&bs, &v, &r, dt, 9, 20, 17408);
        /* cuda's decode kernel (matmul_ggml.cu) takes rows of 16-byte
         * multiples in chunks of 2048 weights: the 9B widths
         * (4096, 12288), a partial last chunk (2304, 1280), rows past one
         * block's 16, and every token tile (1, 2, 4, 8 and two tiles) */
        static const int64_t chunked[][2] = {{37, 4096}, {19, 12288}, {45, 2304}, {17, 1280}};
        for (size_t j = 0; j < 4; j++)
            for (int n = 1; n <= 9; n += 4) check_matmul(&bs, &v, &r2, dt, n, chunked[j][0], chunked[j][1]);
        check_weights_batch_invariance(&bs, &v, &r2, dt, 8, 33, 4096);
        check_weights_batch_invariance(&bs, &v, &r2, dt, 5, 21, 12288);
        check_weights_batch_invariance(&bs, &v, &r2, dt, 3, 18, 2304);
    }
    backends_close(&bs);
    CHECK_VERDICT(v);
}

/* Whether a backend in the set takes no Q8_0 weights (the int8 checks are
 * then left out; test_matmul_q8 requires cpu and ref to take them). */
static bool any_backend_without_q8(const backends *bs) {
    for (int b = 0; b < bs->n; b++)
        if (!lm_backend_supports_weights(bs->be[b], LM_DTYPE_Q8_0)) return true;
    return false;
}

/* matmul_group: every output is exactly what a lone matmul writes on the
 * same backend (a fused launch must not change a bit). */
static void check_matmul_group(const backends *bs, verdict *v, rng *r, int n, int count,
                               const int64_t *rows, int64_t cols, const lm_dtype *dtypes) {
    void *w[LM_MATMUL_GROUP_MAX] = {0};
    float *wv[LM_MATMUL_GROUP_MAX] = {0};
    size_t ny[LM_MATMUL_GROUP_MAX];
    float *x = random_floats(r, (size_t)n * (size_t)cols, 2.0f);
    bool ok = x != NULL;
    for (int i = 0; i < count; i++) {
        size_t nw = (size_t)(rows[i] * cols);
        ny[i] = (size_t)n * (size_t)rows[i];
        wv[i] = malloc(sizeof(float) * (nw ? nw : 1));
        w[i] = wv[i] ? random_matrix(r, dtypes[i], rows[i], cols, wv[i]) : NULL;
        ok = ok && w[i];
    }
    if (!ok) {
        fail(v, "out of memory");
        goto done;
    }
    for (int b = 0; b < bs->n && !v->failed; b++) {
        arena a = arena_on(bs->be[b]);
        lm_matrix m[LM_MATMUL_GROUP_MAX];
        lm_matmul_out outs[LM_MATMUL_GROUP_MAX];
        lm_mem alone[LM_MATMUL_GROUP_MAX];
        lm_mem xm = up_f32(&a, x, (size_t)n * (size_t)cols);
        for (int i = 0; i < count; i++) {
            m[i] = import_matrix(&a, w[i], dtypes[i], rows[i], cols);
            outs[i] = (lm_matmul_out){poisoned(&a, ny[i]), &m[i]};
            alone[i] = poisoned(&a, ny[i]);
        }
        if (!a.ok) {
            fail(v, "%s: backend memory failed", bs->label[b]);
            arena_free(&a);
            break;
        }
        const fused_kernels *fk = fused_of(bs, b);
        if (fk->matmul_group && count > 1)
            fk->matmul_group(a.be, xm, n, outs, count);
        else
            parts_matmul_group(a.be, xm, n, outs, count, false); /* a window's group */
        for (int i = 0; i < count; i++) {
            run_queued(a.be);
            lm_matmul(a.be, alone[i], xm, n, &m[i]);
        }
        for (int i = 0; i < count; i++) {
            float *got = down_f32(&a, outs[i].y, ny[i]), *want = down_f32(&a, alone[i], ny[i]);
            if (!got || !want)
                fail(v, "%s: backend memory failed", bs->label[b]);
            else if (memcmp(got, want, ny[i] * sizeof(float)) != 0)
                fail(v, "matmul_group n=%d product %d of %d (%s, %lldx%lld) on %s differs bitwise from "
                     "matmul", n, i, count, lm_dtype_name(dtypes[i]), (long long)rows[i], (long long)cols,
                     bs->label[b]);
            free(got);
            free(want);
        }
        arena_free(&a);
    }
done:
    for (int i = 0; i < count; i++) {
        free(w[i]);
        free(wv[i]);
    }
    free(x);
}

static void test_matmul_group(void) {
    backends bs;
    CHECK(backends_open(&bs));
    NEED(bs, matmul);
    verdict v = {0};
    rng r = {0x5eed};
    const lm_dtype bf16[] = {LM_DTYPE_BF16, LM_DTYPE_BF16, LM_DTYPE_BF16, LM_DTYPE_BF16};
    const lm_dtype mixed[] = {LM_DTYPE_BF16, LM_DTYPE_F32, LM_DTYPE_BF16, LM_DTYPE_F16};
    const lm_dtype q8[] = {LM_DTYPE_Q8_0, LM_DTYPE_Q8_0, LM_DTYPE_Q8_0, LM_DTYPE_Q8_0};
    const lm_dtype q8_mixed[] = {LM_DTYPE_Q8_0, LM_DTYPE_BF16, LM_DTYPE_Q8_0, LM_DTYPE_Q8_0};
    /* a Gated DeltaNet layer's four (qkv | z | b | a), an attention layer's
     * three, an MLP's two; tails of rows that fill no block; mixed dtypes and
     * a width the vector kernel does not take (fallbacks) */
    const int64_t gdn[] = {160, 64, 4, 4}, attn[] = {128, 32, 32}, mlp[] = {256, 256},
                  odd[] = {13, 5, 1, 7};
    static const int ns[] = {1, 2, 3, 4, 5, 8, 9, 17};
    for (size_t k = 0; k < sizeof ns / sizeof *ns; k++) {
        check_matmul_group(&bs, &v, &r, ns[k], 4, gdn, 64, bf16);
        check_matmul_group(&bs, &v, &r, ns[k], 3, attn, 64, bf16);
        check_matmul_group(&bs, &v, &r, ns[k], 2, mlp, 1024, bf16);
        check_matmul_group(&bs, &v, &r, ns[k], 4, odd, 136, bf16);
        check_matmul_group(&bs, &v, &r, ns[k], 4, odd, 64, mixed);
        check_matmul_group(&bs, &v, &r, ns[k], 2, mlp, 100, bf16);
        /* int8 (Q8_0): released-like widths, row tails, a width whose rows
         * are only 2-byte aligned, int8 beside bf16 */
        if (!any_backend_without_q8(&bs)) {
            check_matmul_group(&bs, &v, &r, ns[k], 4, gdn, 256, q8);
            check_matmul_group(&bs, &v, &r, ns[k], 2, mlp, 1024, q8);
            check_matmul_group(&bs, &v, &r, ns[k], 4, odd, 512, q8);
            check_matmul_group(&bs, &v, &r, ns[k], 4, odd, 96, q8);
            check_matmul_group(&bs, &v, &r, ns[k], 4, odd, 256, q8_mixed);
        }
    }
    check_matmul_group(&bs, &v, &r, 1, 1, gdn, 64, bf16); /* a group of one */
    backends_close(&bs);
    CHECK_VERDICT(v);
}


/* matmul_swiglu: exactly the bits of matmul_group of gate and up, then
 * silu_mul, on the same backend; `taken` counts the calls a backend ran
 * fused (its op returned true). */
static void check_matmul_swiglu(const backends *bs, verdict *v, rng *r, int n, int64_t rows, int64_t cols,
                                lm_dtype dtype, int *taken) {
    size_t nw = (size_t)(rows * cols), ny = (size_t)n * (size_t)rows;
    float *x = random_floats(r, (size_t)n * (size_t)cols, 2.0f);
    float *gv = malloc(sizeof(float) * nw), *uv = malloc(sizeof(float) * nw);
    void *gw = gv ? random_matrix(r, dtype, rows, cols, gv) : NULL;
    void *uw = uv ? random_matrix(r, dtype, rows, cols, uv) : NULL;
    if (!x || !gw || !uw) {
        fail(v, "out of memory");
        goto done;
    }
    for (int b = 0; b < bs->n && !v->failed; b++) {
        arena a = arena_on(bs->be[b]);
        lm_matrix gate = import_matrix(&a, gw, dtype, rows, cols);
        lm_matrix up = import_matrix(&a, uw, dtype, rows, cols);
        lm_mem xm = up_f32(&a, x, (size_t)n * (size_t)cols);
        lm_mem fused = poisoned(&a, ny), parts = poisoned(&a, ny), scratch = poisoned(&a, ny);
        if (!a.ok) {
            fail(v, "%s: backend memory failed", bs->label[b]);
            arena_free(&a);
            break;
        }
        const fused_kernels *fk = fused_of(bs, b);
        if (fk->matmul_swiglu && fk->matmul_swiglu(a.be, fused, xm, n, &gate, &up))
            (*taken)++;
        else
            parts_matmul_swiglu(a.be, fused, scratch, xm, n, &gate, &up, false);
        parts_matmul_swiglu(a.be, parts, scratch, xm, n, &gate, &up, true);
        float *got = down_f32(&a, fused, ny), *want = down_f32(&a, parts, ny);
        if (!got || !want)
            fail(v, "%s: backend memory failed", bs->label[b]);
        else if (memcmp(got, want, ny * sizeof(float)) != 0)
            fail(v, "matmul_swiglu n=%d %lldx%lld %s on %s differs bitwise from matmul_group, then silu_mul", n,
                 (long long)rows, (long long)cols, lm_dtype_name(dtype), bs->label[b]);
        free(got);
        free(want);
        arena_free(&a);
    }
done:
    free(x);
    free(gv);
    free(uv);
    free(gw);
    free(uw);
}

static void test_matmul_swiglu(void) {
    backends bs;
    CHECK(backends_open(&bs));
    NEED(bs, matmul);
    verdict v = {0};
    rng r = {0x5a1f};
    int taken = 0;
    /* an MLP's width, row tails that fill no block, a width the vector
     * kernel does not take (the parts run) */
    static const int ns[] = {1, 2, 3, 4, 5, 8, 9, 17};
    for (size_t k = 0; k < sizeof ns / sizeof *ns; k++) {
        check_matmul_swiglu(&bs, &v, &r, ns[k], 256, 1024, LM_DTYPE_BF16, &taken);
        check_matmul_swiglu(&bs, &v, &r, ns[k], 13, 136, LM_DTYPE_BF16, &taken);
        check_matmul_swiglu(&bs, &v, &r, ns[k], 7, 64, LM_DTYPE_BF16, &taken);
        check_matmul_swiglu(&bs, &v, &r, ns[k], 24, 100, LM_DTYPE_BF16, &taken);
        if (!any_backend_without_q8(&bs)) { /* int8: an MLP's width, a row tail, 2-byte aligned rows */
            check_matmul_swiglu(&bs, &v, &r, ns[k], 256, 1024, LM_DTYPE_Q8_0, &taken);
            check_matmul_swiglu(&bs, &v, &r, ns[k], 13, 512, LM_DTYPE_Q8_0, &taken);
            check_matmul_swiglu(&bs, &v, &r, ns[k], 7, 96, LM_DTYPE_Q8_0, &taken);
        }
    }
    printf("matmul_swiglu: %d of the calls ran fused\n", taken);
    backends_close(&bs);
    CHECK_VERDICT(v);
}

/* ---- the norm and the residual add inside the products ---- */

/* Whether n floats of two backend arrays are the same bits (*memory_ok:
 * whether both could be read back). */
static bool mem_same_bits(arena *a, lm_mem got_m, lm_mem want_m, size_t n, bool *memory_ok) {
    float *got = down_f32(a, got_m, n), *want = down_f32(a, want_m, n);
    bool same = got && want && memcmp(got, want, n * sizeof(float)) == 0;
    *memory_ok = got && want;
    free(got);
    free(want);
    return same;
}

/* normed_matmul_group (swiglu: normed_matmul_swiglu of outs 0 and 1) on
 * each backend against its parts, rmsnorm then the products, on the same
 * backend: x and every output bit for bit.  `taken` counts the calls a
 * backend's own op ran. */
static void check_normed_products(const backends *bs, verdict *v, rng *r, int n, int count, const int64_t *rows,
                                  int64_t cols, lm_dtype dtype, bool swiglu, int *taken) {
    void *w[LM_MATMUL_GROUP_MAX] = {0};
    float *wv[LM_MATMUL_GROUP_MAX] = {0};
    size_t ny[LM_MATMUL_GROUP_MAX], nx = (size_t)n * (size_t)cols;
    float eps = 1e-6f;
    float *h = random_floats(r, nx, 3.0f), *nw = random_floats(r, (size_t)cols, 1.5f);
    bool ok = h && nw;
    for (int i = 0; i < count; i++) {
        size_t nwts = (size_t)(rows[i] * cols);
        ny[i] = (size_t)n * (size_t)rows[i];
        wv[i] = malloc(sizeof(float) * (nwts ? nwts : 1));
        w[i] = wv[i] ? random_matrix(r, dtype, rows[i], cols, wv[i]) : NULL;
        ok = ok && w[i];
    }
    if (!ok) {
        fail(v, "out of memory");
        goto done;
    }
    for (int b = 0; b < bs->n && !v->failed; b++) {
        arena a = arena_on(bs->be[b]);
        lm_matrix m[LM_MATMUL_GROUP_MAX];
        lm_matmul_out fused[LM_MATMUL_GROUP_MAX], parts[LM_MATMUL_GROUP_MAX];
        lm_mem hm = up_f32(&a, h, nx), wm = up_f32(&a, nw, (size_t)cols);
        lm_mem x_fused = poisoned(&a, nx), x_parts = poisoned(&a, nx), scratch = poisoned(&a, ny[0]);
        for (int i = 0; i < count; i++) {
            m[i] = import_matrix(&a, w[i], dtype, rows[i], cols);
            fused[i] = (lm_matmul_out){poisoned(&a, ny[i]), &m[i]};
            parts[i] = (lm_matmul_out){poisoned(&a, ny[i]), &m[i]};
        }
        if (!a.ok) {
            fail(v, "%s: backend memory failed", bs->label[b]);
            arena_free(&a);
            break;
        }
        lm_normed_input in_fused = {.h = hm, .weight = wm, .x = x_fused, .eps = eps};
        lm_normed_input in_parts = {.h = hm, .weight = wm, .x = x_parts, .eps = eps};
        const fused_kernels *fk = fused_of(bs, b);
        int outputs = swiglu ? 1 : count;
        if (swiglu) {
            if (fk->normed_matmul_swiglu && fk->normed_matmul_swiglu(a.be, fused[0].y, &in_fused, n, &m[0], &m[1]))
                (*taken)++;
            else
                parts_normed_swiglu(a.be, fused[0].y, scratch, &in_fused, n, &m[0], &m[1], false);
            parts_normed_swiglu(a.be, parts[0].y, scratch, &in_parts, n, &m[0], &m[1], true);
        } else {
            if (fk->normed_matmul_group && fk->normed_matmul_group(a.be, &in_fused, n, fused, count))
                (*taken)++;
            else
                parts_normed_group(a.be, &in_fused, n, fused, count, false);
            parts_normed_group(a.be, &in_parts, n, parts, count, true);
        }
        bool memory_ok = true;
        if (!mem_same_bits(&a, x_fused, x_parts, nx, &memory_ok))
            fail(v, "normed %s n=%d cols %lld on %s: x differs bitwise from rmsnorm's", swiglu ? "swiglu" : "group",
                 n, (long long)cols, bs->label[b]);
        for (int i = 0; i < outputs && !v->failed; i++)
            if (!mem_same_bits(&a, fused[i].y, parts[i].y, ny[i], &memory_ok))
                fail(v, "normed %s n=%d product %d of %d (%s, %lldx%lld) on %s differs bitwise from rmsnorm, then "
                     "the products", swiglu ? "swiglu" : "group", n, i, count, lm_dtype_name(dtype),
                     (long long)rows[i], (long long)cols, bs->label[b]);
        if (!memory_ok) fail(v, "%s: backend memory failed", bs->label[b]);
        arena_free(&a);
    }
done:
    for (int i = 0; i < count; i++) {
        free(w[i]);
        free(wv[i]);
    }
    free(h);
    free(nw);
}

static void test_normed_products(void) {
    backends bs;
    CHECK(backends_open(&bs));
    NEED(bs, matmul);
    NEED(bs, rmsnorm);
    verdict v = {0};
    rng r = {0x4e0f};
    int taken = 0;
    /* Widths whose norm a device sums with 64, 128, 256, 512 and 1024
     * threads (1024: the 9B and 27B shapes' 4096 and 5120; 2048: the
     * 35B-A3B's), row tails that fill no block, a width the vector kernel
     * does not take (136: 17 groups of 8; 100: none). */
    const int64_t gdn[] = {40, 24, 4, 4}, attn[] = {24, 8, 8}, mlp[] = {24, 24}, router[] = {16, 8, 8, 1};
    static const int64_t widths[] = {64, 100, 136, 256, 1024, 2048, 4096, 5120};
    static const int ns[] = {1, 2, 3, 4, 9}; /* 3-4: a verify step's tile of 4 (64-80 KB of x at 4096-5120) */
    for (size_t k = 0; k < sizeof ns / sizeof *ns; k++)
        for (size_t c = 0; c < sizeof widths / sizeof *widths; c++) {
            check_normed_products(&bs, &v, &r, ns[k], 4, gdn, widths[c], LM_DTYPE_BF16, false, &taken);
            check_normed_products(&bs, &v, &r, ns[k], 2, mlp, widths[c], LM_DTYPE_BF16, true, &taken);
        }
    check_normed_products(&bs, &v, &r, 1, 3, attn, 4096, LM_DTYPE_BF16, false, &taken);
    check_normed_products(&bs, &v, &r, 2, 4, router, 2048, LM_DTYPE_BF16, false, &taken);
    check_normed_products(&bs, &v, &r, 1, 1, attn, 1024, LM_DTYPE_BF16, false, &taken); /* a group of one */
    check_normed_products(&bs, &v, &r, 1, 2, mlp, 1024, LM_DTYPE_F32, true, &taken);  /* no vector kernel */
    if (!any_backend_without_q8(&bs)) {
        check_normed_products(&bs, &v, &r, 1, 4, gdn, 1024, LM_DTYPE_Q8_0, false, &taken);
        check_normed_products(&bs, &v, &r, 1, 2, mlp, 1024, LM_DTYPE_Q8_0, true, &taken);
    }
    printf("normed products: %d of the calls ran fused\n", taken);
    backends_close(&bs);
    CHECK_VERDICT(v);
}

/* matmul_add: y += x · wᵀ exactly as matmul into a scratch, then add, on
 * the same backend. */
static void check_matmul_add(const backends *bs, verdict *v, rng *r, int n, int64_t rows, int64_t cols,
                             lm_dtype dtype, int *taken) {
    size_t nw = (size_t)(rows * cols), ny = (size_t)n * (size_t)rows, nx = (size_t)n * (size_t)cols;
    float *x = random_floats(r, nx, 2.0f), *y0 = random_floats(r, ny, 4.0f);
    float *wv = malloc(sizeof(float) * nw);
    void *w = wv ? random_matrix(r, dtype, rows, cols, wv) : NULL;
    if (!x || !y0 || !w) {
        fail(v, "out of memory");
        goto done;
    }
    for (int b = 0; b < bs->n && !v->failed; b++) {
        arena a = arena_on(bs->be[b]);
        lm_matrix m = import_matrix(&a, w, dtype, rows, cols);
        lm_mem xm = up_f32(&a, x, nx), fused = up_f32(&a, y0, ny), parts = up_f32(&a, y0, ny);
        lm_mem scratch = poisoned(&a, ny);
        if (!a.ok) {
            fail(v, "%s: backend memory failed", bs->label[b]);
            arena_free(&a);
            break;
        }
        const fused_kernels *fk = fused_of(bs, b);
        if (fk->matmul_add && fk->matmul_add(a.be, fused, xm, n, &m))
            (*taken)++;
        else
            parts_matmul_add(a.be, fused, scratch, xm, n, &m, false);
        parts_matmul_add(a.be, parts, scratch, xm, n, &m, true);
        bool memory_ok = true;
        if (!mem_same_bits(&a, fused, parts, ny, &memory_ok))
            fail(v, "matmul_add n=%d %lldx%lld %s on %s differs bitwise from matmul, then add", n, (long long)rows,
                 (long long)cols, lm_dtype_name(dtype), bs->label[b]);
        if (!memory_ok) fail(v, "%s: backend memory failed", bs->label[b]);
        arena_free(&a);
    }
done:
    free(x);
    free(y0);
    free(wv);
    free(w);
}

/* matmul_gated_add: y += other + sigmoid(gate) ⊙ (x' · wᵀ) exactly as
 * (silu_mul into x, with swiglu: x' = silu(x) ⊙ x_up), matmul,
 * sigmoid_scale_rows, add into other and add into y, on the same backend
 * (y compared; other and x are left undefined by the op). */
static void check_matmul_gated_add(const backends *bs, verdict *v, rng *r, int n, int64_t rows, int64_t cols,
                                   lm_dtype dtype, bool swiglu, int *taken) {
    size_t nw = (size_t)(rows * cols), ny = (size_t)n * (size_t)rows, nx = (size_t)n * (size_t)cols;
    float *x = random_floats(r, nx, 2.0f), *y0 = random_floats(r, ny, 4.0f), *o0 = random_floats(r, ny, 3.0f);
    float *g = random_floats(r, (size_t)n, 4.0f), *wv = malloc(sizeof(float) * nw), *up = random_floats(r, nx, 2.0f);
    void *w = wv ? random_matrix(r, dtype, rows, cols, wv) : NULL;
    if (!x || !y0 || !o0 || !g || !w || !up) {
        fail(v, "out of memory");
        goto done;
    }
    for (int b = 0; b < bs->n && !v->failed; b++) {
        arena a = arena_on(bs->be[b]);
        lm_matrix m = import_matrix(&a, w, dtype, rows, cols);
        lm_mem x_fused = up_f32(&a, x, nx), x_parts = up_f32(&a, x, nx), gm = up_f32(&a, g, (size_t)n);
        lm_mem upm = swiglu ? up_f32(&a, up, nx) : (lm_mem){0};
        lm_mem fused = up_f32(&a, y0, ny), parts = up_f32(&a, y0, ny);
        lm_mem other_fused = up_f32(&a, o0, ny), other_parts = up_f32(&a, o0, ny), scratch = poisoned(&a, ny);
        if (!a.ok) {
            fail(v, "%s: backend memory failed", bs->label[b]);
            arena_free(&a);
            break;
        }
        const fused_kernels *fk = fused_of(bs, b);
        if (fk->matmul_gated_add && fk->matmul_gated_add(a.be, fused, x_fused, upm, n, &m, gm, other_fused))
            (*taken)++;
        else
            parts_matmul_gated_add(a.be, fused, scratch, x_fused, upm, n, &m, gm, other_fused, false);
        parts_matmul_gated_add(a.be, parts, scratch, x_parts, upm, n, &m, gm, other_parts, true);
        bool memory_ok = true;
        if (!mem_same_bits(&a, fused, parts, ny, &memory_ok))
            fail(v, "matmul_gated_add%s n=%d %lldx%lld %s on %s differs bitwise from %smatmul, sigmoid_scale_rows, "
                 "add, add", swiglu ? " (swiglu x)" : "", n, (long long)rows, (long long)cols, lm_dtype_name(dtype),
                 bs->label[b], swiglu ? "silu_mul, " : "");
        if (!memory_ok) fail(v, "%s: backend memory failed", bs->label[b]);
        arena_free(&a);
    }
done:
    free(x);
    free(y0);
    free(o0);
    free(g);
    free(wv);
    free(w);
    free(up);
}

static void test_matmul_gated_add(void) {
    backends bs;
    CHECK(backends_open(&bs));
    NEED(bs, matmul);
    NEED(bs, add);
    NEED(bs, sigmoid_scale_rows);
    NEED(bs, silu_mul);
    verdict v = {0};
    rng r = {0x6a7e};
    int taken = 0;
    static const int ns[] = {1, 2, 3, 5, 8, 9, 17};
    for (size_t k = 0; k < sizeof ns / sizeof *ns; k++)
        for (int swiglu = 0; swiglu < 2; swiglu++) {
            /* a shared expert's down; a row tail; no vector kernel */
            check_matmul_gated_add(&bs, &v, &r, ns[k], 256, 512, LM_DTYPE_BF16, swiglu, &taken);
            check_matmul_gated_add(&bs, &v, &r, ns[k], 13, 136, LM_DTYPE_BF16, swiglu, &taken);
            check_matmul_gated_add(&bs, &v, &r, ns[k], 7, 100, LM_DTYPE_BF16, swiglu, &taken);
            if (!any_backend_without_q8(&bs))
                check_matmul_gated_add(&bs, &v, &r, ns[k], 13, 512, LM_DTYPE_Q8_0, swiglu, &taken);
        }
    for (int swiglu = 0; swiglu < 2; swiglu++) /* the 35B-A3B shape's */
        check_matmul_gated_add(&bs, &v, &r, 1, 2048, 512, LM_DTYPE_BF16, swiglu, &taken);
    printf("matmul_gated_add: %d of the calls ran fused\n", taken);
    backends_close(&bs);
    CHECK_VERDICT(v);
}

static void test_matmul_add(void) {
    backends bs;
    CHECK(backends_open(&bs));
    NEED(bs, matmul);
    NEED(bs, add);
    verdict v = {0};
    rng r = {0xadd};
    int taken = 0;
    static const int ns[] = {1, 2, 3, 4, 5, 8, 9, 17};
    for (size_t k = 0; k < sizeof ns / sizeof *ns; k++) {
        check_matmul_add(&bs, &v, &r, ns[k], 256, 1024, LM_DTYPE_BF16, &taken);
        check_matmul_add(&bs, &v, &r, ns[k], 13, 136, LM_DTYPE_BF16, &taken); /* a row tail */
        check_matmul_add(&bs, &v, &r, ns[k], 7, 100, LM_DTYPE_BF16, &taken);  /* no vector kernel */
        if (!any_backend_without_q8(&bs)) check_matmul_add(&bs, &v, &r, ns[k], 13, 512, LM_DTYPE_Q8_0, &taken);
    }
    check_matmul_add(&bs, &v, &r, 1, 64, 4096, LM_DTYPE_F32, &taken);
    printf("matmul_add: %d of the calls ran fused\n", taken);
    backends_close(&bs);
    CHECK_VERDICT(v);
}

/* bf16 compute on the cpu (AVX-512 BF16): every product of bf16 weights
 * rounds each activation row to bf16 and sums in float32.  Checked against
 * a float64 sum over the rounded activations (the products of two bf16 are
 * exact in float32, so only the float32 sums differ: 1e-5 relative), and for
 * batch invariance, bit for bit: each token of a batch of n gets the bits it
 * gets alone, at another place in another batch, and on 1 or 2 threads. */
typedef struct {
    lm_backend *be;
    arena a;
    lm_matrix m;
} bf16_side;

static float *bf16_product(bf16_side *s, const float *x, int n, int64_t rows, int64_t cols) {
    lm_mem y = poisoned(&s->a, (size_t)n * (size_t)rows);
    lm_matmul(s->be, y, up_f32(&s->a, x, (size_t)n * (size_t)cols), n, &s->m);
    return down_f32(&s->a, y, (size_t)n * (size_t)rows);
}

static void check_bf16_compute(lm_backend *const be[2], verdict *v, rng *r, int n, int64_t rows,
                               int64_t cols) {
    size_t nw = (size_t)(rows * cols), nx = (size_t)n * (size_t)cols;
    float *wv = malloc(sizeof(float) * (nw ? nw : 1));
    void *w = wv ? random_weights(r, LM_DTYPE_BF16, nw, wv) : NULL;
    float *x = random_floats(r, nx, 2.0f);
    float *other = random_floats(r, (size_t)cols * 8, 3.0f); /* batchmates */
    float *batch = malloc(sizeof(float) * (size_t)cols * 8);
    double *want = doubles((size_t)n * (size_t)rows);
    float *all[2] = {NULL, NULL};
    bf16_side side[2] = {{.be = be[0], .a = arena_on(be[0])}, {.be = be[1], .a = arena_on(be[1])}};
    if (!wv || !w || !x || !other || !batch || !want) {
        fail(v, "out of memory");
        goto done;
    }
    for (int t = 0; t < n; t++)
        for (int64_t o = 0; o < rows; o++) {
            double acc = 0;
            for (int64_t i = 0; i < cols; i++)
                acc += (double)wv[o * cols + i] *
                       lm_bf16_to_f32(lm_f32_to_bf16(x[(size_t)t * (size_t)cols + (size_t)i]));
            want[(size_t)t * rows + o] = acc;
        }
    for (int b = 0; b < 2; b++) {
        side[b].m = import_matrix(&side[b].a, w, LM_DTYPE_BF16, rows, cols);
        all[b] = bf16_product(&side[b], x, n, rows, cols);
    }
    if (!all[0] || !all[1]) {
        fail(v, "bf16 compute n=%d rows=%lld cols=%lld: backend memory failed", n, (long long)rows,
             (long long)cols);
        goto done;
    }
    double e = rel_error(all[0], want, (size_t)n * (size_t)rows);
    if (!(e < 1e-5))
        fail(v, "bf16 compute n=%d rows=%lld cols=%lld: error %g against the rounded activations", n,
             (long long)rows, (long long)cols, e);
    if (memcmp(all[0], all[1], sizeof(float) * (size_t)n * (size_t)rows) != 0)
        fail(v, "bf16 compute n=%d rows=%lld cols=%lld: 1 and 2 threads differ", n, (long long)rows,
             (long long)cols);
    /* a few tokens alone, and inside a batch of 1 + k batchmates at place k/2 */
    for (int t = 0; t < n && !v->failed; t += n > 8 ? n / 4 : 1) {
        int k = (t * 3) % 8, place = k / 2;
        float *alone = bf16_product(&side[t % 2], x + (size_t)t * (size_t)cols, 1, rows, cols);
        for (int i = 0, o = 0; i <= k; i++)
            memcpy(batch + (size_t)i * (size_t)cols,
                   i == place ? x + (size_t)t * (size_t)cols : other + (size_t)(o++) * (size_t)cols,
                   sizeof(float) * (size_t)cols);
        float *mixed = bf16_product(&side[(t + 1) % 2], batch, k + 1, rows, cols);
        const float *mine = all[0] + (size_t)t * (size_t)rows;
        if (!alone || !mixed)
            fail(v, "bf16 compute: backend memory failed");
        else if (memcmp(alone, mine, sizeof(float) * (size_t)rows) != 0)
            fail(v, "bf16 compute n=%d rows=%lld cols=%lld: token %d alone differs from its batch", n,
                 (long long)rows, (long long)cols, t);
        else if (memcmp(mixed + (size_t)place * (size_t)rows, mine, sizeof(float) * (size_t)rows) != 0)
            fail(v, "bf16 compute n=%d rows=%lld cols=%lld: token %d at place %d of %d differs", n,
                 (long long)rows, (long long)cols, t, place, k + 1);
        free(alone);
        free(mixed);
    }
done:
    for (int b = 0; b < 2; b++) {
        free(all[b]);
        arena_free(&side[b].a);
    }
    free(wv);
    free(w);
    free(x);
    free(other);
    free(batch);
    free(want);
}

static void test_matmul_bf16_compute(void) {
    lm_error err = {0};
    lm_backend *be[2] = {NULL, NULL};
    CHECK_OK(lm_backend_create("cpu", 1, &be[0], &err), &err);
    CHECK_OK(lm_backend_create("cpu", 2, &be[1], &err), &err);
    if (!be[0] || !be[1] || !cpu_offers_bf16(be[0])) {
        printf("  skipped: this CPU has no avx512_bf16, or the cpu backend runs other than its avx512 kernels "
               "(it refuses bf16 compute)\n");
        for (int b = 0; b < 2; b++) lm_backend_destroy(be[b]);
        return;
    }
    for (int b = 0; b < 2; b++) CHECK_OK(lm_backend_set_compute(be[b], "bf16", &err), &err);
    verdict v = {0};
    rng r = {0xbf16ull};
    /* every token-tile width and remainder; rows past a tile and a task;
     * cols with a masked last step (1, 17, 1000), whole steps (64, 1024) */
    static const int ns[] = {1, 2, 3, 4, 5, 6, 7, 9, 13, 130};
    static const int64_t shapes[][2] = {{1, 1}, {13, 17}, {70, 1000}, {257, 64}, {33, 1024}};
    for (size_t i = 0; i < sizeof ns / sizeof ns[0]; i++)
        for (size_t j = 0; j < sizeof shapes / sizeof shapes[0]; j++)
            check_bf16_compute(be, &v, &r, ns[i], shapes[j][0], shapes[j][1]);
    /* released widths: hidden 1024 in (many rows: several panels and tasks), intermediate 3584 */
    check_bf16_compute(be, &v, &r, 11, 1100, 1024);
    check_bf16_compute(be, &v, &r, 5, 40, 3584);
    for (int b = 0; b < 2; b++) lm_backend_destroy(be[b]);
    CHECK_VERDICT(v);
}

/* cols = 0 is an empty sum: every output is 0. */
static void test_matmul_zero_cols(void) {
    backends bs;
    CHECK(backends_open(&bs));
    NEED(bs, matmul);
    verdict v = {0};
    for (int b = 0; b < bs.n; b++) {
        arena a = arena_on(bs.be[b]);
        lm_matrix m = {arena_alloc(&a, 0), LM_DTYPE_BF16, 5, 0};
        lm_mem y = poisoned(&a, 10);
        lm_matmul(a.be, y, arena_alloc(&a, 0), 2, &m);
        float *got = down_f32(&a, y, 10);
        bool zero = got != NULL;
        for (int i = 0; got && i < 10; i++) zero = zero && got[i] == 0;
        if (!zero) fail(&v, "matmul with 0 cols on %s: not all zero", bs.label[b]);
        free(got);
        arena_free(&a);
    }
    backends_close(&bs);
    CHECK_VERDICT(v);
}

static void test_embed(void) {
    backends bs;
    CHECK(backends_open(&bs));
    NEED(bs, embed);
    verdict v = {0};
    rng r = {99};
    static const int64_t dims[] = {1, 17, 64, 1000, 4096};
    int32_t ids[6] = {0, 36, 5, 5, 20, 0}; /* repeats and both ends */
    /* the three float dtypes, then Q8_0 and FP8_B128 (a tied lm_head
     * quantized at load is also the embedding table; an FP8 checkpoint's
     * table may be FP8): the rows s·q exactly */
    for (size_t d = 0; d < 5; d++)
        for (size_t k = 0; k < 5; k++) {
            lm_dtype dtype = d < 3 ? weight_dtypes[d] : d == 3 ? LM_DTYPE_Q8_0 : LM_DTYPE_FP8_B128;
            int64_t vocab = 37, dim = d < 3 ? dims[k] : d == 3 ? 32 * (dims[k] / 16 + 1) : 128 * (dims[k] / 64 + 1);
            size_t n_out = 6 * (size_t)dim;
            float *values = malloc(sizeof(float) * (size_t)(vocab * dim));
            void *table = !values ? NULL
                          : d < 3 ? random_weights(&r, dtype, (size_t)(vocab * dim), values)
                                  : random_matrix(&r, dtype, vocab, dim, values);
            float *want = malloc(sizeof(float) * n_out);
            CHECK(values && table && want);
            for (int t = 0; t < 6; t++)
                memcpy(want + t * dim, values + ids[t] * dim, sizeof(float) * (size_t)dim);
            for (int b = 0; b < bs.n; b++) {
                if (!lm_backend_supports_weights(bs.be[b], dtype)) continue;
                arena a = arena_on(bs.be[b]);
                lm_matrix m = import_matrix(&a, table, dtype, vocab, dim);
                lm_mem out = poisoned(&a, n_out);
                lm_embed(a.be, out, up_i32(&a, ids, 6), 6, &m);
                float *got = down_f32(&a, out, n_out);
                if (!got || memcmp(got, want, sizeof(float) * n_out) != 0)
                    fail(&v, "embed %s dim=%lld on %s differs", lm_dtype_name(dtype),
                         (long long)dim, bs.label[b]);
                free(got);
                arena_free(&a);
            }
            free(values);
            free(table);
            free(want);
        }
    backends_close(&bs);
    CHECK_VERDICT(v);
}

/* Rows of a ggml block table (a GGUF token_embd, also a tied lm_head):
 * exactly the dequantized weights (base/ggml_quant.h), on every backend
 * that takes the format. */
static void test_embed_ggml(void) {
    backends bs;
    CHECK(backends_open(&bs));
    NEED(bs, embed);
    verdict v = {0};
    rng r = {199};
    static const int64_t dims[] = {256, 1024, 4096};
    int32_t ids[6] = {0, 36, 5, 5, 20, 0}; /* repeats and both ends */
    for (size_t d = 0; d < N_GGML_DTYPES; d++)
        for (size_t k = 0; k < 3; k++) {
            lm_dtype dtype = ggml_dtypes[d];
            int64_t vocab = 37, dim = dims[k];
            size_t n_out = 6 * (size_t)dim;
            float *values = malloc(sizeof(float) * (size_t)(vocab * dim));
            void *table = values ? random_ggml(&r, dtype, vocab, dim, values) : NULL;
            float *want = malloc(sizeof(float) * n_out);
            CHECK(values && table && want);
            for (int t = 0; t < 6; t++)
                memcpy(want + t * dim, values + ids[t] * dim, sizeof(float) * (size_t)dim);
            for (int b = 0; b < bs.n; b++) {
                if (!lm_backend_supports_weights(bs.be[b], dtype)) continue;
                arena a = arena_on(bs.be[b]);
                lm_matrix m = import_matrix(&a, table, dtype, vocab, dim);
                lm_mem out = poisoned(&a, n_out);
                lm_embed(a.be, out, up_i32(&a, ids, 6), 6, &m);
                float *got = down_f32(&a, out, n_out);
                if (!got || memcmp(got, want, sizeof(float) * n_out) != 0)
                    fail(&v, "embed %s dim=%lld on %s differs", lm_dtype_name(dtype), (long long)dim,
                         bs.label[b]);
                free(got);
                arena_free(&a);
            }
            free(values);
            free(table);
            free(want);
        }
    backends_close(&bs);
    CHECK_VERDICT(v);
}

/* ------------------------------------------------------------ norms */

/* (rows, dim): odd, fixture (hidden 64, heads of 16 and 32), released
 * (hidden 1024-4096, heads of 128 and 256), 1 and 130 tokens. */
static const int norm_shapes[][2] = {{1, 1},    {3, 17},   {2, 1000}, {130, 64}, {520, 16},
                                     {130, 32}, {1, 1024}, {4, 2048}, {1, 4096}, {64, 128},
                                     {16, 256}, {64, 1024}};
#define N_NORM_SHAPES (sizeof norm_shapes / sizeof norm_shapes[0])

typedef enum { NORM_RMS, NORM_GATED, NORM_L2 } norm_kind;
static const char *const norm_names[] = {"rmsnorm", "gated_rmsnorm", "l2norm_scale"};

static double silu64(double x) { return x / (1.0 + exp(-x)); }

static void check_norm(const backends *bs, verdict *v, rng *r, norm_kind kind, int rows, int dim,
                       bool in_place) {
    size_t n = (size_t)rows * (size_t)dim;
    float eps = 1e-6f, scale = 0.0625f;
    float *x = random_floats(r, n, 3.0f), *z = random_floats(r, n, 8.0f);
    float *w = random_floats(r, (size_t)dim, 1.5f);
    double *want = doubles(n);
    if (!x || !z || !w || !want) {
        fail(v, "out of memory");
        goto done;
    }
    for (int row = 0; row < rows; row++) {
        const float *xr = x + (size_t)row * dim;
        double ss = 0;
        for (int i = 0; i < dim; i++) ss += (double)xr[i] * xr[i];
        double f = kind == NORM_L2 ? scale / sqrt(ss + eps) : 1.0 / sqrt(ss / dim + eps);
        for (int i = 0; i < dim; i++) {
            double y = xr[i] * f;
            if (kind != NORM_L2) y *= w[i];
            if (kind == NORM_GATED) y *= silu64(z[(size_t)row * dim + i]);
            want[(size_t)row * dim + i] = y;
        }
    }
    same_bits same = {0};
    for (int b = 0; b < bs->n && !v->failed; b++) {
        arena a = arena_on(bs->be[b]);
        lm_mem xm = up_f32(&a, x, n), zm = up_f32(&a, z, n), wm = up_f32(&a, w, (size_t)dim);
        lm_mem out = kind == NORM_L2 || in_place ? xm : poisoned(&a, n);
        if (kind == NORM_RMS) lm_rmsnorm(a.be, out, xm, wm, rows, dim, eps);
        if (kind == NORM_GATED) lm_gated_rmsnorm(a.be, out, xm, zm, wm, rows, dim, eps);
        if (kind == NORM_L2) lm_l2norm_scale(a.be, xm, rows, dim, eps, scale);
        float *got = down_f32(&a, out, n);
        double e = got ? rel_error(got, want, n) : INFINITY;
        if (!(e < TOLERANCE))
            fail(v, "%s%s %dx%d on %s: error %g", norm_names[kind], in_place ? " in place" : "",
                 rows, dim, bs->label[b], e);
        if (got) same_bits_check(&same, v, bs->family[b], norm_names[kind], got, n * 4, bs->label[b]);
        free(got);
        arena_free(&a);
    }
    same_bits_free(&same);
done:
    free(x);
    free(z);
    free(w);
    free(want);
}

static void test_norms(void) {
    backends bs;
    CHECK(backends_open(&bs));
    NEED(bs, rmsnorm);
    NEED(bs, gated_rmsnorm);
    NEED(bs, l2norm_scale);
    verdict v = {0};
    rng r = {7};
    for (size_t s = 0; s < N_NORM_SHAPES; s++) {
        int rows = norm_shapes[s][0], dim = norm_shapes[s][1];
        check_norm(&bs, &v, &r, NORM_RMS, rows, dim, false);
        check_norm(&bs, &v, &r, NORM_RMS, rows, dim, true); /* out may alias x */
        check_norm(&bs, &v, &r, NORM_GATED, rows, dim, false);
        check_norm(&bs, &v, &r, NORM_GATED, rows, dim, true);
        check_norm(&bs, &v, &r, NORM_L2, rows, dim, true);
    }
    backends_close(&bs);
    CHECK_VERDICT(v);
}

/* add_rmsnorm: h and out exactly what add, then rmsnorm write on the same
 * backend, out apart or in delta's place. */
static void check_add_rmsnorm(const backends *bs, verdict *v, rng *r, int rows, int dim, bool in_delta) {
    size_t n = (size_t)rows * (size_t)dim;
    float eps = 1e-6f;
    float *h = random_floats(r, n, 3.0f), *d = random_floats(r, n, 2.0f);
    float *w = random_floats(r, (size_t)dim, 1.5f);
    if (!h || !d || !w) {
        fail(v, "out of memory");
        goto done;
    }
    for (int b = 0; b < bs->n && !v->failed; b++) {
        arena a = arena_on(bs->be[b]);
        lm_mem hm = up_f32(&a, h, n), dm = up_f32(&a, d, n), wm = up_f32(&a, w, (size_t)dim);
        lm_mem h2 = up_f32(&a, h, n), d2 = up_f32(&a, d, n), out2 = poisoned(&a, n);
        lm_mem out = in_delta ? dm : poisoned(&a, n);
        const fused_kernels *fk = fused_of(bs, b);
        if (fk->add_rmsnorm)
            fk->add_rmsnorm(a.be, out, hm, dm, wm, rows, dim, eps);
        else
            parts_add_rmsnorm(a.be, out, hm, dm, wm, rows, dim, eps, false);
        parts_add_rmsnorm(a.be, out2, h2, d2, wm, rows, dim, eps, true);
        float *got_h = down_f32(&a, hm, n), *got = down_f32(&a, out, n);
        float *want_h = down_f32(&a, h2, n), *want = down_f32(&a, out2, n);
        if (!got_h || !got || !want_h || !want)
            fail(v, "%s: backend memory failed", bs->label[b]);
        else if (memcmp(got_h, want_h, n * 4) != 0 || memcmp(got, want, n * 4) != 0)
            fail(v, "add_rmsnorm%s %dx%d on %s differs bitwise from add, then rmsnorm",
                 in_delta ? " (out = delta)" : "", rows, dim, bs->label[b]);
        free(got_h);
        free(got);
        free(want_h);
        free(want);
        arena_free(&a);
    }
done:
    free(h);
    free(d);
    free(w);
}

/* ---- a decode layer in plain ops: what a fusing backend makes of it ---- */

/* The plain ops of a layer's MLP and a residual step as the forward
 * writes them, with the intermediates it declares dead: h = the stream,
 * x its norm, g | u the SwiGLU halves, s a product added on, r the routed
 * sum.  With `alone` every op runs by itself (a host wait after each), so
 * a fusing backend (cuda's window) runs the parts; without, it fuses. */
typedef struct {
    lm_mem h, x, g, u, s, r, gate, q, k, norm;
    lm_matrix up, down, wq, wk;
} layer_mem;

static void plain_layer(lm_backend *be, const layer_mem *m, int n, int H, int I, bool alone) {
    float eps = 1e-6f;
#define STEP(call)                  \
    do {                            \
        call;                       \
        if (alone) run_queued(be);  \
    } while (0)
    size_t hb = sizeof(float) * (size_t)n * (size_t)H, ib = sizeof(float) * (size_t)n * (size_t)I;
    /* x = norm(h); g = silu(x·gateᵀ)·(x·upᵀ) (the up matrix twice: gate and up of one shape) */
    STEP(lm_rmsnorm(be, m->x, m->h, m->norm, n, H, eps));
    STEP(lm_matmul(be, m->g, m->x, n, &m->up));
    STEP(lm_matmul(be, m->u, m->x, n, &m->up));
    STEP(lm_silu_mul(be, m->g, m->g, m->u, (int64_t)n * I));
    STEP(lm_discard(be, m->u, ib));
    /* h += g·downᵀ through s */
    STEP(lm_matmul(be, m->s, m->g, n, &m->down));
    STEP(lm_add(be, m->h, m->s, (int64_t)n * H));
    STEP(lm_discard(be, m->s, hb));
    /* h += r + sigmoid(gate)·(silu(g)·u)·downᵀ, the shared expert's way */
    STEP(lm_matmul(be, m->u, m->x, n, &m->up));
    STEP(lm_silu_mul(be, m->g, m->g, m->u, (int64_t)n * I));
    STEP(lm_matmul(be, m->s, m->g, n, &m->down));
    STEP(lm_sigmoid_scale_rows(be, m->s, m->gate, n, H));
    STEP(lm_add(be, m->r, m->s, (int64_t)n * H));
    STEP(lm_add(be, m->h, m->r, (int64_t)n * H));
    STEP(lm_discard(be, m->s, hb));
    STEP(lm_discard(be, m->r, hb));
    STEP(lm_discard(be, m->g, ib));
    /* h += x (a pending output); x = norm(h); q, k of x */
    STEP(lm_add(be, m->h, m->x, (int64_t)n * H));
    STEP(lm_rmsnorm(be, m->x, m->h, m->norm, n, H, eps));
    STEP(lm_matmul(be, m->q, m->x, n, &m->wq));
    STEP(lm_matmul(be, m->k, m->x, n, &m->wk));
#undef STEP
}

/* The live memory (h, x, q, k) after the layer fused equals it after the
 * parts, bit for bit, on every backend (a backend without a fusion of its
 * own runs the same ops both times). */
static void check_plain_layer(const backends *bs, verdict *v, rng *r, int n, int H, int I) {
    size_t nh = (size_t)n * (size_t)H, ni = (size_t)n * (size_t)I;
    float *h = random_floats(r, nh, 2.0f), *norm = random_floats(r, (size_t)H, 1.5f);
    float *gate = random_floats(r, (size_t)n, 2.0f), *routed = random_floats(r, nh, 1.0f);
    float *upv = malloc(sizeof(float) * (size_t)I * (size_t)H), *downv = malloc(sizeof(float) * (size_t)H * (size_t)I);
    float *qv = malloc(sizeof(float) * 64 * (size_t)H), *kv = malloc(sizeof(float) * 32 * (size_t)H);
    void *up = upv ? random_matrix(r, LM_DTYPE_BF16, I, H, upv) : NULL;
    void *down = downv ? random_matrix(r, LM_DTYPE_BF16, H, I, downv) : NULL;
    void *wq = qv ? random_matrix(r, LM_DTYPE_BF16, 64, H, qv) : NULL;
    void *wk = kv ? random_matrix(r, LM_DTYPE_BF16, 32, H, kv) : NULL;
    if (!h || !norm || !gate || !routed || !up || !down || !wq || !wk) {
        fail(v, "out of memory");
        goto done;
    }
    for (int b = 0; b < bs->n && !v->failed; b++) {
        arena a = arena_on(bs->be[b]);
        layer_mem m[2];
        for (int t = 0; t < 2; t++)
            m[t] = (layer_mem){.h = up_f32(&a, h, nh), .x = poisoned(&a, nh), .g = poisoned(&a, ni), .u = poisoned(&a, ni),
                               .s = poisoned(&a, nh), .r = up_f32(&a, routed, nh), .gate = up_f32(&a, gate, (size_t)n),
                               .q = poisoned(&a, (size_t)n * 64), .k = poisoned(&a, (size_t)n * 32),
                               .norm = up_f32(&a, norm, (size_t)H), .up = import_matrix(&a, up, LM_DTYPE_BF16, I, H),
                               .down = import_matrix(&a, down, LM_DTYPE_BF16, H, I),
                               .wq = import_matrix(&a, wq, LM_DTYPE_BF16, 64, H),
                               .wk = import_matrix(&a, wk, LM_DTYPE_BF16, 32, H)};
        if (!a.ok) {
            fail(v, "%s: backend memory failed", bs->label[b]);
            arena_free(&a);
            break;
        }
        plain_layer(a.be, &m[0], n, H, I, false);
        plain_layer(a.be, &m[1], n, H, I, true);
        const struct {
            const char *name;
            lm_mem fused, parts;
            size_t n;
        } live[] = {{"h", m[0].h, m[1].h, nh}, {"x", m[0].x, m[1].x, nh}, {"q", m[0].q, m[1].q, (size_t)n * 64},
                    {"k", m[0].k, m[1].k, (size_t)n * 32}};
        for (size_t i = 0; i < sizeof live / sizeof live[0] && !v->failed; i++) {
            float *got = down_f32(&a, live[i].fused, live[i].n), *want = down_f32(&a, live[i].parts, live[i].n);
            if (!got || !want)
                fail(v, "%s: backend memory failed", bs->label[b]);
            else if (memcmp(got, want, live[i].n * sizeof(float)) != 0)
                fail(v, "a layer's plain ops n=%d H=%d I=%d on %s: %s differs bitwise run together and one by one",
                     n, H, I, bs->label[b], live[i].name);
            free(got);
            free(want);
        }
        arena_free(&a);
    }
done:
    free(h), free(norm), free(gate), free(routed), free(upv), free(downv), free(qv), free(kv);
    free(up), free(down), free(wq), free(wk);
}

static void test_plain_layer_fuses_exactly(void) {
    backends bs;
    CHECK(backends_open(&bs));
    verdict v = {0};
    rng r = {29};
    const int shapes[][3] = {{1, 256, 512}, {3, 256, 512}, {8, 128, 384}, {40, 256, 256}};
    for (size_t i = 0; i < sizeof shapes / sizeof shapes[0]; i++)
        check_plain_layer(&bs, &v, &r, shapes[i][0], shapes[i][1], shapes[i][2]);
    backends_close(&bs);
    CHECK_VERDICT(v);
}

static void test_add_rmsnorm(void) {
    backends bs;
    CHECK(backends_open(&bs));
    NEED(bs, add);
    NEED(bs, rmsnorm);
    verdict v = {0};
    rng r = {11};
    for (size_t s = 0; s < N_NORM_SHAPES; s++) {
        check_add_rmsnorm(&bs, &v, &r, norm_shapes[s][0], norm_shapes[s][1], false);
        check_add_rmsnorm(&bs, &v, &r, norm_shapes[s][0], norm_shapes[s][1], true);
    }
    check_add_rmsnorm(&bs, &v, &r, 3, 4096, true);
    backends_close(&bs);
    CHECK_VERDICT(v);
}

/* ---- layernorm (the vision towers' LayerNorm with bias, model-spec B4) ---- */

static void check_layernorm(const backends *bs, verdict *v, rng *r, int rows, int dim, bool in_place,
                            float offset) {
    size_t n = (size_t)rows * (size_t)dim;
    float eps = 1e-6f;
    float *x = random_floats(r, n, 3.0f), *w = random_floats(r, (size_t)dim, 1.5f);
    float *bias = random_floats(r, (size_t)dim, 1.0f);
    double *want = doubles(n);
    if (!x || !w || !bias || !want) {
        fail(v, "out of memory");
        goto done;
    }
    for (size_t i = 0; i < n; i++) x[i] += offset; /* a mean far from 0 */
    for (int row = 0; row < rows; row++) {
        const float *xr = x + (size_t)row * dim;
        double mean = 0, var = 0;
        for (int i = 0; i < dim; i++) mean += xr[i];
        mean /= dim;
        for (int i = 0; i < dim; i++) var += (xr[i] - mean) * (xr[i] - mean);
        var /= dim; /* biased */
        for (int i = 0; i < dim; i++)
            want[(size_t)row * dim + i] = (xr[i] - mean) / sqrt(var + eps) * w[i] + bias[i];
    }
    same_bits same = {0};
    for (int b = 0; b < bs->n && !v->failed; b++) {
        arena a = arena_on(bs->be[b]);
        lm_mem xm = up_f32(&a, x, n), out = in_place ? xm : poisoned(&a, n);
        lm_layernorm(a.be, out, xm, up_f32(&a, w, (size_t)dim), up_f32(&a, bias, (size_t)dim), rows,
                     dim, eps);
        float *got = down_f32(&a, out, n);
        double e = got ? rel_error(got, want, n) : INFINITY;
        if (!(e < TOLERANCE))
            fail(v, "layernorm%s %dx%d (offset %g) on %s: error %g", in_place ? " in place" : "",
                 rows, dim, (double)offset, bs->label[b], e);
        if (got) same_bits_check(&same, v, bs->family[b], "layernorm", got, n * 4, bs->label[b]);
        free(got);
        arena_free(&a);
    }
    same_bits_free(&same);
done:
    free(x);
    free(w);
    free(bias);
    free(want);
}

static void test_layernorm(void) {
    backends bs;
    CHECK(backends_open(&bs));
    NEED(bs, layernorm);
    verdict v = {0};
    rng r = {8};
    /* norm_shapes, the fixtures' vision widths (32, 64 after the GLM
     * projection), the released towers' (1152 Qwen3.5, 4096 GLM merger) */
    static const int extra[][2] = {{140, 32}, {30, 64}, {9, 1152}, {3, 4096}, {2, 1153}};
    for (size_t s = 0; s < N_NORM_SHAPES; s++) {
        check_layernorm(&bs, &v, &r, norm_shapes[s][0], norm_shapes[s][1], false, 0.0f);
        check_layernorm(&bs, &v, &r, norm_shapes[s][0], norm_shapes[s][1], true, 0.0f);
    }
    for (size_t s = 0; s < sizeof extra / sizeof extra[0]; s++) {
        check_layernorm(&bs, &v, &r, extra[s][0], extra[s][1], false, 0.0f);
        check_layernorm(&bs, &v, &r, extra[s][0], extra[s][1], true, 5.0f);
    }
    backends_close(&bs);
    CHECK_VERDICT(v);
}

/* ------------------------------------------------------------ rope */

typedef struct {
    int n, n_heads, head_dim;
    lm_rope_params p;
} rope_case;

static int section_of(const lm_rope_params *rope, int i) {
    const int *s = rope->sections;
    if (rope->two_d) return i < rope->rot_dim / 4 ? 1 : 2; /* rows, then columns */
    if (rope->interleaved_sections) {
        if (i % 3 == 1 && i < 3 * s[1]) return 1;
        if (i % 3 == 2 && i < 3 * s[2]) return 2;
        return 0;
    }
    return i < s[0] ? 0 : i < s[0] + s[1] ? 1 : 2;
}

static void check_rope(const backends *bs, verdict *v, rng *r, const rope_case *rc) {
    const lm_rope_params *p = &rc->p;
    size_t len = (size_t)rc->n * rc->n_heads * rc->head_dim;
    float *x = random_floats(r, len, 2.0f);
    int32_t *pos = malloc(sizeof(int32_t) * (size_t)rc->n * 3);
    double *want = doubles(len);
    if (!x || !pos || !want) {
        fail(v, "out of memory");
        goto done;
    }
    for (int t = 0; t < rc->n; t++) { /* distinct t/h/w, large enough to test the angles */
        pos[t * 3] = 100 + 37 * t;
        pos[t * 3 + 1] = (int32_t)(rng_next(r) % 50);
        pos[t * 3 + 2] = (int32_t)(rng_next(r) % 4000);
    }
    for (size_t i = 0; i < len; i++) want[i] = x[i];
    int half = p->rot_dim / 2;
    for (int t = 0; t < rc->n; t++)
        for (int i = 0; i < half; i++) {
            /* ops.h: inv_freq and the angle in float32, as transformers */
            float inv_freq = 1.0f / powf(p->theta, (float)(2 * i) / (float)p->rot_dim);
            if (p->two_d) /* rot_dim/4 frequencies theta^(-4f/rot_dim), used twice */
                inv_freq = 1.0f / powf(p->theta, (float)(4 * (i % (p->rot_dim / 4))) / (float)p->rot_dim);
            float angle = (float)pos[t * 3 + section_of(p, i)] * inv_freq;
            double c = cos((double)angle), s = sin((double)angle);
            for (int h = 0; h < rc->n_heads; h++) {
                double *xh = want + ((size_t)t * rc->n_heads + h) * rc->head_dim;
                int ia = p->pair_interleaved ? 2 * i : i, ib = p->pair_interleaved ? 2 * i + 1 : i + half;
                double xa = xh[ia], xb = xh[ib];
                xh[ia] = xa * c - xb * s;
                xh[ib] = xb * c + xa * s;
            }
        }
    same_bits same = {0};
    for (int b = 0; b < bs->n && !v->failed; b++) {
        arena a = arena_on(bs->be[b]);
        lm_mem xm = up_f32(&a, x, len);
        lm_rope(a.be, xm, rc->n, rc->n_heads, rc->head_dim, up_i32(&a, pos, (size_t)rc->n * 3), p);
        float *got = down_f32(&a, xm, len);
        double e = got ? rel_error(got, want, len) : INFINITY;
        if (!(e < TOLERANCE))
            fail(v, "rope n=%d heads=%d head_dim=%d rot_dim=%d on %s: error %g", rc->n,
                 rc->n_heads, rc->head_dim, p->rot_dim, bs->label[b], e);
        if (got) same_bits_check(&same, v, bs->family[b], "rope", got, len * 4, bs->label[b]);
        free(got);
        arena_free(&a);
    }
    same_bits_free(&same);
done:
    free(x);
    free(pos);
    free(want);
}

static void test_rope(void) {
    backends bs;
    CHECK(backends_open(&bs));
    NEED(bs, rope);
    verdict v = {0};
    rng r = {10};
#define ROPE2D(R, TH) {.rot_dim = (R), .theta = (TH), .two_d = true}
#define ROPE(R, TH, S0, S1, S2, INTERLEAVED_SECTIONS, PAIRS)                                       \
    {                                                                                              \
        .rot_dim = (R), .theta = (TH), .sections = {(S0), (S1), (S2)},                             \
        .interleaved_sections = (INTERLEAVED_SECTIONS), .pair_interleaved = (PAIRS)                \
    }
    const rope_case cases[] = {
        /* the fixture: head_dim 32, partial rotary 0.25, sections 2/1/1 */
        {1, 4, 32, ROPE(8, 1e6f, 2, 1, 1, true, false)},
        {130, 4, 32, ROPE(8, 1e6f, 2, 1, 1, true, false)},
        /* Qwen3.5 released: 64 of 256 rotated, interleaved sections 11/11/10 */
        {5, 8, 256, ROPE(64, 1e7f, 11, 11, 10, true, false)},
        {1, 2, 256, ROPE(64, 1e7f, 11, 11, 10, true, false)},
        /* GLM: contiguous sections, interleaved pairs, half of 128 rotated */
        {7, 3, 128, ROPE(64, 10000.0f, 8, 12, 12, false, true)},
        /* full rotary, odd head count, plain 1-D */
        {3, 5, 72, ROPE(72, 10000.0f, 36, 0, 0, false, false)},
        {2, 1, 6, ROPE(2, 10000.0f, 1, 0, 0, true, true)},
        {64, 4, 128, ROPE(32, 1e6f, 6, 5, 5, true, false)},
        /* more frequencies than the cpu kernel's stack chunk (128) */
        {2, 2, 512, ROPE(512, 10000.0f, 256, 0, 0, false, false)},
        /* the vision towers' 2-D rotary over the whole head: the fixtures
         * (head 16, 2 heads), Qwen3.5 (72, 16 heads), GLM-4.6V (128, 12 heads) */
        {140, 2, 16, ROPE2D(16, 10000.0f)},
        {37, 16, 72, ROPE2D(72, 10000.0f)},
        {9, 12, 128, ROPE2D(128, 10000.0f)},
        /* a partial one, and more pairs than the cpu kernel's chunk */
        {3, 2, 40, ROPE2D(24, 1e4f)},
        {2, 1, 1024, ROPE2D(1024, 10000.0f)},
    };
#undef ROPE
#undef ROPE2D
    for (size_t c = 0; c < sizeof cases / sizeof cases[0]; c++) check_rope(&bs, &v, &r, &cases[c]);
    backends_close(&bs);
    CHECK_VERDICT(v);
}

/* ------------------------------------------------------------ elementwise */

typedef enum { EW_SILU_MUL, EW_SILU_MUL_ALIASED, EW_SIGMOID_MUL, EW_ADD } ew_kind;
static const char *const ew_names[] = {"silu_mul", "silu_mul (out = gate)", "sigmoid_mul", "add"};

static void check_elementwise(const backends *bs, verdict *v, rng *r, ew_kind kind, size_t n) {
    float *a_host = random_floats(r, n, 12.0f), *b_host = random_floats(r, n, 3.0f);
    double *want = doubles(n);
    if (!a_host || !b_host || !want) {
        fail(v, "out of memory");
        goto done;
    }
    if (n > 2) a_host[1] = -100.0f, a_host[2] = 100.0f; /* exp under/overflow */
    for (size_t i = 0; i < n; i++) {
        double a = a_host[i], b = b_host[i];
        want[i] = kind == EW_ADD           ? b + a /* x = b, y = a */
                  : kind == EW_SIGMOID_MUL ? b / (1.0 + exp(-a))
                                           : silu64(a) * b;
    }
    same_bits same = {0};
    for (int k = 0; k < bs->n && !v->failed; k++) {
        arena ar = arena_on(bs->be[k]);
        lm_mem am = up_f32(&ar, a_host, n), bm = up_f32(&ar, b_host, n), out = bm;
        switch (kind) {
        case EW_SILU_MUL:
            out = poisoned(&ar, n);
            lm_silu_mul(ar.be, out, am, bm, (int64_t)n);
            break;
        case EW_SILU_MUL_ALIASED:
            out = am;
            lm_silu_mul(ar.be, am, am, bm, (int64_t)n);
            break;
        case EW_SIGMOID_MUL: lm_sigmoid_mul(ar.be, bm, am, (int64_t)n); break;
        case EW_ADD: lm_add(ar.be, bm, am, (int64_t)n); break;
        }
        float *got = down_f32(&ar, out, n);
        double e = got ? rel_error(got, want, n) : INFINITY;
        if (!(e < TOLERANCE))
            fail(v, "%s n=%zu on %s: error %g", ew_names[kind], n, bs->label[k], e);
        if (got) same_bits_check(&same, v, bs->family[k], ew_names[kind], got, n * 4, bs->label[k]);
        free(got);
        arena_free(&ar);
    }
    same_bits_free(&same);
done:
    free(a_host);
    free(b_host);
    free(want);
}

static void test_elementwise(void) {
    backends bs;
    CHECK(backends_open(&bs));
    NEED(bs, silu_mul);
    NEED(bs, sigmoid_mul);
    NEED(bs, add);
    verdict v = {0};
    rng r = {11};
    static const size_t sizes[] = {1, 7, 16, 17, 64, 1000, 3584, 100003, 300000};
    for (int kind = EW_SILU_MUL; kind <= EW_ADD; kind++)
        for (size_t s = 0; s < sizeof sizes / sizeof sizes[0]; s++)
            check_elementwise(&bs, &v, &r, (ew_kind)kind, sizes[s]);
    backends_close(&bs);
    CHECK_VERDICT(v);
}

/* ---- gelu (the vision MLPs: tanh in the Qwen3.5 blocks, erf in the mergers) ---- */

static const char *const gelu_names[] = {"gelu_erf", "gelu_tanh"};

static void check_gelu(const backends *bs, verdict *v, rng *r, lm_gelu_kind kind, size_t n) {
    float *x = random_floats(r, n, 6.0f);
    double *want = doubles(n);
    if (!x || !want) {
        fail(v, "out of memory");
        goto done;
    }
    /* exp under/overflow, and values where 1 + erf / 1 + tanh would cancel */
    if (n > 5) x[1] = -100.0f, x[2] = 9.0f, x[3] = -12.0f, x[4] = 0.0f, x[5] = -5.5f;
    for (size_t i = 0; i < n; i++) {
        double t = x[i];
        want[i] = kind == LM_GELU_ERF
                      ? 0.5 * t * erfc(-t / sqrt(2.0))
                      : 0.5 * t * (1.0 + tanh(sqrt(2.0 / M_PI) * (t + 0.044715 * t * t * t)));
    }
    same_bits same = {0};
    for (int b = 0; b < bs->n && !v->failed; b++) {
        arena a = arena_on(bs->be[b]);
        lm_mem xm = up_f32(&a, x, n);
        lm_gelu(a.be, xm, (int64_t)n, kind);
        float *got = down_f32(&a, xm, n);
        double e = got ? rel_error(got, want, n) : INFINITY;
        if (!(e < TOLERANCE)) fail(v, "%s n=%zu on %s: error %g", gelu_names[kind], n, bs->label[b], e);
        if (got) same_bits_check(&same, v, bs->family[b], gelu_names[kind], got, n * 4, bs->label[b]);
        free(got);
        arena_free(&a);
    }
    same_bits_free(&same);
done:
    free(x);
    free(want);
}

static void test_gelu(void) {
    backends bs;
    CHECK(backends_open(&bs));
    NEED(bs, gelu);
    verdict v = {0};
    rng r = {12};
    static const size_t sizes[] = {1, 7, 16, 17, 64, 1000, 4304, 100003, 300000};
    for (int kind = LM_GELU_ERF; kind <= LM_GELU_TANH; kind++)
        for (size_t s = 0; s < sizeof sizes / sizeof sizes[0]; s++)
            check_gelu(&bs, &v, &r, (lm_gelu_kind)kind, sizes[s]);
    backends_close(&bs);
    CHECK_VERDICT(v);
}

/* ------------------------------------------------------------ moving rows */

static void check_copy_rows(const backends *bs, verdict *v, rng *r, int rows, int width,
                            int64_t src_stride, int64_t src_col, int64_t dst_stride,
                            int64_t dst_col) {
    size_t src_n = (size_t)(rows * src_stride), dst_n = (size_t)(rows * dst_stride);
    float *src = random_floats(r, src_n, 1.0f);
    float *want = malloc(sizeof(float) * (dst_n ? dst_n : 1));
    if (!src || !want) {
        fail(v, "out of memory");
        goto done;
    }
    memset(want, 0xFF, sizeof(float) * dst_n); /* the poison stays outside the rows */
    for (int row = 0; row < rows; row++)
        memcpy(want + row * dst_stride + dst_col, src + row * src_stride + src_col,
               sizeof(float) * (size_t)width);
    for (int b = 0; b < bs->n && !v->failed; b++) {
        arena a = arena_on(bs->be[b]);
        lm_mem dst = poisoned(&a, dst_n), srcm = up_f32(&a, src, src_n);
        lm_copy_rows(a.be, lm_mem_f32(dst, (size_t)dst_col), dst_stride,
                     lm_mem_f32(srcm, (size_t)src_col), src_stride, rows, width);
        float *got = down_f32(&a, dst, dst_n);
        if (!got || memcmp(got, want, sizeof(float) * dst_n) != 0)
            fail(v, "copy_rows rows=%d width=%d strides %lld->%lld on %s differs", rows, width,
                 (long long)src_stride, (long long)dst_stride, bs->label[b]);
        free(got);
        arena_free(&a);
    }
done:
    free(src);
    free(want);
}

static void check_gather_rows(const backends *bs, verdict *v, rng *r, const int32_t *ids, int n,
                              int src_rows, int width) {
    size_t src_n = (size_t)src_rows * width, dst_n = (size_t)n * width;
    float *src = random_floats(r, src_n, 1.0f);
    float *want = malloc(sizeof(float) * (dst_n ? dst_n : 1));
    if (!src || !want) {
        fail(v, "out of memory");
        goto done;
    }
    for (int i = 0; i < n; i++)
        memcpy(want + (size_t)i * width, src + (size_t)ids[i] * width, sizeof(float) * width);
    for (int b = 0; b < bs->n && !v->failed; b++) {
        arena a = arena_on(bs->be[b]);
        lm_mem dst = poisoned(&a, dst_n);
        lm_gather_rows(a.be, dst, up_f32(&a, src, src_n), up_i32(&a, ids, (size_t)n), n, width);
        float *got = down_f32(&a, dst, dst_n);
        if (!got || memcmp(got, want, sizeof(float) * dst_n) != 0)
            fail(v, "gather_rows n=%d width=%d on %s differs", n, width, bs->label[b]);
        free(got);
        arena_free(&a);
    }
done:
    free(src);
    free(want);
}

static void test_copy_and_gather_rows(void) {
    backends bs;
    CHECK(backends_open(&bs));
    NEED(bs, copy_rows);
    NEED(bs, gather_rows);
    verdict v = {0};
    rng r = {21};
    /* the fixture's q | k | v split of conv rows (32 | 32 | 64 of 128),
     * released (2048 | 2048 | 4096 of 8192), a concatenation back into a
     * wider row, one row and 130 rows */
    check_copy_rows(&bs, &v, &r, 130, 32, 128, 0, 32, 0);
    check_copy_rows(&bs, &v, &r, 130, 32, 128, 32, 32, 0);
    check_copy_rows(&bs, &v, &r, 130, 64, 128, 64, 64, 0);
    check_copy_rows(&bs, &v, &r, 1, 2048, 8192, 2048, 2048, 0);
    check_copy_rows(&bs, &v, &r, 3, 4096, 8192, 4096, 4096, 0);
    check_copy_rows(&bs, &v, &r, 130, 17, 17, 0, 40, 23);
    check_copy_rows(&bs, &v, &r, 5, 1, 3, 2, 7, 6);
    check_copy_rows(&bs, &v, &r, 0, 16, 16, 0, 16, 0);
    /* repeated and out-of-order ids */
    static const int32_t ids[] = {5, 0, 5, 2, 9, 9, 1, 9};
    static const int widths[] = {1, 17, 64, 1024, 4096};
    for (size_t w = 0; w < sizeof widths / sizeof widths[0]; w++)
        check_gather_rows(&bs, &v, &r, ids, 8, 10, widths[w]);
    check_gather_rows(&bs, &v, &r, ids, 1, 10, 64);
    backends_close(&bs);
    CHECK_VERDICT(v);
}

static void check_argmax(const backends *bs, verdict *v, const float *x, int rows, int n,
                         const int32_t *want_or_null, const char *what) {
    int32_t *want = malloc(sizeof(int32_t) * (size_t)(rows > 0 ? rows : 1));
    if (!want) {
        fail(v, "out of memory");
        return;
    }
    for (int row = 0; row < rows; row++) { /* the plain definition */
        const float *xr = x + (size_t)row * n;
        int best = -1;
        for (int i = 0; i < n; i++)
            if (!isnan(xr[i]) && (best < 0 || xr[i] > xr[best])) best = i;
        want[row] = best < 0 ? 0 : best;
        if (want_or_null && want_or_null[row] != want[row])
            fail(v, "argmax %s: the test's own oracle says %d, expected %d", what, want[row],
                 want_or_null[row]);
    }
    for (int b = 0; b < bs->n && !v->failed; b++) {
        arena a = arena_on(bs->be[b]);
        lm_mem ids = arena_alloc(&a, sizeof(int32_t) * (size_t)rows);
        if (a.ok) lm_fill(a.be, ids, 0xFF, sizeof(int32_t) * (size_t)rows); /* -1 everywhere */
        lm_argmax_rows(a.be, ids, up_f32(&a, x, (size_t)rows * n), rows, n);
        int32_t *got = down_i32(&a, ids, (size_t)rows);
        for (int row = 0; got && row < rows; row++)
            if (got[row] != want[row]) {
                fail(v, "argmax %s row %d on %s: %d, want %d", what, row, bs->label[b], got[row],
                     want[row]);
                break;
            }
        if (!got) fail(v, "argmax %s on %s: backend memory failed", what, bs->label[b]);
        free(got);
        arena_free(&a);
    }
    free(want);
}

static void test_argmax_rows(void) {
    backends bs;
    CHECK(backends_open(&bs));
    NEED(bs, argmax_rows);
    verdict v = {0};
    rng r = {31};
    const float nan = NAN, inf = INFINITY;
    /* ties -> lowest index; NaN never wins; all NaN -> 0; -inf rows -> 0 */
    const float special[6][5] = {
        {1, 3, 2, 3, 3},          {nan, 1, nan, 1, 0},    {nan, nan, nan, nan, nan},
        {-inf, -inf, -inf, -inf, -inf}, {2, nan, 5, nan, 5}, {-1, -2, inf, inf, nan},
    };
    const int32_t special_want[6] = {1, 1, 0, 0, 2, 2};
    check_argmax(&bs, &v, &special[0][0], 6, 5, special_want, "special rows");
    const float one[1] = {nan};
    check_argmax(&bs, &v, one, 1, 1, (const int32_t[]){0}, "one NaN");
    /* the fixture's vocabulary (2048) for 130 rows, the released one (248320) for 3 */
    static const int shapes[][2] = {{130, 2048}, {3, 248320}, {1, 17}};
    for (size_t s = 0; s < 3; s++) {
        int rows = shapes[s][0], n = shapes[s][1];
        float *x = random_floats(&r, (size_t)rows * n, 10.0f);
        CHECK(x);
        /* a tie at the maximum far apart, and a NaN in front of it */
        for (int row = 0; row < rows; row++) {
            float *xr = x + (size_t)row * n;
            int at = (int)(rng_next(&r) % (uint64_t)n);
            xr[at] = 11.0f;
            xr[n - 1] = 11.0f;
            xr[0] = nan;
        }
        check_argmax(&bs, &v, x, rows, n, NULL, "random rows");
        free(x);
    }
    backends_close(&bs);
    CHECK_VERDICT(v);
}

/* ------------------------------------------------------------ sample_rows */

/* Rows of logits with parameters chosen per row, a few rows skipped.  The
 * ref backend is the definition (ops/ref/sample.c; tests/test_engine.c
 * holds it to the host sampler): its tokens must be in the kept set
 * (greedy and top_k 1 rows: the argmax; top_k rows: at or above the k-th
 * largest logit), skipped rows untouched; another backend must draw the
 * same tokens, except where its float sums put u·total on the other side
 * of a token's edge (the ref's token for u ± 1e-6), at most twice a case. */
typedef struct {
    const char *what;
    int rows, vocab;
    float scale;     /* logits uniform in [-scale, scale) */
    float quantum;   /* > 0: logits rounded to multiples (ties) */
} sample_case;

static void sample_params_for(rng *r, int row, lm_sample_row *p, int vocab) {
    static const float temps[] = {0.0f, 0.5f, 1.0f, 1.7f};
    static const int top_ks[] = {-1, 1, 7, 300, 50, 6000};
    static const float top_ps[] = {1.0f, 0.9f, 0.3f, 0.95f};
    memset(p, 0, sizeof *p);
    p->mode = row % 9 == 8 ? LM_SAMPLE_ROW_SKIP : LM_SAMPLE_ROW_DRAW;
    p->temperature = temps[row % 4];
    p->top_k = top_ks[(row / 2) % 6];
    if (p->top_k >= vocab) p->top_k = -1;
    p->top_p = top_ps[(row / 3) % 4];
    p->min_p = row % 5 == 4 ? 0.05f : 0.0f;
    p->repetition_penalty = 1.0f;
    p->uniform = (double)(rng_next(r) >> 11) / 9007199254740992.0;
}

static void check_sample_rows(const backends *bs, verdict *v, const float *x, const lm_sample_row *params,
                              const lm_sample_entry *entries, int n_entries, int rows, int vocab,
                              const char *what) {
    size_t n = (size_t)rows * vocab;
    int32_t *want = NULL, *want_drew = NULL;
    int tolerated = 0;
    for (int b = 0; b < bs->n && !v->failed; b++) {
        arena a = arena_on(bs->be[b]);
        lm_mem ids = arena_alloc(&a, sizeof(int32_t) * (size_t)rows);
        lm_mem drew = arena_alloc(&a, sizeof(int32_t) * (size_t)rows);
        if (a.ok) lm_fill(a.be, ids, 0xFF, sizeof(int32_t) * (size_t)rows);
        if (a.ok) lm_fill(a.be, drew, 0xFF, sizeof(int32_t) * (size_t)rows);
        lm_mem logits = up_f32(&a, x, n);
        lm_mem pm = arena_upload(&a, params, sizeof *params * (size_t)rows);
        static const lm_sample_entry none = {0};
        lm_mem em = n_entries > 0 ? arena_upload(&a, entries, sizeof *entries * (size_t)n_entries)
                                  : arena_upload(&a, &none, sizeof none);
        if (a.ok) lm_sample_rows(a.be, ids, drew, logits, rows, vocab, pm, em);
        int32_t *got = down_i32(&a, ids, (size_t)rows), *got_drew = down_i32(&a, drew, (size_t)rows);
        if (!got || !got_drew) {
            fail(v, "sample_rows %s on %s: backend memory failed", what, bs->label[b]);
        } else if (strcmp(bs->family[b], "ref") == 0) {
            free(want), free(want_drew);
            want = got, want_drew = got_drew;
            got = got_drew = NULL;
        } else if (!want) {
            fail(v, "sample_rows %s: no ref result before %s", what, bs->label[b]);
        } else {
            for (int r = 0; r < rows && !v->failed; r++) {
                if (got[r] == want[r] && got_drew[r] == want_drew[r]) continue;
                bool edge = false;
                for (int side = -1; side <= 1 && !edge && params[r].mode == LM_SAMPLE_ROW_DRAW; side += 2) {
                    lm_sample_row p = params[r];
                    p.uniform += side * 1e-6;
                    float *row = floats_copy(x + (size_t)r * vocab, (size_t)vocab);
                    int32_t t = -1, d = -1;
                    if (row) lm_ref_sample_rows(&t, &d, row, 1, vocab, &p, entries);
                    free(row);
                    edge = t == got[r] && d == got_drew[r];
                }
                if (edge && ++tolerated <= 2) continue;
                fail(v, "sample_rows %s row %d on %s: token %d (drew %d), want %d (drew %d)", what, r,
                     bs->label[b], got[r], got_drew[r], want[r], want_drew[r]);
            }
        }
        free(got), free(got_drew);
        arena_free(&a);
    }
    /* the ref's tokens against the definition's easy parts */
    for (int r = 0; want && r < rows && !v->failed; r++) {
        const lm_sample_row *p = &params[r];
        const float *xr = x + (size_t)r * vocab;
        if (p->mode != LM_SAMPLE_ROW_DRAW) {
            if (want[r] != -1 || want_drew[r] != -1) fail(v, "sample_rows %s row %d: a skipped row was written", what, r);
            continue;
        }
        if (want[r] < 0 || want[r] >= vocab) {
            fail(v, "sample_rows %s row %d: token %d outside the vocabulary", what, r, want[r]);
            continue;
        }
        bool plain = p->n_bias == 0 && p->n_stop == 0 && p->n_penalty == 0;
        int best = 0;
        for (int i = 1; i < vocab; i++)
            if (xr[i] > xr[best]) best = i;
        if (plain && p->temperature == 0 && want[r] != best)
            fail(v, "sample_rows %s row %d: greedy drew %d, the argmax is %d", what, r, want[r], best);
        if (plain && p->top_k == 1 && xr[want[r]] != xr[best]) /* ties with the max stay */
            fail(v, "sample_rows %s row %d: top_k 1 drew %d (%g), the max is %g", what, r, want[r],
                 (double)xr[want[r]], (double)xr[best]);
        if (plain && p->temperature == 0 && want_drew[r] != 0)
            fail(v, "sample_rows %s row %d: a greedy row took its uniform", what, r);
        if (plain && p->top_k > 1) {
            int above = 0;
            for (int i = 0; i < vocab; i++) above += xr[i] > xr[want[r]];
            if (above >= p->top_k) fail(v, "sample_rows %s row %d: token %d has %d logits above it, top_k %d", what, r, want[r], above, p->top_k);
        }
    }
    free(want), free(want_drew);
}

static void test_sample_rows(void) {
    backends bs;
    CHECK(backends_open(&bs));
    NEED(bs, sample_rows);
    verdict v = {0};
    rng r = {77};
    static const sample_case cases[] = {
        {"fixture vocabulary", 36, 2048, 6.0f, 0},
        {"released vocabulary", 12, 248320, 10.0f, 0},
        {"ties", 36, 4096, 3.0f, 0.5f},
        {"odd width", 18, 17, 2.0f, 0},
    };
    for (size_t c = 0; c < sizeof cases / sizeof cases[0] && !v.failed; c++) {
        const sample_case *sc = &cases[c];
        size_t n = (size_t)sc->rows * sc->vocab;
        float *x = random_floats(&r, n, sc->scale);
        lm_sample_row *params = calloc((size_t)sc->rows, sizeof *params);
        CHECK(x && params);
        if (sc->quantum > 0)
            for (size_t i = 0; i < n; i++) x[i] = roundf(x[i] / sc->quantum) * sc->quantum;
        for (int row = 0; row < sc->rows; row++) sample_params_for(&r, row, &params[row], sc->vocab);
        check_sample_rows(&bs, &v, x, params, NULL, 0, sc->rows, sc->vocab, sc->what);
        free(x), free(params);
    }
    /* special rows: only -inf; NaNs about; every edit (a repeated bias id,
     * stop ids, the penalised history, ids outside the vocabulary) */
    enum { V = 300, ROWS = 4 };
    float *x = random_floats(&r, (size_t)ROWS * V, 4.0f);
    CHECK(x);
    for (int i = 0; i < V; i++) x[i] = -INFINITY;
    for (int i = 0; i < V; i += 7) x[V + i] = NAN;
    lm_sample_entry entries[12];
    float b1 = 30.0f, b2 = -29.5f, b3 = 1.25f;
    memset(entries, 0, sizeof entries);
    entries[0].id = 17, memcpy(&entries[0].a, &b1, 4);
    entries[1].id = 17, memcpy(&entries[1].a, &b2, 4);
    entries[2].id = 400, memcpy(&entries[2].a, &b3, 4); /* outside: skipped */
    entries[3].id = 3, entries[4].id = 250, entries[5].id = -2;
    for (int i = 6; i < 12; i++) entries[i] = (lm_sample_entry){.id = 40 + i, .a = i % 3, .b = i % 2};
    lm_sample_row params[ROWS];
    for (int row = 0; row < ROWS; row++) {
        params[row] = (lm_sample_row){.mode = LM_SAMPLE_ROW_DRAW, .temperature = row == 3 ? 0.0f : 0.8f,
                                      .top_k = row == 2 ? 5 : -1, .top_p = row == 2 ? 0.7f : 1.0f,
                                      .repetition_penalty = 1.4f, .presence_penalty = 0.5f,
                                      .frequency_penalty = -0.25f, .uniform = 0.37 + 0.1 * row};
        if (row >= 2) {
            params[row].first_bias = 0, params[row].n_bias = 3;
            params[row].first_stop = 3, params[row].n_stop = 3;
            params[row].first_penalty = 6, params[row].n_penalty = 6;
        }
    }
    check_sample_rows(&bs, &v, x, params, entries, 12, ROWS, V, "special rows");
    free(x);
    backends_close(&bs);
    CHECK_VERDICT(v);
}

/* ------------------------------------------------------------ attention */

typedef struct {
    int n_heads, n_kv_heads, head_dim, block_size;
    int n_seqs;
    int cached[3];   /* entries already in the cache per sequence */
    int new_toks[3]; /* tokens of this step per sequence */
} attention_case;

/* attention against float64, batch invariance, and gated_attention against
 * its parts (*gated_taken counts the calls a backend ran fused). */
static void check_attention(const backends *bs, verdict *v, rng *r, const attention_case *ac, int *gated_taken) {
    int D = ac->head_dim, stride = 0, total = 0, max_ctx = 0, max_seq_tokens = 0;
    for (int s = 0; s < ac->n_seqs; s++) {
        int blocks = (ac->cached[s] + ac->new_toks[s] + ac->block_size - 1) / ac->block_size;
        if (blocks > stride) stride = blocks;
        total += ac->new_toks[s];
        if (ac->new_toks[s] > max_seq_tokens) max_seq_tokens = ac->new_toks[s];
        if (ac->cached[s] + ac->new_toks[s] > max_ctx) max_ctx = ac->cached[s] + ac->new_toks[s];
    }
    stride += 1; /* a spare entry: rows are table_stride apart, not block-count apart */
    int n_blocks = stride * ac->n_seqs + 3;
    size_t kv_row = (size_t)ac->n_kv_heads * D, pool_n = (size_t)n_blocks * ac->block_size * kv_row;
    size_t q_n = (size_t)total * ac->n_heads * D;
    float *kpool = random_floats(r, pool_n, 1.0f), *vpool = random_floats(r, pool_n, 1.0f);
    float *q = random_floats(r, q_n, 2.0f), *gates = random_floats(r, q_n, 4.0f);
    float *k = random_floats(r, (size_t)total * kv_row, 1.0f);
    float *vv = random_floats(r, (size_t)total * kv_row, 1.0f);
    int32_t *tables = calloc((size_t)(stride * ac->n_seqs), sizeof(int32_t));
    int32_t *perm = malloc(sizeof(int32_t) * (size_t)n_blocks);
    int32_t *token_seq = malloc(sizeof(int32_t) * (size_t)total);
    int32_t *ctx_len = malloc(sizeof(int32_t) * (size_t)total);
    int32_t *slots = malloc(sizeof(int32_t) * (size_t)total);
    double *want = doubles(q_n), *scores = doubles((size_t)max_ctx);
    if (!kpool || !vpool || !q || !gates || !k || !vv || !tables || !perm || !token_seq || !ctx_len ||
        !slots || !want || !scores) {
        fail(v, "out of memory");
        goto done;
    }
    for (int i = 0; i < n_blocks; i++) perm[i] = i;
    for (int i = n_blocks - 1; i > 0; i--) { /* shuffle: blocks land anywhere in the pool */
        int j = (int)(rng_next(r) % (uint64_t)(i + 1));
        int32_t tmp = perm[i];
        perm[i] = perm[j];
        perm[j] = tmp;
    }
    for (int s = 0; s < ac->n_seqs; s++)
        for (int j = 0; j < stride; j++) tables[s * stride + j] = perm[s * stride + j];
    for (int s = 0, i = 0; s < ac->n_seqs; s++)
        for (int j = 0; j < ac->new_toks[s]; j++, i++) {
            int p = ac->cached[s] + j;
            token_seq[i] = s;
            ctx_len[i] = p + 1;
            slots[i] = tables[s * stride + p / ac->block_size] * ac->block_size + p % ac->block_size;
        }
    /* the expected pools after kv_write, then attention over them in float64 */
    float *kwant = floats_copy(kpool, pool_n), *vwant = floats_copy(vpool, pool_n);
    if (!kwant || !vwant) {
        free(kwant);
        free(vwant);
        fail(v, "out of memory");
        goto done;
    }
    for (int i = 0; i < total; i++) {
        memcpy(kwant + (size_t)slots[i] * kv_row, k + (size_t)i * kv_row, sizeof(float) * kv_row);
        memcpy(vwant + (size_t)slots[i] * kv_row, vv + (size_t)i * kv_row, sizeof(float) * kv_row);
    }
    float scale = 1.0f / sqrtf((float)D);
    int group = ac->n_heads / ac->n_kv_heads;
    for (int t = 0; t < total; t++) {
        const int32_t *table = tables + token_seq[t] * stride;
        for (int h = 0; h < ac->n_heads; h++) {
            const float *qh = q + ((size_t)t * ac->n_heads + h) * D;
            size_t head_off = (size_t)(h / group) * D;
            double max = -INFINITY, sum = 0;
            for (int j = 0; j < ctx_len[t]; j++) {
                size_t slot = (size_t)table[j / ac->block_size] * ac->block_size + j % ac->block_size;
                double dot = 0;
                for (int d = 0; d < D; d++) dot += (double)qh[d] * kwant[slot * kv_row + head_off + d];
                scores[j] = dot * scale;
                if (scores[j] > max) max = scores[j];
            }
            for (int j = 0; j < ctx_len[t]; j++) sum += scores[j] = exp(scores[j] - max);
            double *oh = want + ((size_t)t * ac->n_heads + h) * D;
            for (int j = 0; j < ctx_len[t]; j++) {
                size_t slot = (size_t)table[j / ac->block_size] * ac->block_size + j % ac->block_size;
                for (int d = 0; d < D; d++) oh[d] += scores[j] / sum * vwant[slot * kv_row + head_off + d];
            }
        }
    }
    same_bits same = {0};
    for (int b = 0; b < bs->n && !v->failed; b++) {
        arena a = arena_on(bs->be[b]);
        /* the pools the backend asks for: bf16 under bf16 compute (cpu, cuda) */
        lm_dtype pool_dtype = lm_kv_dtype(a.be, D);
        lm_kv_layer kv = {up_pool(&a, kpool, pool_n, pool_dtype), up_pool(&a, vpool, pool_n, pool_dtype),
                          n_blocks, ac->block_size, ac->n_kv_heads, D, pool_dtype};
        lm_kv_write(a.be, &kv, up_f32(&a, k, (size_t)total * kv_row),
                    up_f32(&a, vv, (size_t)total * kv_row), total, up_i32(&a, slots, (size_t)total));
        lm_attention_batch batch = {.n_tokens = total,
                                    .token_seq = up_i32(&a, token_seq, (size_t)total),
                                    .ctx_len = up_i32(&a, ctx_len, (size_t)total),
                                    .block_tables = up_i32(&a, tables, (size_t)(stride * ac->n_seqs)),
                                    .table_stride = stride,
                                    .max_ctx_len = max_ctx,
                                    .n_heads = ac->n_heads,
                                    .n_kv_heads = ac->n_kv_heads,
                                    .head_dim = D,
                                    .scale = scale};
        if (!pool_is(&a, kv.k, pool_n, pool_dtype, kwant) || !pool_is(&a, kv.v, pool_n, pool_dtype, vwant))
            fail(v, "kv_write on %s: the %s pools differ", bs->label[b], lm_dtype_name(pool_dtype));
        /* Twice: without the bound on a sequence's tokens (max_seq_tokens
         * 0), and with the true one, as the models pass it: a backend may
         * pick its kernel by it (cuda in bf16 compute: calls of decode rows
         * only take the float32 split kernel, the others the tensor cores),
         * so both kernels meet each pool. */
        for (int pass = 0; pass < 2 && !v->failed; pass++) {
            batch.max_seq_tokens = pass == 0 ? 0 : max_seq_tokens;
            const char *hint = pass == 0 ? "" : " (max_seq_tokens given)";
            lm_mem out = poisoned(&a, q_n);
            lm_attention(a.be, out, up_f32(&a, q, q_n), &kv, &batch);
            float *got = down_f32(&a, out, q_n);
            if (got && pool_dtype != LM_DTYPE_F32) {
                /* the same attention over float32 pools of the rounded
                 * values gives the same bits: storing rounded changes
                 * nothing (the tensor-core kernel and the cpu's bf16
                 * attention round float32 pools as they read them; cuda's
                 * split kernel reads the values as they are) */
                lm_kv_layer wide = {up_rounded(&a, kwant, pool_n), up_rounded(&a, vwant, pool_n), n_blocks,
                                    ac->block_size, ac->n_kv_heads, D, LM_DTYPE_F32};
                lm_mem out32 = poisoned(&a, q_n);
                lm_attention(a.be, out32, up_f32(&a, q, q_n), &wide, &batch);
                float *got32 = down_f32(&a, out32, q_n);
                if (!got32 || memcmp(got32, got, q_n * 4) != 0)
                    fail(v, "attention H=%d D=%d on %s%s: %s pools and float32 pools give different bits",
                         ac->n_heads, D, bs->label[b], hint, lm_dtype_name(pool_dtype));
                free(got32);
            }
            /* bf16 compute: cuda's attention takes bf16 operands (tensor
             * cores), the cpu's too; bf16 pools (both, in bf16 compute) hold
             * k and v rounded.  Against float64 over the unrounded pools:
             * ‖got − want‖ / ‖want‖ < BF16_TOLERANCE (1e-2; bf16 rounding
             * is 2^-9 relative); float32: max error / max |want| < 1e-5. */
            bool rounds = rounds_activations(bs, b, LM_DTYPE_BF16);
            double e = !got ? INFINITY : rounds ? rel_l2_error(got, want, q_n) : rel_error(got, want, q_n);
            if (!(e < (rounds ? BF16_TOLERANCE : TOLERANCE)))
                fail(v, "attention H=%d KV=%d D=%d bs=%d on %s%s (%s pools): error %g%s", ac->n_heads,
                     ac->n_kv_heads, D, ac->block_size, bs->label[b], hint, lm_dtype_name(pool_dtype), e,
                     rounds ? " (l2, bf16 operands)" : "");
            if (got && pass == 0) same_bits_check(&same, v, bs->family[b], "attention", got, q_n * 4, bs->label[b]);
            /* gated_attention: attention, then sigmoid_mul by the gates,
             * bit for bit on the same backend */
            lm_mem gates_m = up_f32(&a, gates, q_n), fused = poisoned(&a, q_n), parts = poisoned(&a, q_n);
            lm_mem q_m = up_f32(&a, q, q_n);
            const fused_kernels *fk = fused_of(bs, b);
            if (fk->gated_attention && fk->gated_attention(a.be, fused, q_m, gates_m, &kv, &batch))
                (*gated_taken)++;
            else
                parts_gated_attention(a.be, fused, q_m, gates_m, &kv, &batch, false);
            parts_gated_attention(a.be, parts, q_m, gates_m, &kv, &batch, true);
            bool memory_ok = true;
            if (!mem_same_bits(&a, fused, parts, q_n, &memory_ok))
                fail(v, "gated_attention H=%d D=%d on %s%s (%s pools) differs bitwise from attention, then "
                     "sigmoid_mul", ac->n_heads, D, bs->label[b], hint, lm_dtype_name(pool_dtype));
            if (!memory_ok) fail(v, "%s: backend memory failed", bs->label[b]);
            /* Batch invariance: each token alone gives the bits it gave in
             * the batch (under the same bound: one token is within it). */
            size_t q_row = (size_t)ac->n_heads * D;
            int32_t zero = 0;
            lm_mem q1 = poisoned(&a, q_row), alone = poisoned(&a, q_row);
            lm_attention_batch one = batch;
            one.n_tokens = 1;
            one.token_seq = up_i32(&a, &zero, 1);
            one.ctx_len = up_i32(&a, &zero, 1);
            for (int t = 0; got && a.ok && t < total && !v->failed; t++) {
                lm_upload(a.be, q1, q + (size_t)t * q_row, q_row * 4);
                lm_upload(a.be, one.token_seq, token_seq + t, 4);
                lm_upload(a.be, one.ctx_len, ctx_len + t, 4);
                lm_attention(a.be, alone, q1, &kv, &one);
                float *row = down_f32(&a, alone, q_row);
                if (!row || memcmp(row, got + (size_t)t * q_row, q_row * 4) != 0)
                    fail(v, "attention H=%d D=%d on %s%s (%s pools): token %d alone differs from its batch",
                         ac->n_heads, D, bs->label[b], hint, lm_dtype_name(pool_dtype), t);
                free(row);
            }
            free(got);
        }
        arena_free(&a);
    }
    same_bits_free(&same);
    free(kwant);
    free(vwant);
done:
    free(kpool);
    free(vpool);
    free(q);
    free(gates);
    free(k);
    free(vv);
    free(tables);
    free(perm);
    free(token_seq);
    free(ctx_len);
    free(slots);
    free(want);
    free(scores);
}

static void test_kv_write_and_attention(void) {
    backends bs;
    CHECK(backends_open(&bs));
    NEED(bs, kv_write);
    NEED(bs, attention);
    verdict v = {0};
    rng r = {13};
    static const attention_case cases[] = {
        /* the fixture: 4 heads over 2 kv heads of 32; one token, 130 tokens */
        {4, 2, 32, 16, 1, {0, 0, 0}, {1, 0, 0}},
        {4, 2, 32, 16, 2, {9, 0, 0}, {1, 130, 0}},
        /* Qwen3.5 0.8B shape: a decode token and a prefill chunk */
        {8, 2, 256, 16, 2, {40, 0, 0}, {1, 21, 0}},
        /* released GQA groups: 16 over 2 (35B-A3B), 96 over 8 of 128 (GLM) */
        {16, 2, 256, 32, 2, {70, 5, 0}, {1, 2, 0}},
        {96, 8, 128, 32, 1, {33, 0, 0}, {2, 0, 0}},
        /* GLM-like: 12 heads over 4 kv heads, D 128, block 32, three sequences */
        {12, 4, 128, 32, 3, {70, 3, 0}, {2, 5, 9}},
        /* odd sizes: D 17, no GQA, block 1 and 3 */
        {3, 3, 17, 1, 1, {5, 0, 0}, {4, 0, 0}},
        {4, 1, 33, 3, 2, {0, 100, 0}, {7, 1, 0}},
        /* a long decode context */
        {2, 1, 64, 16, 1, {1500, 0, 0}, {1, 0, 0}},
        /* prefill chunks of the 9B shape: query tiles of 16 tokens, two
         * sequences sharing one, keys over several tiles */
        {16, 4, 256, 16, 2, {0, 37, 0}, {150, 3, 0}},
        {8, 2, 128, 16, 3, {100, 0, 5}, {70, 20, 1}},
        /* the cpu's query tiles (four queries x a block of 16 keys, a
         * query's last partial block alone): long prefill chunks beside
         * decode rows, at the 0.8B shape (4 heads a kv head: whole tiles of
         * one token's heads), the bundled model's (2: tiles mix tokens) and
         * groups of 1 and 3 (tiles of 1-3 queries, split over tokens); the
         * alone-vs-batch check below makes each tile's bits equal a lone
         * token's */
        {8, 2, 256, 16, 3, {0, 700, 90}, {300, 1, 64}},
        {4, 2, 128, 16, 3, {333, 0, 1000}, {1, 260, 2}},
        {3, 3, 64, 32, 2, {17, 250}, {200, 1}},
        {6, 2, 40, 16, 2, {0, 31}, {97, 66}},
        /* the cuda kernel's runs of keys: 64 runs a token (its most), and
         * with main's 2 MB of partials, one token a wave */
        {16, 4, 256, 16, 1, {2100, 0, 0}, {3, 0, 0}},
    };
    int gated_taken = 0;
    for (size_t c = 0; c < sizeof cases / sizeof cases[0]; c++)
        check_attention(&bs, &v, &r, &cases[c], &gated_taken);
    printf("gated_attention: %d of the calls ran fused\n", gated_taken);
    backends_close(&bs);
    CHECK_VERDICT(v);
}

/* ------------------------------------------------------------ Gated DeltaNet */

/* The model code's float32 formulas (src/models/qwen35/qwen35.c before the op
 * existed): every backend must give these exact bits. */
static float model_softplus(float x) { return x > 20.0f ? x : log1pf(expf(x)); }

static void check_gdn_gates(const backends *bs, verdict *v, rng *r, int n, int H) {
    size_t len = (size_t)n * H;
    float *b_in = random_floats(r, len, 20.0f), *a_in = random_floats(r, len, 30.0f);
    float *A_log = random_floats(r, (size_t)H, 2.0f), *dt_bias = random_floats(r, (size_t)H, 2.0f);
    float *neg_exp_A = malloc(sizeof(float) * (size_t)H);
    float *beta_want = malloc(sizeof(float) * len), *g_want = malloc(sizeof(float) * len);
    if (!b_in || !a_in || !A_log || !dt_bias || !neg_exp_A || !beta_want || !g_want) {
        fail(v, "out of memory");
        goto done;
    }
    for (int h = 0; h < H; h++) neg_exp_A[h] = -expf(A_log[h]);
    /* the softplus threshold exactly, and just around it */
    if (len >= 3) {
        a_in[0] = 20.0f - dt_bias[0];
        a_in[1] = nextafterf(20.0f, 0) - dt_bias[1 % H];
        a_in[2] = nextafterf(20.0f, 100) - dt_bias[2 % H];
    }
    for (int t = 0; t < n; t++)
        for (int h = 0; h < H; h++) {
            size_t i = (size_t)t * H + h;
            beta_want[i] = 1.0f / (1.0f + expf(-b_in[i]));
            g_want[i] = neg_exp_A[h] * model_softplus(a_in[i] + dt_bias[h]);
        }
    for (int k = 0; k < bs->n && !v->failed; k++) {
        arena a = arena_on(bs->be[k]);
        lm_mem beta = up_f32(&a, b_in, len), g = up_f32(&a, a_in, len);
        lm_gdn_gates(a.be, beta, g, up_f32(&a, neg_exp_A, (size_t)H), up_f32(&a, dt_bias, (size_t)H),
                     n, H);
        float *beta_got = down_f32(&a, beta, len), *g_got = down_f32(&a, g, len);
        if (strcmp(bs->family[k], "cuda") == 0) {
            /* the device's expf / log1pf are not the host libm's: a few ulps */
            double worst = 0;
            for (size_t i = 0; beta_got && g_got && i < len; i++) {
                double eb = fabs((double)beta_got[i] - beta_want[i]) / (fabs(beta_want[i]) + 1e-30);
                double eg = fabs((double)g_got[i] - g_want[i]) / (fabs(g_want[i]) + 1e-30);
                if (!(eb <= worst)) worst = eb;
                if (!(eg <= worst)) worst = eg;
            }
            if (!beta_got || !g_got || !(worst < 1e-6))
                fail(v, "gdn_gates n=%d H=%d on %s: relative error %g (limit 1e-6)", n, H, bs->label[k], worst);
        } else if (!beta_got || !g_got || memcmp(beta_got, beta_want, len * 4) != 0 ||
                   memcmp(g_got, g_want, len * 4) != 0)
            fail(v, "gdn_gates n=%d H=%d on %s: not bit-identical to the model's formula", n, H,
                 bs->label[k]);
        free(beta_got);
        free(g_got);
        arena_free(&a);
    }
done:
    free(b_in);
    free(a_in);
    free(A_log);
    free(dt_bias);
    free(neg_exp_A);
    free(beta_want);
    free(g_want);
}

static void test_gdn_gates(void) {
    backends bs;
    CHECK(backends_open(&bs));
    NEED(bs, gdn_gates);
    verdict v = {0};
    rng r = {41};
    static const int shapes[][2] = {{1, 4}, {130, 4}, {1, 32}, {130, 32}, {7, 48}, {3, 1}};
    for (size_t s = 0; s < sizeof shapes / sizeof shapes[0]; s++)
        check_gdn_gates(&bs, &v, &r, shapes[s][0], shapes[s][1]);
    backends_close(&bs);
    CHECK_VERDICT(v);
}

/* A batch of sequences for the stateful ops: lengths given, rows placed
 * out of order with gaps (first[]), states at scattered slots of a state
 * array with padding between slots, some slots unused. */
typedef struct {
    int n_seqs;
    int32_t first[24], length[24], slot[24];
    int rows;  /* of the row arrays, gaps included */
    int slots; /* of the state array */
    int max_length;
} seq_layout;

static seq_layout make_layout(rng *r, const int *lengths, int n_seqs) {
    seq_layout l = {.n_seqs = n_seqs};
    int order[24];
    for (int s = 0; s < n_seqs; s++) order[s] = s;
    for (int s = n_seqs - 1; s > 0; s--) { /* rows in a shuffled order */
        int j = (int)(rng_next(r) % (uint64_t)(s + 1)), t = order[s];
        order[s] = order[j];
        order[j] = t;
    }
    int row = 2; /* a gap before the first sequence too */
    for (int i = 0; i < n_seqs; i++) {
        int s = order[i];
        l.length[s] = lengths[s];
        l.first[s] = row;
        row += lengths[s] + 1 + (int)(rng_next(r) % 3); /* gaps of 1-3 rows */
        if (lengths[s] > l.max_length) l.max_length = lengths[s];
    }
    l.rows = row;
    /* slots: every other slot from the top down, so neither consecutive nor
     * in sequence order; slot 0.. stay partly unused */
    l.slots = 2 * n_seqs + 2;
    for (int s = 0; s < n_seqs; s++) l.slot[s] = l.slots - 1 - 2 * s;
    return l;
}

static lm_seq_batch upload_layout(arena *a, const seq_layout *l) {
    return (lm_seq_batch){.n_seqs = l->n_seqs,
                          .first = up_i32(a, l->first, (size_t)l->n_seqs),
                          .length = up_i32(a, l->length, (size_t)l->n_seqs),
                          .slot = up_i32(a, l->slot, (size_t)l->n_seqs),
                          .max_length = l->max_length};
}

/* One sequence alone: rows from 0, state at slot 0. */
static seq_layout alone_layout(int length) {
    seq_layout l = {.n_seqs = 1, .rows = length, .slots = 1, .max_length = length};
    l.length[0] = length;
    return l;
}

/* Whether rows outside the sequences kept their poison (all bytes 0xFF). */
static bool gaps_untouched(const float *rows, const seq_layout *l, size_t row_floats) {
    for (int row = 0; row < l->rows; row++) {
        bool inside = false;
        for (int s = 0; s < l->n_seqs; s++)
            inside = inside || (row >= l->first[s] && row < l->first[s] + l->length[s]);
        if (inside) continue;
        const uint32_t *bits = (const uint32_t *)(rows + (size_t)row * row_floats);
        for (size_t i = 0; i < row_floats; i++)
            if (bits[i] != 0xFFFFFFFFu) return false;
    }
    return true;
}

static bool slot_unused(const seq_layout *l, int slot) {
    for (int s = 0; s < l->n_seqs; s++)
        if (l->slot[s] == slot) return false;
    return true;
}

/* ---- causal conv1d + SiLU ---- */

typedef struct {
    int C, K;
    const seq_layout *l;
    const float *in, *weight, *states; /* rows [l->rows, C]; states [slots][stride] */
    int64_t stride;
} conv_call;

/* Runs one conv call on a backend; out rows and states come back. */
static bool run_conv(lm_backend *be, const conv_call *c, float **out, float **states) {
    arena a = arena_on(be);
    size_t rows_n = (size_t)c->l->rows * c->C, states_n = (size_t)c->l->slots * c->stride;
    lm_mem outm = poisoned(&a, rows_n), st = up_f32(&a, c->states, states_n);
    lm_seq_batch seqs = upload_layout(&a, c->l);
    lm_causal_conv1d_silu(be, outm, up_f32(&a, c->in, rows_n), c->C,
                          up_f32(&a, c->weight, (size_t)c->C * c->K), c->K, st, c->stride, &seqs);
    *out = down_f32(&a, outm, rows_n);
    *states = down_f32(&a, st, states_n);
    arena_free(&a);
    return *out && *states;
}

static void check_conv_batch(const backends *bs, verdict *v, rng *r, int C, int K,
                             const int *lengths, int n_seqs) {
    seq_layout l = make_layout(r, lengths, n_seqs);
    int hist = K - 1;
    int64_t stride = (int64_t)C * hist + 5; /* padding between slots */
    size_t rows_n = (size_t)l.rows * C, states_n = (size_t)l.slots * stride;
    float *in = random_floats(r, rows_n, 1.0f), *weight = random_floats(r, (size_t)C * K, 0.5f);
    float *states = random_floats(r, states_n, 1.0f);
    double *want = doubles(rows_n);
    float *want_states = floats_copy(states, states_n);
    if (!in || !weight || !states || !want || !want_states) {
        fail(v, "out of memory");
        goto done;
    }
    /* float64 oracle per sequence; the new window is the last K-1 inputs */
    for (int s = 0; s < n_seqs; s++) {
        const float *st0 = states + l.slot[s] * stride;
        float *st = want_states + l.slot[s] * stride;
        for (int c = 0; c < C; c++) {
            for (int t = 0; t < l.length[s]; t++) {
                double acc = 0;
                for (int j = 0; j < K; j++) {
                    int src = t - hist + j;
                    acc += (double)weight[c * K + j] *
                           (src >= 0 ? in[(size_t)(l.first[s] + src) * C + c] : st0[c * hist + hist + src]);
                }
                want[(size_t)(l.first[s] + t) * C + c] = silu64(acc);
            }
            for (int j = 0; j < hist; j++) {
                int src = l.length[s] + j; /* index into [window ; in] */
                st[c * hist + j] = src < hist ? st0[c * hist + src]
                                              : in[(size_t)(l.first[s] + src - hist) * C + c];
            }
        }
    }
    for (int b = 0; b < bs->n && !v->failed; b++) {
        conv_call call = {C, K, &l, in, weight, states, stride};
        float *out = NULL, *got_states = NULL;
        if (!run_conv(bs->be[b], &call, &out, &got_states)) {
            fail(v, "conv on %s: backend memory failed", bs->label[b]);
            free(out);
            free(got_states);
            break;
        }
        /* the sequences' rows against the oracle (gaps hold NaN in both) */
        double worst = 0;
        for (int s = 0; s < n_seqs; s++) {
            size_t off = (size_t)l.first[s] * C, n = (size_t)l.length[s] * C;
            double e = rel_error(out + off, want + off, n);
            if (!(e <= worst)) worst = e;
        }
        if (!(worst < TOLERANCE))
            fail(v, "conv C=%d K=%d on %s: error %g", C, K, bs->label[b], worst);
        if (!gaps_untouched(out, &l, (size_t)C))
            fail(v, "conv C=%d K=%d on %s: wrote rows between sequences", C, K, bs->label[b]);
        /* windows: exactly the last K-1 inputs; unused slots (padding too) untouched */
        if (memcmp(got_states, want_states, states_n * 4) != 0)
            fail(v, "conv C=%d K=%d on %s: states wrong or an unused slot touched", C, K,
                 bs->label[b]);
        /* each sequence alone gives the same bits as in the batch */
        for (int s = 0; s < n_seqs && !v->failed; s++) {
            seq_layout one = alone_layout(l.length[s]);
            conv_call alone = {C, K, &one, in + (size_t)l.first[s] * C, weight,
                               states + l.slot[s] * stride, stride};
            float *out1 = NULL, *st1 = NULL;
            if (!run_conv(bs->be[b], &alone, &out1, &st1) ||
                memcmp(out1, out + (size_t)l.first[s] * C, (size_t)l.length[s] * C * 4) != 0 ||
                memcmp(st1, got_states + l.slot[s] * stride, (size_t)C * hist * 4) != 0)
                fail(v, "conv C=%d K=%d on %s: sequence %d (length %d) alone differs from batched",
                     C, K, bs->label[b], s, l.length[s]);
            free(out1);
            free(st1);
        }
        free(out);
        free(got_states);
    }
done:
    free(in);
    free(weight);
    free(states);
    free(want);
    free(want_states);
}

static void test_causal_conv1d_silu_batched(void) {
    backends bs;
    CHECK(backends_open(&bs));
    NEED(bs, causal_conv1d_silu);
    verdict v = {0};
    rng r = {51};
    static const int mixed[] = {1, 7, 64, 65, 130};
    static const int decode16[] = {1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1};
    static const int one[] = {130};
    /* the fixture (conv_dim 2·2·16 + 4·16 = 128, K 4) */
    check_conv_batch(&bs, &v, &r, 128, 4, mixed, 5);
    check_conv_batch(&bs, &v, &r, 128, 4, one, 1);
    /* released: 0.8B (6144) and 9B/35B (8192) channels; decode of many
     * sequences, a mixed step */
    check_conv_batch(&bs, &v, &r, 8192, 4, decode16, 16);
    check_conv_batch(&bs, &v, &r, 6144, 4, (const int[]){1, 7, 9, 1}, 4);
    /* odd: a channel tail, K = 1, 2, a kernel wider than the vector path,
     * and a zero-length sequence in the batch */
    check_conv_batch(&bs, &v, &r, 70, 4, (const int[]){2, 3, 10, 0}, 4);
    check_conv_batch(&bs, &v, &r, 70, 4, (const int[]){1, 1, 1}, 3); /* decode rows, a tail */
    check_conv_batch(&bs, &v, &r, 17, 1, (const int[]){5, 9}, 2);
    check_conv_batch(&bs, &v, &r, 33, 2, (const int[]){5, 9, 1}, 3);
    check_conv_batch(&bs, &v, &r, 20, 10, (const int[]){3, 12, 1}, 3);
    backends_close(&bs);
    CHECK_VERDICT(v);
}

/* ---- gated delta rule ---- */

typedef struct {
    int Hk, Hv, dk, dv;
    const seq_layout *l;
    const float *q, *k, *v, *g, *beta, *states;
    int64_t stride;
} gdn_call;

static bool run_gdn(lm_backend *be, const gdn_call *c, float **out, float **states) {
    arena a = arena_on(be);
    size_t rows = (size_t)c->l->rows, qk_n = rows * c->Hk * c->dk, v_n = rows * c->Hv * c->dv;
    size_t gate_n = rows * c->Hv, states_n = (size_t)c->l->slots * c->stride;
    lm_mem outm = poisoned(&a, v_n), st = up_f32(&a, c->states, states_n);
    lm_seq_batch seqs = upload_layout(&a, c->l);
    lm_gated_delta_rule(be, outm, up_f32(&a, c->q, qk_n), up_f32(&a, c->k, qk_n),
                        up_f32(&a, c->v, v_n), up_f32(&a, c->g, gate_n),
                        up_f32(&a, c->beta, gate_n), st, c->stride, &seqs, c->Hk, c->Hv, c->dk,
                        c->dv);
    *out = down_f32(&a, outm, v_n);
    *states = down_f32(&a, st, states_n);
    arena_free(&a);
    return *out && *states;
}

static void l2_rows(float *x, size_t rows, int dim, float scale) {
    for (size_t row = 0; row < rows; row++) {
        double ss = 0;
        for (int i = 0; i < dim; i++) ss += (double)x[row * dim + i] * x[row * dim + i];
        for (int i = 0; i < dim; i++) x[row * dim + i] = (float)(x[row * dim + i] / sqrt(ss + 1e-6) * scale);
    }
}

/* The §A.7 recurrence of one sequence in float64. */
static void delta_rule64(const gdn_call *c, int s, double *out, double *S_all) {
    const seq_layout *l = c->l;
    int group = c->Hv / c->Hk;
    for (int t = 0; t < l->length[s]; t++) {
        size_t row = (size_t)(l->first[s] + t);
        for (int hv = 0; hv < c->Hv; hv++) {
            int hk = hv / group;
            const float *q = c->q + (row * c->Hk + hk) * c->dk, *k = c->k + (row * c->Hk + hk) * c->dk;
            const float *vv = c->v + (row * c->Hv + hv) * c->dv;
            double *S = S_all + (size_t)hv * c->dk * c->dv;
            double decay = exp((double)c->g[row * c->Hv + hv]), beta = c->beta[row * c->Hv + hv];
            for (int j = 0; j < c->dv; j++) {
                double m = 0;
                for (int i = 0; i < c->dk; i++) m += (S[i * c->dv + j] *= decay) * k[i];
                double d = (vv[j] - m) * beta, o = 0;
                for (int i = 0; i < c->dk; i++) o += (S[i * c->dv + j] += k[i] * d) * q[i];
                out[(row * c->Hv + hv) * c->dv + j] = o;
            }
        }
    }
}

static void check_gdn_batch(const backends *bs, verdict *v, rng *r, int Hk, int Hv, int dk, int dv,
                            const int *lengths, int n_seqs) {
    seq_layout l = make_layout(r, lengths, n_seqs);
    int64_t state_n = (int64_t)Hv * dk * dv, stride = state_n + 3;
    size_t rows = (size_t)l.rows, qk_n = rows * Hk * dk, v_n = rows * Hv * dv, gate_n = rows * Hv;
    size_t states_n = (size_t)l.slots * stride;
    float *q = random_floats(r, qk_n, 1.0f), *k = random_floats(r, qk_n, 1.0f);
    float *vv = random_floats(r, v_n, 1.0f), *g = random_floats(r, gate_n, 1.0f);
    float *beta = random_floats(r, gate_n, 1.0f), *states = random_floats(r, states_n, 0.5f);
    double *want = doubles(v_n), *S = doubles((size_t)state_n);
    if (!q || !k || !vv || !g || !beta || !states || !want || !S) {
        fail(v, "out of memory");
        goto done;
    }
    l2_rows(q, rows * Hk, dk, 1.0f / sqrtf((float)dk));
    l2_rows(k, rows * Hk, dk, 1.0f);
    for (size_t i = 0; i < gate_n; i++) {
        g[i] = -0.05f - 1.5f * (g[i] + 1.0f);   /* log decay in (-3, -0.05] */
        beta[i] = 0.5f + 0.45f * beta[i];       /* in (0.05, 0.95) */
    }
    gdn_call call = {Hk, Hv, dk, dv, &l, q, k, vv, g, beta, states, stride};
    double *want_states = doubles(states_n);
    if (!want_states) {
        fail(v, "out of memory");
        goto done;
    }
    for (size_t i = 0; i < states_n; i++) want_states[i] = states[i];
    for (int s = 0; s < n_seqs; s++) {
        double *St = want_states + l.slot[s] * stride;
        for (int64_t i = 0; i < state_n; i++) S[i] = St[i];
        delta_rule64(&call, s, want, S);
        for (int64_t i = 0; i < state_n; i++) St[i] = S[i];
    }
    for (int b = 0; b < bs->n && !v->failed; b++) {
        float *out = NULL, *got_states = NULL;
        if (!run_gdn(bs->be[b], &call, &out, &got_states)) {
            fail(v, "delta rule on %s: backend memory failed", bs->label[b]);
            free(out);
            free(got_states);
            break;
        }
        double worst_out = 0, worst_state = 0;
        for (int s = 0; s < n_seqs; s++) {
            size_t off = (size_t)l.first[s] * Hv * dv, n = (size_t)l.length[s] * Hv * dv;
            double eo = rel_error(out + off, want + off, n);
            double es = rel_error(got_states + l.slot[s] * stride, want_states + l.slot[s] * stride,
                                  (size_t)state_n);
            if (!(eo <= worst_out)) worst_out = eo;
            if (!(es <= worst_state)) worst_state = es;
        }
        if (!(worst_out < TOLERANCE) || !(worst_state < TOLERANCE))
            fail(v, "delta rule Hk=%d Hv=%d dk=%d dv=%d on %s: error out %g state %g", Hk, Hv, dk,
                 dv, bs->label[b], worst_out, worst_state);
        if (!gaps_untouched(out, &l, (size_t)Hv * dv))
            fail(v, "delta rule on %s: wrote rows between sequences", bs->label[b]);
        for (int slot = 0; slot < l.slots; slot++) /* unused slots keep their exact bits */
            if (slot_unused(&l, slot) &&
                memcmp(got_states + slot * stride, states + slot * stride, stride * 4) != 0)
                fail(v, "delta rule on %s: unused slot %d touched", bs->label[b], slot);
        for (int s = 0; s < n_seqs; s++) /* the padding after a used slot too */
            if (memcmp(got_states + l.slot[s] * stride + state_n,
                       states + l.slot[s] * stride + state_n, (size_t)(stride - state_n) * 4) != 0)
                fail(v, "delta rule on %s: wrote past a state", bs->label[b]);
        for (int s = 0; s < n_seqs && !v->failed; s++) {
            seq_layout one = alone_layout(l.length[s]);
            size_t f = (size_t)l.first[s];
            gdn_call alone = {Hk,          Hv,           dk,
                              dv,          &one,         q + f * Hk * dk,
                              k + f * Hk * dk, vv + f * Hv * dv, g + f * Hv,
                              beta + f * Hv, states + l.slot[s] * stride, stride};
            float *out1 = NULL, *st1 = NULL;
            if (!run_gdn(bs->be[b], &alone, &out1, &st1) ||
                memcmp(out1, out + f * Hv * dv, (size_t)l.length[s] * Hv * dv * 4) != 0 ||
                memcmp(st1, got_states + l.slot[s] * stride, (size_t)state_n * 4) != 0)
                fail(v, "delta rule on %s: sequence %d (length %d) alone differs from batched",
                     bs->label[b], s, l.length[s]);
            free(out1);
            free(st1);
        }
        free(out);
        free(got_states);
    }
    free(want_states);
done:
    free(q);
    free(k);
    free(vv);
    free(g);
    free(beta);
    free(states);
    free(want);
    free(S);
}

static void test_gated_delta_rule_batched(void) {
    backends bs;
    CHECK(backends_open(&bs));
    NEED(bs, gated_delta_rule);
    verdict v = {0};
    rng r = {61};
    static const int mixed[] = {1, 7, 64, 65, 130};
    static const int decode16[] = {1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1};
    /* the fixture: 2 key heads, 4 value heads of 16 */
    check_gdn_batch(&bs, &v, &r, 2, 4, 16, 16, mixed, 5);
    check_gdn_batch(&bs, &v, &r, 2, 4, 16, 16, (const int[]){130}, 1);
    check_gdn_batch(&bs, &v, &r, 2, 4, 16, 16, decode16, 16);
    /* released: 16 key / 32 value heads of 128 (9B, 35B-A3B), decode of many
     * sequences and a short mixed step; 16 / 16 (0.8B) */
    check_gdn_batch(&bs, &v, &r, 16, 32, 128, 128, decode16, 16);
    check_gdn_batch(&bs, &v, &r, 16, 32, 128, 128, (const int[]){1, 3, 1}, 3);
    check_gdn_batch(&bs, &v, &r, 16, 16, 128, 128, (const int[]){2, 1}, 2);
    /* prefill beside decode: the cuda backend's chunked form (16 rows or
     * more; chunks of 64, a partial last one) next to its recurrent one */
    check_gdn_batch(&bs, &v, &r, 16, 32, 128, 128, (const int[]){150, 1, 16, 15}, 4);
    check_gdn_batch(&bs, &v, &r, 2, 4, 16, 16, (const int[]){300, 2}, 2);
    /* odd: dv not a multiple of the tile, fewer heads than threads, a
     * zero-length sequence */
    check_gdn_batch(&bs, &v, &r, 3, 6, 33, 40, (const int[]){5, 1, 0}, 3);
    check_gdn_batch(&bs, &v, &r, 1, 1, 16, 80, (const int[]){9, 2}, 2);
    backends_close(&bs);
    CHECK_VERDICT(v);
}

/* ---- gdn_prepare: the delta rule's inputs in one op ---- */

typedef struct {
    float *q, *k, *v, *beta, *g, *states;
} prepare_result;

static void prepare_result_free(prepare_result *p) {
    free(p->q), free(p->k), free(p->v), free(p->beta), free(p->g), free(p->states);
}

/* Runs gdn_prepare on be over the layout's rows: the fused kernel of fk
 * (NULL: none), else the parts, apart or for the window to fuse; *fused:
 * whether the kernel took the call. */
static bool run_prepare(lm_backend *be, const fused_kernels *fk, bool apart, lm_gdn_prepare_args args, const seq_layout *l, const float *mixed,
                        const float *beta, const float *g, const float *weight, const float *states,
                        const float *neg_exp_A, const float *dt_bias, prepare_result *out, bool *fused) {
    arena a = arena_on(be);
    size_t rows = (size_t)l->rows, kd = (size_t)args.Hk * args.dk, vd = (size_t)args.Hv * args.dv;
    size_t cd = 2 * kd + vd, gates = rows * (size_t)args.Hv;
    size_t states_n = (size_t)l->slots * (size_t)args.conv_slot_stride;
    lm_seq_batch seqs = upload_layout(&a, l);
    args.q = poisoned(&a, rows * kd), args.k = poisoned(&a, rows * kd), args.v = poisoned(&a, rows * vd);
    args.beta = up_f32(&a, beta, gates), args.g = up_f32(&a, g, gates);
    args.mixed = up_f32(&a, mixed, rows * cd);
    args.conv_weight = up_f32(&a, weight, cd * (size_t)args.conv_kernel);
    args.conv_states = up_f32(&a, states, states_n);
    args.neg_exp_A = up_f32(&a, neg_exp_A, (size_t)args.Hv), args.dt_bias = up_f32(&a, dt_bias, (size_t)args.Hv);
    args.seqs = &seqs, args.n = l->rows;
    lm_mem conv_out = poisoned(&a, rows * cd);
    if (!a.ok) {
        arena_free(&a);
        return false;
    }
    *fused = fk && fk->gdn_prepare && fk->gdn_prepare(be, &args);
    if (!*fused) parts_gdn_prepare(be, &args, conv_out, apart);
    *out = (prepare_result){down_f32(&a, args.q, rows * kd), down_f32(&a, args.k, rows * kd),
                            down_f32(&a, args.v, rows * vd),  down_f32(&a, args.beta, gates),
                            down_f32(&a, args.g, gates),      down_f32(&a, args.conv_states, states_n)};
    arena_free(&a);
    return out->q && out->k && out->v && out->beta && out->g && out->states;
}

/* Whether the sequences' rows (width floats each) agree bit for bit. */
static bool same_sequence_rows(const float *a, const float *b, const seq_layout *l, size_t width) {
    for (int s = 0; s < l->n_seqs; s++)
        if (memcmp(a + (size_t)l->first[s] * width, b + (size_t)l->first[s] * width,
                   (size_t)l->length[s] * width * sizeof(float)) != 0)
            return false;
    return true;
}

/* gdn_prepare against its parts (gdn_gates, causal_conv1d_silu, the split,
 * l2norm_scale) on the same backend: the same bits in every sequence row
 * and the same windows. */
static void check_gdn_prepare(const backends *bs, verdict *v, rng *r, int Hk, int Hv, int dk, int dv, int K,
                              const int *lengths, int n_seqs, int *taken) {
    seq_layout l = make_layout(r, lengths, n_seqs);
    size_t rows = (size_t)l.rows, kd = (size_t)Hk * dk, vd = (size_t)Hv * dv, cd = 2 * kd + vd;
    int64_t stride = (int64_t)cd * (K - 1) + 3;
    size_t states_n = (size_t)l.slots * (size_t)stride;
    float *mixed = random_floats(r, rows * cd, 2.0f), *weight = random_floats(r, cd * (size_t)K, 0.5f);
    float *states = random_floats(r, states_n, 1.0f), *beta = random_floats(r, rows * (size_t)Hv, 4.0f);
    float *g = random_floats(r, rows * (size_t)Hv, 4.0f), *neg_exp_A = random_floats(r, (size_t)Hv, 1.0f);
    float *dt_bias = random_floats(r, (size_t)Hv, 1.0f);
    if (!mixed || !weight || !states || !beta || !g || !neg_exp_A || !dt_bias) {
        fail(v, "out of memory");
        goto done;
    }
    for (int h = 0; h < Hv; h++) neg_exp_A[h] = -expf(neg_exp_A[h]);
    lm_gdn_prepare_args args = {.conv_kernel = K, .conv_slot_stride = stride, .Hk = Hk, .Hv = Hv, .dk = dk,
                                .dv = dv, .q_scale = 1.0f / sqrtf((float)dk), .eps = 1e-6f};
    for (int b = 0; b < bs->n && !v->failed; b++) {
        /* the fused kernel, the plain ops as the model writes them (cuda's
         * window fuses them), and the parts apart: one set of bits */
        prepare_result got = {0}, windowed = {0}, want = {0};
        bool fused = false, unused = false;
        if (!run_prepare(bs->be[b], fused_of(bs, b), false, args, &l, mixed, beta, g, weight, states, neg_exp_A,
                         dt_bias, &got, &fused) ||
            !run_prepare(bs->be[b], NULL, false, args, &l, mixed, beta, g, weight, states, neg_exp_A, dt_bias,
                         &windowed, &unused) ||
            !run_prepare(bs->be[b], NULL, true, args, &l, mixed, beta, g, weight, states, neg_exp_A, dt_bias, &want,
                         &unused))
            fail(v, "gdn_prepare on %s: backend memory failed", bs->label[b]);
        for (int pass = 0; pass < 2 && !v->failed; pass++) {
            const prepare_result *x = pass == 0 ? &got : &windowed;
            if (!same_sequence_rows(x->q, want.q, &l, kd) || !same_sequence_rows(x->k, want.k, &l, kd) ||
                !same_sequence_rows(x->v, want.v, &l, vd) || !same_sequence_rows(x->beta, want.beta, &l, (size_t)Hv) ||
                !same_sequence_rows(x->g, want.g, &l, (size_t)Hv) ||
                memcmp(x->states, want.states, states_n * sizeof(float)) != 0)
                fail(v, "gdn_prepare Hk=%d Hv=%d dk=%d dv=%d K=%d (%d sequences, longest %d) on %s: %s differs "
                     "bitwise from its parts", Hk, Hv, dk, dv, K, n_seqs, l.max_length, bs->label[b],
                     pass == 0 ? "the fused kernel" : "the plain ops in one window");
        }
        *taken += fused;
        prepare_result_free(&got);
        prepare_result_free(&windowed);
        prepare_result_free(&want);
    }
done:
    free(mixed), free(weight), free(states), free(beta), free(g), free(neg_exp_A), free(dt_bias);
}

static void test_gdn_prepare(void) {
    backends bs;
    CHECK(backends_open(&bs));
    NEED(bs, causal_conv1d_silu);
    verdict v = {0};
    rng r = {67};
    int taken = 0;
    static const int decode16[] = {1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1};
    /* the fixture's heads; released 9B/35B (16 / 32 of 128) and 0.8B (16 /
     * 16); decode, verify rows, a zero-length sequence, sequences longer
     * than a fused launch takes (the parts run), key heads wider than a
     * block's threads, K = 1 and 2 */
    check_gdn_prepare(&bs, &v, &r, 2, 4, 16, 16, 4, decode16, 16, &taken);
    check_gdn_prepare(&bs, &v, &r, 2, 4, 16, 16, 4, (const int[]){3, 1, 4, 0}, 4, &taken);
    check_gdn_prepare(&bs, &v, &r, 16, 32, 128, 128, 4, (const int[]){1}, 1, &taken);
    check_gdn_prepare(&bs, &v, &r, 16, 32, 128, 128, 4, (const int[]){3, 1, 3}, 3, &taken);
    check_gdn_prepare(&bs, &v, &r, 16, 16, 128, 128, 4, (const int[]){16, 2}, 2, &taken);
    check_gdn_prepare(&bs, &v, &r, 2, 4, 24, 20, 4, (const int[]){17, 1}, 2, &taken);
    check_gdn_prepare(&bs, &v, &r, 1, 2, 300, 40, 4, (const int[]){2, 1}, 2, &taken);
    check_gdn_prepare(&bs, &v, &r, 3, 6, 33, 40, 1, (const int[]){5, 1}, 2, &taken);
    check_gdn_prepare(&bs, &v, &r, 1, 1, 16, 80, 2, (const int[]){9, 2}, 2, &taken);
    printf("gdn_prepare: %d of the calls ran fused\n", taken);
    backends_close(&bs);
    CHECK_VERDICT(v);
}

/* ---- gated_delta_rule_norm: the delta rule and its output norm in one op ---- */

/* Runs gated_delta_rule_norm on be: fk's fused kernel (NULL: none), else
 * the parts, apart or for the window; *fused: whether the kernel took it. */
static bool run_delta_rule_norm(lm_backend *be, const fused_kernels *fk, bool apart, const gdn_call *c, const float *z, const float *norm, float **out,
                                float **states, bool *fused) {
    arena a = arena_on(be);
    size_t rows = (size_t)c->l->rows, qk_n = rows * c->Hk * c->dk, v_n = rows * c->Hv * c->dv;
    size_t gate_n = rows * c->Hv, states_n = (size_t)c->l->slots * c->stride;
    lm_seq_batch seqs = upload_layout(&a, c->l);
    lm_delta_rule_norm_args args = {
        .out = poisoned(&a, v_n), .q = up_f32(&a, c->q, qk_n), .k = up_f32(&a, c->k, qk_n),
        .v = up_f32(&a, c->v, v_n), .g = up_f32(&a, c->g, gate_n), .beta = up_f32(&a, c->beta, gate_n),
        .states = up_f32(&a, c->states, states_n), .slot_stride = c->stride, .seqs = &seqs,
        .z = up_f32(&a, z, v_n), .norm = up_f32(&a, norm, (size_t)c->dv), .n = c->l->rows, .Hk = c->Hk,
        .Hv = c->Hv, .dk = c->dk, .dv = c->dv, .eps = 1e-6f};
    if (!a.ok) {
        arena_free(&a);
        return false;
    }
    *fused = fk && fk->gated_delta_rule_norm && fk->gated_delta_rule_norm(be, &args);
    if (!*fused) parts_delta_rule_norm(be, &args, apart);
    *out = down_f32(&a, args.out, v_n);
    *states = down_f32(&a, args.states, states_n);
    arena_free(&a);
    return *out && *states;
}

/* gated_delta_rule_norm against its parts (gated_delta_rule, then
 * gated_rmsnorm) on the same backend: the same bits in every sequence row
 * and every state. */
static void check_delta_rule_norm(const backends *bs, verdict *v, rng *r, int Hk, int Hv, int dk, int dv,
                                  const int *lengths, int n_seqs, int *taken) {
    seq_layout l = make_layout(r, lengths, n_seqs);
    int64_t stride = (int64_t)Hv * dk * dv + 3;
    size_t rows = (size_t)l.rows, qk_n = rows * Hk * dk, v_n = rows * Hv * dv, gate_n = rows * Hv;
    size_t states_n = (size_t)l.slots * stride;
    float *q = random_floats(r, qk_n, 1.0f), *k = random_floats(r, qk_n, 1.0f);
    float *vv = random_floats(r, v_n, 1.0f), *g = random_floats(r, gate_n, 1.0f);
    float *beta = random_floats(r, gate_n, 1.0f), *states = random_floats(r, states_n, 0.5f);
    float *z = random_floats(r, v_n, 3.0f), *norm = random_floats(r, (size_t)dv, 1.0f);
    if (!q || !k || !vv || !g || !beta || !states || !z || !norm) {
        fail(v, "out of memory");
        goto done;
    }
    l2_rows(q, rows * Hk, dk, 1.0f / sqrtf((float)dk));
    l2_rows(k, rows * Hk, dk, 1.0f);
    for (size_t i = 0; i < gate_n; i++) {
        g[i] = -0.05f - 1.5f * (g[i] + 1.0f);
        beta[i] = 0.5f + 0.45f * beta[i];
    }
    gdn_call call = {Hk, Hv, dk, dv, &l, q, k, vv, g, beta, states, stride};
    for (int b = 0; b < bs->n && !v->failed; b++) {
        float *got = NULL, *got_states = NULL, *want = NULL, *want_states = NULL;
        bool fused = false, parts_fused = false;
        if (!run_delta_rule_norm(bs->be[b], fused_of(bs, b), false, &call, z, norm, &got, &got_states, &fused) ||
            !run_delta_rule_norm(bs->be[b], NULL, true, &call, z, norm, &want, &want_states, &parts_fused))
            fail(v, "gated_delta_rule_norm on %s: backend memory failed", bs->label[b]);
        else if (!same_sequence_rows(got, want, &l, (size_t)Hv * dv))
            fail(v, "gated_delta_rule_norm Hk=%d Hv=%d dk=%d dv=%d (%d sequences, longest %d) on %s: the output "
                 "differs bitwise from its parts'", Hk, Hv, dk, dv, n_seqs, l.max_length, bs->label[b]);
        else if (memcmp(got_states, want_states, states_n * sizeof(float)) != 0)
            fail(v, "gated_delta_rule_norm Hk=%d Hv=%d dk=%d dv=%d on %s: the states differ bitwise from its parts'",
                 Hk, Hv, dk, dv, bs->label[b]);
        *taken += fused;
        free(got), free(got_states), free(want), free(want_states);
    }
done:
    free(q), free(k), free(vv), free(g), free(beta), free(states), free(z), free(norm);
}

static void test_delta_rule_norm(void) {
    backends bs;
    CHECK(backends_open(&bs));
    NEED(bs, gated_delta_rule);
    verdict v = {0};
    rng r = {73};
    int taken = 0;
    static const int decode16[] = {1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1};
    /* released 9B / 35B-A3B (16 / 32 heads of 128) and 0.8B (16 / 16):
     * decode, verify rows, a zero-length sequence; the fixture's heads and a
     * prefill beside decode (the parts run) */
    check_delta_rule_norm(&bs, &v, &r, 16, 32, 128, 128, decode16, 16, &taken);
    check_delta_rule_norm(&bs, &v, &r, 16, 32, 128, 128, (const int[]){3, 1, 0, 3}, 4, &taken);
    check_delta_rule_norm(&bs, &v, &r, 16, 16, 128, 128, (const int[]){2, 1}, 2, &taken);
    check_delta_rule_norm(&bs, &v, &r, 2, 4, 16, 16, (const int[]){1, 2}, 2, &taken);
    check_delta_rule_norm(&bs, &v, &r, 16, 32, 128, 128, (const int[]){20, 1}, 2, &taken);
    printf("gated_delta_rule_norm: %d of the calls ran fused\n", taken);
    backends_close(&bs);
    CHECK_VERDICT(v);
}

/* ---- attention_prepare: gated attention's inputs in one op ---- */

typedef struct {
    float *q, *gates, *k, *kpool, *vpool; /* the pools as floats (bf16 widened) */
} attn_prep_result;

static void attn_prep_result_free(attn_prep_result *p) {
    free(p->q), free(p->gates), free(p->k), free(p->kpool), free(p->vpool);
}

/* A pool of n elements of dtype, downloaded as floats. */
static float *down_pool(arena *a, lm_mem m, size_t n, lm_dtype dtype) {
    if (dtype != LM_DTYPE_BF16) return down_f32(a, m, n);
    uint16_t *h = malloc(sizeof(uint16_t) * (n ? n : 1));
    float *f = malloc(sizeof(float) * (n ? n : 1));
    lm_error err = {0};
    if (!h || !f || !a->ok || lm_download(a->be, h, m, n * sizeof(uint16_t), &err) != LM_OK) {
        free(h), free(f);
        a->ok = false;
        return NULL;
    }
    for (size_t i = 0; i < n; i++) f[i] = lm_bf16_to_f32(h[i]);
    free(h);
    return f;
}

/* Runs attention_prepare on be: fk's fused kernel (NULL: none), else the
 * parts, apart or for the window; *fused: whether the kernel took it. */
static bool run_attention_prepare(lm_backend *be, const fused_kernels *fk, bool apart, lm_attention_prepare_args args, lm_kv_layer kv, const float *qg,
                                  const float *k, const float *v, const float *qn, const float *kn,
                                  const int32_t *pos, const int32_t *slots, size_t pool_n, const float *pool,
                                  attn_prep_result *out, bool *fused) {
    arena a = arena_on(be);
    size_t n = (size_t)args.n, D = (size_t)args.head_dim, qd = (size_t)args.n_heads * D;
    size_t kd = (size_t)args.n_kv_heads * D;
    args.q = poisoned(&a, n * qd), args.gates = poisoned(&a, n * qd);
    args.k = up_f32(&a, k, n * kd), args.v = up_f32(&a, v, n * kd);
    args.q_and_gate = up_f32(&a, qg, 2 * n * qd);
    args.q_norm = up_f32(&a, qn, D), args.k_norm = up_f32(&a, kn, D);
    args.positions = up_i32(&a, pos, 3 * n), args.kv_slots = up_i32(&a, slots, n);
    kv.k = up_pool(&a, pool, pool_n, kv.dtype), kv.v = up_pool(&a, pool, pool_n, kv.dtype);
    args.kv = &kv;
    if (!a.ok) {
        arena_free(&a);
        return false;
    }
    *fused = fk && fk->attention_prepare && fk->attention_prepare(be, &args);
    if (!*fused) parts_attention_prepare(be, &args, apart);
    *out = (attn_prep_result){down_f32(&a, args.q, n * qd), down_f32(&a, args.gates, n * qd),
                              down_f32(&a, args.k, n * kd), down_pool(&a, kv.k, pool_n, kv.dtype),
                              down_pool(&a, kv.v, pool_n, kv.dtype)};
    arena_free(&a);
    return out->q && out->gates && out->k && out->kpool && out->vpool;
}

/* attention_prepare against its parts (copy_rows, rmsnorm, rope, kv_write)
 * on the same backend, with the pools it asks for and with bf16 pools
 * where it writes them: the same bits in q, the gates, k and both pools. */
static void check_attention_prepare(const backends *bs, verdict *v, rng *r, int n, int nH, int nKV, int D,
                                    lm_rope_params rope, int *taken) {
    const int block_size = 16, n_blocks = (n + block_size - 1) / block_size + 2;
    size_t qd = (size_t)nH * D, kd = (size_t)nKV * D, pool_n = (size_t)n_blocks * block_size * kd;
    float *qg = random_floats(r, 2 * (size_t)n * qd, 3.0f), *k = random_floats(r, (size_t)n * kd, 3.0f);
    float *vv = random_floats(r, (size_t)n * kd, 1.0f), *qn = random_floats(r, (size_t)D, 1.0f);
    float *kn = random_floats(r, (size_t)D, 1.0f), *pool = random_floats(r, pool_n, 1.0f);
    int32_t *pos = malloc(sizeof(int32_t) * 3 * (size_t)n), *slots = malloc(sizeof(int32_t) * (size_t)n);
    if (!qg || !k || !vv || !qn || !kn || !pool || !pos || !slots) {
        fail(v, "out of memory");
        goto done;
    }
    for (int t = 0; t < n; t++) {
        pos[3 * t] = 5000 + 7 * t, pos[3 * t + 1] = (int32_t)(rng_next(r) % 50), pos[3 * t + 2] = t % 9;
        /* scattered and distinct: 7 is prime to the pool's multiple of 16 slots */
        slots[t] = (t * 7 + 3) % (n_blocks * block_size);
    }
    lm_attention_prepare_args args = {.rope = &rope, .n = n, .n_heads = nH, .n_kv_heads = nKV, .head_dim = D,
                                      .eps = 1e-6f};
    for (int b = 0; b < bs->n && !v->failed; b++) {
        lm_dtype asked = lm_kv_dtype(bs->be[b], D);
        for (int pass = 0; pass < 2 && !v->failed; pass++) {
            /* pass 1: a bf16 pool on a backend whose kv_write writes one (cuda always) */
            lm_dtype dtype = pass == 0 ? asked : LM_DTYPE_BF16;
            if (pass == 1 && (asked == LM_DTYPE_BF16 || strcmp(bs->family[b], "cuda") != 0)) continue;
            lm_kv_layer kv = {.n_blocks = n_blocks, .block_size = block_size, .n_kv_heads = nKV, .head_dim = D,
                              .dtype = dtype};
            /* the fused kernel, the plain ops in one window (cuda fuses
             * them), the parts apart: one set of bits */
            attn_prep_result got = {0}, windowed = {0}, want = {0};
            bool fused = false, unused = false;
            if (!run_attention_prepare(bs->be[b], fused_of(bs, b), false, args, kv, qg, k, vv, qn, kn, pos, slots,
                                       pool_n, pool, &got, &fused) ||
                !run_attention_prepare(bs->be[b], NULL, false, args, kv, qg, k, vv, qn, kn, pos, slots, pool_n, pool,
                                       &windowed, &unused) ||
                !run_attention_prepare(bs->be[b], NULL, true, args, kv, qg, k, vv, qn, kn, pos, slots, pool_n, pool,
                                       &want, &unused))
                fail(v, "attention_prepare on %s: backend memory failed", bs->label[b]);
            for (int which = 0; which < 2 && !v->failed; which++) {
                const attn_prep_result *x = which == 0 ? &got : &windowed;
                const char *differs = memcmp(x->q, want.q, sizeof(float) * (size_t)n * qd)           ? "q"
                                      : memcmp(x->gates, want.gates, sizeof(float) * (size_t)n * qd) ? "the gates"
                                      : memcmp(x->k, want.k, sizeof(float) * (size_t)n * kd)         ? "k"
                                      : memcmp(x->kpool, want.kpool, sizeof(float) * pool_n)         ? "the k pool"
                                      : memcmp(x->vpool, want.vpool, sizeof(float) * pool_n)         ? "the v pool"
                                                                                                     : NULL;
                if (differs)
                    fail(v, "attention_prepare n=%d heads %d/%d D=%d rot %d (%s pools) on %s: %s of %s differs "
                         "bitwise from its parts'", n, nH, nKV, D, rope.rot_dim, lm_dtype_name(dtype), bs->label[b],
                         differs, which == 0 ? "the fused kernel" : "the plain ops in one window");
            }
            *taken += fused;
            attn_prep_result_free(&got);
            attn_prep_result_free(&windowed);
            attn_prep_result_free(&want);
        }
    }
done:
    free(qg), free(k), free(vv), free(qn), free(kn), free(pool), free(pos), free(slots);
}

static void test_attention_prepare(void) {
    backends bs;
    CHECK(backends_open(&bs));
    NEED(bs, rope);
    verdict v = {0};
    rng r = {71};
    int taken = 0;
    const lm_rope_params fixture = {.rot_dim = 8, .theta = 1e6f, .sections = {2, 1, 1}, .interleaved_sections = true};
    const lm_rope_params released = {.rot_dim = 64, .theta = 1e7f, .sections = {11, 11, 10},
                                     .interleaved_sections = true};
    const lm_rope_params pairs = {.rot_dim = 64, .theta = 10000.0f, .sections = {8, 12, 12}, .pair_interleaved = true};
    const lm_rope_params wide = {.rot_dim = 1280, .theta = 10000.0f, .sections = {640, 0, 0}};
    /* the fixture's heads (4 / 2 of 32); the released 9B / 27B decode and
     * a verify step (16 / 4 of 256); interleaved pairs; more pairs than a
     * fused launch takes (the parts run) */
    check_attention_prepare(&bs, &v, &r, 1, 4, 2, 32, fixture, &taken);
    check_attention_prepare(&bs, &v, &r, 37, 4, 2, 32, fixture, &taken);
    check_attention_prepare(&bs, &v, &r, 1, 16, 4, 256, released, &taken);
    check_attention_prepare(&bs, &v, &r, 3, 16, 4, 256, released, &taken);
    check_attention_prepare(&bs, &v, &r, 5, 3, 1, 128, pairs, &taken);
    check_attention_prepare(&bs, &v, &r, 2, 2, 2, 1280, wide, &taken);
    printf("attention_prepare: %d of the calls ran fused\n", taken);
    backends_close(&bs);
    CHECK_VERDICT(v);
}

/* ------------------------------------------------------------ mixture of experts */

/* ---- sigmoid_scale_rows (Qwen3.5's shared-expert gate) ---- */

static void check_sigmoid_scale_rows(const backends *bs, verdict *v, rng *r, int rows, int width) {
    size_t n = (size_t)rows * (size_t)width;
    float *x = random_floats(r, n, 3.0f), *gate = random_floats(r, (size_t)rows, 8.0f);
    double *want = doubles(n);
    if (!x || !gate || !want) {
        fail(v, "out of memory");
        goto done;
    }
    if (rows > 3) gate[1] = -100.0f, gate[2] = 100.0f; /* exp under/overflow */
    for (int row = 0; row < rows; row++) {
        double s = 1.0 / (1.0 + exp(-(double)gate[row]));
        for (int i = 0; i < width; i++)
            want[(size_t)row * width + i] = x[(size_t)row * width + i] * s;
    }
    same_bits same = {0};
    for (int b = 0; b < bs->n && !v->failed; b++) {
        arena a = arena_on(bs->be[b]);
        lm_mem xm = up_f32(&a, x, n);
        lm_sigmoid_scale_rows(a.be, xm, up_f32(&a, gate, (size_t)rows), rows, width);
        float *got = down_f32(&a, xm, n);
        double e = got ? rel_error(got, want, n) : INFINITY;
        if (!(e < TOLERANCE))
            fail(v, "sigmoid_scale_rows %dx%d on %s: error %g", rows, width, bs->label[b], e);
        if (got) same_bits_check(&same, v, bs->family[b], "sigmoid_scale_rows", got, n * 4, bs->label[b]);
        free(got);
        arena_free(&a);
    }
    same_bits_free(&same);
done:
    free(x);
    free(gate);
    free(want);
}

static void test_sigmoid_scale_rows(void) {
    backends bs;
    CHECK(backends_open(&bs));
    NEED(bs, sigmoid_scale_rows);
    verdict v = {0};
    rng r = {81};
    /* odd, the fixture (hidden 64), released hidden widths, 1 and 130 tokens */
    static const int shapes[][2] = {{1, 1},    {3, 17},    {5, 1000}, {1, 64},
                                    {130, 64}, {1, 2048},  {7, 2048}, {130, 2048},
                                    {2, 4096}, {130, 4097}};
    for (size_t s = 0; s < sizeof shapes / sizeof shapes[0]; s++)
        check_sigmoid_scale_rows(&bs, &v, &r, shapes[s][0], shapes[s][1]);
    backends_close(&bs);
    CHECK_VERDICT(v);
}

/* ---- add_rows (the biases of GLM's q/k/v projections) ---- */

static void check_add_rows(const backends *bs, verdict *v, rng *r, int rows, int width) {
    size_t n = (size_t)rows * (size_t)width;
    float *x = random_floats(r, n, 3.0f), *bias = random_floats(r, (size_t)width, 2.0f);
    double *want = doubles(n);
    if (!x || !bias || !want) {
        fail(v, "out of memory");
        goto done;
    }
    for (int row = 0; row < rows; row++)
        for (int i = 0; i < width; i++)
            want[(size_t)row * width + i] = (double)x[(size_t)row * width + i] + bias[i];
    same_bits same = {0};
    for (int b = 0; b < bs->n && !v->failed; b++) {
        arena a = arena_on(bs->be[b]);
        lm_mem xm = up_f32(&a, x, n);
        lm_add_rows(a.be, xm, up_f32(&a, bias, (size_t)width), rows, width);
        float *got = down_f32(&a, xm, n);
        double e = got ? rel_error(got, want, n) : INFINITY;
        if (!(e < TOLERANCE)) fail(v, "add_rows %dx%d on %s: error %g", rows, width, bs->label[b], e);
        if (got) same_bits_check(&same, v, bs->family[b], "add_rows", got, n * 4, bs->label[b]);
        free(got);
        arena_free(&a);
    }
    same_bits_free(&same);
done:
    free(x);
    free(bias);
    free(want);
}

static void test_add_rows(void) {
    backends bs;
    CHECK(backends_open(&bs));
    NEED(bs, add_rows);
    verdict v = {0};
    rng r = {83};
    /* odd, the fixture's q/k widths, released GLM-4.6V widths (12288 q, 1024 k/v), 130 tokens */
    static const int shapes[][2] = {{1, 1}, {3, 17}, {9, 64}, {9, 32}, {130, 64},
                                    {1, 12288}, {5, 1024}, {130, 1027}};
    for (size_t s = 0; s < sizeof shapes / sizeof shapes[0]; s++)
        check_add_rows(&bs, &v, &r, shapes[s][0], shapes[s][1]);
    backends_close(&bs);
    CHECK_VERDICT(v);
}

/* ---- add_weighted_rows (interpolated position embeddings of the vision towers) ---- */

static void check_add_weighted_rows(const backends *bs, verdict *v, rng *r, lm_dtype dtype, int n,
                                    int width, int taps, int64_t table_rows) {
    size_t nx = (size_t)n * (size_t)width, nt = (size_t)n * (size_t)taps;
    float *x = random_floats(r, nx, 2.0f), *weights = random_floats(r, nt, 1.0f);
    float *values = malloc(sizeof(float) * (size_t)(table_rows * width));
    void *table = values ? random_weights(r, dtype, (size_t)(table_rows * width), values) : NULL;
    int32_t *ids = malloc(sizeof(int32_t) * (nt ? nt : 1));
    double *want = doubles(nx);
    if (!x || !weights || !values || !table || !ids || !want) {
        fail(v, "out of memory");
        goto done;
    }
    for (size_t p = 0; p < nt; p++) ids[p] = (int32_t)(rng_next(r) % (uint64_t)table_rows);
    if (nt > 2) ids[0] = 0, ids[1] = (int32_t)(table_rows - 1), ids[2] = ids[1]; /* both ends, a repeat */
    for (int i = 0; i < n; i++)
        for (int c = 0; c < width; c++) {
            double acc = 0;
            for (int k = 0; k < taps; k++) {
                size_t p = (size_t)i * taps + k;
                acc += (double)weights[p] * values[(size_t)ids[p] * width + c];
            }
            want[(size_t)i * width + c] = x[(size_t)i * width + c] + acc;
        }
    same_bits same = {0};
    for (int b = 0; b < bs->n && !v->failed; b++) {
        arena a = arena_on(bs->be[b]);
        lm_matrix m = import_matrix(&a, table, dtype, table_rows, width);
        lm_mem xm = up_f32(&a, x, nx);
        lm_add_weighted_rows(a.be, xm, &m, up_i32(&a, ids, nt), up_f32(&a, weights, nt), n, taps);
        float *got = down_f32(&a, xm, nx);
        double e = got ? rel_error(got, want, nx) : INFINITY;
        if (!(e < TOLERANCE))
            fail(v, "add_weighted_rows %s n=%d width=%d taps=%d on %s: error %g", lm_dtype_name(dtype),
                 n, width, taps, bs->label[b], e);
        if (got) same_bits_check(&same, v, bs->family[b], "add_weighted_rows", got, nx * 4, bs->label[b]);
        free(got);
        arena_free(&a);
    }
    same_bits_free(&same);
done:
    free(x);
    free(weights);
    free(values);
    free(table);
    free(ids);
    free(want);
}

static void test_add_weighted_rows(void) {
    backends bs;
    CHECK(backends_open(&bs));
    NEED(bs, add_weighted_rows);
    verdict v = {0};
    rng r = {85};
    /* (n, width, taps, table rows): odd; the fixtures (64-entry tables of
     * width 32, bilinear 4 and bicubic 16 taps); the released towers (Qwen3.5
     * 2304 x 1152, GLM 576 x 1536); enough rows for the pool to split */
    static const int cases[][4] = {{1, 1, 1, 1},      {3, 17, 4, 5},      {140, 32, 4, 64},
                                   {120, 32, 16, 64}, {5, 1152, 4, 2304}, {7, 1536, 16, 576},
                                   {130, 1000, 16, 37}, {2, 33, 0, 3}};
    for (size_t d = 0; d < 3; d++)
        for (size_t c = 0; c < sizeof cases / sizeof cases[0]; c++)
            check_add_weighted_rows(&bs, &v, &r, weight_dtypes[d], cases[c][0], cases[c][1],
                                    cases[c][2], cases[c][3]);
    backends_close(&bs);
    CHECK_VERDICT(v);
}

/* ---- moe_route ---- */

enum { ROUTE_MAX_E = 512 };

/* What the routing oracle applies: the whole definition, or with one part
 * left out or changed, to show that the test data tells them apart. */
typedef struct {
    bool bias, groups;
    int group_top; /* a group's score: the sum of its group_top largest choices */
} route_variant;
static const route_variant route_full = {true, true, 2};

/* Two choices that float32 rounding could put in either order: close but
 * not equal (softmax scores are small: their gap counts relative to them). */
static bool too_close(double a, double b, bool relative) {
    return a != b && fabs(a - b) < 1e-5 * (relative ? fabs(a) : 1.0);
}

/* One token's routing in float64, by the definition in ops.h.  ids and
 * weights [top_k].  Returns false when float32 rounding could change the
 * result: two of the top_k + 1 best choices too close (equal ones, of equal
 * logits and biases, stay, and must go to the lower index: *tied says there
 * was such a pair), or a kept group's score near a dropped one's. */
static bool route_row64(const float *l, const float *bias, const lm_moe_routing *r,
                        route_variant var, int32_t *ids, double *w, bool *tied) {
    int E = r->n_experts, k = r->top_k;
    bool softmax = r->scoring == LM_MOE_SOFTMAX, separated = true;
    double s[ROUTE_MAX_E], c[ROUTE_MAX_E];
    bool taken[ROUTE_MAX_E] = {false};
    if (softmax) {
        double top = -INFINITY, sum = 0;
        for (int e = 0; e < E; e++) top = l[e] > top ? l[e] : top;
        for (int e = 0; e < E; e++) sum += s[e] = exp((double)l[e] - top);
        for (int e = 0; e < E; e++) s[e] /= sum;
    } else {
        for (int e = 0; e < E; e++) s[e] = 1.0 / (1.0 + exp(-(double)l[e]));
    }
    for (int e = 0; e < E; e++) c[e] = s[e] + (var.bias && bias ? (double)bias[e] : 0.0);
    if (var.groups && r->n_group > 1) {
        int G = r->n_group, per = E / G;
        double score[ROUTE_MAX_E], last_kept = 0;
        bool keep[ROUTE_MAX_E] = {false};
        for (int g = 0; g < G; g++) {
            double first = -INFINITY, second = -INFINITY;
            for (int e = g * per; e < (g + 1) * per; e++) {
                if (c[e] > first)
                    second = first, first = c[e];
                else if (c[e] > second)
                    second = c[e];
            }
            score[g] = first + (var.group_top == 2 ? second : 0.0);
        }
        for (int kept = 0; kept < r->topk_group && kept < G; kept++) {
            int best = -1;
            for (int g = 0; g < G; g++)
                if (!keep[g] && (best < 0 || score[g] > score[best])) best = g;
            keep[best] = true;
            last_kept = score[best];
        }
        for (int g = 0; g < G; g++) /* a clear boundary, without ties */
            if (!keep[g] && fabs(score[g] - last_kept) < 1e-5) separated = false;
        for (int e = 0; e < E; e++)
            if (!keep[e / per]) c[e] = -INFINITY;
    }
    double sum = 0;
    for (int j = 0; j < k; j++) { /* largest first, the lower index on ties */
        int best = -1;
        for (int e = 0; e < E; e++)
            if (!taken[e] && (best < 0 || c[e] > c[best])) best = e;
        taken[best] = true;
        ids[j] = best;
        w[j] = s[best];
        sum += s[best];
    }
    int next = -1; /* the best one left out */
    for (int e = 0; e < E; e++)
        if (!taken[e] && (next < 0 || c[e] > c[next])) next = e;
    for (int j = 0; j < k; j++) {
        double a = c[ids[j]], b = j + 1 < k ? c[ids[j + 1]] : next >= 0 ? c[next] : -INFINITY;
        if (a == b)
            *tied = true;
        else if (too_close(a, b, softmax))
            separated = false;
    }
    for (int j = 0; j < k; j++) {
        if (r->renormalize) w[j] /= sum + 1e-20;
        w[j] *= r->scale;
    }
    return separated;
}

typedef struct {
    int E, k, n;
    lm_moe_scoring scoring;
    bool bias;
    int n_group, topk_group;
    bool renormalize;
    float scale;
} route_case;

static void check_moe_route(const backends *bs, verdict *v, rng *r, const route_case *rc) {
    int E = rc->E, k = rc->k, n = rc->n;
    size_t nl = (size_t)n * E, nk = (size_t)n * k;
    bool softmax = rc->scoring == LM_MOE_SOFTMAX;
    lm_moe_routing routing = {.n_experts = E,
                              .top_k = k,
                              .scoring = rc->scoring,
                              .n_group = rc->n_group,
                              .topk_group = rc->topk_group,
                              .renormalize = rc->renormalize,
                              .scale = rc->scale};
    char what[128];
    snprintf(what, sizeof what, "moe_route %s%s E=%d top_k=%d n=%d groups %d/%d%s scale %g",
             softmax ? "softmax" : "sigmoid", rc->bias ? " biased" : "", E, k, n, rc->n_group,
             rc->topk_group, rc->renormalize ? " renormalized" : "", (double)rc->scale);
    float *logits = malloc(sizeof(float) * nl), *bias = malloc(sizeof(float) * ((size_t)E + 4));
    int32_t *want_ids = malloc(sizeof(int32_t) * nk);
    double *want_w = doubles(nk);
    if (!logits || !bias || !want_ids || !want_w) {
        fail(v, "out of memory");
        goto done;
    }
    /* The bias is passed 4 floats (NaN) into its buffer.  Experts 2m and
     * 2m+1 share a bias, so equal logits of the two are equal choices. */
    for (int i = 0; i < 4; i++) bias[i] = NAN;
    for (int e = 0; e < E; e += 2) bias[4 + e] = bias[4 + e + 1] = 1.0f + 0.25f * rng_float(r);
    const float *bias_e = rc->bias ? bias + 4 : NULL;
    int tied_rows = 0, bias_matters = 0, groups_matter = 0, top2_matters = 0;
    for (int t = 0; t < n; t++) {
        float *l = logits + (size_t)t * E;
        int32_t *ids = want_ids + (size_t)t * k, alt[ROUTE_MAX_E];
        double *w = want_w + (size_t)t * k, alt_w[ROUTE_MAX_E];
        bool tied = false, ignored = false;
        for (int attempt = 0;; attempt++) {
            if (attempt == 1000) {
                fail(v, "%s: cannot make a well separated row", what);
                goto done;
            }
            for (int e = 0; e < E; e++) l[e] = rng_float(r) * (softmax ? 4.0f : 3.0f);
            route_row64(l, bias_e, &routing, route_full, ids, w, &ignored);
            /* every 5 tokens: a plain row (softmax, from the sixth token
             * every tenth: six times as wide, so terms below 2^-21 make
             * cuda sum it in order, not as its exact tree); the top pick
             * tied with another expert (softmax: any; sigmoid: its bias
             * partner); the last pick tied so; a row of equal logits (its
             * first try); a row far from 0, whose softmax must subtract the
             * maximum */
            int kind = t % 5;
            if (kind == 0 && softmax && t % 10 == 5) {
                for (int e = 0; e < E; e++) l[e] *= 6.0f;
            } else if (kind == 1 || kind == 2) {
                int i = ids[kind == 1 ? 0 : k - 1];
                int j = softmax ? (int)(rng_next(r) % (uint64_t)E) : i ^ 1;
                l[j] = l[i];
            } else if (kind == 3 && attempt == 0) {
                for (int e = 0; e < E; e++) l[e] = 0.5f;
            } else if (kind == 4 && softmax) {
                for (int e = 0; e < E; e++) l[e] += 100.0f;
            }
            tied = false;
            if (route_row64(l, bias_e, &routing, route_full, ids, w, &tied)) break;
        }
        tied_rows += tied;
        if (rc->bias) {
            route_row64(l, bias_e, &routing, (route_variant){false, true, 2}, alt, alt_w, &ignored);
            bias_matters += memcmp(alt, ids, sizeof(int32_t) * (size_t)k) != 0;
        }
        if (rc->n_group > 1) {
            route_row64(l, bias_e, &routing, (route_variant){true, false, 2}, alt, alt_w, &ignored);
            groups_matter += memcmp(alt, ids, sizeof(int32_t) * (size_t)k) != 0;
            route_row64(l, bias_e, &routing, (route_variant){true, true, 1}, alt, alt_w, &ignored);
            top2_matters += memcmp(alt, ids, sizeof(int32_t) * (size_t)k) != 0;
        }
    }
    /* the data must tell a wrong routing from the right one */
    if (n >= 7 && tied_rows == 0) fail(v, "%s: the test data has no tied rows", what);
    if (n >= 7 && rc->bias && bias_matters == 0)
        fail(v, "%s: the test data routes alike without the bias", what);
    if (n >= 7 && rc->n_group > 1 && (groups_matter == 0 || top2_matters == 0))
        fail(v, "%s: the test data routes alike without groups (%d) or by the best of a group (%d)",
             what, groups_matter, top2_matters);
    same_bits same_ids = {0}, same_w = {0};
    for (int b = 0; b < bs->n && !v->failed; b++) {
        arena a = arena_on(bs->be[b]);
        lm_mem ids_m = arena_alloc(&a, nk * sizeof(int32_t));
        if (a.ok) lm_fill(a.be, ids_m, 0xFF, nk * sizeof(int32_t)); /* -1 everywhere */
        lm_mem w_m = poisoned(&a, nk);
        lm_moe_routing rt = routing;
        if (rc->bias) rt.correction_bias = lm_mem_f32(up_f32(&a, bias, (size_t)E + 4), 4);
        lm_mem lm = up_f32(&a, logits, nl);
        if (a.ok) lm_moe_route(a.be, ids_m, w_m, lm, n, &rt);
        int32_t *got_ids = down_i32(&a, ids_m, nk);
        float *got_w = down_f32(&a, w_m, nk);
        if (!got_ids || !got_w) fail(v, "%s on %s: backend memory failed", what, bs->label[b]);
        for (size_t p = 0; got_ids && p < nk; p++)
            if (got_ids[p] != want_ids[p]) {
                fail(v, "%s on %s: token %zu pick %zu is expert %d, want %d", what, bs->label[b],
                     p / (size_t)k, p % (size_t)k, got_ids[p], want_ids[p]);
                break;
            }
        double e = got_w ? 0 : INFINITY; /* weights: absolute error, NaN fails */
        for (size_t p = 0; got_w && p < nk; p++) {
            double d = fabs((double)got_w[p] - want_w[p]);
            e = d > e || isnan(d) ? d : e;
        }
        if (!(e <= 1e-6)) fail(v, "%s on %s: weights off by %g", what, bs->label[b], e);
        if (got_ids)
            same_bits_check(&same_ids, v, bs->family[b], "moe_route ids", got_ids, nk * 4, bs->label[b]);
        if (got_w)
            same_bits_check(&same_w, v, bs->family[b], "moe_route weights", got_w, nk * 4, bs->label[b]);
        free(got_ids);
        free(got_w);
        arena_free(&a);
    }
    same_bits_free(&same_ids);
    same_bits_free(&same_w);
done:
    free(logits);
    free(bias);
    free(want_ids);
    free(want_w);
}

static void test_moe_route(void) {
    backends bs;
    CHECK(backends_open(&bs));
    NEED(bs, moe_route);
    verdict v = {0};
    rng r = {83};
    static const int ns[] = {1, 7, 130};
    /* Qwen3.5-MoE (§B.2): softmax over all experts, top_k renormalised;
     * 256 experts top 8 is the released 35B-A3B */
    static const int Es[] = {8, 64, 256}, ks[] = {1, 2, 8};
    for (size_t e = 0; e < 3; e++)
        for (size_t k = 0; k < 3; k++)
            for (size_t i = 0; i < 3; i++) {
                route_case rc = {Es[e], ks[k], ns[i], LM_MOE_SOFTMAX, false, 1, 1, true, 1.0f};
                check_moe_route(&bs, &v, &r, &rc);
            }
    /* GLM-4.6V (§E.2.4): sigmoid, the correction bias for the choice only,
     * 128 experts (and 64) in 8 groups of which 4 stay, top 8, scale 2.5 */
    for (int E = 64; E <= 128; E *= 2)
        for (int g = 1; g <= 8; g *= 8)
            for (int renorm = 1; renorm >= 0; renorm--)
                for (size_t i = 0; i < 3; i++) {
                    route_case rc = {E,  8, ns[i], LM_MOE_SIGMOID, true, g, g == 1 ? 1 : 4,
                                     renorm, 2.5f};
                    check_moe_route(&bs, &v, &r, &rc);
                }
    /* sigmoid without a bias; softmax without renormalising */
    static const route_case others[] = {{64, 8, 130, LM_MOE_SIGMOID, false, 1, 1, true, 1.0f},
                                        {64, 4, 7, LM_MOE_SOFTMAX, false, 1, 1, false, 1.0f}};
    for (size_t i = 0; i < 2; i++) check_moe_route(&bs, &v, &r, &others[i]);
    backends_close(&bs);
    CHECK_VERDICT(v);
}

/* ---- moe_experts ---- */

/* One layer's experts on the host in the fused layout: gate_up [E, 2I, H]
 * (expert e's gate rows, then its up rows) and down [E, H, I]. */
typedef struct {
    int E, H, I;
    lm_dtype dtype;
    void *gate_up, *down;
    float *gate_up_v, *down_v; /* the same, widened */
} expert_set;

/* Bytes of `rows` rows of `cols` weights of dtype (Q8_0: blocks of 32). */
static size_t rows_bytes(lm_dtype dtype, int64_t rows, int64_t cols) {
    return (size_t)rows * lm_dtype_row_bytes(dtype, cols);
}

static bool expert_set_make(expert_set *s, rng *r, int E, int H, int I, lm_dtype dtype) {
    size_t gu = (size_t)E * 2 * I * H, dn = (size_t)E * H * I;
    *s = (expert_set){E, H, I, dtype, NULL, NULL, malloc(sizeof(float) * gu),
                      malloc(sizeof(float) * dn)};
    if (!s->gate_up_v || !s->down_v) return false;
    bool blocks = lm_dtype_is_block(dtype); /* Q8_0 or a ggml format */
    s->gate_up = blocks ? random_matrix(r, dtype, (int64_t)E * 2 * I, H, s->gate_up_v)
                        : random_weights(r, dtype, gu, s->gate_up_v);
    s->down = blocks ? random_matrix(r, dtype, (int64_t)E * H, I, s->down_v) : random_weights(r, dtype, dn, s->down_v);
    return s->gate_up && s->down;
}

static void expert_set_free(expert_set *s) {
    free(s->gate_up);
    free(s->down);
    free(s->gate_up_v);
    free(s->down_v);
}

/* n weights of dtype made NaN (Q8_0: every block's scale a bf16 NaN). */
static void fill_nan(void *w, lm_dtype dtype, size_t n) {
    if (dtype == LM_DTYPE_Q8_0) {
        for (size_t b = 0; b < n / LM_Q8_BLOCK; b++) {
            ((uint8_t *)w)[b * LM_Q8_BLOCK_BYTES] = 0xC0;
            ((uint8_t *)w)[b * LM_Q8_BLOCK_BYTES + 1] = 0x7F;
        }
        return;
    }
    if (lm_ggml_is_block(dtype)) { /* all ones: every block's float16 scale d is a NaN */
        memset(w, 0xFF, lm_dtype_row_bytes(dtype, (int64_t)n));
        return;
    }
    for (size_t i = 0; i < n; i++)
        if (dtype == LM_DTYPE_F32)
            memcpy((uint8_t *)w + 4 * i, &(uint32_t){0x7FC00000u}, 4);
        else
            ((uint16_t *)w)[i] = dtype == LM_DTYPE_BF16 ? 0x7FC0 : 0x7E00;
}

/* y [H] = expert e of x in float64. */
static void expert64(const expert_set *s, int e, const float *x, double *y, double *act) {
    int H = s->H, I = s->I;
    const float *gate = s->gate_up_v + (size_t)e * 2 * I * H, *up = gate + (size_t)I * H;
    const float *down = s->down_v + (size_t)e * H * I;
    for (int i = 0; i < I; i++) {
        double g = 0, u = 0;
        for (int h = 0; h < H; h++) {
            g += (double)gate[(size_t)i * H + h] * x[h];
            u += (double)up[(size_t)i * H + h] * x[h];
        }
        act[i] = silu64(g) * u;
    }
    for (int o = 0; o < H; o++) {
        double acc = 0;
        for (int i = 0; i < I; i++) acc += (double)down[(size_t)o * I + i] * act[i];
        y[o] = acc;
    }
}

/* want [n, H] += each token's k experts weighted (float64 reference);
 * y [H] and act [I] are scratch. */
static void experts_reference(const expert_set *s, const int32_t *ids, const float *w, const float *x, int n, int k,
                              double *want, double *y, double *act) {
    int H = s->H;
    for (int t = 0; t < n; t++)
        for (int j = 0; j < k; j++) {
            size_t p = (size_t)t * k + j;
            expert64(s, ids[p], x + (size_t)t * H, y, act);
            for (int o = 0; o < H; o++) want[(size_t)t * H + o] += (double)w[p] * y[o];
        }
}

static bool bytes_all(const uint8_t *p, size_t n, uint8_t byte) {
    for (size_t i = 0; i < n; i++)
        if (p[i] != byte) return false;
    return true;
}

/* mats [3E] (gate, up, down of every expert) over the host tensors
 * gate_up and down of s's layout: slices of the two fused tensors or 3E
 * separate imports. */
static void import_experts(arena *a, const expert_set *s, const uint8_t *gate_up, const uint8_t *down, bool fused,
                           lm_matrix *mats) {
    int E = s->E, H = s->H, I = s->I;
    size_t half = rows_bytes(s->dtype, I, H), down_bytes = rows_bytes(s->dtype, H, I); /* a gate or up; a down */
    if (fused) {
        lm_matrix gu = import_matrix(a, gate_up, s->dtype, (int64_t)E * 2 * I, H);
        lm_matrix dn = import_matrix(a, down, s->dtype, (int64_t)E * H, I);
        for (int e = 0; e < E; e++) {
            size_t g_off = (size_t)e * 2 * half, u_off = g_off + half;
            mats[e] = (lm_matrix){lm_mem_bytes(gu.data, g_off), s->dtype, I, H};
            mats[E + e] = (lm_matrix){lm_mem_bytes(gu.data, u_off), s->dtype, I, H};
            mats[2 * E + e] = (lm_matrix){lm_mem_bytes(dn.data, (size_t)e * down_bytes), s->dtype, H, I};
        }
        return;
    }
    for (int e = 0; e < E; e++) {
        const uint8_t *g = gate_up + (size_t)e * 2 * half;
        mats[e] = import_matrix(a, g, s->dtype, I, H);
        mats[E + e] = import_matrix(a, g + half, s->dtype, I, H);
        mats[2 * E + e] = import_matrix(a, down + (size_t)e * down_bytes, s->dtype, H, I);
    }
}

/* The first and the last of a step's n tokens, each alone in a step of
 * its own, give the bits they had in the step (got [n, H]): the cuda
 * backend takes few tokens another way than many (no sort, the combine in
 * the down product), but must not sum otherwise. */
static void alone_check(arena *a, verdict *v, const char *what, const char *label, const float *got, lm_mem xm,
                        lm_mem idm, lm_mem wm, int n, int k, const lm_moe_experts *ex, lm_mem scratch) {
    int H = ex->hidden;
    for (int t = 0; t < n && !v->failed; t += n - 1) {
        lm_mem one = poisoned(a, (size_t)H);
        if (!a->ok) break;
        lm_moe_apply_experts(a->be, one, lm_mem_f32(xm, (size_t)t * H), 1, lm_mem_i32(idm, (size_t)t * k),
                             lm_mem_f32(wm, (size_t)t * k), k, ex, scratch);
        float *alone = down_f32(a, one, (size_t)H);
        if (!alone)
            fail(v, "%s on %s: backend memory failed", what, label);
        else if (memcmp(alone, got + (size_t)t * H, sizeof(float) * (size_t)H) != 0)
            fail(v, "%s on %s: token %d alone differs from its row in the step of %d", what, label, t, n);
        free(alone);
    }
}

/* n tokens of k experts each over the experts of s, imported as slices of
 * the two fused tensors or as 3E separate ones.  Experts e % 4 == 1 stay
 * unused (while the others are enough) and hold NaN: an untouched expert
 * is not read.  Token 1 has token 0's experts in reverse order. */
static void check_moe_experts(const backends *bs, verdict *v, rng *r, const expert_set *s, int k,
                              int n, bool fused) {
    enum { FRONT = 256, GUARD = 4096 }; /* guard bytes around the scratch */
    int E = s->E, H = s->H, I = s->I;
    size_t nk = (size_t)n * k, nx = (size_t)n * H;
    size_t half = rows_bytes(s->dtype, I, H), down_bytes = rows_bytes(s->dtype, H, I); /* a gate or up; a down */
    size_t gu_b = (size_t)E * 2 * half, dn_b = (size_t)E * down_bytes;
    char what[128];
    snprintf(what, sizeof what, "moe_experts %s E=%d I=%d H=%d top_k=%d n=%d %s",
             lm_dtype_name(s->dtype), E, I, H, k, n, fused ? "fused" : "per-expert");
    int32_t *ids = malloc(sizeof(int32_t) * nk), *allowed = malloc(sizeof(int32_t) * (size_t)E);
    float *w = malloc(sizeof(float) * nk), *x = random_floats(r, nx, 2.0f);
    uint8_t *gate_up = malloc(gu_b), *down = malloc(dn_b);
    bool *used = calloc((size_t)E, sizeof(bool));
    double *want = doubles(nx), *y = doubles((size_t)H), *act = doubles((size_t)I);
    if (!ids || !allowed || !w || !x || !gate_up || !down || !used || !want || !y || !act) {
        fail(v, "out of memory");
        goto done;
    }
    int n_allowed = 0, n_unused = 0;
    for (int e = 0; e < E; e++)
        if (e % 4 != 1) allowed[n_allowed++] = e;
    if (n_allowed < k)
        for (n_allowed = 0; n_allowed < E; n_allowed++) allowed[n_allowed] = n_allowed;
    for (int t = 0; t < n; t++) {
        int32_t *it = ids + (size_t)t * k;
        for (int j = 0; j < k; j++) {
            if (t == 1) {
                it[j] = ids[k - 1 - j];
            } else { /* a partial shuffle: k distinct experts */
                int pick = j + (int)(rng_next(r) % (uint64_t)(n_allowed - j));
                int32_t tmp = allowed[j];
                allowed[j] = allowed[pick];
                allowed[pick] = tmp;
                it[j] = allowed[j];
            }
            w[(size_t)t * k + j] = 0.05f + 0.475f * (rng_float(r) + 1.0f);
            used[it[j]] = true;
        }
    }
    memcpy(gate_up, s->gate_up, gu_b);
    memcpy(down, s->down, dn_b);
    for (int e = 0; e < E; e++)
        if (!used[e]) {
            n_unused++;
            fill_nan(gate_up + (size_t)e * 2 * half, s->dtype, (size_t)2 * I * H);
            fill_nan(down + (size_t)e * down_bytes, s->dtype, (size_t)H * I);
        }
    if (k < E && n_unused == 0) fail(v, "%s: the test data uses every expert", what);
    experts_reference(s, ids, w, x, n, k, want, y, act);
    same_bits same = {0};
    for (int b = 0; b < bs->n && !v->failed; b++) {
        if (!lm_backend_supports_weights(bs->be[b], s->dtype)) continue; /* refused at load */
        arena a = arena_on(bs->be[b]);
        lm_matrix *mats = malloc(sizeof(lm_matrix) * 3 * (size_t)E);
        if (!mats) {
            fail(v, "out of memory");
            break;
        }
        import_experts(&a, s, gate_up, down, fused, mats);
        lm_moe_experts ex = {E, H, I, mats, mats + E, mats + 2 * E, 0};
        size_t scratch_bytes = lm_moe_scratch_bytes(n, k, &ex);
        size_t total = FRONT + scratch_bytes + GUARD;
        lm_mem sbuf = arena_alloc(&a, total), scratch = lm_mem_bytes(sbuf, FRONT);
        if (a.ok) {
            lm_fill(a.be, sbuf, 0xA5, total);
            lm_fill(a.be, scratch, 0xFF, scratch_bytes); /* poisoned too */
        }
        lm_mem xm = up_f32(&a, x, nx), idm = up_i32(&a, ids, nk), wm = up_f32(&a, w, nk);
        lm_mem out = poisoned(&a, nx);
        if (a.ok) lm_moe_apply_experts(a.be, out, xm, n, idm, wm, k, &ex, scratch);
        float *got = down_f32(&a, out, nx), *x_after = down_f32(&a, xm, nx);
        float *w_after = down_f32(&a, wm, nk);
        int32_t *ids_after = down_i32(&a, idm, nk);
        uint8_t *guard = malloc(total);
        lm_error err = {0};
        bool guard_ok = guard && a.ok && lm_download(a.be, guard, sbuf, total, &err) == LM_OK;
        if (!got || !x_after || !w_after || !ids_after || !guard_ok) {
            fail(v, "%s on %s: backend memory failed", what, bs->label[b]);
        } else {
            /* the experts' matmuls round activations as the matmul does */
            bool rounds = rounds_activations(bs, b, s->dtype);
            double e = rounds ? rel_l2_error(got, want, nx) : rel_error(got, want, nx);
            if (!(e < (rounds ? BF16_TOLERANCE : TOLERANCE)))
                fail(v, "%s on %s: error %g", what, bs->label[b], e);
            if (!bytes_all(guard, FRONT, 0xA5) ||
                !bytes_all(guard + FRONT + scratch_bytes, GUARD, 0xA5))
                fail(v, "%s on %s: wrote outside its %zu scratch bytes", what, bs->label[b],
                     scratch_bytes);
            if (memcmp(x_after, x, nx * 4) != 0 || memcmp(w_after, w, nk * 4) != 0 ||
                memcmp(ids_after, ids, nk * 4) != 0)
                fail(v, "%s on %s: changed its inputs", what, bs->label[b]);
            same_bits_check(&same, v, bs->family[b], "moe_experts", got, nx * 4, bs->label[b]);
            /* the cuda backend's float32 products promise batched == alone
             * and take a step of few tokens another way (the cpu's make
             * no such promise for several tokens) */
            if (n > 1 && !rounds && strcmp(bs->family[b], "cuda") == 0)
                alone_check(&a, v, what, bs->label[b], got, xm, idm, wm, n, k, &ex, scratch);
        }
        free(got);
        free(x_after);
        free(w_after);
        free(ids_after);
        free(guard);
        free(mats);
        arena_free(&a);
    }
    same_bits_free(&same);
done:
    free(ids);
    free(allowed);
    free(w);
    free(x);
    free(gate_up);
    free(down);
    free(used);
    free(want);
    free(y);
    free(act);
}

/* Expert parallelism: the layer's E experts dealt out over n_ranks ranks,
 * rank q holding the range [q·E/R, (q+1)·E/R) (uneven where R does not
 * divide E), each running moe_experts on its range alone (those matrices
 * only, first_expert its first id) with its own scratch of
 * lm_moe_scratch_bytes for that range, guarded.  The ranks' outputs summed
 * in rank order must be the whole layer's within the tolerance; token 0's
 * experts all lie in rank 0's range (when it holds top_k), so every other
 * rank must give it a row of exact zeros (the outputs are NaN-poisoned, so
 * an unwritten row fails).  *zero_rows counts the rows so checked. */
static void check_moe_experts_split(const backends *bs, verdict *v, rng *r, const expert_set *s, int k, int n,
                                    int n_ranks, bool fused, int *zero_rows) {
    enum { FRONT = 256, GUARD = 4096 };
    int E = s->E, H = s->H, I = s->I;
    size_t nk = (size_t)n * k, nx = (size_t)n * H;
    char what[160];
    snprintf(what, sizeof what, "moe_experts over %d ranks %s E=%d I=%d H=%d top_k=%d n=%d %s", n_ranks,
             lm_dtype_name(s->dtype), E, I, H, k, n, fused ? "fused" : "per-expert");
    int32_t *ids = malloc(sizeof(int32_t) * nk), *pool = malloc(sizeof(int32_t) * (size_t)E);
    float *w = malloc(sizeof(float) * nk), *x = random_floats(r, nx, 2.0f), *sum = malloc(sizeof(float) * nx);
    double *want = doubles(nx), *y = doubles((size_t)H), *act = doubles((size_t)I);
    if (!ids || !pool || !w || !x || !sum || !want || !y || !act) {
        fail(v, "out of memory");
        goto done;
    }
    bool token0_in_rank0 = E / n_ranks >= k; /* rank 0's range is [0, E/R) */
    for (int t = 0; t < n; t++) {
        int choices = t == 0 && token0_in_rank0 ? E / n_ranks : E;
        for (int e = 0; e < E; e++) pool[e] = e;
        for (int j = 0; j < k; j++) { /* k distinct experts of the first `choices` */
            int pick = j + (int)(rng_next(r) % (uint64_t)(choices - j));
            int32_t tmp = pool[j];
            pool[j] = pool[pick];
            pool[pick] = tmp;
            ids[(size_t)t * k + j] = pool[j];
            w[(size_t)t * k + j] = 0.05f + 0.475f * (rng_float(r) + 1.0f);
        }
    }
    experts_reference(s, ids, w, x, n, k, want, y, act);
    same_bits same = {0};
    for (int b = 0; b < bs->n && !v->failed; b++) {
        if (!lm_backend_supports_weights(bs->be[b], s->dtype)) continue; /* refused at load */
        arena a = arena_on(bs->be[b]);
        lm_matrix *mats = malloc(sizeof(lm_matrix) * 3 * (size_t)E);
        if (!mats) {
            fail(v, "out of memory");
            break;
        }
        import_experts(&a, s, s->gate_up, s->down, fused, mats);
        lm_mem xm = up_f32(&a, x, nx), idm = up_i32(&a, ids, nk), wm = up_f32(&a, w, nk);
        for (size_t i = 0; i < nx; i++) sum[i] = 0.0f;
        for (int q = 0; q < n_ranks && !v->failed; q++) {
            int first = q * E / n_ranks, count = (q + 1) * E / n_ranks - first;
            lm_moe_experts ex = {count, H, I, mats + first, mats + E + first, mats + 2 * E + first, first};
            size_t scratch_bytes = lm_moe_scratch_bytes(n, k, &ex), total = FRONT + scratch_bytes + GUARD;
            lm_mem sbuf = arena_alloc(&a, total), scratch = lm_mem_bytes(sbuf, FRONT), out = poisoned(&a, nx);
            if (a.ok) {
                lm_fill(a.be, sbuf, 0xA5, total);
                lm_fill(a.be, scratch, 0xFF, scratch_bytes);
                lm_moe_apply_experts(a.be, out, xm, n, idm, wm, k, &ex, scratch);
            }
            float *got = down_f32(&a, out, nx);
            uint8_t *guard = malloc(total);
            lm_error err = {0};
            if (!got || !guard || !a.ok || lm_download(a.be, guard, sbuf, total, &err) != LM_OK) {
                fail(v, "%s on %s: backend memory failed", what, bs->label[b]);
            } else {
                if (!bytes_all(guard, FRONT, 0xA5) || !bytes_all(guard + FRONT + scratch_bytes, GUARD, 0xA5))
                    fail(v, "%s on %s: rank %d wrote outside its %zu scratch bytes", what, bs->label[b], q,
                         scratch_bytes);
                if (q > 0 && token0_in_rank0) {
                    for (int o = 0; o < H; o++)
                        if (got[o] != 0.0f) {
                            fail(v, "%s on %s: rank %d holds none of token 0's experts but gave it %g", what,
                                 bs->label[b], q, (double)got[o]);
                            break;
                        }
                    ++*zero_rows;
                }
                for (size_t i = 0; i < nx; i++) sum[i] += got[i];
            }
            free(got);
            free(guard);
        }
        if (!v->failed) {
            bool rounds = rounds_activations(bs, b, s->dtype);
            double e = rounds ? rel_l2_error(sum, want, nx) : rel_error(sum, want, nx);
            if (!(e < (rounds ? BF16_TOLERANCE : TOLERANCE)))
                fail(v, "%s on %s: the ranks' sum is %g off the whole layer", what, bs->label[b], e);
            same_bits_check(&same, v, bs->family[b], "moe_experts over ranks", sum, nx * 4, bs->label[b]);
        }
        free(mats);
        arena_free(&a);
    }
    same_bits_free(&same);
done:
    free(ids);
    free(pool);
    free(w);
    free(x);
    free(sum);
    free(want);
    free(y);
    free(act);
}

static void test_moe_experts_over_ranks(void) {
    backends bs;
    CHECK(backends_open(&bs));
    NEED(bs, moe_experts);
    verdict v = {0};
    rng r = {91};
    static const struct {
        int E, I, H;
        lm_dtype dtype;
    } sets[] = {{8, 32, 64, LM_DTYPE_BF16}, {8, 32, 64, LM_DTYPE_F32}, {64, 128, 256, LM_DTYPE_BF16}};
    static const int ks[] = {2, 8}, ns[] = {1, 5, 130};
    int zero_rows = 0, turn = 0;
    for (size_t i = 0; i < sizeof sets / sizeof sets[0] && !v.failed; i++) {
        expert_set s;
        if (!expert_set_make(&s, &r, sets[i].E, sets[i].H, sets[i].I, sets[i].dtype)) fail(&v, "out of memory");
        for (size_t k = 0; k < 2 && !v.failed; k++)
            for (size_t j = 0; j < 3 && !v.failed; j++, turn++) /* 2, 3 and 4 ranks in turn, both layouts */
                check_moe_experts_split(&bs, &v, &r, &s, ks[k], ns[j], 2 + turn % 3, turn % 2 == 0, &zero_rows);
        expert_set_free(&s);
    }
    backends_close(&bs);
    CHECK_VERDICT(v);
    CHECK_MSG(zero_rows > 0, "no rank was checked on a token with none of its experts");
}

static void test_moe_experts(void) {
    backends bs;
    CHECK(backends_open(&bs));
    NEED(bs, moe_experts);
    verdict v = {0};
    rng r = {87};
    /* small experts in both weight dtypes; 64 experts of a quarter of the
     * released widths (35B-A3B: 256 of I 512, H 2048) */
    static const struct {
        int E, I, H;
        lm_dtype dtype;
    } sets[] = {{8, 32, 64, LM_DTYPE_BF16},
                {8, 32, 64, LM_DTYPE_F32},
                {64, 128, 256, LM_DTYPE_BF16},
                /* int8 experts (--quantize int8, FP8 checkpoints): where the backend takes them */
                {8, 32, 64, LM_DTYPE_Q8_0},
                {64, 128, 256, LM_DTYPE_Q8_0},
                /* wide experts (as GLM-4.6V's, I 1408): down's rows of many
                 * more columns than a kernel stages at once */
                {8, 768, 96, LM_DTYPE_BF16},
                {8, 768, 96, LM_DTYPE_Q8_0},
                /* GGUF's experts (Q4_K_M files: mostly Q4_K; whole super-blocks) */
                {8, 256, 256, LM_DTYPE_GGML_Q4_K},
                {8, 32, 64, LM_DTYPE_GGML_Q4_0}};
    static const int ks[] = {2, 8}, ns[] = {1, 5, 130};
    for (size_t i = 0; i < sizeof sets / sizeof sets[0] && !v.failed; i++) {
        expert_set s;
        if (!expert_set_make(&s, &r, sets[i].E, sets[i].H, sets[i].I, sets[i].dtype))
            fail(&v, "out of memory");
        for (size_t k = 0; k < 2 && !v.failed; k++)
            for (size_t j = 0; j < 3; j++) {
                check_moe_experts(&bs, &v, &r, &s, ks[k], ns[j], false);
                check_moe_experts(&bs, &v, &r, &s, ks[k], ns[j], true);
            }
        expert_set_free(&s);
    }
    backends_close(&bs);
    CHECK_VERDICT(v);
}

/* ------------------------------------------------------------ the checks themselves */

/* A cpu backend with one op broken on purpose: the checks must catch each.
 * be is that backend, its table the broken one, its impl the real cpu
 * backend's: real_cpu_ops is the table of the kernel set that one runs. */
static const lm_backend_ops *real_cpu_ops(const lm_backend *be) { return lm_cpu_kernels_of(be)->ops; }
static void skip_last_silu_mul(lm_backend *be, lm_mem out, lm_mem gate, lm_mem up, int64_t n) {
    real_cpu_ops(be)->silu_mul(be, out, gate, up, n - 1);
}
static void skip_last_gather(lm_backend *be, lm_mem dst, lm_mem src, lm_mem ids, int n, int w) {
    real_cpu_ops(be)->gather_rows(be, dst, src, ids, n - 1, w);
}
static void drop_last_sequence(lm_backend *be, lm_mem out, lm_mem q, lm_mem k, lm_mem v, lm_mem g,
                               lm_mem beta, lm_mem states, int64_t slot_stride,
                               const lm_seq_batch *seqs, int Hk, int Hv, int dk, int dv) {
    lm_seq_batch fewer = *seqs;
    fewer.n_seqs--;
    real_cpu_ops(be)->gated_delta_rule(be, out, q, k, v, g, beta, states, slot_stride, &fewer, Hk,
                                        Hv, dk, dv);
}
static void conv_ignoring_first(lm_backend *be, lm_mem out, lm_mem in, int C, lm_mem weight, int K,
                                lm_mem states, int64_t slot_stride, const lm_seq_batch *seqs) {
    /* runs the sequences as if their rows were packed from 0 (first[] ignored) */
    int32_t first[24], length[24];
    lm_error err = {0};
    lm_download(be, length, seqs->length, sizeof(int32_t) * (size_t)seqs->n_seqs, &err);
    for (int s = 0, row = 0; s < seqs->n_seqs; s++) first[s] = row, row += length[s];
    lm_seq_batch packed = *seqs;
    lm_upload(be, packed.first, first, sizeof(int32_t) * (size_t)seqs->n_seqs);
    real_cpu_ops(be)->causal_conv1d_silu(be, out, in, C, weight, K, states, slot_stride, &packed);
}

/* Fused ops that are wrong, each beside parts that are right: the checks
 * against the parts must catch them. */
static bool matmul_add_storing(lm_backend *be, lm_mem y, lm_mem x, int n, const lm_matrix *w) {
    real_cpu_ops(be)->matmul(be, y, x, n, w); /* the add forgotten */
    return true;
}
static bool normed_group_of_h(lm_backend *be, const lm_normed_input *in, int n, const lm_matmul_out *outs,
                              int count) {
    real_cpu_ops(be)->rmsnorm(be, in->x, in->h, in->weight, n, (int)outs[0].w->cols, in->eps);
    for (int i = 0; i < count; i++) /* the products of h, not of its norm */
        real_cpu_ops(be)->matmul(be, outs[i].y, in->h, n, outs[i].w);
    return true;
}
/* y += x · wᵀ with each row scaled by sigmoid(gate), through a
 * scratch of its own. */
static bool with_scratch_product(lm_backend *be, lm_mem y, lm_mem x, int n, const lm_matrix *w, lm_mem gate) {
    lm_buffer *buffer = NULL;
    lm_error err;
    if (be->ops->alloc(be, sizeof(float) * (size_t)n * (size_t)w->rows, "test scratch", &buffer, &err) != LM_OK)
        return false;
    lm_mem scratch = {buffer, 0};
    real_cpu_ops(be)->matmul(be, scratch, x, n, w);
    real_cpu_ops(be)->sigmoid_scale_rows(be, scratch, gate, n, (int)w->rows);
    real_cpu_ops(be)->add(be, y, scratch, (int64_t)n * w->rows);
    be->ops->free(be, buffer);
    return true;
}
static bool delta_rule_without_norm(lm_backend *be, const lm_delta_rule_norm_args *a) {
    real_cpu_ops(be)->gated_delta_rule(be, a->out, a->q, a->k, a->v, a->g, a->beta, a->states, a->slot_stride,
                                        a->seqs, a->Hk, a->Hv, a->dk, a->dv); /* the gated norm forgotten */
    return true;
}
static bool attention_ungated(lm_backend *be, lm_mem out, lm_mem q, lm_mem gates, const lm_kv_layer *kv,
                              const lm_attention_batch *batch) {
    (void)gates; /* the gate forgotten */
    real_cpu_ops(be)->attention(be, out, q, kv, batch);
    return true;
}
static bool matmul_gated_add_without_other(lm_backend *be, lm_mem y, lm_mem x, lm_mem x_up, int n,
                                           const lm_matrix *w, lm_mem gate, lm_mem other) {
    if (x_up.buffer) real_cpu_ops(be)->silu_mul(be, x, x, x_up, (int64_t)n * w->cols);
    return with_scratch_product(be, y, x, n, w, gate); /* other never added */
}
static bool matmul_gated_add_without_up(lm_backend *be, lm_mem y, lm_mem x, lm_mem x_up, int n, const lm_matrix *w,
                                        lm_mem gate, lm_mem other) {
    (void)x_up; /* x itself taken as the product's input: the SwiGLU forgotten */
    if (!with_scratch_product(be, y, x, n, w, gate)) return false;
    real_cpu_ops(be)->add(be, y, other, (int64_t)n * w->rows);
    return true;
}
static void sigmoid_scale_skipping_last_row(lm_backend *be, lm_mem x, lm_mem gate, int rows,
                                            int width) {
    real_cpu_ops(be)->sigmoid_scale_rows(be, x, gate, rows - 1, width);
}
static void add_rows_skipping_last_row(lm_backend *be, lm_mem x, lm_mem bias, int rows, int width) {
    real_cpu_ops(be)->add_rows(be, x, bias, rows - 1, width);
}
static void layernorm_skipping_last_row(lm_backend *be, lm_mem out, lm_mem x, lm_mem weight,
                                        lm_mem bias, int rows, int dim, float eps) {
    real_cpu_ops(be)->layernorm(be, out, x, weight, bias, rows - 1, dim, eps);
}
static void layernorm_without_bias(lm_backend *be, lm_mem out, lm_mem x, lm_mem weight,
                                   lm_mem bias, int rows, int dim, float eps) {
    real_cpu_ops(be)->rmsnorm(be, out, x, weight, rows, dim, eps); /* no centring, no bias */
    (void)bias;
}
static void gelu_of_the_other_kind(lm_backend *be, lm_mem x, int64_t n, lm_gelu_kind kind) {
    real_cpu_ops(be)->gelu(be, x, n, kind == LM_GELU_ERF ? LM_GELU_TANH : LM_GELU_ERF);
}
static void weighted_rows_skipping_last_tap(lm_backend *be, lm_mem x, const lm_matrix *table,
                                            lm_mem ids, lm_mem weights, int n, int taps) {
    /* the last tap's weight set to 0, as a loop bound off by one would leave it */
    size_t nt = (size_t)n * (size_t)taps;
    float *w = malloc(sizeof(float) * nt);
    lm_error err = {0};
    if (w && lm_download(be, w, weights, sizeof(float) * nt, &err) == LM_OK) {
        for (int i = 0; i < n; i++) w[(size_t)i * taps + taps - 1] = 0.0f;
        lm_upload(be, weights, w, sizeof(float) * nt);
    }
    free(w);
    real_cpu_ops(be)->add_weighted_rows(be, x, table, ids, weights, n, taps);
}
/* The 2-D rotary with the patch row and column exchanged. */
static void rope_swapping_rows_and_columns(lm_backend *be, lm_mem x, int n, int n_heads,
                                           int head_dim, lm_mem positions,
                                           const lm_rope_params *rope) {
    int32_t *pos = malloc(sizeof(int32_t) * 3 * (size_t)n);
    lm_error err = {0};
    if (pos && lm_download(be, pos, positions, sizeof(int32_t) * 3 * (size_t)n, &err) == LM_OK) {
        for (int t = 0; t < n; t++) {
            int32_t h = pos[3 * t + 1];
            pos[3 * t + 1] = pos[3 * t + 2];
            pos[3 * t + 2] = h;
        }
        lm_upload(be, positions, pos, sizeof(int32_t) * 3 * (size_t)n);
    }
    free(pos);
    real_cpu_ops(be)->rope(be, x, n, n_heads, head_dim, positions, rope);
}
static void route_ignoring_bias(lm_backend *be, lm_mem ids, lm_mem weights, lm_mem logits, int n,
                                const lm_moe_routing *routing) {
    lm_moe_routing r = *routing;
    r.correction_bias = (lm_mem){0};
    real_cpu_ops(be)->moe_route(be, ids, weights, logits, n, &r);
}
static void route_ignoring_groups(lm_backend *be, lm_mem ids, lm_mem weights, lm_mem logits, int n,
                                  const lm_moe_routing *routing) {
    lm_moe_routing r = *routing;
    r.n_group = r.topk_group = 1;
    real_cpu_ops(be)->moe_route(be, ids, weights, logits, n, &r);
}
/* Weights from the biased choices s + bias instead of s (without
 * renormalising: then that is the right weight plus bias · scale). */
static void route_weighting_by_choice(lm_backend *be, lm_mem ids, lm_mem weights, lm_mem logits,
                                      int n, const lm_moe_routing *routing) {
    real_cpu_ops(be)->moe_route(be, ids, weights, logits, n, routing);
    size_t nk = (size_t)n * (size_t)routing->top_k;
    int32_t *id = malloc(sizeof(int32_t) * nk);
    float *w = malloc(sizeof(float) * nk);
    float *bias = malloc(sizeof(float) * (size_t)routing->n_experts);
    lm_error err = {0};
    if (id && w && bias && lm_download(be, id, ids, sizeof(int32_t) * nk, &err) == LM_OK &&
        lm_download(be, w, weights, sizeof(float) * nk, &err) == LM_OK &&
        lm_download(be, bias, routing->correction_bias,
                    sizeof(float) * (size_t)routing->n_experts, &err) == LM_OK) {
        for (size_t p = 0; p < nk; p++) w[p] += bias[id[p]] * routing->scale;
        lm_upload(be, weights, w, sizeof(float) * nk);
    }
    free(id);
    free(w);
    free(bias);
}
static void experts_skipping_last_token(lm_backend *be, lm_mem out, lm_mem x, int n, lm_mem ids,
                                        lm_mem weights, int top_k, const lm_moe_experts *experts,
                                        lm_mem scratch) {
    real_cpu_ops(be)->moe_experts(be, out, x, n - 1, ids, weights, top_k, experts, scratch);
}
static void experts_writing_past_scratch(lm_backend *be, lm_mem out, lm_mem x, int n, lm_mem ids,
                                         lm_mem weights, int top_k, const lm_moe_experts *experts,
                                         lm_mem scratch) {
    real_cpu_ops(be)->moe_experts(be, out, x, n, ids, weights, top_k, experts, scratch);
    lm_fill(be, lm_mem_bytes(scratch, lm_moe_scratch_bytes(n, top_k, experts)), 0, 1);
}

static void test_poison_catches_broken_ops(void) {
    backends real;
    CHECK(backends_open(&real));
    lm_backend_ops broken_ops = *real.be[0]->ops;
    broken_ops.silu_mul = skip_last_silu_mul;
    broken_ops.gather_rows = skip_last_gather;
    broken_ops.gated_delta_rule = drop_last_sequence;
    broken_ops.causal_conv1d_silu = conv_ignoring_first;
    lm_backend broken = {&broken_ops, real.be[0]->impl}; /* cpu/1t's pool */
    fused_kernels broken_fused = {0}; /* the fused kernels below, one at a time */
    backends bs = {.be = {&broken}, .fused = {&broken_fused}, .label = {"broken cpu"}, .family = {"cpu"}, .n = 1};
    rng r = {71};
    verdict v1 = {0}, v2 = {0}, v3 = {0}, v4 = {0}, ok = {0};
    check_elementwise(&bs, &v1, &r, EW_SILU_MUL, 1000);
    check_gather_rows(&bs, &v2, &r, (const int32_t[]){3, 1, 3}, 3, 4, 16);
    check_gdn_batch(&bs, &v3, &r, 2, 4, 16, 16, (const int[]){3, 1, 2}, 3);
    check_conv_batch(&bs, &v4, &r, 128, 4, (const int[]){3, 1, 2}, 3);
    check_elementwise(&bs, &ok, &r, EW_ADD, 1000); /* an op left alone still passes */
    /* mixture of experts: GLM-like routing, 7 tokens; small experts */
    const route_case glm = {64, 8, 7, LM_MOE_SIGMOID, true, 8, 4, false, 2.5f};
    expert_set ex;
    verdict m1 = {0}, m2 = {0}, m3 = {0}, m4 = {0}, m5 = {0}, m6 = {0};
    bool have_experts = expert_set_make(&ex, &r, 8, 64, 32, LM_DTYPE_BF16);
    broken_ops.sigmoid_scale_rows = sigmoid_scale_skipping_last_row;
    check_sigmoid_scale_rows(&bs, &m1, &r, 5, 64);
    verdict m0 = {0};
    broken_ops.add_rows = add_rows_skipping_last_row;
    check_add_rows(&bs, &m0, &r, 5, 64);
    /* the vision ops */
    verdict vis[6] = {{0}};
    broken_ops.layernorm = layernorm_skipping_last_row;
    check_layernorm(&bs, &vis[0], &r, 5, 64, false, 0.0f);
    broken_ops.layernorm = layernorm_without_bias;
    check_layernorm(&bs, &vis[1], &r, 5, 64, false, 1.0f);
    broken_ops.layernorm = real.be[0]->ops->layernorm;
    check_layernorm(&bs, &ok, &r, 5, 64, false, 1.0f);
    broken_ops.gelu = gelu_of_the_other_kind;
    check_gelu(&bs, &vis[2], &r, LM_GELU_ERF, 1000);
    check_gelu(&bs, &vis[3], &r, LM_GELU_TANH, 1000);
    broken_ops.add_weighted_rows = weighted_rows_skipping_last_tap;
    check_add_weighted_rows(&bs, &vis[4], &r, LM_DTYPE_BF16, 9, 32, 4, 64);
    broken_ops.rope = rope_swapping_rows_and_columns;
    const rope_case vision_rope = {14, 2, 16, {.rot_dim = 16, .theta = 10000.0f, .two_d = true}};
    check_rope(&bs, &vis[5], &r, &vision_rope);
    broken_ops.moe_route = route_ignoring_bias;
    check_moe_route(&bs, &m2, &r, &glm);
    broken_ops.moe_route = route_ignoring_groups;
    check_moe_route(&bs, &m3, &r, &glm);
    broken_ops.moe_route = route_weighting_by_choice;
    check_moe_route(&bs, &m4, &r, &glm);
    broken_ops.moe_route = real.be[0]->ops->moe_route; /* the real one passes */
    check_moe_route(&bs, &ok, &r, &glm);
    if (have_experts) {
        broken_ops.moe_experts = experts_skipping_last_token;
        check_moe_experts(&bs, &m5, &r, &ex, 2, 5, true);
        broken_ops.moe_experts = experts_writing_past_scratch;
        check_moe_experts(&bs, &m6, &r, &ex, 2, 5, false);
        broken_ops.moe_experts = real.be[0]->ops->moe_experts;
        check_moe_experts(&bs, &ok, &r, &ex, 2, 5, true);
    }
    expert_set_free(&ex);
    /* the fused ops, against their parts */
    verdict f1 = {0}, f2 = {0}, f3 = {0}, f4 = {0}, f5 = {0}, f6 = {0};
    int taken = 0;
    broken_fused.matmul_add = matmul_add_storing;
    check_matmul_add(&bs, &f1, &r, 2, 13, 136, LM_DTYPE_BF16, &taken);
    const int64_t three[] = {24, 8, 8};
    broken_fused.normed_matmul_group = normed_group_of_h;
    check_normed_products(&bs, &f2, &r, 2, 3, three, 256, LM_DTYPE_BF16, false, &taken);
    broken_fused.matmul_gated_add = matmul_gated_add_without_other;
    check_matmul_gated_add(&bs, &f4, &r, 2, 13, 136, LM_DTYPE_BF16, false, &taken);
    broken_fused.matmul_gated_add = matmul_gated_add_without_up;
    check_matmul_gated_add(&bs, &f6, &r, 2, 13, 136, LM_DTYPE_BF16, true, &taken);
    broken_fused.gated_delta_rule_norm = delta_rule_without_norm;
    check_delta_rule_norm(&bs, &f5, &r, 2, 4, 16, 16, (const int[]){1, 2}, 2, &taken);
    int gated_taken = 0;
    broken_fused.gated_attention = attention_ungated;
    check_attention(&bs, &f3, &r, &(attention_case){4, 2, 32, 16, 1, {3, 0, 0}, {1, 0, 0}}, &gated_taken);
    backends_close(&real);
    CHECK_MSG(taken == 5, "the broken fused ops did not all run (%d of 5)", taken);
    CHECK_MSG(gated_taken >= 1, "the broken gated_attention did not run");
    CHECK_MSG(f3.failed, "a gated_attention that ignores the gates passed");
    CHECK_MSG(f1.failed, "a matmul_add that stores instead of adding passed");
    CHECK_MSG(f2.failed, "a normed_matmul_group whose products read h, not its norm, passed");
    CHECK_MSG(f4.failed, "a matmul_gated_add that never adds other passed");
    CHECK_MSG(f5.failed, "a gated_delta_rule_norm without the norm passed");
    CHECK_MSG(f6.failed, "a matmul_gated_add that ignores x_up (no SwiGLU) passed");
    CHECK_MSG(v1.failed, "a silu_mul that skips the last element passed");
    CHECK_MSG(v2.failed, "a gather_rows that skips the last row passed");
    CHECK_MSG(v3.failed, "a delta rule that drops a sequence passed");
    CHECK_MSG(v4.failed, "a conv that ignores first[] passed");
    CHECK_MSG(m0.failed, "an add_rows that skips the last row passed");
    CHECK_MSG(m1.failed, "a sigmoid_scale_rows that skips the last row passed");
    CHECK_MSG(vis[0].failed, "a layernorm that skips the last row passed");
    CHECK_MSG(vis[1].failed, "a layernorm without centring and bias (an rmsnorm) passed");
    CHECK_MSG(vis[2].failed, "gelu_erf computed as gelu_tanh passed");
    CHECK_MSG(vis[3].failed, "gelu_tanh computed as gelu_erf passed");
    CHECK_MSG(vis[4].failed, "an add_weighted_rows that drops the last tap passed");
    CHECK_MSG(vis[5].failed, "a 2-D rope with rows and columns exchanged passed");
    CHECK_MSG(m2.failed, "a moe_route that ignores the correction bias passed");
    CHECK_MSG(m3.failed, "a moe_route that ignores the expert groups passed");
    CHECK_MSG(m4.failed, "a moe_route that weights by the biased scores passed");
    CHECK(have_experts);
    CHECK_MSG(m5.failed, "a moe_experts that skips the last token passed");
    CHECK_MSG(m6.failed, "a moe_experts that writes past its scratch passed");
    CHECK_VERDICT(ok);
}

int main(void) {
    /* The cuda attention's partials at 2 MB (64 MB by default): calls of
     * many tokens at long contexts run in several waves here. */
    setenv("LOOM_CUDA_ATTENTION_PARTIALS", "2097152", 0);
    /* The cuda normed products run only when asked (matmul.cu says why):
     * asked here, so their kernels stay checked against their parts. */
    setenv("LOOM_CUDA_FUSE_NORM", "1", 0);
    RUN_TEST(test_backend_create_by_name);
    RUN_TEST(test_cpu_kernel_sets);
    RUN_TEST(test_memory_ops);
    RUN_TEST(test_matmul);
    test_run_with("test_matmul_q8", check_block_matmul, (void *)&q8_case);
    test_run_with("test_matmul_fp8", check_block_matmul, (void *)&fp8_case);
    RUN_TEST(test_matmul_ggml);
    RUN_TEST(test_matmul_bf16_compute);
    RUN_TEST(test_matmul_zero_cols);
    RUN_TEST(test_matmul_group);
    RUN_TEST(test_matmul_swiglu);
    RUN_TEST(test_normed_products);
    RUN_TEST(test_matmul_add);
    RUN_TEST(test_matmul_gated_add);
    RUN_TEST(test_embed);
    RUN_TEST(test_embed_ggml);
    RUN_TEST(test_norms);
    RUN_TEST(test_add_rmsnorm);
    RUN_TEST(test_plain_layer_fuses_exactly);
    RUN_TEST(test_layernorm);
    RUN_TEST(test_rope);
    RUN_TEST(test_elementwise);
    RUN_TEST(test_gelu);
    RUN_TEST(test_copy_and_gather_rows);
    RUN_TEST(test_argmax_rows);
    RUN_TEST(test_sample_rows);
    RUN_TEST(test_kv_write_and_attention);
    RUN_TEST(test_gdn_gates);
    RUN_TEST(test_causal_conv1d_silu_batched);
    RUN_TEST(test_gated_delta_rule_batched);
    RUN_TEST(test_gdn_prepare);
    RUN_TEST(test_attention_prepare);
    RUN_TEST(test_delta_rule_norm);
    RUN_TEST(test_sigmoid_scale_rows);
    RUN_TEST(test_add_rows);
    RUN_TEST(test_add_weighted_rows);
    RUN_TEST(test_moe_route);
    RUN_TEST(test_moe_experts);
    RUN_TEST(test_moe_experts_over_ranks);
    RUN_TEST(test_poison_catches_broken_ops);
    return test_summary("test_backend_ops");
}
