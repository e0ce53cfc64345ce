/* Memory for large arrays (weights, KV pools): past 4 MiB, 2 MiB-aligned and
 * marked for transparent huge pages, so filling it faults 512 times less
 * often and streaming it misses the TLB less; smaller sizes are plain
 * 64-byte-aligned blocks.  Free with free().  NULL when out of memory. */
#ifndef LOOM_BASE_BIG_ALLOC_H
#define LOOM_BASE_BIG_ALLOC_H

#include <stddef.h>

void *lm_big_alloc(size_t bytes);
/* Hands the whole pages inside [p, p + bytes) back to the system
 * (madvise MADV_DONTNEED): for data converted at load whose original is not
 * read again.  Afterwards those pages read as zeros (private anonymous or
 * malloc'd memory) or as the file's bytes again (a private file mapping).
 * Only a hint: nothing fails when it does not happen. */
void lm_big_release(const void *p, size_t bytes);

#endif
