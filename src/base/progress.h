/* Progress of long work (loading weights), reported to whoever shows it:
 * each call adds bytes done and, when a step learns of more work, bytes
 * more to do, under a phase name ("reading", "placing", ...: a string
 * constant, compared by address).  Calls may come from several threads at
 * once (tensor-parallel ranks load side by side): the receiver locks.
 * A NULL lm_progress, or one without `add`, reports nothing. */
#ifndef LOOM_BASE_PROGRESS_H
#define LOOM_BASE_PROGRESS_H

#include <stdint.h>

typedef struct {
    void (*add)(void *ctx, const char *phase, uint64_t done_bytes, uint64_t more_total_bytes);
    void *ctx;
} lm_progress;

static inline void lm_progress_add(const lm_progress *p, const char *phase, uint64_t done_bytes,
                                   uint64_t more_total_bytes) {
    if (p && p->add) p->add(p->ctx, phase, done_bytes, more_total_bytes);
}

/* The phases loading reports. */
#define LM_PROGRESS_READING "reading the checkpoint"
#define LM_PROGRESS_PLACING "placing the weights"
#define LM_PROGRESS_MAKING "making random weights"

#endif
