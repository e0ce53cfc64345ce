/* Lock order: the wakeup's mutex, then MHD's own (suspend and resume take
 * it); MHD never calls back into loom while holding it.  The engine calls
 * lm_wakeup_notify under the request's lock, so the reader never holds
 * this mutex while it calls into loom. */
#include "server/wakeup.h"

void lm_wakeup_init(lm_wakeup *w, struct MHD_Connection *c) {
    pthread_mutex_init(&w->mutex, NULL);
    w->connection = c;
    w->suspended = false;
    w->pending = false;
    const union MHD_ConnectionInfo *info = c ? MHD_get_connection_info(c, MHD_CONNECTION_INFO_CONNECTION_FD) : NULL;
    w->fd = info ? info->connect_fd : -1;
    w->watch_index = -1;
}

void lm_wakeup_destroy(lm_wakeup *w) { pthread_mutex_destroy(&w->mutex); }

void lm_wakeup_notify(void *wakeup) {
    lm_wakeup *w = wakeup;
    pthread_mutex_lock(&w->mutex);
    if (w->suspended) {
        w->suspended = false;
        MHD_resume_connection(w->connection);
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
