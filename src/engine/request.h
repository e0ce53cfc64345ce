/* A submitted request as the engine and its caller share it: a deep copy of
 * the parameters, an event queue (the engine thread writes, the caller's
 * thread reads) and a reference count (engine + caller). */
#ifndef LOOM_ENGINE_REQUEST_H
#define LOOM_ENGINE_REQUEST_H

#include <pthread.h>
#include <stdatomic.h>
#include <stdbool.h>

#include "base/error.h"
#include "loom.h"

typedef struct {
    loom_event event;  /* text / top / error point into the owned copies below */
    char *text;
    loom_token_logprob *top;
    char *error;
} lm_queued_event;

struct loom_request {
    loom_request_params params; /* pointers refer to the owned copies below */
    int32_t *prompt, *stop_token_ids, *logit_bias_ids, *keep_special_token_ids;
    float *logit_bias_values;
    char **stop;

    pthread_mutex_t mutex;
    pthread_cond_t ready;
    lm_queued_event *events; /* FIFO ring */
    int head, count, capacity;
    lm_queued_event current; /* the event last handed to the caller */
    int choices_open;        /* choices without a FINISH/ERROR event yet */
    int refs;                /* engine + caller */
    atomic_bool cancelled;
    struct loom_engine *engine;
};

/* Deep-copies params; refs starts at 2 (engine and caller). */
lm_status lm_request_create(const loom_request_params *params, loom_request **out, lm_error *err);
/* Drops one reference; frees on the last. */
void lm_request_unref(loom_request *r);
/* Appends an event (copying text, top and error).  A FINISH or ERROR event
 * closes its choice.  Returns false if out of memory (the event is lost but
 * the choice is still closed, so the caller is never left waiting). */
bool lm_request_push(loom_request *r, const loom_event *event);

#endif
