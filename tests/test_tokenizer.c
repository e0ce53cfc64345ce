/* Tests of the tokenizer against the Rust tokenizers library's reference
 * outputs (fixtures/tokenizers/qwen3: encode_cases.json, chat_cases.json),
 * the fixture model folders, and invariants: streaming detokenization equals
 * one-shot decoding, the NFC fast path equals utf8proc, split behaviours
 * follow the library's own tests, concurrent encodes agree. */
#include <cjson/cJSON.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <utf8proc.h>

#include "harness.h"
#include "text/byte_level.h"
#include "text/detokenizer.h"
#include "text/normalize.h"
#include "text/pretokenize.h"
#include "text/tokenizer.h"
#include "text/tokenizer_config.h"

static lm_tokenizer *qwen3; /* the real Qwen3 tokenizer, loaded once */

static cJSON *load_json_fixture(const char *relative) {
    char path[1024];
    test_fixture_path(path, sizeof path, relative);
    char *data;
    size_t len;
    lm_error err;
    if (lm_tokenizer_read_file(path, (size_t)64 << 20, &data, &len, &err) != LM_OK) return NULL;
    cJSON *json = cJSON_ParseWithLength(data, len);
    free(data);
    return json;
}

/* ids of a JSON array; returns the count, -1 on a bad array. */
static long json_ids(const cJSON *arr, int32_t *out, size_t cap) {
    const cJSON *v;
    size_t n = 0;
    cJSON_ArrayForEach(v, arr) {
        if (!cJSON_IsNumber(v) || n == cap) return -1;
        out[n++] = (int32_t)v->valuedouble;
    }
    return (long)n;
}

static bool same_ids(const int32_t *a, size_t na, const int32_t *b, size_t nb) {
    return na == nb && (na == 0 || memcmp(a, b, na * sizeof *a) == 0);
}

/* Joins what the incremental detokenizer returns for ids. */
static bool stream_decode(const lm_tokenizer *tok, const int32_t *ids, size_t n, bool skip, lm_text_buf *out) {
    lm_detokenizer d;
    lm_detokenizer_init(&d, tok, skip);
    lm_error err;
    out->n = 0;
    bool ok = true;
    for (size_t i = 0; i <= n && ok; i++) {
        const char *piece;
        size_t len;
        lm_status st = i < n ? lm_detokenizer_push(&d, ids[i], &piece, &len, &err)
                             : lm_detokenizer_finish(&d, &piece, &len, &err);
        ok = st == LM_OK && lm_text_buf_append(out, piece, len);
        /* Never half a character: every piece on its own is valid UTF-8. */
        ok = ok && lm_utf8_valid_prefix((const uint8_t *)piece, len) == len;
    }
    lm_detokenizer_free(&d);
    return ok;
}

static void test_encode_cases(void) {
    cJSON *cases = load_json_fixture("tokenizers/qwen3/encode_cases.json");
    CHECK_MSG(cJSON_IsArray(cases), "cannot read encode_cases.json");
    int count = 0;
    const cJSON *c;
    lm_text_buf streamed = {0};
    cJSON_ArrayForEach(c, cases) {
        const char *text = cJSON_GetObjectItem(c, "text")->valuestring;
        const char *decoded = cJSON_GetObjectItem(c, "decoded")->valuestring;
        int32_t want[1024];
        long n_want = json_ids(cJSON_GetObjectItem(c, "ids"), want, 1024);
        int32_t *ids;
        size_t n;
        lm_error err;
        CHECK_OK(lm_tokenizer_encode(qwen3, text, strlen(text), false, &ids, &n, &err), &err);
        bool ok = n_want >= 0 && same_ids(ids, n, want, (size_t)n_want);
        if (!ok) {
            fprintf(stderr, "  text %s: got", text);
            for (size_t i = 0; i < n; i++) fprintf(stderr, " %d", ids[i]);
            fprintf(stderr, "\n");
        }
        char *back;
        size_t back_len;
        lm_status st = lm_tokenizer_decode(qwen3, ids, n, false, &back, &back_len, &err);
        bool streamed_ok = stream_decode(qwen3, ids, n, false, &streamed);
        free(ids);
        CHECK_MSG(ok, "ids differ for case %d", count);
        CHECK_OK(st, &err);
        bool same = back_len == strlen(decoded) && memcmp(back, decoded, back_len) == 0;
        bool same_stream = streamed_ok && streamed.n == back_len && memcmp(streamed.p, back, back_len) == 0;
        free(back);
        CHECK_MSG(same, "decoded text differs for case %d (%s)", count, text);
        CHECK_MSG(same_stream, "streamed decode differs for case %d", count);
        count++;
    }
    lm_text_buf_free(&streamed);
    cJSON_Delete(cases);
    CHECK_MSG(count == 43, "expected 43 cases, ran %d", count);
}

static void test_chat_cases(void) {
    cJSON *cases = load_json_fixture("tokenizers/qwen3/chat_cases.json");
    CHECK_MSG(cJSON_IsArray(cases), "cannot read chat_cases.json");
    int count = 0;
    const cJSON *c;
    cJSON_ArrayForEach(c, cases) {
        const char *rendered = cJSON_GetObjectItem(c, "rendered")->valuestring;
        int32_t want[4096];
        long n_want = json_ids(cJSON_GetObjectItem(c, "ids"), want, 4096);
        int32_t *ids;
        size_t n;
        lm_error err;
        CHECK_OK(lm_tokenizer_encode(qwen3, rendered, strlen(rendered), false, &ids, &n, &err), &err);
        bool ok = n_want > 0 && same_ids(ids, n, want, (size_t)n_want);
        free(ids);
        CHECK_MSG(ok, "chat case %s: ids differ", cJSON_GetObjectItem(c, "name")->valuestring);
        count++;
    }
    cJSON_Delete(cases);
    CHECK(count == 7);
}

static void test_qwen3_config(void) {
    CHECK(lm_tokenizer_vocab_size(qwen3) == 151669);
    CHECK(lm_tokenizer_eos_id(qwen3) == 151645);
    CHECK(strcmp(lm_tokenizer_eos_token(qwen3), "<|im_end|>") == 0);
    CHECK(lm_tokenizer_pad_id(qwen3) == 151643);
    CHECK(lm_tokenizer_bos_token(qwen3) == NULL && lm_tokenizer_bos_id(qwen3) == -1);
    CHECK(!lm_tokenizer_add_bos(qwen3));
    const char *tpl = lm_tokenizer_chat_template(qwen3);
    CHECK(tpl && strncmp(tpl, "{%- if tools %}", 15) == 0);
    /* Special vs merely added (spec G.1: <think> is added, not special). */
    CHECK(lm_tokenizer_is_special(qwen3, 151644));
    CHECK(!lm_tokenizer_is_special(qwen3, 151667) && lm_tokenizer_is_added(qwen3, 151667));
    CHECK(!lm_tokenizer_is_special(qwen3, 198) && !lm_tokenizer_is_added(qwen3, 198));
    CHECK(lm_tokenizer_token_to_id(qwen3, "<think>") == 151667);
    CHECK(lm_tokenizer_token_to_id(qwen3, "Ċ") == 198);
    CHECK(lm_tokenizer_token_to_id(qwen3, "no such token, surely") == -1);
    CHECK(strcmp(lm_tokenizer_id_to_token(qwen3, 9707), "Hello") == 0);
    CHECK(strcmp(lm_tokenizer_id_to_token(qwen3, 1879), "Ġworld") == 0);
    CHECK(lm_tokenizer_id_to_token(qwen3, -1) == NULL && lm_tokenizer_id_to_token(qwen3, 151669) == NULL);
    size_t len;
    const char *bytes = lm_tokenizer_token_bytes(qwen3, 1879, &len);
    CHECK(bytes && len == 6 && memcmp(bytes, " world", 6) == 0);
}

static void test_skip_special(void) {
    const char *text = "<|im_start|>user\nhi<think>x</think><|im_end|>";
    int32_t *ids;
    size_t n;
    lm_error err;
    CHECK_OK(lm_tokenizer_encode(qwen3, text, strlen(text), false, &ids, &n, &err), &err);
    char *out;
    size_t len;
    lm_status st = lm_tokenizer_decode(qwen3, ids, n, true, &out, &len, &err);
    lm_text_buf streamed = {0};
    bool ok = stream_decode(qwen3, ids, n, true, &streamed);
    free(ids);
    CHECK_OK(st, &err);
    /* <|im_start|> and <|im_end|> are special; <think> is not. */
    bool same = strcmp(out, "user\nhi<think>x</think>") == 0;
    bool same_stream = ok && streamed.n == len && memcmp(streamed.p, out, len) == 0;
    free(out);
    lm_text_buf_free(&streamed);
    CHECK(same);
    CHECK(same_stream);
}

/* Every fixture tokenizer loads and knows its special tokens and config. */
static void test_fixture_models(void) {
    static const struct {
        const char *dir;
        int vocab;
        const char *eos;
        int32_t eos_id, pad_id;
    } models[] = {
        {"models/qwen35-dense", 1913, "<|im_end|>", 1902, 1900},
        {"models/qwen35-moe", 1913, "<|im_end|>", 1902, 1900},
        {"models/glm46v-moe", 1917, "<|endoftext|>", 1900, 1900},
    };
    for (size_t i = 0; i < sizeof models / sizeof models[0]; i++) {
        char dir[1024], path[1200];
        test_fixture_path(dir, sizeof dir, models[i].dir);
        lm_tokenizer *tok;
        lm_error err;
        CHECK_OK(lm_tokenizer_load(dir, &tok, &err), &err);
        bool ok = lm_tokenizer_vocab_size(tok) == models[i].vocab && lm_tokenizer_eos_id(tok) == models[i].eos_id &&
                  lm_tokenizer_pad_id(tok) == models[i].pad_id &&
                  strcmp(lm_tokenizer_eos_token(tok), models[i].eos) == 0;
        /* The template comes from chat_template.jinja. */
        snprintf(path, sizeof path, "%s/chat_template.jinja", dir);
        char *tpl = NULL;
        size_t tpl_len;
        lm_status st = lm_tokenizer_read_file(path, 1 << 20, &tpl, &tpl_len, &err);
        bool same_tpl = st == LM_OK && lm_tokenizer_chat_template(tok) &&
                        strcmp(lm_tokenizer_chat_template(tok), tpl) == 0;
        free(tpl);
        /* A round trip through encode and decode gives the text back. */
        const char *text = "<|endoftext|>Hello world, 123 fine\n\n  ok?";
        int32_t *ids;
        size_t n;
        char *back = NULL;
        size_t back_len = 0;
        st = lm_tokenizer_encode(tok, text, strlen(text), true, &ids, &n, &err);
        if (st == LM_OK) {
            st = lm_tokenizer_decode(tok, ids, n, false, &back, &back_len, &err);
            ok = ok && n > 1 && ids[0] == 1900;
            free(ids);
        }
        lm_tokenizer_free(tok);
        bool same = st == LM_OK && strcmp(back, text) == 0;
        free(back);
        CHECK_MSG(ok, "%s: vocabulary or special tokens wrong", models[i].dir);
        CHECK_MSG(same_tpl, "%s: chat template not loaded", models[i].dir);
        CHECK_MSG(same, "%s: round trip failed", models[i].dir);
    }
}

/* Merges written as "a b" strings give the same tokenizer as ["a", "b"] pairs. */
static void test_string_merges(void) {
    cJSON *root = load_json_fixture("models/qwen35-dense/tokenizer.json");
    CHECK(root);
    cJSON *merges = cJSON_GetObjectItem(cJSON_GetObjectItem(root, "model"), "merges");
    cJSON *strings = cJSON_CreateArray();
    const cJSON *pair;
    cJSON_ArrayForEach(pair, merges) {
        char joined[512];
        snprintf(joined, sizeof joined, "%s %s", pair->child->valuestring, pair->child->next->valuestring);
        cJSON_AddItemToArray(strings, cJSON_CreateString(joined));
    }
    cJSON_ReplaceItemInObject(cJSON_GetObjectItem(root, "model"), "merges", strings);
    char *json = cJSON_PrintUnformatted(root);
    cJSON_Delete(root);
    char dir[1024], path[1200];
    test_fixture_path(dir, sizeof dir, "models/qwen35-dense");
    snprintf(path, sizeof path, "%s/tokenizer.json", dir);
    lm_tokenizer *a = NULL, *b = NULL;
    lm_error err;
    lm_status st = lm_tokenizer_load_json(json, strlen(json), &a, &err);
    free(json);
    CHECK_OK(st, &err);
    st = lm_tokenizer_load_json_file(path, &b, &err);
    const char *text = "The merges of this tiny tokenizer, written two ways: it is the same.";
    int32_t *ia = NULL, *ib = NULL;
    size_t na = 0, nb = 0;
    if (st == LM_OK) st = lm_tokenizer_encode(a, text, strlen(text), false, &ia, &na, &err);
    if (st == LM_OK) st = lm_tokenizer_encode(b, text, strlen(text), false, &ib, &nb, &err);
    lm_tokenizer_free(a);
    lm_tokenizer_free(b);
    bool same = st == LM_OK && same_ids(ia, na, ib, nb) && na < strlen(text) / 2;
    free(ia);
    free(ib);
    CHECK_OK(st, &err);
    CHECK_MSG(same, "string merges encode differently (or merges unused: %zu ids)", na);
}

static void test_byte_level_table(void) {
    CHECK(lm_byte_level_char(' ') == 0x120 && lm_byte_level_char('\n') == 0x10A);
    CHECK(lm_byte_level_char('A') == 'A' && lm_byte_level_char(0xAD) == 0x143 && lm_byte_level_char(0x7F) == 0x121);
    bool seen[0x200] = {false};
    for (int b = 0; b < 256; b++) {
        uint32_t c = lm_byte_level_char((uint8_t)b);
        CHECK(c < 0x200 && !seen[c]);
        seen[c] = true;
        CHECK(lm_byte_level_byte(c) == b);
    }
    CHECK(lm_byte_level_byte(0x144) == -1 && lm_byte_level_byte(' ') == -1 && lm_byte_level_byte(0x4E00) == -1);
}

/* Rust's String::from_utf8_lossy on tricky byte strings. */
static void test_lossy_utf8(void) {
    static const struct {
        const char *in;
        size_t n;
        const char *out;
    } cases[] = {
        {"a\xC3", 2, "a\xEF\xBF\xBD"},
        {"\xF0\x9F\x98", 3, "\xEF\xBF\xBD"},
        {"\xE0\x80x", 3, "\xEF\xBF\xBD\xEF\xBF\xBDx"},
        {"\xED\xA0\x80", 3, "\xEF\xBF\xBD\xEF\xBF\xBD\xEF\xBF\xBD"},
        {"\xF4\x90\x80\x80", 4, "\xEF\xBF\xBD\xEF\xBF\xBD\xEF\xBF\xBD\xEF\xBF\xBD"},
        {"\xC0\xAF", 2, "\xEF\xBF\xBD\xEF\xBF\xBD"},
        {"\xF0\x9F\x98\x80!", 5, "\xF0\x9F\x98\x80!"},
        {"\xE4\xBD\xA0\xE4\xBD", 5, "\xE4\xBD\xA0\xEF\xBF\xBD"},
        {"\xE4\xBD\xE4\xBD\xA0", 5, "\xEF\xBF\xBD\xE4\xBD\xA0"},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        lm_text_buf out = {0};
        size_t consumed;
        CHECK(lm_utf8_lossy_append(&out, (const uint8_t *)cases[i].in, cases[i].n, true, &consumed));
        bool same = consumed == cases[i].n && out.n == strlen(cases[i].out) && memcmp(out.p, cases[i].out, out.n) == 0;
        lm_text_buf_free(&out);
        CHECK_MSG(same, "lossy case %zu", i);
    }
}

/* Streaming equals one-shot decoding on random ids, including single-byte
 * tokens that cut characters in half and special tokens between them. */
static void test_stream_random(void) {
    uint64_t state = 12345;
    lm_text_buf streamed = {0};
    int vocab = lm_tokenizer_vocab_size(qwen3);
    for (int round = 0; round < 300; round++) {
        int32_t ids[40];
        size_t n = (size_t)(round % 40);
        for (size_t i = 0; i < n; i++) {
            state = state * 6364136223846793005ull + 1442695040888963407ull;
            uint32_t r = (uint32_t)(state >> 33);
            /* Mostly byte tokens (ids 0..255 are the single bytes in Qwen's vocabulary). */
            ids[i] = r % 4 == 0 ? (int32_t)(r % (uint32_t)vocab) : r % 4 == 1 ? 151643 + (int32_t)(r % 26)
                                                                                 : (int32_t)((r >> 8) % 256);
        }
        for (int skip = 0; skip < 2; skip++) {
            char *one;
            size_t len;
            lm_error err;
            CHECK_OK(lm_tokenizer_decode(qwen3, ids, n, skip, &one, &len, &err), &err);
            bool ok = stream_decode(qwen3, ids, n, skip, &streamed);
            bool same = ok && streamed.n == len && memcmp(streamed.p, one, len) == 0;
            bool valid = lm_utf8_valid_prefix((const uint8_t *)one, len) == len;
            free(one);
            CHECK_MSG(same, "round %d: streamed text differs from one-shot", round);
            CHECK(valid);
        }
    }
    lm_text_buf_free(&streamed);
}

/* lm_nfc_is_inert must only claim characters NFC cannot touch. */
static void test_nfc_inert_table(void) {
    for (uint32_t cp = 0; cp < 0x20000; cp++) {
        if (!lm_nfc_is_inert(cp)) continue;
        const utf8proc_property_t *p = utf8proc_get_property((utf8proc_int32_t)cp);
        CHECK_MSG(p->combining_class == 0, "U+%04X has a combining class", cp);
        /* The second half of a composition pair has comb_index >= 0x8000 in utf8proc 2.8. */
        CHECK_MSG(p->comb_index == UINT16_MAX || p->comb_index < 0x8000, "U+%04X composes with what precedes", cp);
        utf8proc_uint8_t in[8], *out = NULL;
        utf8proc_ssize_t n = utf8proc_encode_char((utf8proc_int32_t)cp, in);
        in[n] = 0;
        out = utf8proc_NFC(in);
        bool same = out && strcmp((char *)out, (char *)in) == 0;
        free(out);
        CHECK_MSG(same, "NFC changes U+%04X", cp);
    }
}

/* The NFC fast path gives what utf8proc gives on the whole text. */
static void test_nfc_random(void) {
    static const uint32_t pool[] = {'a', 'e', 'o', ' ', 'Z', 0xE9, 0x301, 0x323, 0x308, 0x30A, 0x4E2D, 0x304B, 0x3099,
                                    0x309A, 0x30AB, 0xAC00, 0x11A8, 0x1100, 0x1161, 0x212B, 0x0419, 0x0306, 0x0627,
                                    0x0653, 0x0654, 0x1E9B, 0xFB01, 0xFF21, 0x3000, 0x0387, 0x1F71, 0x0344, 0x0F73};
    lm_normalizer nz = {.steps = {LM_NORM_NFC}, .n = 1};
    lm_normalize_scratch scratch = {0};
    uint64_t state = 99;
    for (int round = 0; round < 2000; round++) {
        char text[256];
        size_t len = 0;
        int chars = round % 24;
        for (int i = 0; i < chars; i++) {
            state = state * 6364136223846793005ull + 1442695040888963407ull;
            len += lm_utf8_encode_one(pool[(state >> 33) % (sizeof pool / sizeof pool[0])], text + len);
        }
        text[len] = '\0';
        const char *got;
        size_t got_n;
        lm_error err;
        CHECK_OK(lm_normalize(&nz, text, len, &scratch, &got, &got_n, &err), &err);
        utf8proc_uint8_t *want = utf8proc_NFC((const utf8proc_uint8_t *)text);
        bool same = want && strlen((char *)want) == got_n && memcmp(want, got, got_n) == 0;
        free(want);
        CHECK_MSG(same, "NFC differs on round %d", round);
    }
    lm_normalize_scratch_free(&scratch);
}

typedef struct {
    char pieces[16][16];
    int n;
} piece_list;

static lm_status collect_piece(void *ctx, const char *piece, size_t n, lm_error *err) {
    piece_list *l = ctx;
    if (l->n == 16 || n >= 16) return lm_fail(err, LM_ERR_INTERNAL, "too many pieces");
    memcpy(l->pieces[l->n], piece, n);
    l->pieces[l->n++][n] = '\0';
    return LM_OK;
}

static bool split_gives(const char *json, const char *text, const char *const *want, int n_want) {
    cJSON *j = cJSON_Parse(json);
    lm_pretokenizer p = {0};
    lm_error err;
    lm_status st = lm_pretokenizer_parse(j, &p, &err);
    cJSON_Delete(j);
    if (st != LM_OK) {
        fprintf(stderr, "  %s\n", err.message);
        return false;
    }
    piece_list got = {.n = 0};
    lm_pretok_scratch scratch = {0};
    st = lm_pretokenize(&p, text, strlen(text), &scratch, collect_piece, &got, &err);
    lm_pretok_scratch_free(&scratch);
    lm_pretokenizer_free(&p);
    if (st != LM_OK || got.n != n_want) return false;
    for (int i = 0; i < n_want; i++)
        if (strcmp(got.pieces[i], want[i]) != 0) return false;
    return true;
}

/* The five behaviours, as in the Rust library's split.rs tests (regex
 * \w+|[^\w\s]+ inverted, so the matches are the spaces). */
static void test_split_behaviors(void) {
    const char *text = "How are you doing?";
#define SPLIT(b) "{\"type\":\"Split\",\"pattern\":{\"Regex\":\"\\\\w+|[^\\\\w\\\\s]+\"},\"behavior\":\"" b "\",\"invert\":true}"
    const char *removed[] = {"How", "are", "you", "doing", "?"};
    const char *isolated[] = {"How", " ", "are", " ", "you", " ", "doing", "?"};
    const char *previous[] = {"How ", "are ", "you ", "doing", "?"};
    const char *next[] = {"How", " are", " you", " doing", "?"};
    const char *contiguous[] = {"How", " ", "are", " ", "you", " ", "doing?"};
    CHECK(split_gives(SPLIT("Removed"), text, removed, 5));
    CHECK(split_gives(SPLIT("Isolated"), text, isolated, 8));
    CHECK(split_gives(SPLIT("MergedWithPrevious"), text, previous, 5));
    CHECK(split_gives(SPLIT("MergedWithNext"), text, next, 5));
    CHECK(split_gives(SPLIT("Contiguous"), text, contiguous, 7));
#undef SPLIT
    /* String patterns are literal; invert on "Hello" equals splitting on " ". */
    const char *hellos[] = {"Hello", "Hello", "Hello"};
    CHECK(split_gives("{\"type\":\"Split\",\"pattern\":{\"String\":\" \"},\"behavior\":\"Removed\",\"invert\":false}",
                      "Hello Hello Hello", hellos, 3));
    CHECK(split_gives("{\"type\":\"Split\",\"pattern\":{\"String\":\"Hello\"},\"behavior\":\"Removed\",\"invert\":true}",
                      "Hello Hello Hello", hellos, 3));
    const char *dotted[] = {"a", "b"};
    CHECK(split_gives("{\"type\":\"Split\",\"pattern\":{\"String\":\".\"},\"behavior\":\"Removed\",\"invert\":false}",
                      "a.b", dotted, 2));
    /* ByteLevel with add_prefix_space and the GPT-2 regex. */
    const char *gpt2[] = {" Hello", " world", "!!", "  ", " x"};
    CHECK(split_gives("{\"type\":\"ByteLevel\",\"add_prefix_space\":true,\"use_regex\":true}", "Hello world!!   x",
                      gpt2, 5));
}

static const char TINY_JSON[] =
    "{\"version\":\"1.0\",\"added_tokens\":[%s],\"normalizer\":%s,"
    "\"pre_tokenizer\":{\"type\":\"ByteLevel\",\"add_prefix_space\":false,\"use_regex\":true},"
    "\"decoder\":{\"type\":\"ByteLevel\"},\"post_processor\":%s,"
    "\"model\":{\"type\":\"BPE\",\"vocab\":{\"a\":0,\"b\":1,\"Ġ\":2,\"ab\":3,\"Ġa\":4},\"merges\":[\"a b\",\"Ġ a\"]}}";

static lm_status tiny(const char *added, const char *normalizer, const char *post, lm_tokenizer **tok, lm_error *err) {
    char json[4096];
    snprintf(json, sizeof json, TINY_JSON, added, normalizer, post);
    return lm_tokenizer_load_json(json, strlen(json), tok, err);
}

static bool encodes_to(const lm_tokenizer *tok, const char *text, bool add_special, const int32_t *want, size_t n_want) {
    int32_t *ids;
    size_t n;
    lm_error err;
    if (lm_tokenizer_encode(tok, text, strlen(text), add_special, &ids, &n, &err) != LM_OK) return false;
    bool same = same_ids(ids, n, want, n_want);
    if (!same) {
        fprintf(stderr, "  \"%s\" ->", text);
        for (size_t i = 0; i < n; i++) fprintf(stderr, " %d", ids[i]);
        fprintf(stderr, "\n");
    }
    free(ids);
    return same;
}

/* single_word, lstrip, rstrip, and the post-processor template. */
static void test_added_token_options(void) {
    lm_tokenizer *tok;
    lm_error err;
    CHECK_OK(tiny("{\"id\":10,\"content\":\"ab\",\"single_word\":true,\"special\":true,\"normalized\":false},"
                  "{\"id\":11,\"content\":\"<x>\",\"lstrip\":true,\"rstrip\":true,\"special\":true,\"normalized\":false},"
                  "{\"id\":12,\"content\":\"ba\",\"special\":false,\"normalized\":true}",
                  "null",
                  "{\"type\":\"TemplateProcessing\",\"single\":[{\"SpecialToken\":{\"id\":\"<x>\",\"type_id\":0}},"
                  "{\"Sequence\":{\"id\":\"A\",\"type_id\":0}}],\"special_tokens\":{\"<x>\":{\"id\":\"<x>\",\"ids\":[11],"
                  "\"tokens\":[\"<x>\"]}}}",
                  &tok, &err),
             &err);
    /* "ab" alone is a word: the added token; inside "aab" it is not, so BPE runs (a, ab). */
    const int32_t w1[] = {10}, w2[] = {0, 3}, w3[] = {2, 10, 2};
    const int32_t s1[] = {0, 11, 1}, s2[] = {12, 1}, s3[] = {11}, t1[] = {11, 0, 2, 1};
    bool ok = encodes_to(tok, "ab", false, w1, 1) && encodes_to(tok, "aab", false, w2, 2) &&
              encodes_to(tok, " ab ", false, w3, 3) &&
              /* lstrip/rstrip swallow the spaces around <x>. */
              encodes_to(tok, "a  <x>  b", false, s1, 3) &&
              /* "ab" inside "bab" is not a word; the normalized token "ba" is found after that. */
              encodes_to(tok, "bab", false, s2, 2) &&
              /* "y" has no token and there is no unk: dropped, as the library does. */
              encodes_to(tok, "<x>y", false, s3, 1) &&
              encodes_to(tok, "ab", true, (const int32_t[]){11, 10}, 2) && encodes_to(tok, "a b", true, t1, 4);
    char *text;
    size_t len;
    lm_status st = lm_tokenizer_decode(tok, (const int32_t[]){11, 0, 2, 1, 12}, 5, true, &text, &len, &err);
    lm_tokenizer_free(tok);
    CHECK(ok);
    CHECK_OK(st, &err);
    bool same = strcmp(text, "a bba") == 0;
    free(text);
    CHECK(same);
}

/* Clear errors for bad input. */
static void test_errors(void) {
    int32_t *ids;
    size_t n;
    lm_error err;
    CHECK(lm_tokenizer_encode(qwen3, "ok\xFF", 3, false, &ids, &n, &err) == LM_ERR_INVALID);
    CHECK(strstr(err.message, "UTF-8") != NULL);
    CHECK(lm_tokenizer_encode(qwen3, "a\xED\xA0\x80", 4, false, &ids, &n, &err) == LM_ERR_INVALID);
    char *text;
    size_t len;
    CHECK(lm_tokenizer_decode(qwen3, (const int32_t[]){1, 999999}, 2, false, &text, &len, &err) == LM_ERR_INVALID);
    CHECK(strstr(err.message, "999999") != NULL);
    lm_detokenizer d;
    lm_detokenizer_init(&d, qwen3, false);
    const char *piece;
    CHECK(lm_detokenizer_push(&d, -5, &piece, &len, &err) == LM_ERR_INVALID);
    lm_detokenizer_free(&d);

    lm_tokenizer *tok;
    CHECK(tiny("", "{\"type\":\"Lowercase\"}", "null", &tok, &err) == LM_ERR_UNSUPPORTED);
    CHECK(strstr(err.message, "unsupported normalizer \"Lowercase\"") != NULL);
    CHECK(tiny("", "{\"type\":\"Sequence\",\"normalizers\":[{\"type\":\"NFC\"},{\"type\":\"Strip\"}]}", "null", &tok,
               &err) == LM_ERR_UNSUPPORTED);
    CHECK(lm_tokenizer_load_json("{\"model\":", 9, &tok, &err) == LM_ERR_FORMAT);
    const char *unknown_pre = "{\"model\":{\"type\":\"BPE\",\"vocab\":{\"a\":0},\"merges\":[]},"
                              "\"pre_tokenizer\":{\"type\":\"Metaspace\"},\"decoder\":{\"type\":\"ByteLevel\"}}";
    CHECK(lm_tokenizer_load_json(unknown_pre, strlen(unknown_pre), &tok, &err) == LM_ERR_UNSUPPORTED);
    CHECK(strstr(err.message, "Metaspace") != NULL);
    const char *bad_merge = "{\"model\":{\"type\":\"BPE\",\"vocab\":{\"a\":0},\"merges\":[\"a a\"]},"
                            "\"pre_tokenizer\":{\"type\":\"ByteLevel\"},\"decoder\":{\"type\":\"ByteLevel\"}}";
    CHECK(lm_tokenizer_load_json(bad_merge, strlen(bad_merge), &tok, &err) == LM_ERR_FORMAT);
    CHECK(strstr(err.message, "merge 0") != NULL);
    const char *bad_regex = "{\"model\":{\"type\":\"BPE\",\"vocab\":{\"a\":0},\"merges\":[]},\"pre_tokenizer\":"
                            "{\"type\":\"Sequence\",\"pretokenizers\":[{\"type\":\"Split\",\"pattern\":{\"Regex\":\"(\"},"
                            "\"behavior\":\"Isolated\",\"invert\":false},{\"type\":\"ByteLevel\"}]},"
                            "\"decoder\":{\"type\":\"ByteLevel\"}}";
    CHECK(lm_tokenizer_load_json(bad_regex, strlen(bad_regex), &tok, &err) == LM_ERR_UNSUPPORTED);
    CHECK(lm_tokenizer_load("/nonexistent/dir", &tok, &err) == LM_ERR_IO);
}

typedef struct {
    const char *text;
    size_t len;
    int32_t *ids;
    size_t n;
    lm_status st;
} thread_job;

static void *encode_thread(void *arg) {
    thread_job *job = arg;
    lm_error err;
    job->st = lm_tokenizer_encode(qwen3, job->text, job->len, false, &job->ids, &job->n, &err);
    return NULL;
}

/* Several threads encoding with one tokenizer get what one thread gets. */
static void test_threads(void) {
    lm_text_buf text = {0};
    for (int i = 0; i < 200; i++) {
        char line[160];
        snprintf(line, sizeof line, "line %d: The quick brown fox 你好世界 %x jumps; x%d = f(y) * 2;\n", i, i * 7919, i);
        CHECK(lm_text_buf_append(&text, line, strlen(line)));
    }
    thread_job jobs[4];
    pthread_t threads[4];
    for (int i = 0; i < 4; i++) {
        jobs[i] = (thread_job){.text = text.p, .len = text.n};
        CHECK(pthread_create(&threads[i], NULL, encode_thread, &jobs[i]) == 0);
    }
    for (int i = 0; i < 4; i++) pthread_join(threads[i], NULL);
    bool same = true;
    for (int i = 0; i < 4; i++)
        same = same && jobs[i].st == LM_OK && same_ids(jobs[i].ids, jobs[i].n, jobs[0].ids, jobs[0].n);
    char *back = NULL;
    size_t back_len = 0;
    lm_error err;
    lm_status st = lm_tokenizer_decode(qwen3, jobs[0].ids, jobs[0].n, false, &back, &back_len, &err);
    bool round_trip = st == LM_OK && back_len == text.n && memcmp(back, text.p, text.n) == 0;
    free(back);
    for (int i = 0; i < 4; i++) free(jobs[i].ids);
    lm_text_buf_free(&text);
    CHECK(same);
    CHECK(round_trip);
}

/* Long pieces (heap path) and repeated pieces (cache) agree with short ones. */
static void test_long_pieces(void) {
    char text[4000];
    for (int i = 0; i < 3000; i++) text[i] = ' ';
    memcpy(text + 3000, "end", 4);
    int32_t *ids;
    size_t n;
    lm_error err;
    CHECK_OK(lm_tokenizer_encode(qwen3, text, strlen(text), false, &ids, &n, &err), &err);
    char *back;
    size_t len;
    lm_status st = lm_tokenizer_decode(qwen3, ids, n, false, &back, &len, &err);
    free(ids);
    CHECK_OK(st, &err);
    bool same = len == strlen(text) && memcmp(back, text, len) == 0;
    free(back);
    CHECK(same);
    /* A 127-byte piece (the heap path, too long for the cache), 64 times over. */
    lm_text_buf words = {0};
    const char *word = " 中文中文中文中文中文中文中文中文中文中文中文中文中文中文中文中文中文中文中文中文中文";
    for (int i = 0; i < 64; i++) CHECK(lm_text_buf_append(&words, word, strlen(word)));
    int32_t *one, *all;
    size_t n_one, n_all;
    CHECK_OK(lm_tokenizer_encode(qwen3, word, strlen(word), false, &one, &n_one, &err), &err);
    st = lm_tokenizer_encode(qwen3, words.p, words.n, false, &all, &n_all, &err);
    bool repeated = st == LM_OK && n_all == 64 * n_one;
    for (size_t i = 0; repeated && i < n_all; i++) repeated = all[i] == one[i % n_one];
    free(one);
    if (st == LM_OK) free(all);
    lm_text_buf_free(&words);
    CHECK_OK(st, &err);
    CHECK(repeated);
}

int main(void) {
    char path[1024];
    lm_error err;
    test_fixture_path(path, sizeof path, "tokenizers/qwen3");
    if (lm_tokenizer_load(path, &qwen3, &err) != LM_OK) {
        fprintf(stderr, "cannot load %s: %s\n", path, err.message);
        return 1;
    }
    RUN_TEST(test_encode_cases);
    RUN_TEST(test_chat_cases);
    RUN_TEST(test_qwen3_config);
    RUN_TEST(test_skip_special);
    RUN_TEST(test_fixture_models);
    RUN_TEST(test_string_merges);
    RUN_TEST(test_byte_level_table);
    RUN_TEST(test_lossy_utf8);
    RUN_TEST(test_stream_random);
    RUN_TEST(test_nfc_inert_table);
    RUN_TEST(test_nfc_random);
    RUN_TEST(test_split_behaviors);
    RUN_TEST(test_added_token_options);
    RUN_TEST(test_errors);
    RUN_TEST(test_threads);
    RUN_TEST(test_long_pieces);
    lm_tokenizer_free(qwen3);
    return test_summary("test_tokenizer");
}
