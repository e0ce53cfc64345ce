#include "cli/prefix_cache_flags.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>

static int parse_bytes(const char *value, int64_t *out) {
    errno = 0;
    char *end;
    long long n = strtoll(value, &end, 10);
    int shift = 0;
    if (*end == 'K' || *end == 'k') shift = 10;
    else if (*end == 'M' || *end == 'm') shift = 20;
    else if (*end == 'G' || *end == 'g') shift = 30;
    if (shift) end++;
    if (errno || end == value || *end || n < 1 || n > ((long long)1 << 40) >> shift) {
        fprintf(stderr, "loom: --prefix-snapshot-bytes expects a size from 1 byte to 1T, e.g. 512M (got %s)\n",
                value);
        return -1;
    }
    *out = (int64_t)n << shift;
    return 1;
}

int lm_cli_prefix_cache_option(int opt, const char *value, loom_engine_options *eo) {
    switch (opt) {
    case LM_CLI_OPT_PREFIX_ON: eo->enable_prefix_caching = 1; return 1;
    case LM_CLI_OPT_PREFIX_OFF: eo->enable_prefix_caching = -1; return 1;
    case LM_CLI_OPT_SNAPSHOT_BYTES: return parse_bytes(value, &eo->prefix_snapshot_bytes);
    default: return 0;
    }
}
