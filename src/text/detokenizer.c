/* Ids -> text: the one-shot decode and the incremental detokenizer. */
#include "text/detokenizer.h"

#include <stdlib.h>
#include <string.h>

#include "text/tokenizer_internal.h"

static const char REPLACEMENT[] = "\xEF\xBF\xBD"; /* U+FFFD */

/* How Rust's from_utf8_lossy treats the character starting at s[0]: it is
 * complete (*complete, returns its length), or it breaks after the returned
 * number of bytes (those become one U+FFFD), or the input ends inside it
 * (*truncated, returns n). */
static size_t char_prefix(const uint8_t *s, size_t n, bool *complete, bool *truncated) {
    uint8_t c = s[0];
    size_t need;
    uint8_t lo = 0x80, hi = 0xBF;
    *complete = false;
    *truncated = false;
    if (c < 0x80) {
        *complete = true;
        return 1;
    }
    if (c >= 0xC2 && c <= 0xDF) need = 1;
    else if (c == 0xE0) { need = 2; lo = 0xA0; }
    else if (c >= 0xE1 && c <= 0xEC) need = 2;
    else if (c == 0xED) { need = 2; hi = 0x9F; }
    else if (c >= 0xEE && c <= 0xEF) need = 2;
    else if (c == 0xF0) { need = 3; lo = 0x90; }
    else if (c >= 0xF1 && c <= 0xF3) need = 3;
    else if (c == 0xF4) { need = 3; hi = 0x8F; }
    else return 1; /* invalid lead byte: replaced alone */
    size_t i = 1;
    for (; i <= need; i++) {
        if (i >= n) {
            *truncated = true;
            return i;
        }
        uint8_t lo_i = i == 1 ? lo : 0x80, hi_i = i == 1 ? hi : 0xBF;
        if (s[i] < lo_i || s[i] > hi_i) return i;
    }
    *complete = true;
    return i;
}

bool lm_utf8_lossy_append(lm_text_buf *out, const uint8_t *s, size_t n, bool final, size_t *consumed) {
    /* Output is at most 3 bytes per input byte (U+FFFD for a lone byte). */
    *consumed = 0;
    if (n > SIZE_MAX / 4 || !lm_text_buf_reserve(out, 3 * n)) return false;
    if (n == 0) {
        out->p[out->n] = '\0';
        return true;
    }
    size_t i = 0, run = 0; /* s[run..i) is valid and not yet copied */
    while (i < n) {
        if (s[i] < 0x80) {
            i++;
            continue;
        }
        bool complete, truncated;
        size_t len = char_prefix(s + i, n - i, &complete, &truncated);
        if (complete) {
            i += len;
            continue;
        }
        memcpy(out->p + out->n, s + run, i - run);
        out->n += i - run;
        if (truncated && !final) {
            run = i;
            break;
        }
        memcpy(out->p + out->n, REPLACEMENT, 3);
        out->n += 3;
        i += len;
        run = i;
    }
    if (i >= n) {
        memcpy(out->p + out->n, s + run, n - run);
        out->n += n - run;
        run = n;
    }
    out->p[out->n] = '\0';
    *consumed = run;
    return true;
}

static bool token_bytes(const lm_tokenizer *tok, int32_t id, const char **bytes, size_t *len) {
    if (id < 0 || id >= tok->n_ids || !tok->token_text[id]) return false;
    *bytes = tok->decode_blob + tok->token_bytes[id].off;
    *len = tok->token_bytes[id].len;
    return true;
}

lm_status lm_tokenizer_decode(const lm_tokenizer *tok, const int32_t *ids, size_t n, bool skip_special, char **text,
                              size_t *len, lm_error *err) {
    *text = NULL;
    *len = 0;
    if (!ids && n) return lm_fail(err, LM_ERR_INVALID, "ids is NULL");
    lm_text_buf raw = {0}, out = {0};
    lm_status st = LM_OK;
    for (size_t i = 0; i < n; i++) {
        const char *b;
        size_t bl;
        if (!token_bytes(tok, ids[i], &b, &bl)) {
            st = lm_fail(err, LM_ERR_INVALID, "token id %d at position %zu names no token", ids[i], i);
            break;
        }
        if (skip_special && (tok->flags[ids[i]] & LM_TOKEN_SPECIAL)) continue;
        if (!lm_text_buf_append(&raw, b, bl)) {
            st = lm_fail(err, LM_ERR_NOMEM, "out of memory decoding %zu ids", n);
            break;
        }
    }
    size_t consumed;
    if (st == LM_OK && !lm_utf8_lossy_append(&out, (const uint8_t *)raw.p, raw.n, true, &consumed))
        st = lm_fail(err, LM_ERR_NOMEM, "out of memory decoding %zu ids", n);
    lm_text_buf_free(&raw);
    if (st != LM_OK) {
        lm_text_buf_free(&out);
        return st;
    }
    if (!out.p && !(out.p = calloc(1, 1))) return lm_fail(err, LM_ERR_NOMEM, "out of memory");
    *text = out.p;
    *len = out.n;
    return LM_OK;
}

void lm_detokenizer_init(lm_detokenizer *d, const lm_tokenizer *tok, bool skip_special) {
    memset(d, 0, sizeof *d);
    d->tok = tok;
    d->skip_special = skip_special;
}

void lm_detokenizer_keep_special(lm_detokenizer *d, const int32_t *ids, int n) {
    d->keep = ids;
    d->n_keep = ids ? n : 0;
}

static bool kept(const lm_detokenizer *d, int32_t id) {
    for (int i = 0; i < d->n_keep; i++)
        if (d->keep[i] == id) return true;
    return false;
}

void lm_detokenizer_free(lm_detokenizer *d) {
    lm_text_buf_free(&d->out);
    d->n_pending = 0;
}

/* Decodes pending + bytes into d->out, keeping an unfinished character. */
static lm_status feed(lm_detokenizer *d, const uint8_t *bytes, size_t n, bool final, lm_error *err) {
    d->out.n = 0;
    if (!lm_text_buf_reserve(&d->out, 3 * n + 8)) return lm_fail(err, LM_ERR_NOMEM, "out of memory in the detokenizer");
    d->out.p[0] = '\0';
    size_t from = 0; /* new bytes used to settle the waiting character */
    if (d->n_pending) {
        /* The waiting character is settled by at most 4 bytes in all. */
        uint8_t head[4];
        size_t take = n < 4 - d->n_pending ? n : 4 - d->n_pending;
        memcpy(head, d->pending, d->n_pending);
        if (take) memcpy(head + d->n_pending, bytes, take);
        size_t head_n = d->n_pending + take;
        bool complete, truncated;
        size_t len = char_prefix(head, head_n, &complete, &truncated);
        if (truncated && !final) { /* all new bytes taken, still unfinished */
            memcpy(d->pending, head, head_n);
            d->n_pending = head_n;
            return LM_OK;
        }
        const void *settled = complete ? (const void *)head : REPLACEMENT;
        size_t settled_n = complete ? len : 3;
        memcpy(d->out.p, settled, settled_n);
        d->out.n = settled_n;
        d->out.p[d->out.n] = '\0';
        from = len - d->n_pending;
        d->n_pending = 0;
    }
    size_t consumed;
    if (!lm_utf8_lossy_append(&d->out, bytes ? bytes + from : bytes, n - from, final, &consumed))
        return lm_fail(err, LM_ERR_NOMEM, "out of memory in the detokenizer");
    d->n_pending = n - from - consumed;
    if (d->n_pending) memcpy(d->pending, bytes + from + consumed, d->n_pending);
    return LM_OK;
}

lm_status lm_detokenizer_push(lm_detokenizer *d, int32_t id, const char **text, size_t *len, lm_error *err) {
    const char *b;
    size_t bl;
    *text = "";
    *len = 0;
    if (!token_bytes(d->tok, id, &b, &bl)) return lm_fail(err, LM_ERR_INVALID, "token id %d names no token", id);
    if (d->skip_special && (d->tok->flags[id] & LM_TOKEN_SPECIAL) && !kept(d, id)) return LM_OK;
    lm_status st = feed(d, (const uint8_t *)b, bl, false, err);
    if (st != LM_OK) return st;
    *text = d->out.p ? d->out.p : "";
    *len = d->out.n;
    return LM_OK;
}

lm_status lm_detokenizer_finish(lm_detokenizer *d, const char **text, size_t *len, lm_error *err) {
    *text = "";
    *len = 0;
    lm_status st = feed(d, NULL, 0, true, err);
    if (st != LM_OK) return st;
    d->n_pending = 0;
    *text = d->out.p ? d->out.p : "";
    *len = d->out.n;
    return LM_OK;
}
