/* Normalizers of tokenizer.json: Unicode NFC/NFD/NFKC/NFKD and Sequence.
 * NFC, the one real checkpoints use, has a fast path: stretches of text made
 * of characters that NFC can never change or combine (ASCII, Latin-1, CJK
 * ideographs, kana, Hangul syllables, ...) are copied as they are, and only
 * the rest goes through utf8proc. */
#ifndef LOOM_TEXT_NORMALIZE_H
#define LOOM_TEXT_NORMALIZE_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "base/error.h"
#include "text/byte_level.h"

struct cJSON;

typedef enum { LM_NORM_NFC, LM_NORM_NFD, LM_NORM_NFKC, LM_NORM_NFKD } lm_norm_kind;

#define LM_NORMALIZER_MAX_STEPS 16

typedef struct {
    lm_norm_kind steps[LM_NORMALIZER_MAX_STEPS];
    size_t n; /* 0: no normalizer */
} lm_normalizer;

/* Scratch memory for one encode call. */
typedef struct {
    int32_t *cps;
    size_t cps_cap;
    lm_text_buf bufs[2];
} lm_normalize_scratch;

/* Reads tokenizer.json's "normalizer" value (NULL or JSON null: none). */
lm_status lm_normalizer_parse(const struct cJSON *json, lm_normalizer *out, lm_error *err);

/* Normalises valid UTF-8 text.  *out points at s itself when nothing
 * changed, otherwise into the scratch (valid until its next use). */
lm_status lm_normalize(const lm_normalizer *nz, const char *s, size_t n, lm_normalize_scratch *scratch,
                       const char **out, size_t *out_n, lm_error *err);
void lm_normalize_scratch_free(lm_normalize_scratch *scratch);

/* True when NFC leaves cp alone and cp never combines with a character
 * before it (a starter, not the second half of any composition). */
bool lm_nfc_is_inert(uint32_t cp);

#endif
