/* While the server is busy, a log line every interval (vLLM's periodic
 * stats): prompt and generation tokens/s since the last line, requests
 * running and waiting, KV-cache use, and the draft acceptance while
 * speculating.  Silent while idle (one last line after work stops). */
#ifndef LOOM_SERVER_THROUGHPUT_LOG_H
#define LOOM_SERVER_THROUGHPUT_LOG_H

#include "base/error.h"
#include "base/log.h"
#include "loom.h"

typedef struct lm_throughput_log lm_throughput_log;

/* The log and engine must outlive it. */
lm_status lm_throughput_log_start(const lm_log *log, loom_engine *engine, double interval_s,
                                  lm_throughput_log **out, lm_error *err);
void lm_throughput_log_stop(lm_throughput_log *t);

#endif
