/* Makes, describes and destroys cpu backends: picks the kernel set
 * (base/kernel_set.h) and points the backend at that set's op table.  The
 * one file of src/ops/cpu/ compiled once, not per kernel set (the Makefile's
 * KERNEL_SRC_cpu leaves it out): it may only call what every CPU runs. */
#include <stdlib.h>

#include "ops/backend_kinds.h"
#include "ops/cpu/cpu_backend.h"

#define X(s) extern const lm_cpu_kernels lm_cpu_kernels_##s;
LM_KERNEL_SETS
#undef X

#define X(s) [LM_KERNEL_SET_ID(s)] = &lm_cpu_kernels_##s,
static const lm_cpu_kernels *const sets[LM_KERNEL_SET_COUNT] = {LM_KERNEL_SETS};
#undef X

static lm_status create_on(int n_threads, lm_kernel_set set, lm_backend **out, lm_error *err) {
    const lm_cpu_kernels *kernels = sets[set];
    if (!kernels) return lm_fail(err, LM_ERR_INTERNAL, "the %s kernel set is not linked in", lm_kernel_set_name(set));
    lm_backend *be = calloc(1, sizeof *be);
    lm_cpu_backend *cpu = calloc(1, sizeof *cpu);
    if (!be || !cpu) {
        free(be);
        free(cpu);
        return lm_fail(err, LM_ERR_NOMEM, "out of memory creating the cpu backend");
    }
    lm_status st = lm_pool_create(n_threads, &cpu->pool, err);
    if (st != LM_OK) {
        free(be);
        free(cpu);
        return st;
    }
    cpu->kernels = kernels;
    cpu->features = lm_cpu_features_detect();
    cpu->compute = LM_DTYPE_F32;
    be->ops = kernels->ops;
    be->impl = cpu;
    *out = be;
    return LM_OK;
}

lm_status lm_backend_cpu_create(int n_threads, lm_backend **out, lm_error *err) {
    return lm_backend_cpu_create_with_kernels(n_threads, NULL, out, err);
}

lm_status lm_backend_cpu_create_with_kernels(int n_threads, const char *kernels, lm_backend **out, lm_error *err) {
    *out = NULL;
    lm_kernel_set set;
    lm_status st;
    if (kernels) {
        lm_cpu_features cpu = lm_cpu_features_detect();
        st = lm_kernel_set_choose(kernels, "kernels", &cpu, &set, err);
    } else {
        st = lm_kernel_set_for_process(&set, NULL, err);
    }
    return st != LM_OK ? st : create_on(n_threads, set, out, err);
}

bool lm_cpu_backend_owns(const lm_backend *be) {
    for (int s = 0; s < LM_KERNEL_SET_COUNT; s++)
        if (sets[s] && be->ops == sets[s]->ops) return true;
    return false;
}

const char *lm_backend_cpu_kernels(const lm_backend *be) {
    return be && lm_cpu_backend_owns(be) ? lm_kernel_set_name(lm_cpu_kernels_of(be)->set) : NULL;
}

void lm_cpu_backend_destroy(lm_backend *be) {
    lm_cpu_backend *cpu = be->impl;
    if (cpu) {
        lm_pool_destroy(cpu->pool);
        free(cpu->bf16_scratch);
    }
    free(cpu);
    free(be);
}

int lm_cpu_backend_threads(const lm_backend *be) {
    return lm_pool_size(((const lm_cpu_backend *)be->impl)->pool);
}
