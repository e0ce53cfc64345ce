/* A quick measurement of this machine's memory read bandwidth, for rooflines. */
#ifndef LOOM_BASE_MEMBW_H
#define LOOM_BASE_MEMBW_H

#include "base/threadpool.h"

/* Bytes per second of a multi-threaded read pass over a buffer well beyond
 * the caches (best of a few passes); 0 if the buffer cannot be allocated. */
double lm_measure_read_bandwidth(lm_pool *pool);

#endif
