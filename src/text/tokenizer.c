/* Loading tokenizer.json into an lm_tokenizer, and the small accessors. */
#include <cjson/cJSON.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "text/byte_level.h"
#include "text/tokenizer_internal.h"
#include "text/tokenizer_gguf.h"

static const cJSON *get(const cJSON *obj, const char *key) {
    return cJSON_GetObjectItemCaseSensitive(obj, key);
}

static bool get_bool(const cJSON *obj, const char *key, bool dflt) {
    const cJSON *v = get(obj, key);
    return cJSON_IsBool(v) ? cJSON_IsTrue(v) : dflt;
}

/* An integer id in [0, LM_TOKENIZER_MAX_IDS). */
static bool json_id(const cJSON *v, int32_t *id) {
    if (!cJSON_IsNumber(v)) return false;
    double d = v->valuedouble;
    if (!(d >= 0 && d < (double)LM_TOKENIZER_MAX_IDS) || d != (double)(int32_t)d) return false;
    *id = (int32_t)d;
    return true;
}

/* ---- model (BPE) ---- */

static lm_status check_model_options(const cJSON *model, lm_error *err) {
    const cJSON *type = get(model, "type");
    if (type && !(cJSON_IsString(type) && strcmp(type->valuestring, "BPE") == 0))
        return lm_fail(err, LM_ERR_UNSUPPORTED, "unsupported model type \"%.64s\" (loom has BPE)",
                       cJSON_IsString(type) ? type->valuestring : "?");
    const char *empty_ok[] = {"continuing_subword_prefix", "end_of_word_suffix"};
    for (size_t i = 0; i < 2; i++) {
        const cJSON *v = get(model, empty_ok[i]);
        if (v && !cJSON_IsNull(v) && !(cJSON_IsString(v) && v->valuestring[0] == '\0'))
            return lm_fail(err, LM_ERR_UNSUPPORTED, "BPE with a %s is not supported", empty_ok[i]);
    }
    const cJSON *dropout = get(model, "dropout");
    if (dropout && !cJSON_IsNull(dropout) && !(cJSON_IsNumber(dropout) && dropout->valuedouble == 0))
        return lm_fail(err, LM_ERR_UNSUPPORTED, "BPE dropout is not supported");
    return LM_OK;
}

static lm_status load_vocab(lm_tokenizer *tok, const cJSON *vocab, int32_t *max_id, lm_error *err) {
    if (!cJSON_IsObject(vocab)) return lm_fail(err, LM_ERR_FORMAT, "model.vocab is not an object");
    size_t count = (size_t)cJSON_GetArraySize(vocab);
    lm_status st = lm_str_map_init(&tok->vocab, count, err);
    if (st != LM_OK) return st;
    const cJSON *item;
    cJSON_ArrayForEach(item, vocab) {
        int32_t id;
        if (!json_id(item, &id))
            return lm_fail(err, LM_ERR_FORMAT, "model.vocab[\"%.64s\"] is not an id in [0, %d)", item->string,
                           LM_TOKENIZER_MAX_IDS);
        st = lm_str_map_put(&tok->vocab, item->string, strlen(item->string), id, err);
        if (st != LM_OK) return st;
        if (id > *max_id) *max_id = id;
    }
    return LM_OK;
}

static lm_status load_merges(lm_tokenizer *tok, const cJSON *merges, lm_error *err) {
    if (!merges || cJSON_IsNull(merges)) merges = NULL;
    else if (!cJSON_IsArray(merges)) return lm_fail(err, LM_ERR_FORMAT, "model.merges is not an array");
    size_t count = merges ? (size_t)cJSON_GetArraySize(merges) : 0;
    lm_status st = lm_merge_map_init(&tok->bpe.merges, count, err);
    if (st != LM_OK || !merges) return st;
    lm_text_buf joined = {0};
    uint32_t rank = 0;
    const cJSON *item;
    cJSON_ArrayForEach(item, merges) {
        /* "a b" (one space) or ["a", "b"]. */
        const char *a, *b;
        size_t a_len, b_len;
        if (cJSON_IsString(item)) {
            a = item->valuestring;
            const char *space = strchr(a, ' ');
            if (!space || strchr(space + 1, ' ')) {
                st = lm_fail(err, LM_ERR_FORMAT, "merge %u \"%.64s\" is not two tokens separated by one space", rank, a);
                break;
            }
            a_len = (size_t)(space - a);
            b = space + 1;
            b_len = strlen(b);
        } else if (cJSON_IsArray(item) && cJSON_GetArraySize(item) == 2 && cJSON_IsString(item->child) &&
                   cJSON_IsString(item->child->next)) {
            a = item->child->valuestring;
            b = item->child->next->valuestring;
            a_len = strlen(a);
            b_len = strlen(b);
        } else {
            st = lm_fail(err, LM_ERR_FORMAT, "merge %u is neither \"a b\" nor [\"a\", \"b\"]", rank);
            break;
        }
        int32_t left = lm_str_map_get(&tok->vocab, a, a_len), right = lm_str_map_get(&tok->vocab, b, b_len);
        joined.n = 0;
        if (!lm_text_buf_append(&joined, a, a_len) || !lm_text_buf_append(&joined, b, b_len)) {
            st = lm_fail(err, LM_ERR_NOMEM, "out of memory reading merges");
            break;
        }
        int32_t merged = lm_str_map_get(&tok->vocab, joined.p, joined.n);
        if (left < 0 || right < 0 || merged < 0) {
            st = lm_fail(err, LM_ERR_FORMAT, "merge %u (\"%.*s\" + \"%.*s\"): %s is not in the vocabulary", rank,
                         (int)(a_len > 64 ? 64 : a_len), a, (int)(b_len > 64 ? 64 : b_len), b,
                         left < 0 ? "the left token" : right < 0 ? "the right token" : "the merged token");
            break;
        }
        lm_merge_map_put(&tok->bpe.merges, left, right, rank, merged);
        rank++;
    }
    lm_text_buf_free(&joined);
    return st;
}

/* ---- added tokens ---- */

static lm_status load_added(lm_tokenizer *tok, const cJSON *list, int32_t *max_id, lm_error *err) {
    if (!list || cJSON_IsNull(list)) return lm_str_map_init(&tok->added_map, 0, err);
    if (!cJSON_IsArray(list)) return lm_fail(err, LM_ERR_FORMAT, "added_tokens is not an array");
    size_t count = (size_t)cJSON_GetArraySize(list);
    lm_status st = lm_str_map_init(&tok->added_map, count, err);
    if (st != LM_OK) return st;
    tok->added = calloc(count ? count : 1, sizeof *tok->added);
    if (!tok->added) return lm_fail(err, LM_ERR_NOMEM, "out of memory for %zu added tokens", count);
    const cJSON *item;
    size_t index = 0;
    cJSON_ArrayForEach(item, list) {
        const cJSON *content = get(item, "content");
        int32_t id;
        if (!cJSON_IsString(content) || !json_id(get(item, "id"), &id))
            return lm_fail(err, LM_ERR_FORMAT, "added_tokens[%zu] needs a string \"content\" and an id in [0, %d)",
                           index, LM_TOKENIZER_MAX_IDS);
        index++;
        if (content->valuestring[0] == '\0') continue; /* the library ignores empty added tokens */
        lm_added_token *t = &tok->added[tok->n_added];
        t->len = strlen(content->valuestring);
        t->content = strdup(content->valuestring);
        if (!t->content) return lm_fail(err, LM_ERR_NOMEM, "out of memory for added tokens");
        tok->n_added++;
        t->id = id;
        t->special = get_bool(item, "special", false);
        t->normalized = get_bool(item, "normalized", !t->special);
        t->lstrip = get_bool(item, "lstrip", false);
        t->rstrip = get_bool(item, "rstrip", false);
        t->single_word = get_bool(item, "single_word", false);
        st = lm_str_map_put(&tok->added_map, t->content, t->len, id, err);
        if (st != LM_OK) return st;
        if (id > *max_id) *max_id = id;
    }
    return LM_OK;
}

/* Normalized tokens are searched for in their normalised form. */
static lm_status normalize_added(lm_tokenizer *tok, lm_error *err) {
    lm_normalize_scratch scratch = {0};
    lm_status st = LM_OK;
    for (size_t i = 0; i < tok->n_added && st == LM_OK; i++) {
        lm_added_token *t = &tok->added[i];
        const char *norm = t->content;
        size_t norm_len = t->len;
        if (t->normalized) {
            if (lm_utf8_valid_prefix((const uint8_t *)t->content, t->len) != t->len) {
                st = lm_fail(err, LM_ERR_FORMAT, "added token %d is not valid UTF-8", t->id);
                break;
            }
            st = lm_normalize(&tok->normalizer, t->content, t->len, &scratch, &norm, &norm_len, err);
        }
        if (st != LM_OK) break;
        t->match = malloc(norm_len + 1);
        if (!t->match) {
            st = lm_fail(err, LM_ERR_NOMEM, "out of memory for added tokens");
            break;
        }
        memcpy(t->match, norm, norm_len);
        t->match[norm_len] = '\0';
        t->match_len = norm_len;
    }
    lm_normalize_scratch_free(&scratch);
    return st;
}

typedef struct {
    const lm_added_token *added;
} sort_ctx;

static int compare_added(const void *pa, const void *pb, void *arg) {
    const lm_added_token *added = ((const sort_ctx *)arg)->added;
    const lm_added_token *a = &added[*(const uint32_t *)pa], *b = &added[*(const uint32_t *)pb];
    uint8_t fa = (uint8_t)a->match[0], fb = (uint8_t)b->match[0];
    if (fa != fb) return fa < fb ? -1 : 1;
    if (a->match_len != b->match_len) return a->match_len > b->match_len ? -1 : 1; /* longest first */
    uint32_t ia = *(const uint32_t *)pa, ib = *(const uint32_t *)pb;
    return ia < ib ? -1 : ia > ib;
}

static lm_status build_matcher(lm_tokenizer *tok, lm_added_matcher *m, bool normalized, lm_error *err) {
    m->order = malloc((tok->n_added ? tok->n_added : 1) * sizeof *m->order);
    if (!m->order) return lm_fail(err, LM_ERR_NOMEM, "out of memory for added tokens");
    m->n = 0;
    for (size_t i = 0; i < tok->n_added; i++)
        if (tok->added[i].normalized == normalized && tok->added[i].match_len > 0) m->order[m->n++] = (uint32_t)i;
    sort_ctx ctx = {tok->added};
    qsort_r(m->order, m->n, sizeof *m->order, compare_added, &ctx);
    size_t k = 0;
    for (unsigned b = 0; b < 256; b++) {
        m->first[b] = (uint32_t)k;
        while (k < m->n && (uint8_t)tok->added[m->order[k]].match[0] == b) k++;
    }
    m->first[256] = (uint32_t)k;
    return LM_OK;
}

/* ---- per-id tables ---- */

/* What the ByteLevel decoder makes of one token's text: its bytes when every
 * character is in the byte alphabet, else the text unchanged. */
static lm_status append_decoded(lm_text_buf *blob, const char *text, size_t len, lm_span *span, lm_error *err) {
    if (!lm_text_buf_reserve(blob, len) || blob->n > UINT32_MAX - len)
        return lm_fail(err, LM_ERR_NOMEM, "out of memory for the decode table");
    long n = lm_byte_level_decode(text, len, (uint8_t *)blob->p + blob->n);
    if (n < 0) {
        memcpy(blob->p + blob->n, text, len);
        n = (long)len;
    }
    span->off = (uint32_t)blob->n;
    span->len = (uint32_t)n;
    blob->n += (size_t)n;
    return LM_OK;
}

static lm_status build_id_tables(lm_tokenizer *tok, int32_t max_id, lm_error *err) {
    tok->n_ids = max_id + 1;
    size_t n = (size_t)tok->n_ids;
    tok->token_text = calloc(n, sizeof *tok->token_text);
    tok->token_bytes = calloc(n, sizeof *tok->token_bytes);
    tok->flags = calloc(n, 1);
    if (!tok->token_text || !tok->token_bytes || !tok->flags)
        return lm_fail(err, LM_ERR_NOMEM, "out of memory for %zu token ids", n);
    for (size_t i = 0; i < tok->vocab.n; i++) {
        const lm_str_entry *e = &tok->vocab.entries[i];
        tok->token_text[e->id] = tok->vocab.blob + e->off;
    }
    for (size_t i = 0; i < tok->n_added; i++) {
        const lm_added_token *t = &tok->added[i];
        tok->token_text[t->id] = t->content;
        tok->flags[t->id] = LM_TOKEN_ADDED | (t->special ? LM_TOKEN_SPECIAL : 0);
    }
    lm_text_buf blob = {0};
    for (size_t id = 0; id < n; id++) {
        if (!tok->token_text[id]) continue;
        lm_status st = append_decoded(&blob, tok->token_text[id], strlen(tok->token_text[id]), &tok->token_bytes[id], err);
        if (st != LM_OK) {
            lm_text_buf_free(&blob);
            return st;
        }
        if (tok->token_bytes[id].len > tok->max_token_bytes) tok->max_token_bytes = tok->token_bytes[id].len;
    }
    tok->decode_blob = blob.p ? blob.p : calloc(1, 1);
    if (!tok->decode_blob) return lm_fail(err, LM_ERR_NOMEM, "out of memory");
    return LM_OK;
}

static lm_status build_byte_table(lm_tokenizer *tok, const cJSON *model, lm_error *err) {
    lm_bpe *bpe = &tok->bpe;
    bpe->unk_id = -1;
    const cJSON *unk = get(model, "unk_token");
    if (cJSON_IsString(unk)) bpe->unk_id = lm_str_map_get(&tok->vocab, unk->valuestring, strlen(unk->valuestring));
    bpe->fuse_unk = get_bool(model, "fuse_unk", false);
    bool byte_fallback = get_bool(model, "byte_fallback", false);
    for (unsigned b = 0; b < 256; b++) {
        char text[8];
        uint8_t byte = (uint8_t)b;
        size_t len = lm_byte_level_encode(&byte, 1, text);
        bpe->byte_to_id[b] = lm_str_map_get(&tok->vocab, text, len);
        if (bpe->byte_to_id[b] < 0 && byte_fallback) {
            snprintf(text, sizeof text, "<0x%02X>", b);
            bpe->byte_to_id[b] = lm_str_map_get(&tok->vocab, text, strlen(text));
        }
    }
    bpe->ignore_merges = get_bool(model, "ignore_merges", false);
    if (bpe->ignore_merges) {
        /* Look-ups by a piece's raw bytes need the vocabulary keyed by bytes. */
        lm_status st = lm_str_map_init(&tok->vocab_bytes, tok->vocab.n, err);
        if (st != LM_OK) return st;
        uint8_t *buf = NULL;
        for (size_t i = 0; i < tok->vocab.n && st == LM_OK; i++) {
            const lm_str_entry *e = &tok->vocab.entries[i];
            uint8_t *nb = realloc(buf, e->len + 1);
            if (!nb) {
                st = lm_fail(err, LM_ERR_NOMEM, "out of memory");
                break;
            }
            buf = nb;
            long n = lm_byte_level_decode(tok->vocab.blob + e->off, e->len, buf);
            if (n >= 0) st = lm_str_map_put(&tok->vocab_bytes, (const char *)buf, (size_t)n, e->id, err);
        }
        free(buf);
        if (st != LM_OK) return st;
        bpe->vocab_by_bytes = &tok->vocab_bytes;
    }
    return LM_OK;
}

/* ---- decoder and post-processor ---- */

static lm_status check_decoder(const cJSON *dec, lm_error *err) {
    const cJSON *type = get(dec, "type");
    if (!cJSON_IsString(type)) return lm_fail(err, LM_ERR_UNSUPPORTED, "a tokenizer without a ByteLevel decoder is not supported");
    if (strcmp(type->valuestring, "ByteLevel") == 0) return LM_OK;
    if (strcmp(type->valuestring, "Sequence") == 0) {
        const cJSON *list = get(dec, "decoders"), *item;
        if (!cJSON_IsArray(list) || cJSON_GetArraySize(list) == 0)
            return lm_fail(err, LM_ERR_FORMAT, "Sequence decoder has no \"decoders\"");
        cJSON_ArrayForEach(item, list) {
            lm_status st = check_decoder(item, err);
            if (st != LM_OK) return st;
        }
        return LM_OK;
    }
    return lm_fail(err, LM_ERR_UNSUPPORTED, "unsupported decoder \"%.64s\" (loom has ByteLevel)", type->valuestring);
}

static lm_status push_id(int32_t **ids, size_t *n, int32_t id, lm_error *err) {
    if (*n >= 64) return lm_fail(err, LM_ERR_UNSUPPORTED, "post-processor template adds more than 64 tokens");
    int32_t *v = realloc(*ids, (*n + 1) * sizeof *v);
    if (!v) return lm_fail(err, LM_ERR_NOMEM, "out of memory");
    v[(*n)++] = id;
    *ids = v;
    return LM_OK;
}

static lm_status parse_template(lm_tokenizer *tok, const cJSON *pp, lm_error *err) {
    const cJSON *single = get(pp, "single"), *specials = get(pp, "special_tokens"), *piece;
    if (!cJSON_IsArray(single)) return lm_fail(err, LM_ERR_FORMAT, "TemplateProcessing has no \"single\" list");
    bool after = false;
    tok->n_prefix = tok->n_suffix = 0;
    cJSON_ArrayForEach(piece, single) {
        if (get(piece, "Sequence")) {
            after = true;
            continue;
        }
        const cJSON *name = get(get(piece, "SpecialToken"), "id");
        if (!cJSON_IsString(name)) return lm_fail(err, LM_ERR_FORMAT, "TemplateProcessing piece is neither Sequence nor SpecialToken");
        const cJSON *ids = get(get(specials, name->valuestring), "ids"), *idv;
        if (!cJSON_IsArray(ids))
            return lm_fail(err, LM_ERR_FORMAT, "TemplateProcessing special token \"%.64s\" has no ids", name->valuestring);
        cJSON_ArrayForEach(idv, ids) {
            int32_t id;
            if (!json_id(idv, &id)) return lm_fail(err, LM_ERR_FORMAT, "TemplateProcessing id is not a valid id");
            lm_status st = after ? push_id(&tok->suffix_ids, &tok->n_suffix, id, err)
                                 : push_id(&tok->prefix_ids, &tok->n_prefix, id, err);
            if (st != LM_OK) return st;
        }
    }
    return LM_OK;
}

static lm_status parse_post_processor(lm_tokenizer *tok, const cJSON *pp, lm_error *err) {
    if (!pp || cJSON_IsNull(pp)) return LM_OK;
    const cJSON *type = get(pp, "type");
    if (!cJSON_IsString(type)) return lm_fail(err, LM_ERR_FORMAT, "post_processor has no \"type\"");
    const char *t = type->valuestring;
    if (strcmp(t, "ByteLevel") == 0) return LM_OK; /* only adjusts offsets */
    if (strcmp(t, "TemplateProcessing") == 0) return parse_template(tok, pp, err);
    if (strcmp(t, "Sequence") == 0) {
        const cJSON *list = get(pp, "processors"), *item;
        if (!cJSON_IsArray(list)) return lm_fail(err, LM_ERR_FORMAT, "Sequence post_processor has no \"processors\"");
        cJSON_ArrayForEach(item, list) {
            lm_status st = parse_post_processor(tok, item, err);
            if (st != LM_OK) return st;
        }
        return LM_OK;
    }
    if (strcmp(t, "RobertaProcessing") == 0 || strcmp(t, "BertProcessing") == 0) {
        /* "cls": ["<s>", 0], "sep": ["</s>", 2]: single = cls A sep. */
        int32_t cls, sep;
        const cJSON *c = get(pp, "cls"), *s = get(pp, "sep");
        if (!cJSON_IsArray(c) || !cJSON_IsArray(s) || !json_id(cJSON_GetArrayItem(c, 1), &cls) ||
            !json_id(cJSON_GetArrayItem(s, 1), &sep))
            return lm_fail(err, LM_ERR_FORMAT, "%s needs \"cls\" and \"sep\" as [token, id]", t);
        tok->n_prefix = tok->n_suffix = 0;
        lm_status st = push_id(&tok->prefix_ids, &tok->n_prefix, cls, err);
        return st != LM_OK ? st : push_id(&tok->suffix_ids, &tok->n_suffix, sep, err);
    }
    return lm_fail(err, LM_ERR_UNSUPPORTED, "unsupported post_processor \"%.64s\"", t);
}

/* ---- loading ---- */

static lm_status load_root(lm_tokenizer *tok, const cJSON *root, lm_error *err) {
    if (!cJSON_IsObject(root)) return lm_fail(err, LM_ERR_FORMAT, "tokenizer.json is not a JSON object");
    const cJSON *model = get(root, "model");
    if (!cJSON_IsObject(model)) return lm_fail(err, LM_ERR_FORMAT, "tokenizer.json has no \"model\" object");
    lm_status st = check_model_options(model, err);
    if (st != LM_OK) return st;
    st = lm_normalizer_parse(get(root, "normalizer"), &tok->normalizer, err);
    if (st != LM_OK) return st;
    st = lm_pretokenizer_parse(get(root, "pre_tokenizer"), &tok->pretok, err);
    if (st != LM_OK) return st;
    if (!tok->pretok.byte_level)
        return lm_fail(err, LM_ERR_UNSUPPORTED, "BPE without a ByteLevel pre_tokenizer is not supported (loom does byte-level BPE)");
    st = check_decoder(get(root, "decoder"), err);
    if (st != LM_OK) return st;
    int32_t max_id = -1;
    st = load_vocab(tok, get(model, "vocab"), &max_id, err);
    if (st != LM_OK) return st;
    st = load_added(tok, get(root, "added_tokens"), &max_id, err);
    if (st != LM_OK) return st;
    if (max_id < 0) return lm_fail(err, LM_ERR_FORMAT, "tokenizer.json has no tokens");
    st = load_merges(tok, get(model, "merges"), err);
    if (st != LM_OK) return st;
    st = build_byte_table(tok, model, err);
    if (st != LM_OK) return st;
    st = build_id_tables(tok, max_id, err);
    if (st != LM_OK) return st;
    st = normalize_added(tok, err);
    if (st != LM_OK) return st;
    st = build_matcher(tok, &tok->raw_matcher, false, err);
    if (st != LM_OK) return st;
    st = build_matcher(tok, &tok->norm_matcher, true, err);
    if (st != LM_OK) return st;
    return parse_post_processor(tok, get(root, "post_processor"), err);
}

lm_status lm_tokenizer_load_json(const char *json, size_t len, lm_tokenizer **out, lm_error *err) {
    *out = NULL;
    lm_tokenizer *tok = calloc(1, sizeof *tok);
    if (!tok) return lm_fail(err, LM_ERR_NOMEM, "out of memory");
    tok->bos_id = tok->eos_id = tok->pad_id = -1;
    cJSON *root = cJSON_ParseWithLength(json, len);
    lm_status st = root ? load_root(tok, root, err) : lm_fail(err, LM_ERR_FORMAT, "tokenizer.json is not valid JSON");
    cJSON_Delete(root);
    if (st != LM_OK) {
        lm_tokenizer_free(tok);
        return st;
    }
    *out = tok;
    return LM_OK;
}

lm_status lm_tokenizer_load_json_file(const char *path, lm_tokenizer **out, lm_error *err) {
    char *data;
    size_t len;
    *out = NULL;
    lm_status st = lm_tokenizer_read_file(path, LM_TOKENIZER_FILE_MAX, &data, &len, err);
    if (st != LM_OK) return st;
    st = lm_tokenizer_load_json(data, len, out, err);
    free(data);
    if (st != LM_OK) return lm_fail_context(err, "%s", path);
    return LM_OK;
}

/* A GGUF model's tokenizer, from its metadata (text/tokenizer_gguf.c). */
static lm_status load_from_gguf(const char *path, lm_tokenizer **out, lm_error *err) {
    lm_gguf *g;
    lm_status st = lm_gguf_open(path, LM_LOAD_MMAP, &g, err);
    if (st != LM_OK) return st;
    st = lm_tokenizer_from_gguf(g, out, err);
    lm_gguf_close(g);
    return st;
}

lm_status lm_tokenizer_load(const char *dir, lm_tokenizer **out, lm_error *err) {
    char path[4096];
    *out = NULL;
    bool is_gguf = false;
    lm_status located = lm_gguf_locate(dir, &is_gguf, path, sizeof path, err);
    if (located != LM_OK) return located;
    if (is_gguf) return load_from_gguf(path, out, err);
    int n = snprintf(path, sizeof path, "%s/tokenizer.json", dir);
    if (n < 0 || (size_t)n >= sizeof path) return lm_fail(err, LM_ERR_INVALID, "path too long: %s", dir);
    lm_tokenizer *tok;
    lm_status st = lm_tokenizer_load_json_file(path, &tok, err);
    if (st != LM_OK) return st;
    st = lm_tokenizer_config_load(dir, &tok->config, err);
    if (st != LM_OK) {
        lm_tokenizer_free(tok);
        return st;
    }
    if (tok->config.bos_token) tok->bos_id = lm_tokenizer_token_to_id(tok, tok->config.bos_token);
    if (tok->config.eos_token) tok->eos_id = lm_tokenizer_token_to_id(tok, tok->config.eos_token);
    if (tok->config.pad_token) tok->pad_id = lm_tokenizer_token_to_id(tok, tok->config.pad_token);
    *out = tok;
    return LM_OK;
}

void lm_tokenizer_free(lm_tokenizer *tok) {
    if (!tok) return;
    lm_merge_map_free(&tok->bpe.merges);
    lm_str_map_free(&tok->vocab);
    lm_str_map_free(&tok->vocab_bytes);
    lm_str_map_free(&tok->added_map);
    free(tok->token_text);
    free(tok->token_bytes);
    free(tok->decode_blob);
    free(tok->flags);
    for (size_t i = 0; i < tok->n_added; i++) {
        free(tok->added[i].content);
        free(tok->added[i].match);
    }
    free(tok->added);
    free(tok->raw_matcher.order);
    free(tok->norm_matcher.order);
    lm_pretokenizer_free(&tok->pretok);
    free(tok->prefix_ids);
    free(tok->suffix_ids);
    lm_tokenizer_config_free(&tok->config);
    free(tok);
}

/* ---- accessors ---- */

int lm_tokenizer_vocab_size(const lm_tokenizer *tok) { return tok->n_ids; }

const char *lm_tokenizer_id_to_token(const lm_tokenizer *tok, int32_t id) {
    return id >= 0 && id < tok->n_ids ? tok->token_text[id] : NULL;
}

int32_t lm_tokenizer_token_to_id(const lm_tokenizer *tok, const char *s) {
    size_t len = strlen(s);
    int32_t id = lm_str_map_get(&tok->added_map, s, len);
    return id >= 0 ? id : lm_str_map_get(&tok->vocab, s, len);
}

const char *lm_tokenizer_token_bytes(const lm_tokenizer *tok, int32_t id, size_t *len) {
    if (id < 0 || id >= tok->n_ids || !tok->token_text[id]) return NULL;
    *len = tok->token_bytes[id].len;
    return tok->decode_blob + tok->token_bytes[id].off;
}

size_t lm_tokenizer_max_token_bytes(const lm_tokenizer *tok) { return tok->max_token_bytes; }

size_t lm_tokenizer_min_tokens(const lm_tokenizer *tok, size_t text_bytes) {
    /* Normalisation can shrink text: NFC composes three Hangul jamo (9
     * bytes) into one syllable (3), so a third is the floor; 4 leaves room. */
    size_t per = tok->max_token_bytes ? tok->max_token_bytes * 4 : 1;
    return text_bytes / per;
}

bool lm_tokenizer_is_special(const lm_tokenizer *tok, int32_t id) {
    return id >= 0 && id < tok->n_ids && (tok->flags[id] & LM_TOKEN_SPECIAL);
}

bool lm_tokenizer_is_added(const lm_tokenizer *tok, int32_t id) {
    return id >= 0 && id < tok->n_ids && (tok->flags[id] & LM_TOKEN_ADDED);
}

const char *lm_tokenizer_chat_template(const lm_tokenizer *tok) { return tok->config.chat_template; }
const char *lm_tokenizer_eos_token(const lm_tokenizer *tok) { return tok->config.eos_token; }
const char *lm_tokenizer_bos_token(const lm_tokenizer *tok) { return tok->config.bos_token; }
const char *lm_tokenizer_pad_token(const lm_tokenizer *tok) { return tok->config.pad_token; }
int32_t lm_tokenizer_eos_id(const lm_tokenizer *tok) { return tok->eos_id; }
int32_t lm_tokenizer_bos_id(const lm_tokenizer *tok) { return tok->bos_id; }
int32_t lm_tokenizer_pad_id(const lm_tokenizer *tok) { return tok->pad_id; }
bool lm_tokenizer_add_bos(const lm_tokenizer *tok) { return tok->config.add_bos_token && tok->bos_id >= 0; }
