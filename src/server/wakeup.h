/* A connection suspended while its request has nothing to send, resumed by
 * the engine (loom_request_set_notify) the moment an event is queued: no
 * timer, and no wake-up lost between "nothing to read" and the suspend.
 *
 * The resume itself (MHD_resume_connection: MHD's lock and a write to its
 * inter-thread channel, a system call) is not made on the engine's thread:
 * a step that ends 64 streams' tokens would pay 64 of them before the next
 * step.  The notify hands the wakeup to the server's resumer thread, which
 * resumes what it is handed in a batch (one signal a batch). */
#ifndef LM_SERVER_WAKEUP_H
#define LM_SERVER_WAKEUP_H

#include <microhttpd.h>
#include <pthread.h>
#include <stdbool.h>

#include "base/error.h"

typedef struct lm_resumer lm_resumer;

typedef struct lm_wakeup {
    pthread_mutex_t mutex;
    struct MHD_Connection *connection;
    bool suspended; /* by lm_wakeup_suspend, not yet handed to be resumed */
    bool pending;   /* told since the reader last suspended: look again */
    int fd;         /* the connection's socket, for the sweep's look (http.c) */
    int watch_index; /* in the server's list of watched wakeups, or -1 */
    lm_resumer *resumer;      /* NULL: resumed on the notifying thread */
    struct lm_wakeup *queued; /* the resumer's list (its mutex) */
} lm_wakeup;

/* resumer may be NULL (the connection is then resumed by the notifier). */
void lm_wakeup_init(lm_wakeup *w, struct MHD_Connection *c, lm_resumer *resumer);
void lm_wakeup_destroy(lm_wakeup *w);
/* The notify hook (any thread, never blocks beyond two short mutexes):
 * has the connection resumed if suspended, else makes the next suspend
 * return false so that the reader looks again. */
void lm_wakeup_notify(void *wakeup);
/* On the connection's I/O thread, after the reader found nothing to read:
 * suspends the connection and returns true, or returns false (the caller
 * looks for events again) when told since the last suspend. */
bool lm_wakeup_suspend(lm_wakeup *w);

/* The thread that resumes handed connections.  Stop it before the daemon
 * stops: it resumes what it still holds and ends; a wakeup handed after
 * that is resumed by its notifier.  A suspended connection is never
 * closed, so a handed wakeup outlives its turn. */
lm_status lm_resumer_start(lm_resumer **out, lm_error *err);
void lm_resumer_stop(lm_resumer *r);
void lm_resumer_free(lm_resumer *r); /* stops it first if needed */

#endif
