/* JSON values as their exact text: the schema's own number texts kept and written back. */
#include "grammar/json_schema_compiler.h"

#include <stdio.h>
#include <stdlib.h>

#include "grammar/json_number.h"

/* ---- numbers as the schema writes them */

/* cJSON keeps a number as a double; the schema's own text of each number
 * goes into its node's valuestring (which cJSON_Delete frees and
 * cJSON_Print ignores), read in document order: a const 9007199254740993
 * or a bound 0.1 is written back / compared as written. */
static const char *scan_number(const char **p, const char *end, size_t *len) {
    for (;;) {
        while (*p < end && **p != '"' && **p != '-' && !(**p >= '0' && **p <= '9')) (*p)++;
        if (*p >= end) return NULL;
        if (**p == '"') {
            for ((*p)++; *p < end && **p != '"'; (*p)++)
                if (**p == '\\') (*p)++;
            (*p)++;
            continue;
        }
        const char *start = *p;
        while (*p < end && strchr("0123456789+-.eE", **p)) (*p)++;
        *len = (size_t)(*p - start);
        return start;
    }
}

bool lm_js_stash_numbers(cJSON *node, const char **p, const char *end) {
    for (; node; node = node->next) {
        if (cJSON_IsNumber(node)) {
            size_t len = 0;
            const char *text = scan_number(p, end, &len);
            if (!text || node->valuestring) return false;
            node->valuestring = malloc(len + 1);
            if (!node->valuestring) return false;
            memcpy(node->valuestring, text, len);
            node->valuestring[len] = 0;
        }
        if (node->child && !lm_js_stash_numbers(node->child, p, end)) return false;
    }
    return true;
}

void lm_js_number_text(const cJSON *v, char *buf, size_t size) {
    if (v->valuestring) snprintf(buf, size, "%s", v->valuestring);
    else lm_json_number_text(v->valuedouble, buf, size);
}

typedef struct {
    char *p;
    size_t n, cap;
    bool failed;
} text_buf;

static void put_text(text_buf *t, const char *s, size_t len) {
    if (t->failed) return;
    if (t->n + len + 1 > t->cap) {
        size_t cap = t->cap ? t->cap : 64;
        while (cap < t->n + len + 1) cap *= 2;
        char *q = realloc(t->p, cap);
        if (!q) {
            t->failed = true;
            return;
        }
        t->p = q;
        t->cap = cap;
    }
    memcpy(t->p + t->n, s, len);
    t->n += len;
    t->p[t->n] = 0;
}

static void put_string(text_buf *t, const char *s) {
    cJSON tmp = {.type = cJSON_String, .valuestring = (char *)s};
    char *q = cJSON_PrintUnformatted(&tmp);
    if (!q) t->failed = true;
    else put_text(t, q, strlen(q));
    cJSON_free(q);
}

/* A value's compact JSON text with its numbers exact. */
static void print_exact(text_buf *t, const cJSON *v) {
    char num[LM_NUMBER_MAX_TEXT];
    if (cJSON_IsNumber(v)) {
        lm_js_number_text(v, num, sizeof num);
        put_text(t, num, strlen(num));
    } else if (cJSON_IsString(v)) {
        put_string(t, v->valuestring);
    } else if (cJSON_IsArray(v) || cJSON_IsObject(v)) {
        bool obj = cJSON_IsObject(v);
        put_text(t, obj ? "{" : "[", 1);
        for (const cJSON *c = v->child; c; c = c->next) {
            if (c != v->child) put_text(t, ",", 1);
            if (obj) {
                put_string(t, c->string);
                put_text(t, ":", 1);
            }
            print_exact(t, c);
        }
        put_text(t, obj ? "}" : "]", 1);
    } else {
        const char *w = cJSON_IsTrue(v) ? "true" : cJSON_IsFalse(v) ? "false" : "null";
        put_text(t, w, strlen(w));
    }
}

char *lm_js_exact_text(const cJSON *v) {
    text_buf t = {0};
    print_exact(&t, v);
    if (t.failed) {
        free(t.p);
        return NULL;
    }
    return t.p;
}

char *lm_json_text_exact(const cJSON *value) { return lm_js_exact_text(value); }

/* ---- literals */

/* A value as its JSON text; in any-whitespace mode an object or array
 * value may still come as written compactly (the model copies it). */
lm_status lm_js_json_literal(json_builder *j, const cJSON *value, lm_gseq *out) {
    char *text = lm_js_exact_text(value);
    if (!text) return nomem(j);
    lm_status st = lm_gseq_literal(j->b, out, text, strlen(text), j->err);
    free(text);
    return st;
}

/* Values as one trie of their JSON texts (grammar.h's lm_grammar_literals):
 * hundreds of values stay one matcher stack. */
lm_status lm_js_literals(json_builder *j, const cJSON *const *values, int n, lm_gseq *out) {
    char **texts = calloc((size_t)n, sizeof *texts);
    size_t *lens = calloc((size_t)n, sizeof *lens);
    lm_status st = texts && lens ? LM_OK : nomem(j);
    for (int i = 0; i < n && st == LM_OK; i++) {
        texts[i] = lm_js_exact_text(values[i]);
        if (!texts[i]) st = nomem(j);
        else lens[i] = strlen(texts[i]);
    }
    uint32_t rule = 0;
    if (st == LM_OK) st = lm_grammar_literals(j->b, (const char *const *)texts, lens, (uint32_t)n, &rule, j->err);
    if (st == LM_OK) ref(out, rule);
    for (int k = 0; texts && k < n; k++) free(texts[k]);
    free(texts);
    free(lens);
    return st;
}
