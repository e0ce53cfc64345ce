/* Text -> ids: added tokens, normalisation, pre-tokenisation, BPE.
 * All per-call state lives in an encode_ctx on the caller's stack, so a const
 * tokenizer can encode on several threads at once. */
#include <stdlib.h>
#include <string.h>
#include <utf8proc.h>

#include "text/byte_level.h"
#include "text/tokenizer_internal.h"

typedef struct {
    const lm_tokenizer *tok;
    lm_ids out;
    lm_bpe_cache cache;
    lm_bpe_scratch bpe;
    lm_normalize_scratch norm;
    lm_pretok_scratch pre;
} encode_ctx;

static void encode_ctx_free(encode_ctx *c) {
    lm_bpe_cache_free(&c->cache);
    lm_bpe_scratch_free(&c->bpe);
    lm_normalize_scratch_free(&c->norm);
    lm_pretok_scratch_free(&c->pre);
}

static lm_status on_piece(void *vc, const char *piece, size_t n, lm_error *err) {
    encode_ctx *c = vc;
    return lm_bpe_encode_cached(&c->tok->bpe, (const uint8_t *)piece, n, &c->cache, &c->bpe, &c->out, err);
}

/* ---- added-token search ---- */

/* Unicode White_Space (what the Rust regex crate's \s matches). */
static bool is_white_space(uint32_t cp) {
    return (cp >= 0x09 && cp <= 0x0D) || cp == 0x20 || cp == 0x85 || cp == 0xA0 || cp == 0x1680 ||
           (cp >= 0x2000 && cp <= 0x200A) || cp == 0x2028 || cp == 0x2029 || cp == 0x202F || cp == 0x205F ||
           cp == 0x3000;
}

/* The regex crate's \w: alphabetic, marks, decimal digits, connector punctuation, joiners. */
static bool is_word_char(uint32_t cp) {
    if (cp < 0x80) return (cp >= '0' && cp <= '9') || (cp >= 'a' && cp <= 'z') || (cp >= 'A' && cp <= 'Z') || cp == '_';
    if (cp == 0x200C || cp == 0x200D) return true;
    switch (utf8proc_category((utf8proc_int32_t)cp)) {
    case UTF8PROC_CATEGORY_LU: case UTF8PROC_CATEGORY_LL: case UTF8PROC_CATEGORY_LT: case UTF8PROC_CATEGORY_LM:
    case UTF8PROC_CATEGORY_LO: case UTF8PROC_CATEGORY_NL: case UTF8PROC_CATEGORY_MN: case UTF8PROC_CATEGORY_MC:
    case UTF8PROC_CATEGORY_ME: case UTF8PROC_CATEGORY_ND: case UTF8PROC_CATEGORY_PC: return true;
    default: return false;
    }
}

/* The character ending just before s[end] (s is valid UTF-8, end > 0). */
static uint32_t char_before(const char *s, size_t end, size_t *start) {
    size_t i = end - 1;
    while (i > 0 && ((uint8_t)s[i] & 0xC0) == 0x80) i--;
    size_t len;
    *start = i;
    return lm_utf8_decode_one((const uint8_t *)s + i, end - i, &len);
}

/* Where the run of whitespace ending at end begins. */
static size_t whitespace_start_before(const char *s, size_t end) {
    while (end > 0) {
        size_t start;
        if (!is_white_space(char_before(s, end, &start))) break;
        end = start;
    }
    return end;
}

static size_t whitespace_end_after(const char *s, size_t n, size_t pos) {
    while (pos < n) {
        size_t len;
        if (!is_white_space(lm_utf8_decode_one((const uint8_t *)s + pos, n - pos, &len))) break;
        pos += len;
    }
    return pos;
}

/* The leftmost-longest added token in s[from..n); false when none. */
static bool find_added(const lm_tokenizer *tok, const lm_added_matcher *m, const char *s, size_t n, size_t from,
                       size_t *at, const lm_added_token **found) {
    for (size_t i = from; i < n; i++) {
        uint8_t b = (uint8_t)s[i];
        for (uint32_t k = m->first[b]; k < m->first[b + 1]; k++) {
            const lm_added_token *t = &tok->added[m->order[k]];
            if (t->match_len <= n - i && memcmp(s + i, t->match, t->match_len) == 0) {
                *at = i;
                *found = t;
                return true;
            }
        }
    }
    return false;
}

typedef lm_status (*gap_fn)(encode_ctx *c, const char *s, size_t n, lm_error *err);

/* Cuts the added tokens of m out of s: the text between them goes to gap,
 * the tokens' ids to the output.  Follows the library's
 * AddedVocabulary::find_matches, with single_word / lstrip / rstrip. */
static lm_status split_added(encode_ctx *c, const lm_added_matcher *m, const char *s, size_t n, gap_fn gap,
                             lm_error *err) {
    if (m->n == 0) return gap(c, s, n, err);
    size_t done = 0, search = 0, at;
    const lm_added_token *t;
    lm_status st;
    while (search < n && find_added(c->tok, m, s, n, search, &at, &t)) {
        size_t start = at, stop = at + t->match_len;
        search = stop;
        if (t->single_word) {
            size_t prev_start, len;
            bool word_before = start > 0 && is_word_char(char_before(s, start, &prev_start));
            bool word_after = stop < n && is_word_char(lm_utf8_decode_one((const uint8_t *)s + stop, n - stop, &len));
            if (word_before || word_after) continue;
        }
        if (t->lstrip) {
            size_t ws = whitespace_start_before(s, start);
            start = ws > done ? ws : done;
        }
        if (t->rstrip) stop = whitespace_end_after(s, n, stop);
        if (done < start) {
            st = gap(c, s + done, start - done, err);
            if (st != LM_OK) return st;
        }
        st = lm_ids_push(&c->out, t->id, err);
        if (st != LM_OK) return st;
        done = stop;
        if (search < stop) search = stop;
    }
    return done < n ? gap(c, s + done, n - done, err) : LM_OK;
}

/* ---- the pipeline ---- */

static lm_status encode_normalized(encode_ctx *c, const char *s, size_t n, lm_error *err) {
    return lm_pretokenize(&c->tok->pretok, s, n, &c->pre, on_piece, c, err);
}

static lm_status encode_raw_segment(encode_ctx *c, const char *s, size_t n, lm_error *err) {
    const char *norm;
    size_t norm_n;
    lm_status st = lm_normalize(&c->tok->normalizer, s, n, &c->norm, &norm, &norm_n, err);
    if (st != LM_OK) return st;
    return split_added(c, &c->tok->norm_matcher, norm, norm_n, encode_normalized, err);
}

static lm_status push_all(lm_ids *out, const int32_t *ids, size_t n, lm_error *err) {
    lm_status st = lm_ids_reserve(out, n, err);
    if (st != LM_OK) return st;
    if (n) memcpy(out->v + out->n, ids, n * sizeof *ids);
    out->n += n;
    return LM_OK;
}

lm_status lm_tokenizer_encode(const lm_tokenizer *tok, const char *text, size_t len, bool add_special, int32_t **ids,
                              size_t *n_ids, lm_error *err) {
    *ids = NULL;
    *n_ids = 0;
    if (!text && len) return lm_fail(err, LM_ERR_INVALID, "text is NULL");
    if (len > LM_TOKENIZER_MAX_TEXT)
        return lm_fail(err, LM_ERR_INVALID, "text of %zu bytes is longer than the %zu allowed", len, LM_TOKENIZER_MAX_TEXT);
    size_t valid = lm_utf8_valid_prefix((const uint8_t *)text, len);
    if (valid != len) return lm_fail(err, LM_ERR_INVALID, "text is not valid UTF-8 (byte %zu)", valid);

    encode_ctx c = {.tok = tok};
    /* Typical text has 3-5 bytes per token. */
    lm_status st = lm_ids_reserve(&c.out, len / 3 + 16, err);
    bool bos = add_special && tok->config.add_bos_token && tok->bos_id >= 0 &&
               !(tok->n_prefix > 0 && tok->prefix_ids[0] == tok->bos_id);
    bool eos = add_special && tok->config.add_eos_token && tok->eos_id >= 0 &&
               !(tok->n_suffix > 0 && tok->suffix_ids[tok->n_suffix - 1] == tok->eos_id);
    if (st == LM_OK && bos) st = lm_ids_push(&c.out, tok->bos_id, err);
    if (st == LM_OK && add_special) st = push_all(&c.out, tok->prefix_ids, tok->n_prefix, err);
    if (st == LM_OK) st = split_added(&c, &tok->raw_matcher, text, len, encode_raw_segment, err);
    if (st == LM_OK && add_special) st = push_all(&c.out, tok->suffix_ids, tok->n_suffix, err);
    if (st == LM_OK && eos) st = lm_ids_push(&c.out, tok->eos_id, err);
    encode_ctx_free(&c);
    if (st != LM_OK) {
        free(c.out.v);
        return st;
    }
    *ids = c.out.v;
    *n_ids = c.out.n;
    return LM_OK;
}
