/* Backends by name: one row of `kinds` per backend of this build. */
#include <string.h>

#include "ops/backend_kinds.h"

static lm_status create_ref(int n_threads, lm_backend **out, lm_error *err) {
    (void)n_threads; /* always one */
    return lm_backend_ref_create(out, err);
}
static int one_thread(const lm_backend *be) {
    (void)be;
    return 1;
}

typedef struct {
    const char *name;
    const lm_backend_ops *ops;
    lm_status (*create)(int n_threads, lm_backend **out, lm_error *err);
    void (*destroy)(lm_backend *be);
    int (*threads)(const lm_backend *be);
} backend_kind;

static const backend_kind kinds[] = {
    {"cpu", &lm_cpu_backend_ops, lm_backend_cpu_create, lm_cpu_backend_destroy,
     lm_cpu_backend_threads},
    {"ref", &lm_ref_backend_ops, create_ref, lm_ref_backend_destroy, one_thread},
};
#define N_KINDS (sizeof kinds / sizeof kinds[0])

const char *lm_backend_names(void) { return "cpu, ref"; }

lm_status lm_backend_create(const char *name, int n_threads, lm_backend **out, lm_error *err) {
    *out = NULL;
    for (size_t i = 0; i < N_KINDS; i++)
        if (name && strcmp(name, kinds[i].name) == 0) return kinds[i].create(n_threads, out, err);
    return lm_fail(err, LM_ERR_INVALID, "unknown backend '%s' (this build has: %s)",
                   name ? name : "(null)", lm_backend_names());
}

static const backend_kind *kind_of(const lm_backend *be) {
    for (size_t i = 0; i < N_KINDS; i++)
        if (be->ops == kinds[i].ops) return &kinds[i];
    return NULL;
}

void lm_backend_destroy(lm_backend *be) {
    if (!be) return;
    const backend_kind *k = kind_of(be);
    if (k) k->destroy(be);
}

int lm_backend_threads(const lm_backend *be) {
    const backend_kind *k = kind_of(be);
    return k ? k->threads(be) : 1;
}
