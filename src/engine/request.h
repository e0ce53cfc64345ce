/* A submitted request as the engine and its caller share it: a deep copy of
 * the parameters, an event queue (the engine thread writes, the caller's
 * thread reads) and a reference count (engine + caller). */
#ifndef LOOM_ENGINE_REQUEST_H
#define LOOM_ENGINE_REQUEST_H

#include <pthread.h>
#include <stdatomic.h>
#include <stdbool.h>

#include "base/error.h"
#include "engine/image_cache.h"
#include "loom.h"
#include "image/image_processor.h"
#include "image/multimodal_prompt.h"

typedef struct {
    loom_event event;  /* text / top / error point into the owned copies below */
    char *text;
    loom_token_logprob *top;
    char *error;
} lm_queued_event;

/* One image of a request: its file, its patch rows until the engine thread
 * encodes them, where its placeholders are, and then the tower's rows. */
typedef struct {
    uint8_t *file;
    size_t file_bytes;
    uint64_t content_hash;    /* of the file (prefix caching keys its rows by it) */
    lm_image_patches patches; /* freed once encoded */
    lm_image_grid grid;
    lm_image_span span;       /* in the expanded prompt */
    lm_image_embedding *embedding; /* NULL until encoded; a reference held */
} lm_request_image;

struct loom_request {
    loom_request_params params; /* pointers refer to the owned copies below */
    int32_t *prompt, *stop_token_ids, *logit_bias_ids, *keep_special_token_ids;
    float *logit_bias_values;
    char **stop;
    /* Images: the prompt above is the expanded one, with each token's
     * 3-component position; tokens past it sit at index + rope_delta. */
    lm_request_image *images;
    int n_images;
    int32_t *positions; /* [n_prompt][3], NULL for a text prompt */
    int rope_delta;

    pthread_mutex_t mutex;
    pthread_cond_t ready;
    lm_queued_event *events; /* FIFO ring */
    int head, count, capacity;
    lm_queued_event current; /* the event last handed to the caller */
    int choices_open;        /* choices without a FINISH/ERROR event yet */
    int refs;                /* engine + caller */
    void (*notify)(void *ctx); /* loom_request_set_notify's, called under mutex */
    void *notify_ctx;
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
