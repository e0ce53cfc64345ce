/* A fixed pool of threads that prepare requests off the connections' I/O
 * threads (a generation request is parsed, validated, rendered, tokenized
 * and submitted there while its connection is suspended), fed by a bounded
 * queue: a burst past the queue is refused, and the caller answers it 503,
 * instead of costing a thread per request. */
#ifndef LM_SERVER_PREPARE_POOL_H
#define LM_SERVER_PREPARE_POOL_H

#include <stdbool.h>

#include "base/error.h"

#define LM_PREPARE_DEFAULT_THREADS 4
#define LM_PREPARE_MAX_THREADS 256
#define LM_PREPARE_DEFAULT_QUEUE 1024 /* as the engine's own queue (--max-waiting's default) */
#define LM_PREPARE_MAX_QUEUE (1 << 20)

typedef struct lm_prepare_pool lm_prepare_pool;

/* What a thread does with an item: run(cls, item), once per item pushed. */
typedef void (*lm_prepare_fn)(void *cls, void *item);

/* threads in 1..LM_PREPARE_MAX_THREADS; capacity: the items that may wait
 * for a thread (those running are not counted), 1..LM_PREPARE_MAX_QUEUE. */
lm_status lm_prepare_pool_start(int threads, int capacity, lm_prepare_fn run, void *cls, lm_prepare_pool **out,
                                lm_error *err);
/* Holds a place in the queue for one item: false when the queue is full or
 * the pool stops.  A true answer is followed by lm_prepare_pool_push, which
 * cannot fail: the caller readies the item in between (suspends its
 * connection) knowing that a thread will take it. */
bool lm_prepare_pool_reserve(lm_prepare_pool *p);
void lm_prepare_pool_push(lm_prepare_pool *p, void *item);
/* The items waiting for a thread (reserved ones included). */
int lm_prepare_pool_waiting(lm_prepare_pool *p);
/* Refuses new reservations, lets the threads run what is queued or
 * reserved, and joins them.  The pool stays valid (reserve answers false)
 * until freed, so callers racing the stop are refused, never left dangling. */
void lm_prepare_pool_stop(lm_prepare_pool *p);
/* Stops the pool if it still runs, then frees it (NULL: nothing). */
void lm_prepare_pool_free(lm_prepare_pool *p);

#endif
