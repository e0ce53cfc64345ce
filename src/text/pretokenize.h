/* Pre-tokenizers of tokenizer.json: Split (a regex or a literal, with the
 * Rust library's five delimiter behaviours and invert), ByteLevel (optional
 * leading space and GPT-2 regex; the byte mapping itself is implicit because
 * loom's BPE works on raw bytes) and Sequence.
 *
 * Regexes are compiled by PCRE2 with UTF and Unicode properties (\p{L},
 * look-ahead) and JIT.  Matching reproduces onig's find_iter as the Rust
 * library uses it, including how it steps over empty matches.  Pieces are
 * streamed to a callback: nothing is allocated per piece. */
#ifndef LOOM_TEXT_PRETOKENIZE_H
#define LOOM_TEXT_PRETOKENIZE_H

#define PCRE2_CODE_UNIT_WIDTH 8
#include <pcre2.h>
#include <stdbool.h>
#include <stddef.h>

#include "base/error.h"
#include "text/byte_level.h"

struct cJSON;

typedef enum {
    LM_SPLIT_ISOLATED,
    LM_SPLIT_REMOVED,
    LM_SPLIT_MERGED_WITH_PREVIOUS,
    LM_SPLIT_MERGED_WITH_NEXT,
    LM_SPLIT_CONTIGUOUS,
} lm_split_behavior;

typedef enum { LM_PRETOK_SPLIT, LM_PRETOK_PREFIX_SPACE } lm_pretok_kind;

typedef struct {
    lm_pretok_kind kind;
    pcre2_code *re; /* LM_PRETOK_SPLIT */
    lm_split_behavior behavior;
    bool invert;
} lm_pretok_step;

#define LM_PRETOK_MAX_STEPS 16

typedef struct {
    lm_pretok_step steps[LM_PRETOK_MAX_STEPS];
    size_t n;
    bool byte_level; /* a ByteLevel pre-tokenizer is part of it */
} lm_pretokenizer;

/* Reads tokenizer.json's "pre_tokenizer" value (NULL or JSON null: none). */
lm_status lm_pretokenizer_parse(const struct cJSON *json, lm_pretokenizer *out, lm_error *err);
void lm_pretokenizer_free(lm_pretokenizer *p);

/* Per-call state (never shared between threads). */
typedef struct {
    pcre2_match_data *match;
    pcre2_match_context *mctx;
    pcre2_jit_stack *jit_stack;
    lm_text_buf prefixed[LM_PRETOK_MAX_STEPS];
} lm_pretok_scratch;

void lm_pretok_scratch_free(lm_pretok_scratch *s);

/* Receives each non-empty piece, in order. */
typedef lm_status (*lm_piece_fn)(void *ctx, const char *piece, size_t n, lm_error *err);

/* Splits valid UTF-8 text s into pieces and passes each to fn. */
lm_status lm_pretokenize(const lm_pretokenizer *p, const char *s, size_t n, lm_pretok_scratch *scratch,
                         lm_piece_fn fn, void *ctx, lm_error *err);

#endif
