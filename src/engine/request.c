#include "grammar/compiled.h"
#include "engine/request.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

static void *copy_array(const void *src, size_t n, size_t size, bool *ok) {
    if (n == 0 || !src) return NULL;
    void *dst = malloc(n * size);
    if (!dst) {
        *ok = false;
        return NULL;
    }
    memcpy(dst, src, n * size);
    return dst;
}

static void free_event(lm_queued_event *e) {
    free(e->text);
    free(e->top);
    free(e->error);
    memset(e, 0, sizeof *e);
}

static void request_free(loom_request *r) {
    for (int i = 0; i < r->count; i++) free_event(&r->events[(r->head + i) % r->capacity]);
    free_event(&r->current);
    free(r->events);
    free(r->prompt);
    free(r->stop_token_ids);
    free(r->logit_bias_ids);
    free(r->logit_bias_values);
    free(r->keep_special_token_ids);
    lm_grammar_unref(r->params.grammar);
    for (int i = 0; i < r->n_images; i++) {
        free(r->images[i].file);
        lm_image_patches_free(&r->images[i].patches);
        lm_image_embedding_unref(r->images[i].embedding);
    }
    free(r->images);
    free(r->positions);
    for (int i = 0; r->stop && i < r->params.n_stop; i++) free(r->stop[i]);
    free(r->stop);
    pthread_mutex_destroy(&r->mutex);
    pthread_cond_destroy(&r->ready);
    free(r);
}

lm_status lm_request_create(const loom_request_params *p, loom_request **out, lm_error *err) {
    loom_request *r = calloc(1, sizeof *r);
    if (!r) return lm_fail(err, LM_ERR_NOMEM, "out of memory");
    pthread_mutex_init(&r->mutex, NULL);
    pthread_cond_init(&r->ready, NULL);
    r->params = *p;
    r->params.grammar = lm_grammar_ref(p->grammar);
    bool ok = true;
    r->prompt = copy_array(p->prompt, (size_t)p->n_prompt, sizeof(int32_t), &ok);
    r->stop_token_ids = copy_array(p->stop_token_ids, (size_t)p->n_stop_token_ids, sizeof(int32_t), &ok);
    r->logit_bias_ids = copy_array(p->sampling.logit_bias_ids, (size_t)p->sampling.n_logit_bias,
                                   sizeof(int32_t), &ok);
    r->logit_bias_values = copy_array(p->sampling.logit_bias_values, (size_t)p->sampling.n_logit_bias,
                                      sizeof(float), &ok);
    r->keep_special_token_ids = copy_array(p->keep_special_token_ids, (size_t)p->n_keep_special_token_ids,
                                           sizeof(int32_t), &ok);
    if (p->n_stop > 0) {
        r->stop = calloc((size_t)p->n_stop, sizeof *r->stop);
        ok = ok && r->stop;
        for (int i = 0; ok && i < p->n_stop; i++) ok = (r->stop[i] = strdup(p->stop[i])) != NULL;
    }
    r->params.prompt = r->prompt;
    r->params.stop_token_ids = r->stop_token_ids;
    r->params.sampling.logit_bias_ids = r->logit_bias_ids;
    r->params.sampling.logit_bias_values = r->logit_bias_values;
    r->params.stop = (const char *const *)r->stop;
    r->params.keep_special_token_ids = r->keep_special_token_ids;
    if (!r->keep_special_token_ids) r->params.n_keep_special_token_ids = 0;
    r->choices_open = p->n;
    r->refs = 2;
    atomic_init(&r->cancelled, false);
    if (!ok) {
        request_free(r);
        return lm_fail(err, LM_ERR_NOMEM, "out of memory copying the request");
    }
    *out = r;
    return LM_OK;
}

void lm_request_unref(loom_request *r) {
    if (!r) return;
    pthread_mutex_lock(&r->mutex);
    int left = --r->refs;
    /* The first to let go is the caller (loom_request_free: no more calls)
     * or the engine (no more events): either way the hook is done. */
    r->notify = NULL;
    pthread_mutex_unlock(&r->mutex);
    if (left == 0) request_free(r);
}

static bool copy_event(lm_queued_event *q, const loom_event *e) {
    memset(q, 0, sizeof *q);
    q->event = *e;
    bool ok = true;
    if (e->text) {
        q->text = malloc(e->text_len + 1);
        if (q->text) {
            memcpy(q->text, e->text, e->text_len);
            q->text[e->text_len] = '\0';
        }
        ok = q->text != NULL;
        q->event.text = q->text;
    }
    if (e->n_top > 0) {
        q->top = copy_array(e->top, (size_t)e->n_top, sizeof *e->top, &ok);
        q->event.top = q->top;
    }
    if (e->error) {
        q->error = strdup(e->error);
        ok = ok && q->error;
        q->event.error = q->error;
    }
    if (!ok) free_event(q);
    return ok;
}

bool lm_request_push(loom_request *r, const loom_event *e) {
    bool closes = e->type != LOOM_EVENT_TOKEN;
    pthread_mutex_lock(&r->mutex);
    bool ok = true;
    if (r->count == r->capacity) {
        int grown = r->capacity ? r->capacity * 2 : 16;
        lm_queued_event *bigger = malloc(sizeof *bigger * (size_t)grown);
        if (bigger) {
            for (int i = 0; i < r->count; i++) bigger[i] = r->events[(r->head + i) % r->capacity];
            free(r->events);
            r->events = bigger;
            r->head = 0;
            r->capacity = grown;
        } else {
            ok = false;
        }
    }
    if (ok) {
        ok = copy_event(&r->events[(r->head + r->count) % r->capacity], e);
        if (ok) r->count++;
    }
    if (closes) r->choices_open--;
    pthread_cond_broadcast(&r->ready);
    if (r->notify) r->notify(r->notify_ctx);
    pthread_mutex_unlock(&r->mutex);
    return ok;
}

void loom_request_set_notify(loom_request *r, void (*notify)(void *ctx), void *ctx) {
    if (!r) return;
    pthread_mutex_lock(&r->mutex);
    r->notify = notify;
    r->notify_ctx = ctx;
    /* What was queued before the hook: announced now, or never. */
    if (notify && (r->count > 0 || r->choices_open <= 0)) notify(ctx);
    pthread_mutex_unlock(&r->mutex);
}

int loom_next_event(loom_request *r, loom_event *event, int timeout_ms) {
    struct timespec deadline;
    if (timeout_ms >= 0) {
        clock_gettime(CLOCK_REALTIME, &deadline);
        deadline.tv_sec += timeout_ms / 1000;
        deadline.tv_nsec += (long)(timeout_ms % 1000) * 1000000L;
        if (deadline.tv_nsec >= 1000000000L) {
            deadline.tv_sec++;
            deadline.tv_nsec -= 1000000000L;
        }
    }
    pthread_mutex_lock(&r->mutex);
    free_event(&r->current);
    int result = 1;
    while (r->count == 0) {
        if (r->choices_open <= 0) {
            result = -1;
            break;
        }
        if (timeout_ms < 0) {
            pthread_cond_wait(&r->ready, &r->mutex);
        } else if (pthread_cond_timedwait(&r->ready, &r->mutex, &deadline) == ETIMEDOUT) {
            result = r->count ? 1 : 0;
            break;
        }
    }
    if (result == 1 && r->count > 0) {
        r->current = r->events[r->head];
        r->head = (r->head + 1) % r->capacity;
        r->count--;
        *event = r->current.event;
    } else if (result == 1) {
        result = r->choices_open <= 0 ? -1 : 0;
    }
    pthread_mutex_unlock(&r->mutex);
    return result;
}
