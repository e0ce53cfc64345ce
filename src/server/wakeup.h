/* A connection suspended while its request has nothing to send, resumed by
 * the engine (loom_request_set_notify) the moment an event is queued: no
 * timer, and no wake-up lost between "nothing to read" and the suspend. */
#ifndef LM_SERVER_WAKEUP_H
#define LM_SERVER_WAKEUP_H

#include <microhttpd.h>
#include <pthread.h>
#include <stdbool.h>

typedef struct {
    pthread_mutex_t mutex;
    struct MHD_Connection *connection;
    bool suspended; /* by lm_wakeup_suspend, not yet resumed */
    bool pending;   /* told since the reader last suspended: look again */
    int fd;         /* the connection's socket, for the sweep's look (http.c) */
    int watch_index; /* in the server's list of watched wakeups, or -1 */
} lm_wakeup;

void lm_wakeup_init(lm_wakeup *w, struct MHD_Connection *c);
void lm_wakeup_destroy(lm_wakeup *w);
/* The notify hook (any thread, never blocks beyond the wakeup's mutex):
 * resumes the connection if suspended, else makes the next suspend return
 * false so that the reader looks again. */
void lm_wakeup_notify(void *wakeup);
/* On the connection's I/O thread, after the reader found nothing to read:
 * suspends the connection and returns true, or returns false (the caller
 * looks for events again) when told since the last suspend. */
bool lm_wakeup_suspend(lm_wakeup *w);

#endif
