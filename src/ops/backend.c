/* Backends by name: one row of `kinds` per backend of this build. */
#include <stdbool.h>
#include <stdio.h>
#include <string.h>

#include "ops/backend_kinds.h"

static lm_status create_ref(int device, int n_threads, lm_backend **out, lm_error *err) {
    (void)device;
    (void)n_threads; /* always one */
    return lm_backend_ref_create(out, err);
}
static lm_status create_cpu(int device, int n_threads, lm_backend **out, lm_error *err) {
    (void)device;
    return lm_backend_cpu_create(n_threads, out, err);
}
static int one_thread(const lm_backend *be) {
    (void)be;
    return 1;
}

typedef struct {
    const char *name;
    const lm_backend_ops *ops;          /* its backends' table, or */
    bool (*owns)(const lm_backend *be); /* whether be is one (a kind with several tables) */
    lm_status (*create)(int device, int n_threads, lm_backend **out, lm_error *err);
    void (*destroy)(lm_backend *be);
    int (*threads)(const lm_backend *be);
    bool host;                 /* one device, the host's memory */
    int (*device_count)(void); /* GPU kinds */
} backend_kind;

#ifdef LOOM_HAVE_CUDA
/* n_threads means nothing on a GPU; lm_backend_create takes device 0
 * (CUDA_VISIBLE_DEVICES picks which GPUs are there).
 * A build whose table still has holes is refused, naming them: the models
 * call every op. */
static lm_status create_cuda(int device, int n_threads, lm_backend **out, lm_error *err) {
    (void)n_threads;
    char missing[512];
    if (lm_backend_missing_ops(&lm_cuda_backend_ops, missing, sizeof missing) > 0)
        return lm_fail(err, LM_ERR_UNSUPPORTED, "the cuda backend of this build lacks: %s", missing);
    return lm_backend_cuda_create(device, out, err);
}
#endif

static const backend_kind kinds[] = {
    {"cpu", NULL, lm_cpu_backend_owns, create_cpu, lm_cpu_backend_destroy, lm_cpu_backend_threads, true, NULL},
    {"ref", &lm_ref_backend_ops, NULL, create_ref, lm_ref_backend_destroy, one_thread, true, NULL},
#ifdef LOOM_HAVE_CUDA
    {"cuda", &lm_cuda_backend_ops, NULL, create_cuda, lm_cuda_backend_destroy, one_thread, false, lm_cuda_device_count},
#endif
};
#define N_KINDS (sizeof kinds / sizeof kinds[0])

#ifdef LOOM_HAVE_CUDA
const char *lm_backend_names(void) { return "cpu, ref, cuda"; }
#else
const char *lm_backend_names(void) { return "cpu, ref"; }
#endif

/* The names of the ops a table leaves NULL, comma-separated into buf;
 * returns how many. */
int lm_backend_missing_ops(const lm_backend_ops *ops, char *buf, size_t size) {
#define OP(name) {#name, ops->name != NULL}
    const struct {
        const char *name;
        bool present;
    } all[] = {OP(alloc), OP(import_host), OP(free), OP(buffer_size), OP(upload), OP(download),
               OP(copy), OP(fill), OP(synchronize), OP(matmul), OP(embed), OP(rmsnorm),
               OP(gated_rmsnorm), OP(l2norm_scale), OP(rope), OP(silu_mul), OP(layernorm),
               OP(gelu), OP(sigmoid_mul), OP(add), OP(copy_rows), OP(gather_rows),
               OP(add_weighted_rows), OP(argmax_rows), OP(add_rows), OP(sigmoid_scale_rows),
               OP(moe_route), OP(moe_experts), OP(kv_write), OP(attention), OP(gdn_gates),
               OP(causal_conv1d_silu), OP(gated_delta_rule)};
#undef OP
    int n = 0;
    size_t used = 0;
    if (size) buf[0] = '\0';
    for (size_t i = 0; i < sizeof all / sizeof all[0]; i++)
        if (!all[i].present) {
            int w = snprintf(buf + used, used < size ? size - used : 0, "%s%s", n ? ", " : "", all[i].name);
            if (w > 0 && used + (size_t)w < size) used += (size_t)w;
            n++;
        }
    return n;
}

lm_status lm_backend_create(const char *name, int n_threads, lm_backend **out, lm_error *err) {
    return lm_backend_create_on(name, 0, n_threads, out, err);
}

lm_status lm_backend_create_on(const char *name, int device, int n_threads, lm_backend **out, lm_error *err) {
    *out = NULL;
    for (size_t i = 0; i < N_KINDS; i++) {
        if (!name || strcmp(name, kinds[i].name) != 0) continue;
        if (kinds[i].host && device != 0)
            return lm_fail(err, LM_ERR_INVALID, "the %s backend has one device (0), not %d", name, device);
        return kinds[i].create(device, n_threads, out, err);
    }
#ifndef LOOM_HAVE_CUDA
    if (name && strcmp(name, "cuda") == 0)
        return lm_fail(err, LM_ERR_UNSUPPORTED,
                       "--device cuda: this loom was built without the CUDA backend; build it with "
                       "`make CUDA=1` (needs nvcc, the CUDA toolkit) on a machine with an NVIDIA GPU, "
                       "or run on the cpu");
#endif
    return lm_fail(err, LM_ERR_INVALID, "unknown backend '%s' (this build has: %s)",
                   name ? name : "(null)", lm_backend_names());
}

bool lm_backend_name_known(const char *name) {
    return name && (strcmp(name, "cpu") == 0 || strcmp(name, "ref") == 0 || strcmp(name, "cuda") == 0);
}

static const backend_kind *kind_of(const lm_backend *be) {
    for (size_t i = 0; i < N_KINDS; i++)
        if (kinds[i].owns ? kinds[i].owns(be) : be->ops == kinds[i].ops) return &kinds[i];
    return NULL;
}

void lm_backend_destroy(lm_backend *be) {
    if (!be) return;
    const backend_kind *k = kind_of(be);
    if (k) k->destroy(be);
}

bool lm_backend_is_host(const lm_backend *be) {
    const backend_kind *k = kind_of(be);
    return k && k->host;
}

int lm_backend_device_count(const char *name) {
    for (size_t i = 0; i < N_KINDS; i++)
        if (name && strcmp(name, kinds[i].name) == 0) return kinds[i].host ? 1 : kinds[i].device_count();
    return 0;
}

int lm_backend_threads(const lm_backend *be) {
    const backend_kind *k = kind_of(be);
    return k ? k->threads(be) : 1;
}

lm_status lm_backend_set_compute(lm_backend *be, const char *name, lm_error *err) {
    lm_dtype dtype;
    if (strcmp(name, "f32") == 0 || strcmp(name, "float32") == 0)
        dtype = LM_DTYPE_F32;
    else if (strcmp(name, "bf16") == 0 || strcmp(name, "bfloat16") == 0)
        dtype = LM_DTYPE_BF16;
    else
        return lm_fail(err, LM_ERR_INVALID, "unknown compute precision '%s' (f32 or bf16)", name);
    if (be->ops->set_compute_dtype) return be->ops->set_compute_dtype(be, dtype, err);
    if (dtype == LM_DTYPE_F32) return LM_OK;
    return lm_fail(err, LM_ERR_UNSUPPORTED, "the %s backend computes in float32 only (bf16 compute: --device cpu on a CPU with AVX-512 BF16, or cuda)",
                   be->ops->name);
}

const char *lm_backend_compute(const lm_backend *be) {
    return be->ops->compute_dtype && be->ops->compute_dtype(be) == LM_DTYPE_BF16 ? "bf16" : "f32";
}
