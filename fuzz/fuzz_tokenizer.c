/* libFuzzer target for the tokenizer, on the real Qwen3 tokenizer
 * ($LOOM_FIXTURES/tokenizers/qwen3, default tests/fixtures).  The first
 * input byte picks what the rest is:
 *   0-191: text to encode (bit 0 of the byte: add special tokens).  Invalid
 *          UTF-8 must be refused; valid text must round-trip (decoding gives
 *          the text back up to NFC, as the tokenizer normalises) and the
 *          streaming detokenizer must give exactly the one-shot decode;
 *   192-223: little-endian 32-bit ids to decode (one-shot and streaming
 *          must agree, both with and without special tokens);
 *   224-239: a tokenizer.json to load (and, if it loads, encode a sample);
 *   240-255: a tokenizer_config.json to parse.
 * A broken invariant aborts. */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <utf8proc.h>

#include "text/byte_level.h"
#include "text/detokenizer.h"
#include "text/tokenizer.h"
#include "text/tokenizer_config.h"

static lm_tokenizer *tok; /* loaded once by LLVMFuzzerInitialize */

int LLVMFuzzerInitialize(int *argc, char ***argv) {
    (void)argc;
    (void)argv;
    const char *fixtures = getenv("LOOM_FIXTURES");
    char dir[4096];
    snprintf(dir, sizeof dir, "%s/tokenizers/qwen3", fixtures ? fixtures : "tests/fixtures");
    lm_error err;
    if (lm_tokenizer_load(dir, &tok, &err) != LM_OK) {
        fprintf(stderr, "fuzz_tokenizer: cannot load %s: %s\n", dir, err.message);
        abort();
    }
    return 0;
}

static void check(bool ok, const char *what) {
    if (!ok) {
        fprintf(stderr, "fuzz_tokenizer: %s\n", what);
        abort();
    }
}

/* Decodes ids one-shot and streaming; both must succeed or fail together and agree. */
static void decode_both(const int32_t *ids, size_t n, bool skip, char **text, size_t *len) {
    lm_error err;
    lm_status st = lm_tokenizer_decode(tok, ids, n, skip, text, len, &err);
    lm_detokenizer d;
    lm_detokenizer_init(&d, tok, skip);
    lm_text_buf joined = {0};
    lm_status sst = LM_OK;
    for (size_t i = 0; i <= n && sst == LM_OK; i++) {
        const char *piece;
        size_t piece_len;
        sst = i < n ? lm_detokenizer_push(&d, ids[i], &piece, &piece_len, &err)
                    : lm_detokenizer_finish(&d, &piece, &piece_len, &err);
        if (sst == LM_OK) {
            check(lm_utf8_valid_prefix((const uint8_t *)piece, piece_len) == piece_len, "a streamed piece is not UTF-8");
            check(lm_text_buf_append(&joined, piece, piece_len), "out of memory");
        }
    }
    lm_detokenizer_free(&d);
    check((st == LM_OK) == (sst == LM_OK), "one-shot and streaming decode disagree on failure");
    if (st == LM_OK) {
        check(lm_utf8_valid_prefix((const uint8_t *)*text, *len) == *len, "decoded text is not UTF-8");
        check(joined.n == *len && (*len == 0 || memcmp(joined.p, *text, *len) == 0),
              "streamed text differs from one-shot decode");
    } else {
        *text = NULL;
    }
    lm_text_buf_free(&joined);
}

static char *nfc(const char *s, size_t n, size_t *out_len) {
    utf8proc_uint8_t *out = NULL;
    utf8proc_ssize_t r = utf8proc_map((const utf8proc_uint8_t *)s, (utf8proc_ssize_t)n, &out,
                                      UTF8PROC_STABLE | UTF8PROC_COMPOSE);
    check(r >= 0, "utf8proc refused valid UTF-8");
    *out_len = (size_t)r;
    return (char *)out;
}

static void fuzz_encode(const char *text, size_t n, bool add_special) {
    int32_t *ids = NULL;
    size_t n_ids = 0;
    lm_error err;
    bool valid = lm_utf8_valid_prefix((const uint8_t *)text, n) == n;
    lm_status st = lm_tokenizer_encode(tok, text, n, add_special, &ids, &n_ids, &err);
    check(valid ? st == LM_OK : st == LM_ERR_INVALID, "encode accepted invalid UTF-8 or refused valid text");
    if (st != LM_OK) return;
    for (size_t i = 0; i < n_ids; i++) check(ids[i] >= 0 && ids[i] < lm_tokenizer_vocab_size(tok), "id out of range");
    char *back;
    size_t back_len;
    decode_both(ids, n_ids, false, &back, &back_len);
    check(back != NULL, "decoding encoded ids failed");
    size_t a_len, b_len;
    char *a = nfc(text, n, &a_len), *b = nfc(back, back_len, &b_len);
    check(a_len == b_len && memcmp(a, b, a_len) == 0, "decode(encode(text)) is not the text");
    free(a);
    free(b);
    free(back);
    decode_both(ids, n_ids, true, &back, &back_len);
    free(back);
    free(ids);
}

static void fuzz_decode(const uint8_t *data, size_t size) {
    size_t n = size / 4;
    int32_t *ids = malloc((n ? n : 1) * sizeof *ids);
    if (!ids) return;
    int vocab = lm_tokenizer_vocab_size(tok);
    for (size_t i = 0; i < n; i++) {
        uint32_t v = (uint32_t)data[4 * i] | (uint32_t)data[4 * i + 1] << 8 | (uint32_t)data[4 * i + 2] << 16 |
                     (uint32_t)data[4 * i + 3] << 24;
        /* Mostly valid ids, sometimes anything (negative, too large). */
        ids[i] = (v >> 31) ? (int32_t)v : (int32_t)(v % (uint32_t)(vocab + 4));
    }
    for (int skip = 0; skip < 2; skip++) {
        char *text;
        size_t len;
        decode_both(ids, n, skip, &text, &len);
        free(text);
    }
    free(ids);
}

static void fuzz_load(const char *json, size_t n) {
    lm_tokenizer *t = NULL;
    lm_error err;
    if (lm_tokenizer_load_json(json, n, &t, &err) != LM_OK) {
        check(t == NULL && err.message[0] != '\0', "a failed load must say why and return nothing");
        return;
    }
    static const char sample[] = "Hello <|im_start|> world 123 \xE4\xBD\xA0\xE5\xA5\xBD  \n\n!";
    int32_t *ids;
    size_t n_ids;
    if (lm_tokenizer_encode(t, sample, sizeof sample - 1, true, &ids, &n_ids, &err) == LM_OK) {
        char *text;
        size_t len;
        if (lm_tokenizer_decode(t, ids, n_ids, false, &text, &len, &err) == LM_OK) free(text);
        free(ids);
    }
    lm_tokenizer_free(t);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    if (size == 0) return 0;
    uint8_t mode = data[0];
    const char *rest = (const char *)data + 1;
    size_t n = size - 1;
    if (mode < 192) {
        fuzz_encode(rest, n, mode & 1);
    } else if (mode < 224) {
        fuzz_decode(data + 1, n);
    } else if (mode < 240) {
        fuzz_load(rest, n);
    } else {
        lm_tokenizer_config cfg;
        lm_error err;
        if (lm_tokenizer_config_parse(rest, n, &cfg, &err) == LM_OK) lm_tokenizer_config_free(&cfg);
    }
    return 0;
}
