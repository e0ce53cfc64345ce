/* The inside of lm_tokenizer, shared by tokenizer.c (loading), tokenizer_encode.c
 * and detokenizer.c.  Not for use outside src/text. */
#ifndef LOOM_TEXT_TOKENIZER_INTERNAL_H
#define LOOM_TEXT_TOKENIZER_INTERNAL_H

#include "text/bpe.h"
#include "text/normalize.h"
#include "text/pretokenize.h"
#include "text/tokenizer.h"
#include "text/tokenizer_config.h"

/* Ids must stay below this (the per-id tables are allocated up to the largest id). */
#define LM_TOKENIZER_MAX_IDS ((int32_t)1 << 24)

typedef struct {
    char *content; /* as written in tokenizer.json */
    size_t len;
    char *match; /* what is searched for: content, or its normalised form for normalized tokens */
    size_t match_len;
    int32_t id;
    bool special, normalized, lstrip, rstrip, single_word;
} lm_added_token;

/* Added tokens grouped by first byte, longest first, for leftmost-longest search. */
typedef struct {
    uint32_t first[257]; /* order[first[b] .. first[b+1]) start with byte b */
    uint32_t *order;     /* indexes into lm_tokenizer.added */
    size_t n;
} lm_added_matcher;

enum { LM_TOKEN_SPECIAL = 1, LM_TOKEN_ADDED = 2 };

typedef struct {
    uint32_t off, len;
} lm_span;

struct lm_tokenizer {
    lm_bpe bpe;
    lm_str_map vocab;       /* model token (byte-level text) -> id */
    lm_str_map vocab_bytes; /* raw bytes -> id; only for ignore_merges */
    lm_str_map added_map;   /* added token content -> id */

    int32_t n_ids;          /* 1 + the largest id */
    const char **token_text; /* per id: tokenizer.json's string, NULL for a hole */
    lm_span *token_bytes;    /* per id: decoded bytes in decode_blob */
    size_t max_token_bytes;  /* the longest of them */
    char *decode_blob;
    uint8_t *flags; /* per id: LM_TOKEN_* */

    lm_added_token *added;
    size_t n_added;
    lm_added_matcher raw_matcher;  /* normalized=false tokens, searched in the raw text */
    lm_added_matcher norm_matcher; /* normalized=true tokens, searched after normalisation */

    lm_normalizer normalizer;
    lm_pretokenizer pretok;

    int32_t *prefix_ids, *suffix_ids; /* the post-processor's template around a sequence */
    size_t n_prefix, n_suffix;

    lm_tokenizer_config config;
    int32_t bos_id, eos_id, pad_id;
};

#endif
