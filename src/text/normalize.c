#include "text/normalize.h"

#include <cjson/cJSON.h>
#include <stdlib.h>
#include <string.h>
#include <utf8proc.h>

bool lm_nfc_is_inert(uint32_t cp) {
    if (cp < 0x300) return true; /* ASCII, Latin-1, Latin Extended-A/B, IPA, spacing modifiers */
    if (cp < 0x3000) {
        if (cp >= 0x400 && cp <= 0x482) return true; /* Cyrillic letters */
        if (cp >= 0x48A && cp <= 0x4FF) return true;
        if (cp >= 0x620 && cp <= 0x64A) return true; /* Arabic letters */
        return false;
    }
    if (cp <= 0x3029) return true;                   /* CJK symbols and punctuation */
    if (cp >= 0x3041 && cp <= 0x3096) return true;   /* hiragana */
    if (cp >= 0x30A1 && cp <= 0x30FA) return true;   /* katakana */
    if (cp == 0x30FC) return true;                   /* prolonged sound mark */
    if (cp >= 0x4E00 && cp <= 0x9FFF) return true;   /* CJK unified ideographs */
    if (cp >= 0xAC00 && cp <= 0xD7A3) return true;   /* Hangul syllables */
    if (cp >= 0xFF01 && cp <= 0xFF60) return true;   /* fullwidth forms */
    return false;
}

lm_status lm_normalizer_parse(const cJSON *json, lm_normalizer *out, lm_error *err) {
    if (!json || cJSON_IsNull(json)) return LM_OK;
    if (!cJSON_IsObject(json)) return lm_fail(err, LM_ERR_FORMAT, "normalizer is not an object");
    const cJSON *type = cJSON_GetObjectItemCaseSensitive(json, "type");
    if (!cJSON_IsString(type)) return lm_fail(err, LM_ERR_FORMAT, "normalizer has no \"type\"");
    const char *t = type->valuestring;
    lm_norm_kind kind;
    if (strcmp(t, "Sequence") == 0) {
        const cJSON *list = cJSON_GetObjectItemCaseSensitive(json, "normalizers");
        if (!cJSON_IsArray(list)) return lm_fail(err, LM_ERR_FORMAT, "Sequence normalizer has no \"normalizers\" array");
        const cJSON *item;
        cJSON_ArrayForEach(item, list) {
            lm_status st = lm_normalizer_parse(item, out, err);
            if (st != LM_OK) return st;
        }
        return LM_OK;
    }
    if (strcmp(t, "NFC") == 0) kind = LM_NORM_NFC;
    else if (strcmp(t, "NFD") == 0) kind = LM_NORM_NFD;
    else if (strcmp(t, "NFKC") == 0) kind = LM_NORM_NFKC;
    else if (strcmp(t, "NFKD") == 0) kind = LM_NORM_NFKD;
    else return lm_fail(err, LM_ERR_UNSUPPORTED, "unsupported normalizer \"%.64s\" (loom has NFC, NFD, NFKC, NFKD, Sequence)", t);
    if (out->n == LM_NORMALIZER_MAX_STEPS)
        return lm_fail(err, LM_ERR_UNSUPPORTED, "more than %d normalizer steps", LM_NORMALIZER_MAX_STEPS);
    out->steps[out->n++] = kind;
    return LM_OK;
}

void lm_normalize_scratch_free(lm_normalize_scratch *s) {
    free(s->cps);
    s->cps = NULL;
    s->cps_cap = 0;
    lm_text_buf_free(&s->bufs[0]);
    lm_text_buf_free(&s->bufs[1]);
}

static utf8proc_option_t options_of(lm_norm_kind kind) {
    switch (kind) {
    case LM_NORM_NFC: return UTF8PROC_STABLE | UTF8PROC_COMPOSE;
    case LM_NORM_NFD: return UTF8PROC_STABLE | UTF8PROC_DECOMPOSE;
    case LM_NORM_NFKC: return UTF8PROC_STABLE | UTF8PROC_COMPOSE | UTF8PROC_COMPAT;
    case LM_NORM_NFKD: return UTF8PROC_STABLE | UTF8PROC_DECOMPOSE | UTF8PROC_COMPAT;
    }
    return UTF8PROC_STABLE | UTF8PROC_COMPOSE;
}

/* Normalises s[0..n) with utf8proc and appends the result to dst. */
static lm_status utf8proc_append(const uint8_t *s, size_t n, utf8proc_option_t opts, lm_normalize_scratch *sc,
                                 lm_text_buf *dst, lm_error *err) {
    if (n > (size_t)1 << 30) return lm_fail(err, LM_ERR_NOMEM, "text too long to normalise");
    for (;;) {
        utf8proc_ssize_t need = utf8proc_decompose(s, (utf8proc_ssize_t)n, sc->cps, (utf8proc_ssize_t)sc->cps_cap, opts);
        if (need < 0) return lm_fail(err, LM_ERR_INVALID, "normalisation failed: %s", utf8proc_errmsg(need));
        if ((size_t)need <= sc->cps_cap) {
            utf8proc_ssize_t bytes = utf8proc_reencode(sc->cps, need, opts);
            if (bytes < 0) return lm_fail(err, LM_ERR_INVALID, "normalisation failed: %s", utf8proc_errmsg(bytes));
            if (!lm_text_buf_append(dst, sc->cps, (size_t)bytes))
                return lm_fail(err, LM_ERR_NOMEM, "out of memory normalising text");
            return LM_OK;
        }
        size_t cap = sc->cps_cap ? sc->cps_cap : 256;
        while (cap < (size_t)need) cap *= 2;
        int32_t *cps = realloc(sc->cps, cap * sizeof *cps);
        if (!cps) return lm_fail(err, LM_ERR_NOMEM, "out of memory normalising text");
        sc->cps = cps;
        sc->cps_cap = cap;
    }
}

static bool all_ascii(const uint8_t *s, size_t n) {
    size_t i = 0;
    for (; i + 8 <= n; i += 8) {
        uint64_t v;
        memcpy(&v, s + i, 8);
        if (v & 0x8080808080808080ull) return false;
    }
    for (; i < n; i++)
        if (s[i] & 0x80) return false;
    return true;
}

/* NFC: copy inert stretches, send the rest (with the starter before it,
 * which may compose with it) through utf8proc.  *changed is false when the
 * text needed no work at all (dst is then unused). */
static lm_status nfc(const uint8_t *s, size_t n, lm_normalize_scratch *sc, lm_text_buf *dst, bool *changed,
                     lm_error *err) {
    size_t i = 0, copied = 0; /* s[copied..i) is inert and not yet copied */
    size_t prev_start = 0;    /* start of the character before i */
    *changed = false;
    dst->n = 0;
    while (i < n) {
        if (s[i] < 0x80) {
            prev_start = i++;
            continue;
        }
        size_t len;
        uint32_t cp = lm_utf8_decode_one(s + i, n - i, &len);
        if (lm_nfc_is_inert(cp)) {
            prev_start = i;
            i += len;
            continue;
        }
        /* A stretch that needs work: from the character before it (if inert,
         * it is a starter that may compose) to the next inert character. */
        size_t run_start = i > copied ? prev_start : i;
        size_t j = i + len;
        while (j < n) {
            size_t l2 = 1;
            uint32_t c2 = s[j];
            if (c2 >= 0x80) c2 = lm_utf8_decode_one(s + j, n - j, &l2);
            if (lm_nfc_is_inert(c2)) break;
            j += l2;
        }
        if (!*changed) {
            if (!lm_text_buf_reserve(dst, n)) return lm_fail(err, LM_ERR_NOMEM, "out of memory normalising text");
            *changed = true;
        }
        if (!lm_text_buf_append(dst, s + copied, run_start - copied))
            return lm_fail(err, LM_ERR_NOMEM, "out of memory normalising text");
        lm_status st = utf8proc_append(s + run_start, j - run_start, options_of(LM_NORM_NFC), sc, dst, err);
        if (st != LM_OK) return st;
        copied = i = j;
    }
    if (*changed && !lm_text_buf_append(dst, s + copied, n - copied))
        return lm_fail(err, LM_ERR_NOMEM, "out of memory normalising text");
    return LM_OK;
}

lm_status lm_normalize(const lm_normalizer *nz, const char *s, size_t n, lm_normalize_scratch *sc, const char **out,
                       size_t *out_n, lm_error *err) {
    const char *cur = s;
    size_t cur_n = n;
    int which = 0;
    for (size_t k = 0; k < nz->n; k++) {
        if (all_ascii((const uint8_t *)cur, cur_n)) break; /* ASCII is invariant under all four forms */
        lm_text_buf *dst = &sc->bufs[which];
        bool changed = true;
        lm_status st;
        if (nz->steps[k] == LM_NORM_NFC) {
            st = nfc((const uint8_t *)cur, cur_n, sc, dst, &changed, err);
        } else {
            dst->n = 0;
            st = utf8proc_append((const uint8_t *)cur, cur_n, options_of(nz->steps[k]), sc, dst, err);
        }
        if (st != LM_OK) return st;
        if (changed) {
            cur = dst->p;
            cur_n = dst->n;
            which ^= 1;
        }
    }
    *out = cur;
    *out_n = cur_n;
    return LM_OK;
}
