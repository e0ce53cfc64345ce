/* The chat-template API over the Jinja engine (jinja_*.c): compiling,
 * rendering a request context the way transformers does, and finding a
 * model folder's template and special tokens. */
#include "text/chat_template.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "text/jinja_eval.h"
#include "text/jinja_json.h"
#include "text/tokenizer_gguf.h"

struct lm_chat_template {
    jtemplate *tpl;
    char *bos, *eos;
};

#define CONFIG_MAX_BYTES ((size_t)64 << 20)

void lm_chat_template_options_default(lm_chat_template_options *o) {
    jrender_limits l;
    jrender_limits_default(&l);
    memset(o, 0, sizeof *o);
    o->max_loop_iterations = l.max_loop_iterations;
    o->max_macro_depth = l.max_macro_depth;
    o->max_output = l.max_output;
    o->max_memory = l.max_memory;
    o->max_steps = l.max_steps;
    o->max_time_ms = l.max_time_ms;
}

lm_status lm_chat_template_compile(const char *source, size_t len, lm_chat_template **out,
                                   lm_error *err) {
    *out = NULL;
    if (!source && len) return lm_fail(err, LM_ERR_INVALID, "chat template: no source");
    lm_chat_template *t = calloc(1, sizeof *t);
    if (!t) return lm_fail(err, LM_ERR_NOMEM, "out of memory");
    lm_status st = jtemplate_compile(source ? source : "", len, &t->tpl, err);
    if (st) {
        free(t);
        return st;
    }
    *out = t;
    return LM_OK;
}

void lm_chat_template_free(lm_chat_template *t) {
    if (!t) return;
    jtemplate_free(t->tpl);
    free(t->bos);
    free(t->eos);
    free(t);
}

static lm_status dup_opt(const char *s, char **out, lm_error *err) {
    *out = NULL;
    if (!s) return LM_OK;
    *out = strdup(s);
    return *out ? LM_OK : lm_fail(err, LM_ERR_NOMEM, "out of memory");
}

lm_status lm_chat_template_set_special_tokens(lm_chat_template *t, const char *bos, const char *eos,
                                              lm_error *err) {
    char *b, *e;
    lm_status st = dup_opt(bos, &b, err);
    if (st) return st;
    if ((st = dup_opt(eos, &e, err))) {
        free(b);
        return st;
    }
    free(t->bos);
    free(t->eos);
    t->bos = b;
    t->eos = e;
    return LM_OK;
}

static void limits_from(const lm_chat_template_options *o, jrender_limits *l) {
    jrender_limits_default(l);
    if (!o) return;
    l->max_loop_iterations = o->max_loop_iterations;
    l->max_macro_depth = o->max_macro_depth;
    l->max_output = o->max_output;
    l->max_memory = o->max_memory;
    l->max_steps = o->max_steps;
    l->max_time_ms = o->max_time_ms;
    l->has_now = o->has_now;
    l->now = o->now;
}

/* Adds a key unless the context already has it (the key is a C literal). */
static bool set_default(jrt *rt, jv ctx, const char *key, jv value) {
    if (jdict_get_str(jv_dict(ctx), key, strlen(key))) {
        jv_release(&rt->c, value);
        return true;
    }
    jv k;
    if (!jv_new_str(&rt->c, key, strlen(key), &k)) {
        jv_release(&rt->c, value);
        return false;
    }
    return jdict_set(&rt->c, jv_dict(ctx), k, value);
}

static bool set_default_str(jrt *rt, jv ctx, const char *key, const char *s) {
    if (!s) return true;
    jv v;
    return jv_new_str(&rt->c, s, strlen(s), &v) && set_default(rt, ctx, key, v);
}

/* transformers' render call: render(messages=..., tools=tools or None,
 * documents=None, add_generation_prompt=False, **special_tokens, **kwargs). */
static lm_status render_context(const lm_chat_template *t, jrt *rt, jv ctx, char **out,
                                size_t *out_len) {
    bool ok = ctx.kind == JV_DICT ||
              jfail_plain(&rt->c, LM_ERR_INVALID,
                          "chat template context must be a JSON object, not %s", jv_type_name(ctx));
    ok = ok && set_default(rt, ctx, "tools", jv_none()) &&
         set_default(rt, ctx, "documents", jv_none()) &&
         set_default(rt, ctx, "add_generation_prompt", jv_bool(false)) &&
         set_default_str(rt, ctx, "bos_token", t->bos) &&
         set_default_str(rt, ctx, "eos_token", t->eos);
    ok = ok && jrt_render(rt, t->tpl, ctx, out, out_len);
    lm_status st = ok ? LM_OK : (rt->c.err ? rt->c.err->code : LM_ERR_INVALID);
    if (!ok && st == LM_OK) st = LM_ERR_INTERNAL;
    jrt_destroy(rt);
    return st;
}

lm_status lm_chat_template_render_ex(const lm_chat_template *t, const cJSON *context,
                                     const lm_chat_template_options *opts, char **out,
                                     size_t *out_len, lm_error *err) {
    *out = NULL;
    if (out_len) *out_len = 0;
    lm_error local;
    if (!err) err = &local;
    jrender_limits lim;
    limits_from(opts, &lim);
    jrt rt;
    if (!jrt_init(&rt, &lim, err)) {
        jrt_destroy(&rt);
        return err->code;
    }
    jv ctx;
    if (!context) {
        if (!jv_new_dict(&rt.c, JV_DICT, &ctx)) {
            jrt_destroy(&rt);
            return err->code;
        }
    } else if (!jv_from_cjson(&rt.c, context, &ctx)) {
        jrt_destroy(&rt);
        return err->code;
    }
    size_t len;
    lm_status st = render_context(t, &rt, ctx, out, &len);
    if (out_len) *out_len = len;
    return st;
}

lm_status lm_chat_template_render(const lm_chat_template *t, const cJSON *context, char **out,
                                  size_t *out_len, lm_error *err) {
    return lm_chat_template_render_ex(t, context, NULL, out, out_len, err);
}

lm_status lm_chat_template_render_json(const lm_chat_template *t, const char *json, size_t json_len,
                                       const lm_chat_template_options *opts, char **out,
                                       size_t *out_len, lm_error *err) {
    *out = NULL;
    if (out_len) *out_len = 0;
    lm_error local;
    if (!err) err = &local;
    jrender_limits lim;
    limits_from(opts, &lim);
    jrt rt;
    if (!jrt_init(&rt, &lim, err)) {
        jrt_destroy(&rt);
        return err->code;
    }
    jv ctx;
    if (!jjson_parse(&rt.c, json ? json : "", json ? json_len : 0, &ctx)) {
        jrt_destroy(&rt);
        return err->code;
    }
    size_t len;
    lm_status st = render_context(t, &rt, ctx, out, &len);
    if (out_len) *out_len = len;
    return st;
}

/* ---- model folders ---- */

/* Reads a whole file (at most max bytes); LM_ERR_IO with errno ENOENT kept
 * in *missing when it does not exist. */
static lm_status read_file(const char *path, size_t max, char **data, size_t *len, bool *missing,
                           lm_error *err) {
    *data = NULL;
    *len = 0;
    if (missing) *missing = false;
    FILE *f = fopen(path, "rb");
    if (!f) {
        if (missing && errno == ENOENT) *missing = true;
        return lm_fail(err, LM_ERR_IO, "cannot open %s: %s", path, strerror(errno));
    }
    struct stat stt;
    if (fstat(fileno(f), &stt) != 0 || !S_ISREG(stt.st_mode)) {
        fclose(f);
        return lm_fail(err, LM_ERR_IO, "%s is not a regular file", path);
    }
    if ((uint64_t)stt.st_size > max) {
        fclose(f);
        return lm_fail(err, LM_ERR_FORMAT, "%s is larger than %zu bytes", path, max);
    }
    size_t size = (size_t)stt.st_size;
    char *buf = malloc(size + 1);
    if (!buf) {
        fclose(f);
        return lm_fail(err, LM_ERR_NOMEM, "out of memory reading %s", path);
    }
    size_t got = fread(buf, 1, size, f);
    fclose(f);
    if (got != size) {
        free(buf);
        return lm_fail(err, LM_ERR_IO, "short read on %s", path);
    }
    buf[size] = 0;
    *data = buf;
    *len = size;
    return LM_OK;
}

/* A special token in tokenizer_config.json: "text" or {"content": "text"}. */
static const char *token_text(const cJSON *cfg, const char *key) {
    const cJSON *v = cJSON_GetObjectItemCaseSensitive(cfg, key);
    if (cJSON_IsString(v)) return v->valuestring;
    if (cJSON_IsObject(v)) {
        const cJSON *c = cJSON_GetObjectItemCaseSensitive(v, "content");
        if (cJSON_IsString(c)) return c->valuestring;
    }
    return NULL;
}

/* The "chat_template" value of a config: a string or a list of named templates. */
static lm_status template_from_config(const cJSON *cfg, const char *path, const char **out,
                                      lm_error *err) {
    *out = NULL;
    const cJSON *ct = cJSON_GetObjectItemCaseSensitive(cfg, "chat_template");
    if (cJSON_IsString(ct)) {
        *out = ct->valuestring;
        return LM_OK;
    }
    if (cJSON_IsArray(ct)) {
        const cJSON *e;
        cJSON_ArrayForEach(e, ct) {
            const cJSON *name = cJSON_GetObjectItemCaseSensitive(e, "name");
            const cJSON *tmpl = cJSON_GetObjectItemCaseSensitive(e, "template");
            if (cJSON_IsString(name) && cJSON_IsString(tmpl) &&
                strcmp(name->valuestring, "default") == 0) {
                *out = tmpl->valuestring;
                return LM_OK;
            }
        }
        return lm_fail(err, LM_ERR_FORMAT, "%s: chat_template lists no template named \"default\"",
                       path);
    }
    if (ct && !cJSON_IsNull(ct))
        return lm_fail(err, LM_ERR_FORMAT, "%s: chat_template must be a string or a list", path);
    return LM_OK;
}

static lm_status parse_json_file(const char *path, cJSON **out, bool *missing, lm_error *err) {
    char *data;
    size_t len;
    *out = NULL;
    lm_status st = read_file(path, CONFIG_MAX_BYTES, &data, &len, missing, err);
    if (st) return st;
    *out = cJSON_ParseWithLength(data, len);
    free(data);
    if (!*out) return lm_fail(err, LM_ERR_FORMAT, "%s is not valid JSON", path);
    if (!cJSON_IsObject(*out)) {
        cJSON_Delete(*out);
        *out = NULL;
        return lm_fail(err, LM_ERR_FORMAT, "%s: expected a JSON object", path);
    }
    return LM_OK;
}

lm_status lm_chat_template_load_dir(const char *dir, lm_chat_template **out, char **bos, char **eos,
                                    lm_error *err) {
    *out = NULL;
    if (bos) *bos = NULL;
    if (eos) *eos = NULL;
    char path[4096];
    bool is_gguf = false;
    lm_status located = lm_gguf_locate(dir, &is_gguf, path, sizeof path, err);
    if (located != LM_OK) return located;
    if (is_gguf) { /* the template of a GGUF model's metadata (text/tokenizer_gguf.c) */
        lm_gguf *g;
        lm_status gs = lm_gguf_open(path, LM_LOAD_MMAP, &g, err);
        if (gs != LM_OK) return gs;
        gs = lm_chat_template_from_gguf(g, out, bos, eos, err);
        lm_gguf_close(g);
        return gs;
    }
    cJSON *tok_cfg = NULL;
    bool missing;
    struct stat dir_stat;
    if (stat(dir, &dir_stat) != 0)
        return lm_fail(err, LM_ERR_IO, "cannot open model folder %s: %s", dir, strerror(errno));
    if (!S_ISDIR(dir_stat.st_mode)) return lm_fail(err, LM_ERR_IO, "%s is not a folder", dir);
    snprintf(path, sizeof path, "%s/tokenizer_config.json", dir);
    lm_status st = parse_json_file(path, &tok_cfg, &missing, err);
    if (st && !missing) return st;

    char *source = NULL;
    size_t source_len = 0;
    snprintf(path, sizeof path, "%s/chat_template.jinja", dir);
    st = read_file(path, (size_t)1 << 20, &source, &source_len, &missing, err);
    if (st && !missing) goto done;
    if (st) { /* chat_template.json (processor folders), then tokenizer_config.json */
        cJSON *cfg = NULL;
        snprintf(path, sizeof path, "%s/chat_template.json", dir);
        st = parse_json_file(path, &cfg, &missing, err);
        if (st && !missing) goto done;
        st = LM_OK;
        const cJSON *from = cfg ? cfg : tok_cfg;
        const char *text = NULL;
        if (from) {
            snprintf(path, sizeof path, "%s/%s", dir,
                     cfg ? "chat_template.json" : "tokenizer_config.json");
            st = template_from_config(from, path, &text, err);
        }
        if (!st && !text && cfg &&
            tok_cfg) { /* chat_template.json without one: try the tokenizer's */
            snprintf(path, sizeof path, "%s/tokenizer_config.json", dir);
            st = template_from_config(tok_cfg, path, &text, err);
        }
        if (!st && !text)
            st = lm_fail(err, LM_ERR_FORMAT,
                         "%s has no chat template (chat_template.jinja or tokenizer_config.json)",
                         dir);
        if (!st) {
            source_len = strlen(text);
            source = strdup(text);
            if (!source) st = lm_fail(err, LM_ERR_NOMEM, "out of memory");
        }
        cJSON_Delete(cfg);
        if (st) goto done;
    }
    st = lm_chat_template_compile(source, source_len, out, err);
    if (st) {
        lm_fail_context(err, "%s", dir);
        goto done;
    }
    const char *b = tok_cfg ? token_text(tok_cfg, "bos_token") : NULL;
    const char *e = tok_cfg ? token_text(tok_cfg, "eos_token") : NULL;
    st = lm_chat_template_set_special_tokens(*out, b, e, err);
    if (!st && bos) st = dup_opt(b, bos, err);
    if (!st && eos) st = dup_opt(e, eos, err);
    if (st) {
        lm_chat_template_free(*out);
        *out = NULL;
        if (bos) free(*bos), *bos = NULL;
        if (eos) free(*eos), *eos = NULL;
    }
done:
    free(source);
    cJSON_Delete(tok_cfg);
    return st;
}
