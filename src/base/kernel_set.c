#include "base/kernel_set.h"

#include <stdlib.h>
#include <string.h>

static const char *const set_names[LM_KERNEL_SET_COUNT] = {
    [LM_KERNEL_SET_GENERIC] = "generic",
    [LM_KERNEL_SET_AVX2] = "avx2",
    [LM_KERNEL_SET_AVX512] = "avx512",
    [LM_KERNEL_SET_NATIVE] = "native",
};

/* What a set's code needs of the CPU, for the refusals. */
static const char *const set_needs[LM_KERNEL_SET_COUNT] = {
    [LM_KERNEL_SET_GENERIC] = "nothing",
    [LM_KERNEL_SET_AVX2] = "AVX2, FMA and F16C with the OS saving the ymm registers",
    [LM_KERNEL_SET_AVX512] = "AVX-512 F/BW/VL/DQ/CD with the OS saving the zmm and mask registers",
    [LM_KERNEL_SET_NATIVE] = "the instructions of the machine that built it (-march=native)",
};

#define X(s) LM_KERNEL_SET_ID(s),
static const lm_kernel_set built[] = {LM_KERNEL_SETS};
#undef X
#define N_BUILT (int)(sizeof built / sizeof built[0])

#define X(s) " " #s
static const char built_names[] = LM_KERNEL_SETS;
#undef X

const char *lm_kernel_set_name(lm_kernel_set set) {
    return (unsigned)set < LM_KERNEL_SET_COUNT ? set_names[set] : "unknown";
}

const char *lm_kernel_sets_built(void) { return built_names + 1; }

bool lm_kernel_set_is_built(lm_kernel_set set) {
    for (int i = 0; i < N_BUILT; i++)
        if (built[i] == set) return true;
    return false;
}

/* Every set is compiled with the tree's flags too (-march=x86-64 in a
 * portable build, -march=native in a PORTABLE=0 one, or whatever CFLAGS
 * says), as this file is: a set needs what they allowed, as far as the
 * features tell, on top of its own -m flags. */
static bool baseline_runs_on(const lm_cpu_features *cpu) {
#if defined(__AVX512F__) && defined(__AVX512BW__) && defined(__AVX512VL__) && defined(__AVX512DQ__) && \
    defined(__AVX512CD__)
    return cpu->avx512;
#elif defined(__AVX2__) && defined(__FMA__) && defined(__F16C__)
    return cpu->avx2;
#else
    (void)cpu;
    return true;
#endif
}

bool lm_kernel_set_runs_on(lm_kernel_set set, const lm_cpu_features *cpu) {
    switch (set) {
    case LM_KERNEL_SET_GENERIC: return baseline_runs_on(cpu);
    case LM_KERNEL_SET_AVX2: return baseline_runs_on(cpu) && cpu->avx2;
    case LM_KERNEL_SET_AVX512: return baseline_runs_on(cpu) && cpu->avx512;
    case LM_KERNEL_SET_NATIVE: return baseline_runs_on(cpu);
    }
    return false;
}

/* What a set needs that the CPU lacks, for the refusals. */
static const char *missing_for(lm_kernel_set set, const lm_cpu_features *cpu) {
    if (!baseline_runs_on(cpu)) return "the instructions the build's -march (or CFLAGS) allows";
    return set_needs[set];
}

/* The built sets the CPU runs, space-separated ("" when none). */
static void runnable_names(const lm_cpu_features *cpu, char *buf, size_t size) {
    size_t used = 0;
    buf[0] = '\0';
    for (int i = 0; i < N_BUILT; i++) {
        if (!lm_kernel_set_runs_on(built[i], cpu)) continue;
        const char *name = set_names[built[i]];
        size_t len = strlen(name);
        if (used + len + 2 > size) break;
        if (used) buf[used++] = ' ';
        memcpy(buf + used, name, len + 1);
        used += len;
    }
}

lm_status lm_kernel_set_choose(const char *requested, const char *source, const lm_cpu_features *cpu,
                               lm_kernel_set *out, lm_error *err) {
    char runs[64];
    runnable_names(cpu, runs, sizeof runs);
    if (!requested || !*requested) {
        for (int i = N_BUILT - 1; i >= 0; i--)
            if (lm_kernel_set_runs_on(built[i], cpu)) {
                *out = built[i];
                return LM_OK;
            }
        return lm_fail(err, LM_ERR_UNSUPPORTED, "this CPU runs no kernel set of this build (%s: they need %s)",
                       lm_kernel_sets_built(), missing_for(built[0], cpu));
    }
    for (int i = 0; i < N_BUILT; i++) {
        if (strcmp(requested, set_names[built[i]]) != 0) continue;
        if (!lm_kernel_set_runs_on(built[i], cpu))
            return lm_fail(err, LM_ERR_UNSUPPORTED,
                           "%s=%.40s: this CPU cannot run the %s kernels (they need %s); it runs: %s", source,
                           requested, set_names[built[i]], missing_for(built[i], cpu), *runs ? runs : "none");
        *out = built[i];
        return LM_OK;
    }
    bool known = false;
    for (int s = 0; s < LM_KERNEL_SET_COUNT; s++) known = known || strcmp(requested, set_names[s]) == 0;
    if (!known)
        return lm_fail(err, LM_ERR_INVALID, "%s=%.40s: not a kernel set (this build has: %s)", source, requested,
                       lm_kernel_sets_built());
    bool native = strcmp(requested, set_names[LM_KERNEL_SET_NATIVE]) == 0;
    return lm_fail(err, LM_ERR_INVALID, "%s=%.40s: this build has no %s kernels, only: %s (make PORTABLE=%d builds %s)",
                   source, requested, requested, lm_kernel_sets_built(), native ? 0 : 1,
                   native ? "native" : "generic, avx2 and avx512 on x86-64");
}

lm_status lm_kernel_set_for_process(lm_kernel_set *out, bool *forced, lm_error *err) {
    const char *requested = getenv(LM_KERNEL_SET_ENV);
    if (forced) *forced = requested && *requested;
    lm_cpu_features cpu = lm_cpu_features_detect();
    return lm_kernel_set_choose(requested, LM_KERNEL_SET_ENV, &cpu, out, err);
}
