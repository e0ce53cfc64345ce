/* Lock order: the wakeup's mutex, then the resumer's, then MHD's own
 * (suspend and resume take it); MHD never calls back into loom while
 * holding it.  The engine calls lm_wakeup_notify under the request's
 * lock, so the reader never holds these mutexes while it calls into loom. */
#include "server/wakeup.h"

#include <stdlib.h>

struct lm_resumer {
    pthread_mutex_t mutex;
    pthread_cond_t handed;
    lm_wakeup *first, *last; /* handed, not yet resumed, in order */
    bool stopping, started;
    pthread_t thread;
};

static void *resumer_main(void *arg) {
    lm_resumer *r = arg;
    pthread_mutex_lock(&r->mutex);
    for (;;) {
        while (!r->first && !r->stopping)
            pthread_cond_wait(&r->handed, &r->mutex);
        lm_wakeup *batch = r->first;
        r->first = r->last = NULL;
        if (!batch && r->stopping) break;
        pthread_mutex_unlock(&r->mutex);
        while (batch) { /* read next first: resumed, the connection may be done with its wakeup */
            lm_wakeup *next = batch->queued;
            MHD_resume_connection(batch->connection);
            batch = next;
        }
        pthread_mutex_lock(&r->mutex);
    }
    pthread_mutex_unlock(&r->mutex);
    return NULL;
}

lm_status lm_resumer_start(lm_resumer **out, lm_error *err) {
    lm_resumer *r = calloc(1, sizeof *r);
    if (!r) return lm_fail(err, LM_ERR_NOMEM, "out of memory for the server's resumer");
    pthread_mutex_init(&r->mutex, NULL);
    pthread_cond_init(&r->handed, NULL);
    if (pthread_create(&r->thread, NULL, resumer_main, r) != 0) {
        pthread_cond_destroy(&r->handed);
        pthread_mutex_destroy(&r->mutex);
        free(r);
        return lm_fail(err, LM_ERR_INTERNAL, "cannot start the server's resumer thread");
    }
    r->started = true;
    *out = r;
    return LM_OK;
}

void lm_resumer_stop(lm_resumer *r) {
    if (!r || !r->started) return;
    pthread_mutex_lock(&r->mutex);
    r->stopping = true;
    pthread_cond_signal(&r->handed);
    pthread_mutex_unlock(&r->mutex);
    pthread_join(r->thread, NULL);
    r->started = false;
}

void lm_resumer_free(lm_resumer *r) {
    if (!r) return;
    lm_resumer_stop(r);
    pthread_cond_destroy(&r->handed);
    pthread_mutex_destroy(&r->mutex);
    free(r);
}

/* The connection of w, suspended and no longer marked so, resumed: by the
 * resumer, or here once it stopped (or where there is none). */
static void hand_over(lm_wakeup *w) {
    lm_resumer *r = w->resumer;
    if (r) {
        pthread_mutex_lock(&r->mutex);
        if (!r->stopping) {
            w->queued = NULL;
            if (r->last) r->last->queued = w;
            else {
                r->first = w;
                pthread_cond_signal(&r->handed); /* one signal a batch */
            }
            r->last = w;
            pthread_mutex_unlock(&r->mutex);
            return;
        }
        pthread_mutex_unlock(&r->mutex);
    }
    MHD_resume_connection(w->connection);
}

void lm_wakeup_init(lm_wakeup *w, struct MHD_Connection *c, lm_resumer *resumer) {
    pthread_mutex_init(&w->mutex, NULL);
    w->connection = c;
    w->suspended = false;
    w->pending = false;
    const union MHD_ConnectionInfo *info = c ? MHD_get_connection_info(c, MHD_CONNECTION_INFO_CONNECTION_FD) : NULL;
    w->fd = info ? info->connect_fd : -1;
    w->watch_index = -1;
    w->resumer = resumer;
    w->queued = NULL;
}

void lm_wakeup_destroy(lm_wakeup *w) { pthread_mutex_destroy(&w->mutex); }

void lm_wakeup_notify(void *wakeup) {
    lm_wakeup *w = wakeup;
    pthread_mutex_lock(&w->mutex);
    if (w->suspended) {
        /* Handed over under w's mutex: the reader cannot suspend again
         * before the resume (it runs only once resumed), and no second
         * notify hands it twice (suspended is false until then). */
        w->suspended = false;
        hand_over(w);
    } else {
        w->pending = true;
    }
    pthread_mutex_unlock(&w->mutex);
}

bool lm_wakeup_suspend(lm_wakeup *w) {
    pthread_mutex_lock(&w->mutex);
    bool suspend = !w->pending;
    w->pending = false;
    if (suspend) {
        MHD_suspend_connection(w->connection);
        w->suspended = true;
    }
    pthread_mutex_unlock(&w->mutex);
    return suspend;
}
