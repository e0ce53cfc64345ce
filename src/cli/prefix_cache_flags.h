/* The prefix-caching flags every command that builds an engine takes, in
 * vLLM's spelling: --enable-prefix-caching, --no-enable-prefix-caching and
 * the recurrent-state snapshot pool's size, --prefix-snapshot-bytes N (a
 * suffix K, M or G multiplies by 1024s). */
#ifndef LOOM_CLI_PREFIX_CACHE_FLAGS_H
#define LOOM_CLI_PREFIX_CACHE_FLAGS_H

#include <getopt.h>
#include <stdint.h>

#include "loom.h"

enum { LM_CLI_OPT_PREFIX_ON = 0x180, LM_CLI_OPT_PREFIX_OFF, LM_CLI_OPT_SNAPSHOT_BYTES };

/* Entries for a getopt_long option table. */
#define LM_CLI_PREFIX_CACHE_OPTIONS                                             \
    {"enable-prefix-caching", no_argument, 0, LM_CLI_OPT_PREFIX_ON},            \
    {"no-enable-prefix-caching", no_argument, 0, LM_CLI_OPT_PREFIX_OFF},        \
    {"prefix-snapshot-bytes", required_argument, 0, LM_CLI_OPT_SNAPSHOT_BYTES}

#define LM_CLI_PREFIX_CACHE_USAGE                                                              \
    "  --enable-prefix-caching  reuse the KV blocks and recurrent-state snapshots of prompt\n" \
    "                           prefixes seen before (the default)\n"                          \
    "  --no-enable-prefix-caching  recompute every prompt from its first token\n"              \
    "  --prefix-snapshot-bytes N   the recurrent-state snapshot pool (default 256M; K, M, G)\n"

/* Applies one of those options to eo: 1 handled, 0 not one of them, -1 a
 * bad value (the error is printed). */
int lm_cli_prefix_cache_option(int opt, const char *value, loom_engine_options *eo);

#endif
