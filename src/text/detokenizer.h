/* Incremental detokenizer for streaming output.  Feed ids one at a time;
 * each push returns the newly completed text.  It never returns half a UTF-8
 * character: bytes of an unfinished character wait for the next token.
 * Invalid bytes become U+FFFD exactly as the one-shot lm_tokenizer_decode
 * (and Rust's String::from_utf8_lossy) does, so the pieces joined are
 * byte-for-byte the one-shot decode of the same ids. */
#ifndef LOOM_TEXT_DETOKENIZER_H
#define LOOM_TEXT_DETOKENIZER_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "base/error.h"
#include "text/byte_level.h"
#include "text/tokenizer.h"

typedef struct {
    const lm_tokenizer *tok;
    bool skip_special;
    const int32_t *keep; /* special ids kept despite skip_special (borrowed) */
    int n_keep;
    uint8_t pending[4]; /* the start of a character still waiting for bytes */
    size_t n_pending;
    lm_text_buf out; /* what the last call returned */
} lm_detokenizer;

/* tok must outlive the detokenizer. */
void lm_detokenizer_init(lm_detokenizer *d, const lm_tokenizer *tok, bool skip_special);
/* With skip_special: the special tokens ids[0..n) are still decoded (ids
 * must outlive the detokenizer). */
void lm_detokenizer_keep_special(lm_detokenizer *d, const int32_t *ids, int n);
/* Adds one id.  *text / *len: the text it completes (possibly empty); valid
 * until the next call on d.  An id that names no token: LM_ERR_INVALID (the
 * detokenizer is unchanged). */
lm_status lm_detokenizer_push(lm_detokenizer *d, int32_t id, const char **text, size_t *len, lm_error *err);
/* Ends the stream: an unfinished character becomes U+FFFD.  The detokenizer
 * is then empty and may be reused. */
lm_status lm_detokenizer_finish(lm_detokenizer *d, const char **text, size_t *len, lm_error *err);
void lm_detokenizer_free(lm_detokenizer *d);

/* Appends s[0..n) to out with invalid UTF-8 replaced by U+FFFD (one per
 * maximal invalid subpart).  When final is false, an unfinished character at
 * the end is not written; *consumed says how many bytes were used.  False
 * when memory ran out. */
bool lm_utf8_lossy_append(lm_text_buf *out, const uint8_t *s, size_t n, bool final, size_t *consumed);

#endif
