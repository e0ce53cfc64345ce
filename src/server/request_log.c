#include "server/request_log.h"

#include <stdio.h>

void lm_request_log(const lm_log *log, const lm_request_record *r) {
    if (!lm_log_enabled(log, LM_LOG_INFO)) return;
    double decode = r->ttft >= 0 ? r->seconds - r->ttft : 0;
    double rate = decode > 0 && r->output_tokens > 1 ? (r->output_tokens - 1) / decode : 0;
    if (r->cancelled_by_client) {
        char first[48] = "";
        if (r->ttft >= 0) snprintf(first, sizeof first, ", first token %.3f s", r->ttft);
        lm_log_printf(log, LM_LOG_INFO,
                      "request %s %s cancelled by the client: prompt %d, cached %d, output %d tokens so far%s, %.3f s",
                      r->id, r->route, r->prompt_tokens, r->cached_tokens, r->output_tokens, first, r->seconds);
        return;
    }
    if (r->ttft < 0)
        lm_log_printf(log, LM_LOG_INFO, "request %s %s %u: prompt %d, cached %d, output %d tokens, %.3f s, %.200s",
                      r->id, r->route, r->status, r->prompt_tokens, r->cached_tokens, r->output_tokens, r->seconds,
                      r->finish);
    else
        lm_log_printf(log, LM_LOG_INFO,
                      "request %s %s %u: prompt %d, cached %d, output %d tokens, first token %.3f s, %.1f tokens/s, "
                      "%.3f s, finish %s",
                      r->id, r->route, r->status, r->prompt_tokens, r->cached_tokens, r->output_tokens, r->ttft, rate,
                      r->seconds, r->finish);
}
