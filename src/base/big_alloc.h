/* Memory for large arrays (weights, KV pools): past 4 MiB, 2 MiB-aligned and
 * marked for transparent huge pages, so filling it faults 512 times less
 * often and streaming it misses the TLB less; smaller sizes are plain
 * 64-byte-aligned blocks.  Free with free().  NULL when out of memory. */
#ifndef LOOM_BASE_BIG_ALLOC_H
#define LOOM_BASE_BIG_ALLOC_H

#include <stddef.h>

void *lm_big_alloc(size_t bytes);

#endif
