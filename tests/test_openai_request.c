/* The request parser's bounds on untrusted bodies (src/server/openai_request.c):
 * the byte pre-scan (depth, value count, NUL escapes), the errors it gives,
 * unknown fields dropped, tool names, lists of prompts, and image parts
 * (src/server/media.c: base64 data: URIs, local files under a media folder,
 * remote URLs refused). */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "harness.h"
#include "server/media.h"
#include "server/openai_request.h"

static lm_status parse(lm_api_kind kind, const char *body, lm_openai_request *r, char *param, lm_error *err) {
    return lm_openai_request_parse(kind, body, strlen(body), NULL, r, param, 64, err);
}

/* Values are counted exactly on valid JSON: 1 + commas + non-empty containers. */
static void test_prescan_counts(void) {
    static const struct {
        const char *json;
        int depth;
        size_t values;
    } cases[] = {
        {"1", 0, 1},
        {"[]", 1, 1},
        {"[1]", 1, 2},
        {"[1,2]", 1, 3},
        {"{\"a\":[1,2]}", 2, 4},
        {"[[1],[2]]", 2, 5},
        {"{\"a\":\"[,{\",\"b\":{}}", 2, 3},          /* brackets and commas in strings do not count */
        {" [ 1 , [ ] , { \"k\" : null } ] ", 2, 5},
        {"[\"\\\"\",\"\\\\\"]", 1, 3},               /* escaped quote and backslash */
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        lm_json_scan scan;
        lm_json_prescan(cases[i].json, strlen(cases[i].json), 64, 1000, NULL, 0, &scan);
        CHECK_MSG(scan.depth == cases[i].depth && scan.values == cases[i].values && !scan.nul,
                  "%s: depth %d values %zu", cases[i].json, scan.depth, scan.values);
    }
}

/* The bounds: depth 64 -> 400, more than 524288 values -> 413 (too_large),
 * refused before cJSON builds a tree. */
static void test_bounds(void) {
    char param[64];
    lm_error err = {0};
    lm_openai_request r;
    size_t n = 70;
    char *deep = malloc(2 * n + 64);
    int k = sprintf(deep, "{\"prompt\":\"hi\",\"x\":");
    for (size_t i = 0; i < n; i++) deep[k++] = '[';
    for (size_t i = 0; i < n; i++) deep[k++] = ']';
    strcpy(deep + k, "}");
    lm_status st = parse(LM_API_COMPLETION, deep, &r, param, &err);
    bool too_large = r.too_large;
    lm_openai_request_free(&r);
    free(deep);
    CHECK(st == LM_ERR_INVALID && !too_large && strstr(err.message, "64"));

    size_t values = LM_REQUEST_MAX_VALUES + 10;
    char *wide = malloc(2 * values + 64);
    k = sprintf(wide, "{\"prompt\":\"hi\",\"x\":[");
    for (size_t i = 0; i < values; i++) wide[k++] = '1', wide[k++] = ',';
    strcpy(wide + k - 1, "]}");
    st = parse(LM_API_COMPLETION, wide, &r, param, &err);
    too_large = r.too_large;
    lm_openai_request_free(&r);
    CHECK(st != LM_OK && too_large && strstr(err.message, "524288"));
    /* Just under the bound parses, and the unknown field is not kept. */
    k = sprintf(wide, "{\"prompt\":\"hi\",\"x\":[");
    for (size_t i = 0; i < LM_REQUEST_MAX_VALUES - 10; i++) wide[k++] = '1', wide[k++] = ',';
    strcpy(wide + k - 1, "]}");
    st = parse(LM_API_COMPLETION, wide, &r, param, &err);
    free(wide);
    bool dropped = st == LM_OK && !cJSON_HasObjectItem(r.doc, "x") && cJSON_HasObjectItem(r.doc, "prompt");
    lm_openai_request_free(&r);
    CHECK_MSG(dropped, "%s", err.message);
}

/* \u0000 in a field that is read: 400 naming it; elsewhere ignored; an
 * escaped backslash before "u0000" is no NUL. */
static void test_nul(void) {
    static const struct {
        lm_api_kind kind;
        const char *body;
        const char *param; /* NULL: parses */
    } cases[] = {
        {LM_API_COMPLETION, "{\"prompt\":\"a\\u0000b\"}", "prompt"},
        {LM_API_COMPLETION, "{\"prompt\":[\"a\",\"b\\u0000\"]}", "prompt"},
        {LM_API_COMPLETION, "{\"model\":\"m\\u0000\",\"prompt\":\"a\"}", "model"},
        {LM_API_CHAT, "{\"messages\":[{\"role\":\"user\",\"content\":\"a\\u0000b\"}]}", "messages"},
        {LM_API_CHAT, "{\"messages\":[{\"role\\u0000\":\"user\",\"content\":\"a\"}]}", "messages"},
        {LM_API_COMPLETION, "{\"prompt\":\"a\",\"stop\":[\"x\\u0000\"]}", "stop"},
        {LM_API_COMPLETION, "{\"prompt\":\"a\",\"pro\\u0000mpt\":1}", ""},
        {LM_API_COMPLETION, "{\"prompt\":\"a\",\"unknown\":\"\\u0000\"}", NULL},
        {LM_API_COMPLETION, "{\"prompt\":\"a\\\\u0000b\"}", NULL},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        char param[64];
        lm_error err = {0};
        lm_openai_request r;
        lm_status st = parse(cases[i].kind, cases[i].body, &r, param, &err);
        bool ok = cases[i].param ? st == LM_ERR_INVALID && strcmp(param, cases[i].param) == 0 && strstr(err.message, "NUL")
                                 : st == LM_OK;
        if (ok && !cases[i].param && cases[i].kind == LM_API_COMPLETION)
            ok = r.n_prompts == 1 && r.prompts[0].text_len == strlen(r.prompts[0].text);
        lm_openai_request_free(&r);
        CHECK_MSG(ok, "%s: status %d param '%s' message '%s'", cases[i].body, (int)st, param, err.message);
    }
}

static void test_tool_names(void) {
    static const struct {
        const char *name;
        bool ok;
    } cases[] = {
        {"get_weather", true}, {"a-b_C9", true}, {"x</tool_call>", false}, {"", false}, {"a b", false},
        {"\\u00e9", false},    {"aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa", true},
        {"aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa", false},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        char body[512], param[64];
        snprintf(body, sizeof body,
                 "{\"messages\":[{\"role\":\"user\",\"content\":\"hi\"}],\"tools\":[{\"type\":\"function\","
                 "\"function\":{\"name\":\"ok\"}},{\"type\":\"function\",\"function\":{\"name\":\"%s\"}}]}",
                 cases[i].name);
        lm_error err = {0};
        lm_openai_request r;
        lm_status st = parse(LM_API_CHAT, body, &r, param, &err);
        lm_openai_request_free(&r);
        bool ok = cases[i].ok ? st == LM_OK
                              : st == LM_ERR_INVALID && strcmp(param, "tools") == 0 && strstr(err.message, "tools[1]");
        CHECK_MSG(ok, "%s: status %d '%s'", cases[i].name, (int)st, err.message);
    }
}

static void test_prompt_lists(void) {
    char param[64];
    lm_error err = {0};
    lm_openai_request r;
    CHECK_OK(parse(LM_API_COMPLETION, "{\"prompt\":[\"a\",\"bc\"],\"n\":2}", &r, param, &err), &err);
    bool ok = r.n_prompts == 2 && strcmp(r.prompts[1].text, "bc") == 0 && r.params.n == 2;
    lm_openai_request_free(&r);
    CHECK(ok);
    CHECK_OK(parse(LM_API_COMPLETION, "{\"prompt\":[[1,2],[3]]}", &r, param, &err), &err);
    ok = r.n_prompts == 2 && r.prompts[0].n_ids == 2 && r.prompts[1].n_ids == 1 && r.prompts[1].ids[0] == 3;
    lm_openai_request_free(&r);
    CHECK(ok);
    CHECK_OK(parse(LM_API_COMPLETION, "{\"prompt\":[1,2,3]}", &r, param, &err), &err);
    ok = r.n_prompts == 1 && r.prompts[0].n_ids == 3;
    lm_openai_request_free(&r);
    CHECK(ok);
    lm_status st = parse(LM_API_COMPLETION, "{\"prompt\":[\"a\",{}]}", &r, param, &err);
    lm_openai_request_free(&r);
    CHECK(st == LM_ERR_INVALID && strcmp(param, "prompt") == 0);
    st = parse(LM_API_COMPLETION, "{\"prompt\":[\"a\",\"b\",\"c\"],\"n\":64}", &r, param, &err);
    lm_openai_request_free(&r);
    CHECK(st == LM_ERR_INVALID && strcmp(param, "prompt") == 0);
}

/* A message whose content key differs in case: the content is "", nothing
 * leaks (found by fuzz_request; ASan checks the leak). */
static void test_content_key_case(void) {
    char param[64];
    lm_error err = {0};
    lm_openai_request r;
    CHECK_OK(parse(LM_API_CHAT, "{\"messages\":[{\"role\":\"user\",\"Content\":\"a\"}]}", &r, param, &err), &err);
    const cJSON *content = cJSON_GetObjectItemCaseSensitive(cJSON_GetArrayItem(r.messages, 0), "content");
    bool ok = cJSON_IsString(content) && content->valuestring[0] == 0;
    lm_openai_request_free(&r);
    CHECK(ok);
}

/* ------------------------------------------------------------ images */

#define MARKER "<|vision_start|><|image_pad|><|vision_end|>"

static char *b64_encode(const unsigned char *in, size_t n) {
    static const char alphabet[] = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
    char *out = malloc(4 * ((n + 2) / 3) + 1);
    size_t k = 0;
    for (size_t i = 0; i < n; i += 3) {
        uint32_t v = (uint32_t)in[i] << 16 | (i + 1 < n ? (uint32_t)in[i + 1] << 8 : 0) | (i + 2 < n ? in[i + 2] : 0);
        out[k++] = alphabet[v >> 18 & 63];
        out[k++] = alphabet[v >> 12 & 63];
        out[k++] = i + 1 < n ? alphabet[v >> 6 & 63] : '=';
        out[k++] = i + 2 < n ? alphabet[v & 63] : '=';
    }
    out[k] = 0;
    return out;
}

/* Every length 0..300 of random bytes round-trips; bad inputs are refused
 * with the reason. */
static void test_base64(void) {
    unsigned char bytes[300];
    uint32_t x = 12345;
    for (size_t i = 0; i < sizeof bytes; i++) bytes[i] = (unsigned char)((x = x * 1103515245u + 12345u) >> 16);
    lm_error err = {0};
    for (size_t n = 0; n <= sizeof bytes; n++) {
        char *text = b64_encode(bytes, n);
        uint8_t *out = NULL;
        size_t len = 0;
        lm_status st = lm_base64_decode(text, strlen(text), 1 << 20, &out, &len, &err);
        bool ok = st == LM_OK && len == n && (n == 0 || memcmp(out, bytes, n) == 0);
        free(out);
        free(text);
        CHECK_MSG(ok, "length %zu: %s", n, err.message);
    }
    static const struct {
        const char *in;
        const char *message;
    } bad[] = {
        {"QUJD!A==", "is not valid base64: '!' at offset 4"},
        {"QUJ", "is not valid base64: its length (3) is not a multiple of 4 (missing '=' padding?)"},
        {"QU=D", "is not valid base64: '=' padding at offset 2, before the end"},
        {"Q===", "is not valid base64: '=' padding at offset 1, before the end"},
        {"QR==", "is not valid base64: nonzero bits after its last byte"},
        {"QUJ=QUJD", "is not valid base64: '=' padding at offset 3, before the end"},
        {"QUJD\nQUJD", "is not valid base64: its length (9) is not a multiple of 4 (missing '=' padding?)"},
        {"QUJD QUJ", "is not valid base64: byte 0x20 at offset 4"},
        {"QUJD-_==", "is not valid base64: '-' at offset 4"},
        {"QUJDRA==", NULL}, /* "ABCD" */
    };
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        uint8_t *out = NULL;
        size_t len = 0;
        lm_error e = {0};
        lm_status st = lm_base64_decode(bad[i].in, strlen(bad[i].in), 1 << 20, &out, &len, &e);
        bool ok = bad[i].message ? st == LM_ERR_INVALID && !out && strcmp(e.message, bad[i].message) == 0
                                 : st == LM_OK && len == 4 && memcmp(out, "ABCD", 4) == 0;
        free(out);
        CHECK_MSG(ok, "'%s': status %d '%s'", bad[i].in, (int)st, e.message);
    }
    /* The size bound, before anything is allocated. */
    uint8_t *out = NULL;
    size_t len = 0;
    CHECK(lm_base64_decode("QUJDRA==", 8, 3, &out, &len, &err) == LM_ERR_INVALID && !out &&
          strcmp(err.message, "is 4 bytes; the limit is 3") == 0);
}

static lm_status parse_images(const char *body, const lm_image_parts *parts, lm_openai_request *r, char *param,
                              lm_error *err) {
    return lm_openai_request_parse(LM_API_CHAT, body, strlen(body), parts, r, param, 64, err);
}

/* A chat whose one user message holds an image part with url (and an
 * optional text before it). */
static char *image_chat(const char *role, const char *url) {
    size_t n = strlen(url) + 256;
    char *body = malloc(n);
    snprintf(body, n,
             "{\"messages\":[{\"role\":\"%s\",\"content\":[{\"type\":\"text\",\"text\":\"look: \"},"
             "{\"type\":\"image_url\",\"image_url\":{\"url\":\"%s\",\"detail\":\"auto\"}}]}]}",
             role, url);
    return body;
}

static const char *content_of(const lm_openai_request *r, int message) {
    const cJSON *c = cJSON_GetObjectItemCaseSensitive(cJSON_GetArrayItem(r->messages, message), "content");
    return cJSON_IsString(c) ? c->valuestring : NULL;
}

/* Data URIs: decoded in place of the part, the marker in the content;
 * the string form of image_url (vLLM) and {"type": "image"} too. */
static void test_image_data_uris(void) {
    const lm_image_parts parts = {.marker = MARKER};
    char param[64];
    lm_error err = {0};
    lm_openai_request r;
    char *body = image_chat("user", "data:image/png;base64,iVBORw0KGgo=");
    CHECK_OK(parse_images(body, &parts, &r, param, &err), &err);
    free(body);
    bool ok = r.n_images == 1 && r.params.n_images == 1 && r.params.images == r.images && r.images[0].size == 8 &&
              memcmp(r.images[0].data, "\x89PNG\r\n\x1a\n", 8) == 0 &&
              strcmp(content_of(&r, 0), "look: " MARKER) == 0 && !cJSON_HasObjectItem(r.doc, "messages");
    lm_openai_request_free(&r);
    CHECK(ok);
    /* Two messages, three images, in order, with the text around them; the
     * other fields of a message are kept. */
    const char *three =
        "{\"messages\":[{\"role\":\"system\",\"content\":\"be brief\"},"
        "{\"role\":\"user\",\"name\":\"ann\",\"content\":[{\"type\":\"image_url\",\"image_url\":\"data:image/jpeg;base64,QQ==\"},"
        "{\"type\":\"text\",\"text\":\" and \"},{\"type\":\"image\",\"image\":\"DATA:Image/WebP;BASE64,QkI=\"}]},"
        "{\"role\":\"assistant\",\"content\":\"ok\"},"
        "{\"role\":\"user\",\"content\":[{\"type\":\"text\",\"text\":\"and \"},{\"type\":\"image_url\","
        "\"image_url\":{\"url\":\"data:image/jpg;base64,Q0ND\"}}]}]}";
    CHECK_OK(parse_images(three, &parts, &r, param, &err), &err);
    const cJSON *name = cJSON_GetObjectItemCaseSensitive(cJSON_GetArrayItem(r.messages, 1), "name");
    ok = r.n_images == 3 && r.images[0].size == 1 && memcmp(r.images[0].data, "A", 1) == 0 && r.images[1].size == 2 &&
         memcmp(r.images[1].data, "BB", 2) == 0 && r.images[2].size == 3 && memcmp(r.images[2].data, "CCC", 3) == 0 &&
         strcmp(content_of(&r, 0), "be brief") == 0 && strcmp(content_of(&r, 1), MARKER " and " MARKER) == 0 &&
         strcmp(content_of(&r, 3), "and " MARKER) == 0 && cJSON_IsString(name) && strcmp(name->valuestring, "ann") == 0;
    lm_openai_request_free(&r);
    CHECK(ok);
}

/* Each refusal: 400, param "messages", the exact sentence. */
typedef struct {
    const char *role, *url;
    const char *message; /* NULL: parses, one image */
} image_case;

static void check_image_cases(const image_case *cases, size_t n, const lm_image_parts *parts) {
    for (size_t i = 0; i < n; i++) {
        char param[64] = "";
        lm_error err = {0};
        lm_openai_request r;
        char *body = image_chat(cases[i].role ? cases[i].role : "user", cases[i].url);
        lm_status st = parse_images(body, parts, &r, param, &err);
        free(body);
        int n_images = r.n_images;
        lm_openai_request_free(&r);
        bool ok = cases[i].message ? st == LM_ERR_INVALID && strcmp(param, "messages") == 0 &&
                                         strcmp(err.message, cases[i].message) == 0
                                   : st == LM_OK && n_images == 1;
        CHECK_MSG(ok, "%s: status %d param '%s' message '%s'", cases[i].url, (int)st, param, err.message);
    }
}

#define AT "'messages[0].content[1].image_url.url' (image 1) "

static void test_image_refusals(void) {
    const lm_image_parts parts = {.marker = MARKER, .max_image_bytes = 16};
    static const image_case cases[] = {
        {NULL, "data:image/png;base64,QUJD!A==", AT "is not valid base64: '!' at offset 4"},
        {NULL, "data:image/png;base64,QUJ", AT "is not valid base64: its length (3) is not a multiple of 4 (missing '=' padding?)"},
        {NULL, "data:image/png;base64,", AT "is a data: URI without data"},
        {NULL, "data:image/png;base64,QUJDREVGR0hJSktMTU5PUFFS", AT "is 18 bytes; the limit is 16"},
        {NULL, "data:text/plain;base64,QUJD", AT "is a data: URI of type 'text/plain', not an image"},
        {NULL, "data:image/gif;base64,QUJD", AT "is a data: URI of type 'image/gif': loom reads PNG, JPEG and WebP images"},
        {NULL, "data:;base64,QUJD", AT "is a data: URI without a media type: send data:image/png;base64,..."},
        {NULL, "data:image/png,ABC", AT "is a data: URI that is not base64: send data:image/png;base64,... (or jpeg, webp)"},
        {NULL, "data:image/png;charset=utf-8,ABC", AT "is a data: URI that is not base64: send data:image/png;base64,... (or jpeg, webp)"},
        {NULL, "data:image/png;base64", AT "is a data: URI without the ',' before its data"},
        {NULL, "https://example.com/cat.png", AT "is a remote URL, and the server makes no outbound connections: send the "
                                              "image as a data: URI (data:image/png;base64,...)"},
        {NULL, "HTTP://example.com/cat.png", AT "is a remote URL, and the server makes no outbound connections: send the "
                                             "image as a data: URI (data:image/png;base64,...)"},
        {NULL, "ftp://example.com/cat.png", AT "is a URL of scheme 'ftp', which loom does not read: send the image as a data: URI"},
        {NULL, "", AT "is empty"},
        {NULL, "/etc/hostname", AT "is a local file, and this server reads none (start it with --allowed-local-media-path DIR to "
                                "allow files under DIR); send the image as a data: URI"},
        {NULL, "file:///etc/hostname", AT "is a local file, and this server reads none (start it with --allowed-local-media-path "
                                       "DIR to allow files under DIR); send the image as a data: URI"},
        {"assistant", "data:image/png;base64,QUJD", "'messages[0].content[1]' is an image in a message of role 'assistant': "
                                                  "images are taken in user messages only"},
        {"system", "data:image/png;base64,QUJD", "'messages[0].content[1]' is an image in a message of role 'system': "
                                               "images are taken in user messages only"},
        {"developer", "data:image/png;base64,QUJD", "'messages[0].content[1]' is an image in a message of role 'system': "
                                                  "images are taken in user messages only"},
        {NULL, "data:image/png;base64,QUJD", NULL},
    };
    check_image_cases(cases, sizeof cases / sizeof cases[0], &parts);
    if (test_current_failed()) return;
    /* No marker (a model without a vision tower): the server's sentence. */
    const lm_image_parts none = {.refusal = "this model does not take images"};
    static const image_case no_vision[] = {
        {NULL, "data:image/png;base64,QUJD", "'messages[0].content[1]' is an image, and this model does not take images"},
    };
    check_image_cases(no_vision, 1, &none);
    check_image_cases(no_vision, 1, NULL);
    if (test_current_failed()) return;
    /* Malformed parts, other part types. */
    static const struct {
        const char *body, *message;
    } shapes[] = {
        {"{\"messages\":[{\"role\":\"user\",\"content\":[{\"type\":\"image_url\",\"image_url\":{}}]}]}",
         "'messages[0].content[0]' (an image part) needs a string 'image_url.url'"},
        {"{\"messages\":[{\"role\":\"user\",\"content\":[{\"type\":\"image_url\",\"image_url\":7}]}]}",
         "'messages[0].content[0]' (an image part) needs a string 'image_url.url'"},
        {"{\"messages\":[{\"role\":\"user\",\"content\":[{\"type\":\"image\"}]}]}",
         "'messages[0].content[0]' (an image part) needs a string 'image'"},
        {"{\"messages\":[{\"role\":\"user\",\"content\":[{\"type\":\"input_audio\",\"input_audio\":{}}]}]}",
         "'messages': content parts of type 'input_audio' are not supported (text and image_url)"},
    };
    for (size_t i = 0; i < sizeof shapes / sizeof shapes[0]; i++) {
        char param[64] = "";
        lm_error err = {0};
        lm_openai_request r;
        lm_status st = parse_images(shapes[i].body, &parts, &r, param, &err);
        lm_openai_request_free(&r);
        CHECK_MSG(st == LM_ERR_INVALID && strcmp(param, "messages") == 0 && strcmp(err.message, shapes[i].message) == 0,
                  "%s: '%s'", shapes[i].body, err.message);
    }
}

/* At most LOOM_MAX_IMAGES, and at most max_request_bytes of them in all. */
static void test_image_count(void) {
    {
        const lm_image_parts small = {.marker = MARKER, .max_image_bytes = 4, .max_request_bytes = 5};
        const char *body = "{\"messages\":[{\"role\":\"user\",\"content\":[{\"type\":\"image_url\",\"image_url\":"
                           "\"data:image/png;base64,QUJD\"},{\"type\":\"image_url\",\"image_url\":\"data:image/png;base64,"
                           "QUJD\"}]}]}";
        char param[64] = "";
        lm_error err = {0};
        lm_openai_request r;
        lm_status st = parse_images(body, &small, &r, param, &err);
        lm_openai_request_free(&r);
        CHECK_MSG(st == LM_ERR_INVALID && strcmp(param, "messages") == 0 &&
                      strcmp(err.message, "'messages[0].content[1].image_url' (image 2) is 3 bytes; the limit is 2 (what "
                                          "the request's earlier images left)") == 0,
                  "%s", err.message);
    }
    const lm_image_parts parts = {.marker = MARKER};
    char body[4096];
    for (int count = LOOM_MAX_IMAGES; count <= LOOM_MAX_IMAGES + 1; count++) {
        int k = sprintf(body, "{\"messages\":[{\"role\":\"user\",\"content\":[");
        for (int i = 0; i < count; i++)
            k += sprintf(body + k, "%s{\"type\":\"image_url\",\"image_url\":\"data:image/png;base64,QUJD\"}", i ? "," : "");
        strcpy(body + k, "]}]}");
        char param[64] = "";
        lm_error err = {0};
        lm_openai_request r;
        lm_status st = parse_images(body, &parts, &r, param, &err);
        int n = r.n_images;
        lm_openai_request_free(&r);
        if (count == LOOM_MAX_IMAGES) CHECK_MSG(st == LM_OK && n == LOOM_MAX_IMAGES, "%s", err.message);
        else CHECK_MSG(st == LM_ERR_INVALID && strcmp(param, "messages") == 0 &&
                       strcmp(err.message, "'messages' holds more than 16 images, the most a request takes") == 0,
                       "%s", err.message);
    }
}

static void write_file(const char *path, const char *text) {
    FILE *f = fopen(path, "wb");
    if (f) {
        fputs(text, f);
        fclose(f);
    }
}

/* Local files: only inside the folder, after symlinks and .. resolved. */
static void test_image_local_files(void) {
    const char *scratch = test_scratch_dir();
    char media[512], outside[512], path[1024], link[1024], dir_link[1024];
    snprintf(media, sizeof media, "%s/media", scratch);
    snprintf(outside, sizeof outside, "%s/secret.png", scratch);
    mkdir(media, 0700);
    snprintf(path, sizeof path, "%s/sub", media);
    mkdir(path, 0700);
    snprintf(path, sizeof path, "%s/sub/cat.png", media);
    write_file(path, "PNGDATA");
    snprintf(path, sizeof path, "%s/empty.png", media);
    write_file(path, "");
    snprintf(path, sizeof path, "%s/big.png", media);
    write_file(path, "0123456789abcdefXYZ");
    write_file(outside, "SECRET");
    snprintf(link, sizeof link, "%s/link.png", media);
    symlink(outside, link);
    snprintf(dir_link, sizeof dir_link, "%s/up", media);
    symlink(scratch, dir_link);
    snprintf(path, sizeof path, "%s/inner.png", media);
    symlink("sub/cat.png", path); /* a link that stays inside is fine */
    char *dir = NULL;
    lm_error err = {0};
    CHECK_OK(lm_media_dir(media, &dir, &err), &err);
    CHECK(lm_media_dir(outside, &(char *){NULL}, &err) == LM_ERR_INVALID);
    const lm_image_parts parts = {.marker = MARKER, .local_dir = dir, .max_image_bytes = 16};
    char urls[12][1200], messages[12][1400];
    const char *forms[12] = {
        "%s/sub/cat.png", "file://%s/sub/cat.png", "sub/cat.png", "%s/inner.png",
        "%s/../secret.png", "%s/link.png", "%s/up/secret.png", "../secret.png",
        "%s/empty.png", "%s/big.png", "%s/sub", "file://%s/sub/c%%61t.png"};
    for (int i = 0; i < 12; i++) snprintf(urls[i], sizeof urls[i], forms[i], media);
    const char *outside_fmt = AT "names '%s', which is not a file inside the folder given by --allowed-local-media-path";
    snprintf(messages[4], sizeof messages[4], outside_fmt, urls[4]);
    snprintf(messages[5], sizeof messages[5], outside_fmt, urls[5]);
    snprintf(messages[6], sizeof messages[6], outside_fmt, urls[6]);
    snprintf(messages[7], sizeof messages[7], outside_fmt, urls[7]);
    snprintf(messages[8], sizeof messages[8], AT "names '%s', an empty file", urls[8]);
    snprintf(messages[9], sizeof messages[9], AT "names '%s', a file of 19 bytes; the limit is 16", urls[9]);
    snprintf(messages[10], sizeof messages[10], AT "names '%s', which is not a regular file", urls[10]);
    const image_case cases[] = {
        {NULL, urls[0], NULL},        {NULL, urls[1], NULL},        {NULL, urls[2], NULL},
        {NULL, urls[3], NULL},        {NULL, urls[4], messages[4]}, {NULL, urls[5], messages[5]},
        {NULL, urls[6], messages[6]}, {NULL, urls[7], messages[7]}, {NULL, urls[8], messages[8]},
        {NULL, urls[9], messages[9]}, {NULL, urls[10], messages[10]}, {NULL, urls[11], NULL},
        {NULL, "file://host/x.png", AT "is a file:// URI that names a host: use file:///PATH"},
        {NULL, "file:///x%00.png", AT "is a file:// URI with a bad %-escape (or %00)"},
    };
    check_image_cases(cases, sizeof cases / sizeof cases[0], &parts);
    /* The bytes are the file's. */
    char param[64];
    lm_openai_request r;
    char *body = image_chat("user", urls[1]);
    lm_status st = parse_images(body, &parts, &r, param, &err);
    free(body);
    bool ok = st == LM_OK && r.n_images == 1 && r.images[0].size == 7 && memcmp(r.images[0].data, "PNGDATA", 7) == 0;
    lm_openai_request_free(&r);
    free(dir);
    CHECK_MSG(ok, "%s", err.message);
}

int main(void) {
    RUN_TEST(test_prescan_counts);
    RUN_TEST(test_bounds);
    RUN_TEST(test_nul);
    RUN_TEST(test_tool_names);
    RUN_TEST(test_prompt_lists);
    RUN_TEST(test_content_key_case);
    RUN_TEST(test_base64);
    RUN_TEST(test_image_data_uris);
    RUN_TEST(test_image_refusals);
    RUN_TEST(test_image_count);
    RUN_TEST(test_image_local_files);
    return test_summary("test_openai_request");
}
