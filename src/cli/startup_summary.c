#include "cli/startup_summary.h"

#include <stdio.h>
#include <unistd.h>

uint64_t lm_cli_resident_bytes(void) {
    FILE *f = fopen("/proc/self/statm", "r");
    if (!f) return 0;
    unsigned long long size = 0, resident = 0;
    int got = fscanf(f, "%llu %llu", &size, &resident);
    fclose(f);
    long page = sysconf(_SC_PAGESIZE);
    return got == 2 && page > 0 ? (uint64_t)resident * (uint64_t)page : 0;
}

/* "25.3 M", "2.1 B" */
static void count_text(int64_t n, char *out, size_t size) {
    if (n >= 1000000000) snprintf(out, size, "%.2f B", (double)n / 1e9);
    else snprintf(out, size, "%.1f M", (double)n / 1e6);
}

void lm_cli_log_startup(const lm_log *log, const lm_startup_facts *f) {
    const loom_engine_info *e = f->engine;
    char total[32], active[32];
    count_text(e->n_parameters, total, sizeof total);
    count_text(e->n_active_parameters, active, sizeof active);
    char moe[64] = "";
    if (e->n_active_parameters > 0 && e->n_active_parameters < e->n_parameters)
        snprintf(moe, sizeof moe, ", %s active per token", active);
    lm_log_printf(log, LM_LOG_INFO, "model %s: %s (%s), %s parameters%s, weights %.1f MB%s%s%s", f->model, e->family,
                  e->architecture, total, moe, (double)e->weight_bytes / 1e6, f->weight_dtypes[0] ? " (" : "",
                  f->weight_dtypes, f->weight_dtypes[0] ? ")" : "");
    bool detail = f->load_detail && f->load_detail[0];
    lm_log_printf(log, LM_LOG_INFO, "loaded in %.2f s%s%s%s, %.0f MiB resident; %s backend (%s compute%s%s%s), %d threads%s",
                  f->load_seconds, detail ? " (" : "", detail ? f->load_detail : "", detail ? ")" : "",
                  (double)lm_cli_resident_bytes() / (1 << 20), e->backend, e->compute,
                  e->cpu_kernels[0] ? ", " : "", e->cpu_kernels, e->cpu_kernels[0] ? " kernels" : "", e->threads,
                  e->vision ? ", images on" : "");
    if (!e->prefix_caching)
        lm_log_printf(log, LM_LOG_INFO, "prefix caching off");
    else if (e->prefix_snapshot_bytes > 0)
        lm_log_printf(log, LM_LOG_INFO, "prefix caching on, recurrent-state snapshots in %.0f MiB (--prefix-snapshot-bytes)",
                      (double)e->prefix_snapshot_bytes / (1 << 20));
    else
        lm_log_printf(log, LM_LOG_INFO, "prefix caching on");
    int full = e->max_model_len > 0 ? (int)(e->kv_cache_tokens / e->max_model_len) : 0;
    if (e->max_model_len_note[0]) lm_log_printf(log, LM_LOG_WARNING, "%s", e->max_model_len_note);
    else lm_log_printf(log, LM_LOG_INFO, "max model length %d (%s)", e->max_model_len, f->model_len_why);
    lm_log_printf(log, LM_LOG_INFO,
                  "KV cache: %lld tokens (%s, %.0f MiB) in blocks of %d, %d sequence%s of full length at once; "
                  "%d state slots (sequences decoding at once); %d tokens per step",
                  (long long)e->kv_cache_tokens, e->kv_cache_dtype, (double)e->kv_cache_bytes / (1 << 20),
                  e->kv_block_size, full, full == 1 ? "" : "s", e->state_slots, e->max_batch_tokens);
    if (e->speculative_tokens > 0) {
        lm_log_printf(log, LM_LOG_INFO, "speculative decoding on: up to %d MTP drafts per sequence and step (as many as pay)",
                      e->speculative_tokens);
        if (e->draft_round_bytes < e->draft_round_bytes_full)
            lm_log_printf(log, LM_LOG_INFO, "draft head: the first %d token ids (--draft-vocab), %.1f of %.1f MB a round",
                          e->draft_vocab, (double)e->draft_round_bytes / 1e6, (double)e->draft_round_bytes_full / 1e6);
    } else if (f->speculative_asked > 0)
        lm_log_printf(log, LM_LOG_WARNING, "speculative decoding off: %s", e->speculative_status);
    else
        lm_log_printf(log, LM_LOG_INFO, "speculative decoding off (--speculative-tokens K turns it on)");
    lm_log_printf(log, LM_LOG_INFO, "sampling defaults: %s", f->sampling_defaults);
}
