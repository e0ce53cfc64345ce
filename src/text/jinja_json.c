/* JSON text and cJSON trees to template values. */
#include "text/jinja_json.h"

#include <errno.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "text/jinja_print.h"

typedef struct {
    jctx *c;
    const char *s;
    size_t n, pos;
} jparser;

static bool perr(jparser *p, const char *what) {
    return jfail_plain(p->c, LM_ERR_FORMAT, "invalid JSON at byte %zu: %s", p->pos, what);
}

static void skip_ws(jparser *p) {
    while (p->pos < p->n && (p->s[p->pos] == ' ' || p->s[p->pos] == '\t' || p->s[p->pos] == '\n' ||
                             p->s[p->pos] == '\r'))
        p->pos++;
}

static bool lit(jparser *p, const char *word) {
    size_t k = strlen(word);
    if (p->n - p->pos >= k && memcmp(p->s + p->pos, word, k) == 0) {
        p->pos += k;
        return true;
    }
    return false;
}

static int hexval(char ch) {
    if (ch >= '0' && ch <= '9') return ch - '0';
    if (ch >= 'a' && ch <= 'f') return ch - 'a' + 10;
    if (ch >= 'A' && ch <= 'F') return ch - 'A' + 10;
    return -1;
}

static bool read_hex4(jparser *p, uint32_t *out) {
    if (p->n - p->pos < 4) return perr(p, "truncated \\u escape");
    uint32_t v = 0;
    for (int i = 0; i < 4; i++) {
        int h = hexval(p->s[p->pos + (size_t)i]);
        if (h < 0) return perr(p, "bad \\u escape");
        v = v * 16 + (uint32_t)h;
    }
    p->pos += 4;
    *out = v;
    return true;
}

static bool parse_string(jparser *p, jv *out) {
    p->pos++; /* opening quote */
    jbuf b = {0};
    bool ok = true;
    for (;;) {
        size_t start = p->pos;
        while (p->pos < p->n && p->s[p->pos] != '"' && p->s[p->pos] != '\\' &&
               (unsigned char)p->s[p->pos] >= 0x20)
            p->pos++;
        if (!jbuf_put(p->c, &b, p->s + start, p->pos - start)) goto fail;
        if (p->pos >= p->n) {
            perr(p, "unterminated string");
            goto fail;
        }
        char ch = p->s[p->pos];
        if (ch == '"') {
            p->pos++;
            break;
        }
        if (ch != '\\') {
            perr(p, "control character in string");
            goto fail;
        }
        p->pos++;
        if (p->pos >= p->n) {
            perr(p, "unterminated string");
            goto fail;
        }
        char e = p->s[p->pos++];
        const char *rep = NULL;
        switch (e) {
        case '"': rep = "\""; break;
        case '\\': rep = "\\"; break;
        case '/': rep = "/"; break;
        case 'b': rep = "\b"; break;
        case 'f': rep = "\f"; break;
        case 'n': rep = "\n"; break;
        case 'r': rep = "\r"; break;
        case 't': rep = "\t"; break;
        case 'u': {
            uint32_t cp;
            if (!read_hex4(p, &cp)) goto fail;
            if (cp >= 0xD800 && cp < 0xDC00 && p->n - p->pos >= 6 && p->s[p->pos] == '\\' &&
                p->s[p->pos + 1] == 'u') {
                size_t save = p->pos;
                p->pos += 2;
                uint32_t lo;
                if (!read_hex4(p, &lo)) goto fail;
                if (lo >= 0xDC00 && lo < 0xE000)
                    cp = 0x10000 + ((cp - 0xD800) << 10) + (lo - 0xDC00);
                else
                    p->pos = save;
            }
            if (cp >= 0xD800 && cp < 0xE000) cp = 0xFFFD; /* a lone surrogate has no UTF-8 form */
            char enc[4];
            if (!jbuf_put(p->c, &b, enc, jutf8_encode(cp, enc))) goto fail;
            continue;
        }
        default: perr(p, "bad escape"); goto fail;
        }
        if (!jbuf_puts(p->c, &b, rep)) goto fail;
    }
    if (!jutf8_valid(b.data ? b.data : "", b.len)) {
        perr(p, "string is not valid UTF-8");
        goto fail;
    }
    ok = jbuf_take_str(p->c, &b, out);
    jbuf_free(&b);
    return ok;
fail:
    jbuf_free(&b);
    return false;
}

static bool parse_number(jparser *p, jv *out) {
    size_t start = p->pos;
    bool is_float = false;
    if (p->s[p->pos] == '-') p->pos++;
    if (lit(p, "Infinity")) {
        *out = jv_float(p->s[start] == '-' ? -INFINITY : INFINITY);
        return true;
    }
    if (p->pos >= p->n || p->s[p->pos] < '0' || p->s[p->pos] > '9') return perr(p, "bad number");
    if (p->s[p->pos] == '0')
        p->pos++;
    else
        while (p->pos < p->n && p->s[p->pos] >= '0' && p->s[p->pos] <= '9') p->pos++;
    if (p->pos + 1 < p->n && p->s[p->pos] == '.' && p->s[p->pos + 1] >= '0' &&
        p->s[p->pos + 1] <= '9') {
        is_float = true;
        p->pos++;
        while (p->pos < p->n && p->s[p->pos] >= '0' && p->s[p->pos] <= '9') p->pos++;
    }
    if (p->pos < p->n && (p->s[p->pos] == 'e' || p->s[p->pos] == 'E')) {
        size_t save = p->pos++;
        if (p->pos < p->n && (p->s[p->pos] == '+' || p->s[p->pos] == '-')) p->pos++;
        if (p->pos < p->n && p->s[p->pos] >= '0' && p->s[p->pos] <= '9') {
            is_float = true;
            while (p->pos < p->n && p->s[p->pos] >= '0' && p->s[p->pos] <= '9') p->pos++;
        } else {
            p->pos = save;
        }
    }
    char tmp[400];
    size_t len = p->pos - start;
    if (len >= sizeof tmp) return perr(p, "number too long");
    memcpy(tmp, p->s + start, len);
    tmp[len] = 0;
    if (!is_float) {
        errno = 0;
        long long v = strtoll(tmp, NULL, 10);
        if (errno == 0) {
            *out = jv_int(v);
            return true;
        }
        /* Python would keep a big integer exactly; the closest float is
         * the best 64-bit stand-in. */
    }
    *out = jv_float(strtod(tmp, NULL));
    return true;
}

static bool parse_value(jparser *p, jv *out, int depth) {
    if (depth > JJSON_DEPTH_MAX) return perr(p, "nested too deeply");
    skip_ws(p);
    if (p->pos >= p->n) return perr(p, "unexpected end");
    char ch = p->s[p->pos];
    if (ch == '"') return parse_string(p, out);
    if (ch == '{') {
        p->pos++;
        if (!jv_new_dict(p->c, JV_DICT, out)) return false;
        skip_ws(p);
        if (p->pos < p->n && p->s[p->pos] == '}') {
            p->pos++;
            return true;
        }
        for (;;) {
            skip_ws(p);
            if (p->pos >= p->n || p->s[p->pos] != '"') {
                perr(p, "expected a string key");
                goto fail;
            }
            jv key, val;
            if (!parse_string(p, &key)) goto fail;
            skip_ws(p);
            if (p->pos >= p->n || p->s[p->pos] != ':') {
                jv_release(p->c, key);
                perr(p, "expected ':'");
                goto fail;
            }
            p->pos++;
            if (!parse_value(p, &val, depth + 1)) {
                jv_release(p->c, key);
                goto fail;
            }
            if (!jdict_set(p->c, jv_dict(*out), key, val)) goto fail;
            skip_ws(p);
            if (p->pos < p->n && p->s[p->pos] == ',') {
                p->pos++;
                continue;
            }
            if (p->pos < p->n && p->s[p->pos] == '}') {
                p->pos++;
                return true;
            }
            perr(p, "expected ',' or '}'");
            goto fail;
        }
    }
    if (ch == '[') {
        p->pos++;
        if (!jv_new_list(p->c, JV_LIST, 0, out)) return false;
        skip_ws(p);
        if (p->pos < p->n && p->s[p->pos] == ']') {
            p->pos++;
            return true;
        }
        for (;;) {
            jv item;
            if (!parse_value(p, &item, depth + 1)) goto fail;
            if (!jlist_push(p->c, jv_list(*out), item)) goto fail;
            skip_ws(p);
            if (p->pos < p->n && p->s[p->pos] == ',') {
                p->pos++;
                continue;
            }
            if (p->pos < p->n && p->s[p->pos] == ']') {
                p->pos++;
                return true;
            }
            perr(p, "expected ',' or ']'");
            goto fail;
        }
    }
    if (lit(p, "true")) return *out = jv_bool(true), true;
    if (lit(p, "false")) return *out = jv_bool(false), true;
    if (lit(p, "null")) return *out = jv_none(), true;
    if (lit(p, "NaN")) return *out = jv_float(NAN), true;
    if (ch == '-' || ch == 'I' || (ch >= '0' && ch <= '9')) return parse_number(p, out);
    return perr(p, "unexpected character");
fail:
    jv_release(p->c, *out);
    return false;
}

bool jjson_parse(jctx *c, const char *text, size_t len, jv *out) {
    jparser p = {.c = c, .s = text, .n = len, .pos = 0};
    if (!parse_value(&p, out, 0)) return false;
    skip_ws(&p);
    if (p.pos != p.n) {
        jv_release(c, *out);
        return perr(&p, "extra data after the value");
    }
    return true;
}

static bool from_cjson(jctx *c, const cJSON *j, jv *out, int depth) {
    if (depth > JJSON_DEPTH_MAX)
        return jfail_plain(c, LM_ERR_FORMAT, "JSON value nested too deeply");
    if (cJSON_IsNull(j)) return *out = jv_none(), true;
    if (cJSON_IsTrue(j)) return *out = jv_bool(true), true;
    if (cJSON_IsFalse(j)) return *out = jv_bool(false), true;
    if (cJSON_IsNumber(j)) {
        double d = j->valuedouble;
        if (isfinite(d) && d == floor(d) && fabs(d) < 9007199254740992.0)
            *out = jv_int((int64_t)d);
        else
            *out = jv_float(d);
        return true;
    }
    if (cJSON_IsString(j)) {
        const char *s = j->valuestring ? j->valuestring : "";
        size_t n = strlen(s);
        if (!jutf8_valid(s, n))
            return jfail_plain(c, LM_ERR_FORMAT, "a string in the context is not valid UTF-8");
        return jv_new_str(c, s, n, out);
    }
    if (cJSON_IsRaw(j)) {
        const char *s = j->valuestring ? j->valuestring : "";
        return jjson_parse(c, s, strlen(s), out);
    }
    if (cJSON_IsArray(j)) {
        if (!jv_new_list(c, JV_LIST, 0, out)) return false;
        for (const cJSON *e = j->child; e; e = e->next) {
            jv item;
            if (!from_cjson(c, e, &item, depth + 1) || !jlist_push(c, jv_list(*out), item)) {
                jv_release(c, *out);
                return false;
            }
        }
        return true;
    }
    if (cJSON_IsObject(j)) {
        if (!jv_new_dict(c, JV_DICT, out)) return false;
        for (const cJSON *e = j->child; e; e = e->next) {
            jv key, val;
            const char *k = e->string ? e->string : "";
            if (!jutf8_valid(k, strlen(k))) {
                jv_release(c, *out);
                return jfail_plain(c, LM_ERR_FORMAT, "a key in the context is not valid UTF-8");
            }
            if (!jv_new_str(c, k, strlen(k), &key)) {
                jv_release(c, *out);
                return false;
            }
            if (!from_cjson(c, e, &val, depth + 1)) {
                jv_release(c, key);
                jv_release(c, *out);
                return false;
            }
            if (!jdict_set(c, jv_dict(*out), key, val)) {
                jv_release(c, *out);
                return false;
            }
        }
        return true;
    }
    return jfail_plain(c, LM_ERR_FORMAT, "unsupported JSON item in the context");
}

bool jv_from_cjson(jctx *c, const cJSON *j, jv *out) { return from_cjson(c, j, out, 0); }
