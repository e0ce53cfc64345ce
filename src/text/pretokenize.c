#include "text/pretokenize.h"

#include <cjson/cJSON.h>
#include <stdlib.h>
#include <string.h>

/* The GPT-2 regex the ByteLevel pre-tokenizer splits with when use_regex is true. */
static const char GPT2_PATTERN[] =
    "'s|'t|'re|'ve|'m|'ll|'d| ?\\p{L}+| ?\\p{N}+| ?[^\\s\\p{L}\\p{N}]+|\\s+(?!\\S)|\\s+";

/* JIT stacks grow on demand up to this size (a regex that needs more fails cleanly). */
#define JIT_STACK_MAX ((size_t)8 << 20)

/* ---- parsing ---- */

/* The Rust library compiles its regexes with Oniguruma, whose Unicode
 * classes differ from PCRE2's in small ways: \s is the White_Space property
 * (PCRE2 adds U+180E), \w is letters, marks, numbers and connector
 * punctuation (PCRE2: letters, numbers, '_'), and \h is a hex digit (PCRE2:
 * horizontal space).  These escapes are rewritten into explicit classes.
 * (Negated forms inside a bracket class are left to PCRE2.) */
static const char SPACE_ITEMS[] = "\\t\\n\\x0B\\f\\r \\x{85}\\x{A0}\\x{1680}\\x{2000}-\\x{200A}\\x{2028}\\x{2029}\\x{202F}\\x{205F}\\x{3000}";
static const char WORD_ITEMS[] = "\\p{L}\\p{M}\\p{N}\\p{Pc}";
static const char HEX_ITEMS[] = "0-9a-fA-F";

static bool append_class(lm_text_buf *b, const char *items, bool in_class, bool negate) {
    if (in_class) return lm_text_buf_append(b, items, strlen(items));
    return lm_text_buf_append(b, negate ? "[^" : "[", negate ? 2 : 1) && lm_text_buf_append(b, items, strlen(items)) &&
           lm_text_buf_append(b, "]", 1);
}

static bool onig_compatible(const char *p, size_t n, lm_text_buf *out) {
    bool in_class = false, ok = true;
    out->n = 0;
    for (size_t i = 0; i < n && ok;) {
        char c = p[i];
        if (c == '\\' && i + 1 < n) {
            char e = p[i + 1];
            const char *items = e == 's' || e == 'S' ? SPACE_ITEMS : e == 'w' || e == 'W' ? WORD_ITEMS
                              : e == 'h' || e == 'H' ? HEX_ITEMS : NULL;
            bool negate = e == 'S' || e == 'W' || e == 'H';
            if (items && !(in_class && negate)) ok = append_class(out, items, in_class, negate);
            else ok = lm_text_buf_append(out, p + i, 2);
            i += 2;
            continue;
        }
        if (!in_class && c == '[') {
            /* "[", an optional "^", and a "]" right after them is a literal. */
            size_t j = i + 1;
            if (j < n && p[j] == '^') j++;
            if (j < n && p[j] == ']') j++;
            ok = lm_text_buf_append(out, p + i, j - i);
            in_class = true;
            i = j;
            continue;
        }
        if (in_class && c == '[' && i + 1 < n && p[i + 1] == ':') { /* [:alpha:] */
            const char *end = memchr(p + i + 2, ']', n - i - 2);
            size_t j = end ? (size_t)(end - p) + 1 : n;
            ok = lm_text_buf_append(out, p + i, j - i);
            i = j;
            continue;
        }
        if (in_class && c == ']') in_class = false;
        ok = lm_text_buf_append(out, p + i, 1);
        i++;
    }
    return ok;
}

static lm_status compile_pattern(const char *pattern, size_t len, bool literal, pcre2_code **out, lm_error *err) {
    int code;
    PCRE2_SIZE offset;
    uint32_t opts = PCRE2_UTF | (literal ? PCRE2_LITERAL : PCRE2_UCP);
    lm_text_buf rewritten = {0};
    if (!literal) {
        if (!onig_compatible(pattern, len, &rewritten)) {
            lm_text_buf_free(&rewritten);
            return lm_fail(err, LM_ERR_NOMEM, "out of memory compiling a regex");
        }
    }
    pcre2_code *re = literal ? pcre2_compile((PCRE2_SPTR)pattern, len, opts, &code, &offset, NULL)
                             : pcre2_compile((PCRE2_SPTR)(rewritten.p ? rewritten.p : ""), rewritten.n, opts, &code, &offset, NULL);
    lm_text_buf_free(&rewritten);
    if (!re) {
        PCRE2_UCHAR msg[256];
        pcre2_get_error_message(code, msg, sizeof msg);
        return lm_fail(err, LM_ERR_UNSUPPORTED, "pre-tokenizer regex /%.120s/ does not compile at offset %zu: %s",
                       pattern, (size_t)offset, (const char *)msg);
    }
    /* Without JIT (e.g. a platform that lacks it) the interpreter still works. */
    (void)pcre2_jit_compile(re, PCRE2_JIT_COMPLETE);
    *out = re;
    return LM_OK;
}

static lm_status add_step(lm_pretokenizer *p, lm_pretok_step step, lm_error *err) {
    if (p->n == LM_PRETOK_MAX_STEPS) {
        if (step.re) pcre2_code_free(step.re);
        return lm_fail(err, LM_ERR_UNSUPPORTED, "more than %d pre-tokenizer steps", LM_PRETOK_MAX_STEPS);
    }
    p->steps[p->n++] = step;
    return LM_OK;
}

static bool get_bool(const cJSON *obj, const char *key, bool dflt) {
    const cJSON *v = cJSON_GetObjectItemCaseSensitive(obj, key);
    return cJSON_IsBool(v) ? cJSON_IsTrue(v) : dflt;
}

static lm_status parse_split(const cJSON *json, lm_pretokenizer *p, lm_error *err) {
    const cJSON *pattern = cJSON_GetObjectItemCaseSensitive(json, "pattern");
    const cJSON *regex = cJSON_GetObjectItemCaseSensitive(pattern, "Regex");
    const cJSON *string = cJSON_GetObjectItemCaseSensitive(pattern, "String");
    const cJSON *src = cJSON_IsString(regex) ? regex : string;
    if (!cJSON_IsString(src))
        return lm_fail(err, LM_ERR_FORMAT, "Split pre-tokenizer needs \"pattern\": {\"Regex\": ...} or {\"String\": ...}");
    const cJSON *behavior = cJSON_GetObjectItemCaseSensitive(json, "behavior");
    if (!cJSON_IsString(behavior)) return lm_fail(err, LM_ERR_FORMAT, "Split pre-tokenizer has no \"behavior\"");
    static const struct {
        const char *name;
        lm_split_behavior b;
    } behaviors[] = {
        {"Isolated", LM_SPLIT_ISOLATED},
        {"Removed", LM_SPLIT_REMOVED},
        {"MergedWithPrevious", LM_SPLIT_MERGED_WITH_PREVIOUS},
        {"MergedWithNext", LM_SPLIT_MERGED_WITH_NEXT},
        {"Contiguous", LM_SPLIT_CONTIGUOUS},
    };
    lm_pretok_step step = {.kind = LM_PRETOK_SPLIT, .invert = get_bool(json, "invert", false)};
    size_t k = 0;
    for (; k < sizeof behaviors / sizeof behaviors[0]; k++)
        if (strcmp(behavior->valuestring, behaviors[k].name) == 0) break;
    if (k == sizeof behaviors / sizeof behaviors[0])
        return lm_fail(err, LM_ERR_UNSUPPORTED, "unsupported Split behavior \"%.64s\"", behavior->valuestring);
    step.behavior = behaviors[k].b;
    lm_status st = compile_pattern(src->valuestring, strlen(src->valuestring), src == string, &step.re, err);
    if (st != LM_OK) return st;
    return add_step(p, step, err);
}

lm_status lm_pretokenizer_parse(const cJSON *json, lm_pretokenizer *p, lm_error *err) {
    if (!json || cJSON_IsNull(json)) return LM_OK;
    if (!cJSON_IsObject(json)) return lm_fail(err, LM_ERR_FORMAT, "pre_tokenizer is not an object");
    const cJSON *type = cJSON_GetObjectItemCaseSensitive(json, "type");
    if (!cJSON_IsString(type)) return lm_fail(err, LM_ERR_FORMAT, "pre_tokenizer has no \"type\"");
    const char *t = type->valuestring;
    if (strcmp(t, "Sequence") == 0) {
        const cJSON *list = cJSON_GetObjectItemCaseSensitive(json, "pretokenizers");
        if (!cJSON_IsArray(list)) return lm_fail(err, LM_ERR_FORMAT, "Sequence pre_tokenizer has no \"pretokenizers\" array");
        const cJSON *item;
        cJSON_ArrayForEach(item, list) {
            lm_status st = lm_pretokenizer_parse(item, p, err);
            if (st != LM_OK) return st;
        }
        return LM_OK;
    }
    if (strcmp(t, "Split") == 0) return parse_split(json, p, err);
    if (strcmp(t, "ByteLevel") == 0) {
        p->byte_level = true;
        /* The library's defaults when a field is missing: both true. */
        if (get_bool(json, "add_prefix_space", true)) {
            lm_status st = add_step(p, (lm_pretok_step){.kind = LM_PRETOK_PREFIX_SPACE}, err);
            if (st != LM_OK) return st;
        }
        if (get_bool(json, "use_regex", true)) {
            lm_pretok_step step = {.kind = LM_PRETOK_SPLIT, .behavior = LM_SPLIT_ISOLATED};
            lm_status st = compile_pattern(GPT2_PATTERN, sizeof GPT2_PATTERN - 1, false, &step.re, err);
            if (st != LM_OK) return st;
            return add_step(p, step, err);
        }
        return LM_OK;
    }
    return lm_fail(err, LM_ERR_UNSUPPORTED, "unsupported pre_tokenizer \"%.64s\" (loom has Split, ByteLevel, Sequence)", t);
}

void lm_pretokenizer_free(lm_pretokenizer *p) {
    for (size_t i = 0; i < p->n; i++)
        if (p->steps[i].re) pcre2_code_free(p->steps[i].re);
    memset(p, 0, sizeof *p);
}

void lm_pretok_scratch_free(lm_pretok_scratch *s) {
    if (s->match) pcre2_match_data_free(s->match);
    if (s->mctx) pcre2_match_context_free(s->mctx);
    if (s->jit_stack) pcre2_jit_stack_free(s->jit_stack);
    for (size_t i = 0; i < LM_PRETOK_MAX_STEPS; i++) lm_text_buf_free(&s->prefixed[i]);
    memset(s, 0, sizeof *s);
}

/* ---- splitting ---- */

typedef struct {
    const lm_pretokenizer *p;
    lm_pretok_scratch *sc;
    lm_piece_fn fn;
    void *ctx;
    lm_error *err;
} run_ctx;

static lm_status run_level(const run_ctx *r, size_t level, const char *s, size_t n);

/* Applies a delimiter behaviour to the stream of (segment, is_match) that
 * the matcher produces, emitting the resulting pieces in order.  This is the
 * Rust library's NormalizedString::split written as a one-pass state
 * machine (MergedWithNext needs one segment of look-ahead). */
typedef struct {
    const run_ctx *r;
    size_t level;
    const char *s;
    lm_split_behavior behavior;
    bool has_pending, previous_match;
    size_t pending_start, pending_end;
} splitter;

static lm_status emit(splitter *sp, size_t start, size_t end) {
    if (end == start) return LM_OK;
    return run_level(sp->r, sp->level + 1, sp->s + start, end - start);
}

static lm_status split_segment(splitter *sp, size_t start, size_t end, bool is_match) {
    lm_status st = LM_OK;
    switch (sp->behavior) {
    case LM_SPLIT_ISOLATED: return emit(sp, start, end);
    case LM_SPLIT_REMOVED: return is_match ? LM_OK : emit(sp, start, end);
    case LM_SPLIT_CONTIGUOUS:
    case LM_SPLIT_MERGED_WITH_PREVIOUS: {
        bool extend = sp->behavior == LM_SPLIT_CONTIGUOUS ? is_match == sp->previous_match
                                                          : is_match && !sp->previous_match;
        sp->previous_match = is_match;
        if (extend && sp->has_pending) {
            sp->pending_end = end;
            return LM_OK;
        }
        if (sp->has_pending) st = emit(sp, sp->pending_start, sp->pending_end);
        sp->has_pending = true;
        sp->pending_start = start;
        sp->pending_end = end;
        return st;
    }
    case LM_SPLIT_MERGED_WITH_NEXT:
        /* A match joins the segment after it when that one is not a match. */
        if (sp->has_pending) {
            sp->has_pending = false;
            if (!is_match) return emit(sp, sp->pending_start, end);
            st = emit(sp, sp->pending_start, sp->pending_end);
            if (st != LM_OK) return st;
        }
        if (is_match) {
            sp->has_pending = true;
            sp->pending_start = start;
            sp->pending_end = end;
            return LM_OK;
        }
        return emit(sp, start, end);
    }
    return LM_OK;
}

static lm_status split_finish(splitter *sp) {
    if (!sp->has_pending) return LM_OK;
    sp->has_pending = false;
    return emit(sp, sp->pending_start, sp->pending_end);
}

/* One pcre2_match.  When the default 32 KiB JIT stack is too small, retry
 * with a large one (kept for the rest of the call). */
static int match_at(const run_ctx *r, const pcre2_code *re, const char *s, size_t n, size_t from) {
    lm_pretok_scratch *sc = r->sc;
    int rc = pcre2_match(re, (PCRE2_SPTR)s, n, from, PCRE2_NO_UTF_CHECK, sc->match, sc->mctx);
    if (rc != PCRE2_ERROR_JIT_STACKLIMIT || sc->jit_stack) return rc;
    sc->jit_stack = pcre2_jit_stack_create(32 * 1024, JIT_STACK_MAX, NULL);
    if (!sc->jit_stack) return PCRE2_ERROR_NOMEMORY;
    pcre2_jit_stack_assign(sc->mctx, NULL, sc->jit_stack);
    return pcre2_match(re, (PCRE2_SPTR)s, n, from, PCRE2_NO_UTF_CHECK, sc->match, sc->mctx);
}

static lm_status split_level(const run_ctx *r, size_t level, const char *s, size_t n) {
    const lm_pretok_step *step = &r->p->steps[level];
    lm_pretok_scratch *sc = r->sc;
    if (!sc->match) {
        /* The default match limit (10 million steps) stops \s*[\r\n]+ on a
         * whitespace run of some megabytes: the work is linear in the text,
         * which is bounded, so lift it. */
        sc->match = pcre2_match_data_create(1, NULL);
        sc->mctx = pcre2_match_context_create(NULL);
        if (!sc->match || !sc->mctx) return lm_fail(r->err, LM_ERR_NOMEM, "out of memory for regex match data");
        pcre2_set_match_limit(sc->mctx, UINT32_MAX);
    }
    splitter sp = {.r = r, .level = level, .s = s, .behavior = step->behavior};
    /* onig's find_iter: search from the end of the last match; an empty match
     * right where the previous match ended is skipped by stepping one
     * character forward. */
    size_t last_end = 0, prev = 0;
    bool have_last_match = false;
    size_t last_match_end = 0;
    lm_status st;
    while (last_end <= n) {
        int rc = match_at(r, step->re, s, n, last_end);
        if (rc == PCRE2_ERROR_NOMATCH) break;
        if (rc < 0) {
            PCRE2_UCHAR msg[256];
            pcre2_get_error_message(rc, msg, sizeof msg);
            return lm_fail(r->err, rc == PCRE2_ERROR_NOMEMORY ? LM_ERR_NOMEM : LM_ERR_UNSUPPORTED,
                           "pre-tokenizer regex failed: %s", (const char *)msg);
        }
        PCRE2_SIZE *ov = pcre2_get_ovector_pointer(sc->match);
        size_t start = ov[0], end = ov[1];
        if (start == end && have_last_match && last_match_end == end) {
            size_t step_len = 1;
            if (last_end < n) {
                uint8_t c = (uint8_t)s[last_end];
                step_len = c < 0x80 ? 1 : c < 0xE0 ? 2 : c < 0xF0 ? 3 : 4;
            }
            last_end += step_len;
            continue;
        }
        last_end = end;
        have_last_match = true;
        last_match_end = end;
        if (prev != start) {
            st = split_segment(&sp, prev, start, step->invert);
            if (st != LM_OK) return st;
        }
        st = split_segment(&sp, start, end, !step->invert);
        if (st != LM_OK) return st;
        prev = end;
    }
    if (prev != n) {
        st = split_segment(&sp, prev, n, step->invert);
        if (st != LM_OK) return st;
    }
    return split_finish(&sp);
}

static lm_status run_level(const run_ctx *r, size_t level, const char *s, size_t n) {
    if (n == 0) return LM_OK;
    if (level == r->p->n) return r->fn(r->ctx, s, n, r->err);
    const lm_pretok_step *step = &r->p->steps[level];
    if (step->kind == LM_PRETOK_PREFIX_SPACE) {
        if (s[0] == ' ') return run_level(r, level + 1, s, n);
        lm_text_buf *b = &r->sc->prefixed[level];
        b->n = 0;
        if (!lm_text_buf_append(b, " ", 1) || !lm_text_buf_append(b, s, n))
            return lm_fail(r->err, LM_ERR_NOMEM, "out of memory adding a prefix space");
        return run_level(r, level + 1, b->p, b->n);
    }
    return split_level(r, level, s, n);
}

lm_status lm_pretokenize(const lm_pretokenizer *p, const char *s, size_t n, lm_pretok_scratch *scratch,
                         lm_piece_fn fn, void *ctx, lm_error *err) {
    run_ctx r = {p, scratch, fn, ctx, err};
    return run_level(&r, 0, s, n);
}
