#include "base/big_alloc.h"

#include <stdint.h>
#include <stdlib.h>
#include <sys/mman.h>

#define HUGE_PAGE ((size_t)2 << 20)

void *lm_big_alloc(size_t bytes) {
    size_t align = bytes >= 2 * HUGE_PAGE ? HUGE_PAGE : 64;
    size_t rounded = (bytes + align - 1) / align * align;
    if (rounded < bytes) return NULL; /* overflow */
    void *p = aligned_alloc(align, rounded ? rounded : align);
    /* Only a hint: without THP the pages stay small and all still works. */
    if (p && align == HUGE_PAGE) (void)madvise(p, rounded, MADV_HUGEPAGE);
    return p;
}
