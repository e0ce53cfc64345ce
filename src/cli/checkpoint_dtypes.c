#include "cli/checkpoint_dtypes.h"

#include <stdio.h>
#include <string.h>

#include "base/dtype.h"
#include "io/checkpoint.h"

lm_status lm_cli_checkpoint_summary(const char *dir, lm_checkpoint_summary *out, lm_error *err) {
    memset(out, 0, sizeof *out);
    lm_checkpoint *ck = NULL;
    lm_status st = lm_checkpoint_open(dir, LM_LOAD_MMAP, &ck, err);
    if (st != LM_OK) return st;
    size_t by_dtype[LM_DTYPE_COUNT] = {0};
    out->tensors = lm_checkpoint_count(ck);
    for (size_t i = 0; i < out->tensors; i++) {
        const lm_tensor *t = lm_checkpoint_at(ck, i);
        by_dtype[t->dtype]++;
        out->parameters += t->n_elements;
    }
    out->bytes = lm_checkpoint_total_bytes(ck);
    lm_checkpoint_close(ck);
    size_t used = 0;
    for (int d = 0; d < LM_DTYPE_COUNT && used < sizeof out->dtypes; d++)
        if (by_dtype[d]) {
            int n = snprintf(out->dtypes + used, sizeof out->dtypes - used, "%s%s x%zu", used ? ", " : "",
                             lm_dtype_name((lm_dtype)d), by_dtype[d]);
            if (n > 0) used += (size_t)n;
        }
    return LM_OK;
}
