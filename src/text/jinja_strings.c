/* String operations with Python's str semantics (code points, Unicode
 * whitespace and case mapping through utf8proc): case changes, strip,
 * replace, split, and printf-style `%` formatting. */
#include <inttypes.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <utf8proc.h>

#include "text/jinja_builtins.h"
#include "text/jinja_eval.h"

enum { CASE_JINJA_TITLE = 1000 };

/* Python's full case mappings that are not one code point to one
 * (SpecialCasing.txt, unconditional part; utf8proc only has the simple ones). */
typedef struct {
    uint32_t cp;
    const char *upper, *title, *lower;
} special_case;

static const special_case special_cases[] = {
    {0x00DF, "SS", "Ss", NULL},                             /* ß */
    {0x0130, NULL, NULL, "i\xcc\x87"},                      /* İ -> i + combining dot */
    {0x0149, "\xca\xbcN", "\xca\xbcN", NULL},               /* ŉ */
    {0x01F0, "J\xcc\x8c", "J\xcc\x8c", NULL},               /* ǰ */
    {0x0587, "\xd4\xb5\xd5\x92", "\xd4\xb5\xd6\x82", NULL}, /* և */
    {0x1E96, "H\xcc\xb1", "H\xcc\xb1", NULL},               /* ẖ */
    {0x1E97, "T\xcc\x88", "T\xcc\x88", NULL},               /* ẗ */
    {0x1E98, "W\xcc\x8a", "W\xcc\x8a", NULL},               /* ẘ */
    {0x1E99, "Y\xcc\x8a", "Y\xcc\x8a", NULL},               /* ẙ */
    {0x1E9A, "A\xca\xbe", "A\xca\xbe", NULL},               /* ẚ */
    {0xFB00, "FF", "Ff", NULL},
    {0xFB01, "FI", "Fi", NULL},
    {0xFB02, "FL", "Fl", NULL},
    {0xFB03, "FFI", "Ffi", NULL},
    {0xFB04, "FFL", "Ffl", NULL},
    {0xFB05, "ST", "St", NULL},
    {0xFB06, "ST", "St", NULL},
};

/* The multi-character mapping of cp for a case mode, or NULL. */
static const char *special_mapping(uint32_t cp, char which) {
    if (cp < 0xDF) return NULL;
    for (size_t i = 0; i < sizeof special_cases / sizeof special_cases[0]; i++)
        if (special_cases[i].cp == cp)
            return which == 'u'   ? special_cases[i].upper
                   : which == 't' ? special_cases[i].title
                                  : special_cases[i].lower;
    return NULL;
}

/* Jinja's title filter splits words at runs of -, whitespace, (, {, [ and <. */
static bool jinja_word_break(uint32_t cp) {
    return cp == '-' || cp == '(' || cp == '{' || cp == '[' || cp == '<' || jcp_isspace(cp);
}

static bool cp_case_ignorable(uint32_t cp) {
    if (cp == '\'' || cp == '.' || cp == ':' || cp == 0xB7 || cp == 0x2019) return true;
    utf8proc_category_t c = utf8proc_category((utf8proc_int32_t)cp);
    return c == UTF8PROC_CATEGORY_MN || c == UTF8PROC_CATEGORY_ME || c == UTF8PROC_CATEGORY_CF ||
           c == UTF8PROC_CATEGORY_LM || c == UTF8PROC_CATEGORY_SK;
}

static bool cp_cased(uint32_t cp);

/* Python lowers a capital sigma ending a word to ς (Final_Sigma): a cased
 * letter before it and none after it, skipping case-ignorable characters. */
static bool final_sigma(const jstr *s, size_t lo, size_t hi, size_t at, size_t len) {
    bool before = false;
    for (size_t i = at; i > lo;) {
        i--;
        while (i > lo && ((unsigned char)s->data[i] & 0xC0) == 0x80) i--;
        uint32_t cp;
        jutf8_decode((const unsigned char *)s->data + i, s->len - i, &cp);
        if (cp_case_ignorable(cp)) continue;
        before = cp_cased(cp);
        break;
    }
    if (!before) return false;
    for (size_t i = at + len; i < hi;) {
        uint32_t cp;
        i += jutf8_decode((const unsigned char *)s->data + i, hi - i, &cp);
        if (cp_case_ignorable(cp)) continue;
        return !cp_cased(cp);
    }
    return true;
}

/* End of the Jinja title piece (a run of word or of break characters) at i. */
static size_t piece_end(const jstr *s, size_t i, bool brk) {
    while (i < s->len) {
        uint32_t cp;
        size_t k = jutf8_decode((const unsigned char *)s->data + i, s->len - i, &cp);
        if (jinja_word_break(cp) != brk) break;
        i += k;
    }
    return i;
}

static bool cp_cased(uint32_t cp) {
    utf8proc_category_t c = utf8proc_category((utf8proc_int32_t)cp);
    return c == UTF8PROC_CATEGORY_LU || c == UTF8PROC_CATEGORY_LL || c == UTF8PROC_CATEGORY_LT;
}

/* ß has no simple upper case in Python (utf8proc maps it to ẞ) */
static uint32_t cp_upper(uint32_t cp) {
    return cp == 0xDF ? cp : (uint32_t)utf8proc_toupper((utf8proc_int32_t)cp);
}
static uint32_t cp_lower(uint32_t cp) { return (uint32_t)utf8proc_tolower((utf8proc_int32_t)cp); }
static uint32_t cp_title(uint32_t cp) {
    return cp == 0xDF ? cp : (uint32_t)utf8proc_totitle((utf8proc_int32_t)cp);
}

bool jstr_case(jrt *rt, jv sv, int mode, jv *out) {
    jstr *s = jv_str(sv);
    if (s->ncp == s->len && mode != CASE_JINJA_TITLE &&
        mode != JM_TITLE) { /* ASCII: a byte at a time */
        if (!jctx_charge(&rt->c, 1 + s->len / 64)) return false;
        jstr *r;
        if (!jstr_alloc(&rt->c, s->len, &r)) return false;
        for (size_t i = 0; i < s->len; i++) {
            char c = s->data[i];
            bool lower = c >= 'a' && c <= 'z', upper = c >= 'A' && c <= 'Z';
            bool to_upper = mode == JM_UPPER || (mode == JM_SWAPCASE && lower) ||
                            (mode == JM_CAPITALIZE && i == 0);
            bool to_lower = mode == JM_LOWER || mode == JM_CASEFOLD ||
                            (mode == JM_SWAPCASE && upper) || (mode == JM_CAPITALIZE && i > 0);
            if (to_upper && lower)
                c = (char)(c - 32);
            else if (to_lower && upper)
                c = (char)(c + 32);
            r->data[i] = c;
        }
        r->ncp = s->len;
        *out = jv_obj(JV_STR, r);
        return true;
    }
    if (!jctx_charge(&rt->c, 1 + s->ncp)) return false; /* a case table look-up per code point */
    jbuf b = {0};
    size_t i = 0;
    bool prev_cased = false, first = true, ok = true;
    size_t lo = 0,
           hi = s->len; /* the context of final sigma: Jinja's title lowers each piece alone */
    while (ok && i < s->len) {
        uint32_t cp, r;
        size_t k = jutf8_decode((const unsigned char *)s->data + i, s->len - i, &cp);
        bool valid = !(cp == 0xFFFD && k == 1);
        char which = 0; /* which full mapping applies: u(pper), t(itle) or l(ower) */
        switch (mode) {
        case JM_UPPER: r = cp_upper(cp), which = 'u'; break;
        case JM_LOWER:
        case JM_CASEFOLD: r = cp_lower(cp), which = 'l'; break;
        case JM_SWAPCASE: {
            utf8proc_category_t c = utf8proc_category((utf8proc_int32_t)cp);
            if (c == UTF8PROC_CATEGORY_LL)
                r = cp_upper(cp), which = 'u';
            else if (c == UTF8PROC_CATEGORY_LU || c == UTF8PROC_CATEGORY_LT)
                r = cp_lower(cp), which = 'l';
            else
                r = cp;
            break;
        }
        case JM_CAPITALIZE:
            if (first)
                r = cp_title(cp), which = 't';
            else
                r = cp_lower(cp), which = 'l';
            break;
        case JM_TITLE: /* Python str.title: a cased letter after an uncased one starts a word */
            if (!cp_cased(cp))
                r = cp;
            else if (prev_cased)
                r = cp_lower(cp), which = 'l';
            else
                r = cp_title(cp), which = 't';
            prev_cased = cp_cased(cp);
            break;
        default: /* CASE_JINJA_TITLE: item[0].upper() + item[1:].lower() */
            if (first)
                r = cp_upper(cp), which = 'u';
            else
                r = cp_lower(cp), which = 'l';
            prev_cased = jinja_word_break(cp);
            break;
        }
        const char *special = valid ? special_mapping(cp, which) : NULL;
        if (mode == JM_CASEFOLD && cp == 0xDF) special = "ss";
        if (mode == CASE_JINJA_TITLE &&
            first) { /* item[1:].lower() sees only the rest of the piece */
            lo = i + k;
            hi = piece_end(s, i + k, jinja_word_break(cp));
        }
        if (cp == 0x3A3 && which == 'l' && mode != JM_CASEFOLD && final_sigma(s, lo, hi, i, k))
            r = 0x3C2;
        if (mode == CASE_JINJA_TITLE) {
            first = prev_cased; /* the next character starts a new piece after a break run */
        } else {
            first = false;
        }
        if (special) {
            ok = jbuf_puts(&rt->c, &b, special);
        } else if (!valid || r == cp) {
            ok = jbuf_put(&rt->c, &b, s->data + i, k);
        } else {
            char enc[4];
            ok = jbuf_put(&rt->c, &b, enc, jutf8_encode(r, enc));
        }
        i += k;
    }
    ok = ok && jbuf_take_str(&rt->c, &b, out);
    jbuf_free(&b);
    return ok;
}

/* Does the set `chars` (a str) contain cp? */
static bool in_chars(jstr *chars, uint32_t cp) {
    size_t i = 0;
    while (i < chars->len) {
        uint32_t c;
        i += jutf8_decode((const unsigned char *)chars->data + i, chars->len - i, &c);
        if (c == cp) return true;
    }
    return false;
}

bool jstr_strip(jrt *rt, jv sv, jv chars, bool left, bool right, jv *out) {
    jstr *s = jv_str(sv);
    if (!jctx_charge(&rt->c, 1 + s->len / 16)) return false;
    jstr *set = NULL;
    if (chars.kind == JV_STR)
        set = jv_str(chars);
    else if (chars.kind != JV_NONE)
        return jfail(&rt->c, LM_ERR_INVALID, "strip arg must be None or str, not %s",
                     jv_type_name(chars));
    size_t start = 0, end = s->len, i = 0;
    bool seen = false;
    while (i < s->len) { /* one forward pass: first and last kept code points */
        uint32_t cp;
        size_t k = jutf8_decode((const unsigned char *)s->data + i, s->len - i, &cp);
        bool strip = set ? in_chars(set, cp) : jcp_isspace(cp);
        if (!strip) {
            if (!seen) start = i;
            seen = true;
            end = i + k;
        }
        i += k;
    }
    if (!seen) start = end = 0; /* everything strippable: both directions leave "" */
    if (!left) start = 0;
    if (!right && seen) end = s->len;
    if (start == 0 && end == s->len) {
        *out = jv_retain(sv);
        return true;
    }
    return jv_new_str(&rt->c, s->data + start, end - start, out);
}

bool jstr_replace(jrt *rt, jv sv, jv oldv, jv newv, int64_t count, jv *out) {
    if (oldv.kind != JV_STR || newv.kind != JV_STR)
        return jfail(&rt->c, LM_ERR_INVALID, "replace() arguments must be str");
    jstr *s = jv_str(sv), *old = jv_str(oldv), *rep = jv_str(newv);
    if (!jctx_charge(&rt->c, 1 + s->len / 16)) return false;
    jbuf b = {0};
    bool ok = true;
    int64_t done = 0;
    if (old->len == 0) { /* Python inserts the replacement around every code point */
        size_t i = 0;
        while (ok && (count < 0 || done < count)) {
            ok = jbuf_put(&rt->c, &b, rep->data, rep->len);
            done++;
            if (i >= s->len) break;
            uint32_t cp;
            size_t k = jutf8_decode((const unsigned char *)s->data + i, s->len - i, &cp);
            ok = ok && jbuf_put(&rt->c, &b, s->data + i, k);
            i += k;
        }
        ok = ok && jbuf_put(&rt->c, &b, s->data + i, s->len - i);
    } else {
        size_t i = 0;
        while (ok && i <= s->len) {
            const char *hit = (count < 0 || done < count)
                                  ? memmem(s->data + i, s->len - i, old->data, old->len)
                                  : NULL;
            if (!hit) {
                ok = jbuf_put(&rt->c, &b, s->data + i, s->len - i);
                break;
            }
            size_t at = (size_t)(hit - s->data);
            ok = jbuf_put(&rt->c, &b, s->data + i, at - i) &&
                 jbuf_put(&rt->c, &b, rep->data, rep->len);
            i = at + old->len;
            done++;
        }
    }
    ok = ok && jctx_charge(&rt->c, (uint64_t)done) && jbuf_take_str(&rt->c, &b, out);
    jbuf_free(&b);
    return ok;
}

static bool push_piece(jrt *rt, jv list, const char *p, size_t n) {
    jv piece;
    return jv_new_str(&rt->c, p, n, &piece) && jlist_push(&rt->c, jv_list(list), piece);
}

/* Reverses a list in place (it was just built and is not shared). */
static void reverse_items(jlist *l) {
    for (size_t i = 0, j = l->len; i + 1 < j; i++, j--) {
        jv t = l->items[i];
        l->items[i] = l->items[j - 1];
        l->items[j - 1] = t;
    }
}

/* Length of the whitespace code point ending at byte end (0 when none). */
static size_t space_before(const char *s, size_t start, size_t end) {
    size_t i = end;
    while (i > start && ((unsigned char)s[i - 1] & 0xC0) == 0x80 && end - i < 3) i--;
    if (i > start) i--;
    if (((unsigned char)s[i] & 0xC0) == 0x80) i = end - 1;
    size_t k = jutf8_space_len(s + i, end - i);
    return k == end - i ? k : 0;
}

bool jstr_split(jrt *rt, jv sv, jv sep, int64_t maxsplit, bool from_right, jv *out) {
    jstr *s = jv_str(sv);
    if (!jctx_charge(&rt->c, 1 + s->len / 16)) return false;
    if (!jv_new_list(&rt->c, JV_LIST, 0, out)) return false;
    bool ok = true;
    int64_t splits = 0;
    if (sep.kind == JV_NONE) { /* runs of whitespace, no empty pieces */
        if (!from_right) {
            size_t i = 0;
            for (;;) {
                size_t k;
                while (i < s->len && (k = jutf8_space_len(s->data + i, s->len - i))) i += k;
                if (i >= s->len) break;
                if (maxsplit >= 0 && splits >= maxsplit) {
                    ok = push_piece(rt, *out, s->data + i, s->len - i);
                    break;
                }
                size_t start = i;
                while (i < s->len && !jutf8_space_len(s->data + i, s->len - i)) {
                    uint32_t cp;
                    i += jutf8_decode((const unsigned char *)s->data + i, s->len - i, &cp);
                }
                if (!(ok = push_piece(rt, *out, s->data + start, i - start))) break;
                splits++;
            }
        } else {
            size_t end = s->len;
            for (;;) {
                size_t k;
                while (end > 0 && (k = space_before(s->data, 0, end))) end -= k;
                if (end == 0) break;
                if (maxsplit >= 0 && splits >= maxsplit) {
                    ok = push_piece(rt, *out, s->data, end);
                    break;
                }
                size_t start = end;
                while (start > 0 && !space_before(s->data, 0, start)) {
                    start--;
                    while (start > 0 && ((unsigned char)s->data[start] & 0xC0) == 0x80) start--;
                }
                if (!(ok = push_piece(rt, *out, s->data + start, end - start))) break;
                end = start;
                splits++;
            }
            reverse_items(jv_list(*out));
        }
    } else if (sep.kind == JV_STR) {
        jstr *d = jv_str(sep);
        if (d->len == 0) {
            jv_release(&rt->c, *out);
            return jfail(&rt->c, LM_ERR_INVALID, "empty separator");
        }
        if (!from_right) {
            size_t i = 0;
            for (;;) {
                const char *hit = (maxsplit < 0 || splits < maxsplit)
                                      ? memmem(s->data + i, s->len - i, d->data, d->len)
                                      : NULL;
                if (!hit) {
                    ok = push_piece(rt, *out, s->data + i, s->len - i);
                    break;
                }
                size_t at = (size_t)(hit - s->data);
                if (!(ok = push_piece(rt, *out, s->data + i, at - i))) break;
                i = at + d->len;
                splits++;
            }
        } else {
            size_t end = s->len;
            for (;;) {
                size_t at = SIZE_MAX;
                if ((maxsplit < 0 || splits < maxsplit) && end >= d->len)
                    for (size_t p = end - d->len + 1; p-- > 0;)
                        if (memcmp(s->data + p, d->data, d->len) == 0) {
                            at = p;
                            break;
                        }
                if (at == SIZE_MAX) {
                    ok = push_piece(rt, *out, s->data, end);
                    break;
                }
                if (!(ok = push_piece(rt, *out, s->data + at + d->len, end - at - d->len))) break;
                end = at;
                splits++;
            }
            reverse_items(jv_list(*out));
        }
    } else {
        jv_release(&rt->c, *out);
        return jfail(&rt->c, LM_ERR_INVALID, "must be str or None, not %s", jv_type_name(sep));
    }
    if (!ok) jv_release(&rt->c, *out);
    return ok;
}

bool jstr_slice(jrt *rt, jv sv, size_t byte_start, size_t byte_end, jv *out) {
    jstr *s = jv_str(sv);
    if (byte_start == 0 && byte_end == s->len) {
        *out = jv_retain(sv);
        return true;
    }
    return jv_new_str(&rt->c, s->data + byte_start, byte_end - byte_start, out);
}

/* ---- printf-style formatting: "%s and %d" % (a, b) ---- */

static bool pad_text(jrt *rt, jbuf *b, const char *text, size_t len, int width, bool left) {
    size_t ncp = jutf8_count(text, len);
    size_t pad = width > 0 && (size_t)width > ncp ? (size_t)width - ncp : 0;
    bool ok = true;
    for (size_t i = 0; ok && !left && i < pad; i++) ok = jbuf_put(&rt->c, b, " ", 1);
    ok = ok && jbuf_put(&rt->c, b, text, len);
    for (size_t i = 0; ok && left && i < pad; i++) ok = jbuf_put(&rt->c, b, " ", 1);
    return ok;
}

static bool format_percent_one(jrt *rt, jbuf *b, char conv, const char *flags, int width, int prec,
                               jv v) {
    char spec[32], tmp[512];
    int n;
    bool left = strchr(flags, '-') != NULL;
    switch (conv) {
    case 's':
    case 'r': {
        jbuf t = {0};
        bool ok = conv == 's' ? jv_print(&rt->c, &t, v) : jv_repr(&rt->c, &t, v);
        size_t len = t.len;
        if (ok && prec >= 0 && t.data) { /* precision truncates to code points */
            size_t i = 0, cps = 0;
            while (i < t.len && cps < (size_t)prec) {
                uint32_t cp;
                i += jutf8_decode((const unsigned char *)t.data + i, t.len - i, &cp);
                cps++;
            }
            len = i;
        }
        ok = ok && pad_text(rt, b, t.data ? t.data : "", len, width, left);
        jbuf_free(&t);
        return ok;
    }
    case 'd':
    case 'i':
    case 'x':
    case 'X':
    case 'o': {
        int64_t i;
        if (v.kind == JV_INT)
            i = v.u.i;
        else if (v.kind == JV_BOOL)
            i = v.u.b;
        else if (v.kind == JV_FLOAT && (conv == 'd' || conv == 'i') && isfinite(v.u.f) &&
                 fabs(v.u.f) < 9.2e18)
            i = (int64_t)v.u.f;
        else
            return jfail(&rt->c, LM_ERR_INVALID, "%%%c format: a real number is required, not %s",
                         conv, jv_type_name(v));
        snprintf(spec, sizeof spec, "%%%s%s%s%s", flags, width > 0 ? "*" : "",
                 prec >= 0 ? ".*" : "",
                 conv == 'x'   ? PRIx64
                 : conv == 'X' ? PRIX64
                 : conv == 'o' ? PRIo64
                               : PRId64);
        if (width > 0 && prec >= 0)
            n = snprintf(tmp, sizeof tmp, spec, width, prec, i);
        else if (width > 0)
            n = snprintf(tmp, sizeof tmp, spec, width, i);
        else if (prec >= 0)
            n = snprintf(tmp, sizeof tmp, spec, prec, i);
        else
            n = snprintf(tmp, sizeof tmp, spec, i);
        break;
    }
    case 'f':
    case 'F':
    case 'e':
    case 'E':
    case 'g':
    case 'G': {
        if (!jv_is_num(v))
            return jfail(&rt->c, LM_ERR_INVALID, "must be real number, not %s", jv_type_name(v));
        double d = v.kind == JV_FLOAT ? v.u.f : v.kind == JV_INT ? (double)v.u.i : v.u.b;
        snprintf(spec, sizeof spec, "%%%s*.*%c", flags, conv);
        n = snprintf(tmp, sizeof tmp, spec, width > 0 ? width : 0, prec >= 0 ? prec : 6, d);
        break;
    }
    case 'c': {
        if (v.kind == JV_STR && jv_str(v)->ncp == 1)
            return pad_text(rt, b, jv_str(v)->data, jv_str(v)->len, width, left);
        if (v.kind != JV_INT || v.u.i < 0 || v.u.i > 0x10FFFF)
            return jfail(&rt->c, LM_ERR_INVALID, "%%c requires an int or a single character");
        char enc[4];
        return pad_text(rt, b, enc, jutf8_encode((uint32_t)v.u.i, enc), width, left);
    }
    default: return jfail(&rt->c, LM_ERR_INVALID, "unsupported format character '%c'", conv);
    }
    if (n < 0) return jfail(&rt->c, LM_ERR_INVALID, "formatting failed");
    if ((size_t)n >= sizeof tmp) return jfail(&rt->c, LM_ERR_INVALID, "formatted number too wide");
    return jbuf_put(&rt->c, b, tmp, (size_t)n);
}

bool jstr_percent(jrt *rt, jv fmtv, jv args, jv *out) {
    jstr *fmt = jv_str(fmtv);
    jv *items = &args;
    size_t nitems = 1, next = 0;
    if (args.kind == JV_TUPLE) {
        items = jv_list(args)->items;
        nitems = jv_list(args)->len;
    }
    /* Python treats anything with __getitem__ (dict, list, Undefined) as a
     * possible mapping: no "not all arguments converted" error for it */
    bool mapping = args.kind == JV_DICT || args.kind == JV_LIST || args.kind == JV_UNDEFINED;
    jbuf b = {0};
    bool ok = true;
    size_t i = 0;
    while (ok && i < fmt->len) {
        const char *pct = memchr(fmt->data + i, '%', fmt->len - i);
        size_t stop = pct ? (size_t)(pct - fmt->data) : fmt->len;
        ok = jbuf_put(&rt->c, &b, fmt->data + i, stop - i);
        if (!ok || !pct) break;
        i = stop + 1;
        jv value = jv_none();
        bool have_value = false;
        if (i < fmt->len && fmt->data[i] == '(') { /* %(name)s */
            const char *close = memchr(fmt->data + i, ')', fmt->len - i);
            if (!close || args.kind != JV_DICT) {
                ok = jfail(&rt->c, LM_ERR_INVALID,
                           close ? "format requires a mapping" : "incomplete format key");
                break;
            }
            jv *found = jdict_get_str(jv_dict(args), fmt->data + i + 1,
                                      (size_t)(close - fmt->data) - i - 1);
            if (!found) {
                ok = jfail(&rt->c, LM_ERR_INVALID, "format key '%.*s' not found",
                           (int)((size_t)(close - fmt->data) - i - 1), fmt->data + i + 1);
                break;
            }
            value = *found;
            have_value = true;
            i = (size_t)(close - fmt->data) + 1;
        }
        char flags[8];
        size_t nf = 0;
        while (i < fmt->len && strchr("-+ #0", fmt->data[i]) && nf < sizeof flags - 1)
            flags[nf++] = fmt->data[i++];
        flags[nf] = 0;
        int width = 0, prec = -1;
        while (i < fmt->len && fmt->data[i] >= '0' && fmt->data[i] <= '9' && width < 10000)
            width = width * 10 + (fmt->data[i++] - '0');
        if (i < fmt->len && fmt->data[i] == '.') {
            i++;
            prec = 0;
            while (i < fmt->len && fmt->data[i] >= '0' && fmt->data[i] <= '9' && prec < 10000)
                prec = prec * 10 + (fmt->data[i++] - '0');
        }
        if (i >= fmt->len) {
            ok = jfail(&rt->c, LM_ERR_INVALID, "incomplete format");
            break;
        }
        char conv = fmt->data[i++];
        if (conv == '%') {
            ok = jbuf_put(&rt->c, &b, "%", 1);
            continue;
        }
        if (!have_value) {
            if (next >= nitems) {
                ok = jfail(&rt->c, LM_ERR_INVALID, "not enough arguments for format string");
                break;
            } else
                value = items[next++];
        }
        ok = format_percent_one(rt, &b, conv, flags, width, prec, value);
    }
    if (ok && !mapping && next < nitems)
        ok = jfail(&rt->c, LM_ERR_INVALID, "not all arguments converted during string formatting");
    ok = ok && jbuf_take_str(&rt->c, &b, out);
    jbuf_free(&b);
    return ok;
}

bool jstr_jinja_title(jrt *rt, jv s, jv *out) { return jstr_case(rt, s, CASE_JINJA_TITLE, out); }
