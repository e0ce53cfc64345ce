#include "base/big_alloc.h"

#include <stdint.h>
#include <stdlib.h>
#include <sys/mman.h>
#include <unistd.h>

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

void lm_big_release(const void *p, size_t bytes) {
    long page_size = sysconf(_SC_PAGESIZE);
    uintptr_t page = page_size > 0 ? (uintptr_t)page_size : 4096;
    uintptr_t begin = ((uintptr_t)p + page - 1) / page * page, end = ((uintptr_t)p + bytes) / page * page;
    if (end > begin) (void)madvise((void *)begin, end - begin, MADV_DONTNEED);
}
