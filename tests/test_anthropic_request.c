/* The Anthropic Messages API's translation (src/server/anthropic_request.c)
 * into the chat request the OpenAI path serves, its errors (400s naming the
 * field), and the output shapes (src/server/anthropic_response.c): the
 * message, the stream's events, the error bodies. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "harness.h"
#include "server/anthropic_request.h"
#include "server/anthropic_response.h"
#include "server/error_body.h"
#include "server/request_id.h"

#define MARKER "<|vision_start|><|image_pad|><|vision_end|>"

/* "PREFIX" and then exactly n of [A-Za-z0-9] */
static bool has_form(const char *id, const char *prefix, size_t n) {
    size_t k = strlen(prefix);
    if (strncmp(id, prefix, k) != 0 || strlen(id) != k + n) return false;
    for (const char *p = id + k; *p; p++)
        if (!((*p >= 'a' && *p <= 'z') || (*p >= 'A' && *p <= 'Z') || (*p >= '0' && *p <= '9'))) return false;
    return true;
}

static lm_status parse(const char *body, bool count, lm_openai_request *r, char *param, lm_error *err) {
    static const lm_image_parts parts = {.marker = MARKER};
    bool one_tool_use;
    return lm_anthropic_request_parse(body, strlen(body), count, &parts, r, &one_tool_use, param, 64, err);
}

static const char *str_at(const cJSON *obj, const char *key) {
    const cJSON *v = cJSON_GetObjectItemCaseSensitive(obj, key);
    return cJSON_IsString(v) ? v->valuestring : NULL;
}

static bool str_is(const cJSON *obj, const char *key, const char *want) {
    const char *v = str_at(obj, key);
    return v && strcmp(v, want) == 0;
}

/* A whole conversation: system blocks, a tool_use turn and its tool_result,
 * tools, a named tool_choice, sampling fields, stop_sequences, thinking. */
static void test_translation(void) {
    const char *body =
        "{\"model\":\"m\",\"max_tokens\":64,\"temperature\":0.5,\"top_p\":0.9,\"top_k\":7,\"metadata\":{\"user_id\":\"u\"},"
        "\"stop_sequences\":[\"END\",\"STOP\"],\"stream\":true,"
        "\"system\":[{\"type\":\"text\",\"text\":\"be \"},{\"type\":\"text\",\"text\":\"brief\",\"cache_control\":{}}],"
        "\"thinking\":{\"type\":\"enabled\",\"budget_tokens\":2048},"
        "\"tools\":[{\"name\":\"get_weather\",\"description\":\"d\",\"input_schema\":{\"type\":\"object\"}}],"
        "\"tool_choice\":{\"type\":\"tool\",\"name\":\"get_weather\"},"
        "\"messages\":[{\"role\":\"user\",\"content\":\"Weather?\"},"
        "{\"role\":\"assistant\",\"content\":[{\"type\":\"thinking\",\"thinking\":\"hm\",\"signature\":\"s\"},"
        "{\"type\":\"text\",\"text\":\"Looking.\"},"
        "{\"type\":\"tool_use\",\"id\":\"toolu_1\",\"name\":\"get_weather\",\"input\":{\"city\":\"Paris\"}}]},"
        "{\"role\":\"user\",\"content\":[{\"type\":\"tool_result\",\"tool_use_id\":\"toolu_1\","
        "\"content\":[{\"type\":\"text\",\"text\":\"sunny\"}]},{\"type\":\"text\",\"text\":\"thanks\"}]}]}";
    lm_openai_request r;
    char param[64];
    lm_error err = {0};
    CHECK_OK(parse(body, false, &r, param, &err), &err);
    const cJSON *m = r.messages;
    const cJSON *sys = cJSON_GetArrayItem(m, 0), *user = cJSON_GetArrayItem(m, 1), *asst = cJSON_GetArrayItem(m, 2);
    const cJSON *tool = cJSON_GetArrayItem(m, 3), *last = cJSON_GetArrayItem(m, 4);
    const cJSON *call = cJSON_GetArrayItem(cJSON_GetObjectItemCaseSensitive(asst, "tool_calls"), 0);
    const cJSON *fn = cJSON_GetObjectItemCaseSensitive(call, "function");
    const cJSON *args = cJSON_GetObjectItemCaseSensitive(fn, "arguments");
    const cJSON *kwargs = r.template_kwargs;
    const cJSON *tfn = cJSON_GetObjectItemCaseSensitive(cJSON_GetArrayItem(r.tools, 0), "function");
    bool ok = cJSON_GetArraySize(m) == 5 && str_is(sys, "role", "system") && str_is(sys, "content", "be brief") &&
              str_is(user, "role", "user") && str_is(user, "content", "Weather?") && str_is(asst, "role", "assistant") &&
              str_is(asst, "content", "Looking.") && str_is(asst, "reasoning_content", "hm") &&
              str_is(call, "id", "toolu_1") && str_is(fn, "name", "get_weather") && cJSON_IsObject(args) &&
              str_is(args, "city", "Paris") && str_is(tool, "role", "tool") && str_is(tool, "tool_call_id", "toolu_1") &&
              str_is(tool, "content", "sunny") && str_is(last, "role", "user") && str_is(last, "content", "thanks");
    CHECK_MSG(ok, "messages: %s", cJSON_PrintUnformatted(r.messages));
    ok = r.model && strcmp(r.model, "m") == 0 && r.params.max_tokens == 64 && r.max_tokens_given && r.stream &&
         r.params.sampling.temperature == 0.5f && r.params.sampling.top_p == 0.9f && r.params.sampling.top_k == 7 &&
         r.params.n_stop == 2 && strcmp(r.stop[0], "END") == 0 && strcmp(r.stop[1], "STOP") == 0 &&
         cJSON_IsTrue(cJSON_GetObjectItemCaseSensitive(kwargs, "enable_thinking")) &&
         r.tool_choice == LM_TOOL_CHOICE_NAMED && strcmp(r.tool_name, "get_weather") == 0 &&
         cJSON_GetArraySize(r.tools) == 1 && str_is(tfn, "name", "get_weather") && str_is(tfn, "description", "d") &&
         cJSON_IsObject(cJSON_GetObjectItemCaseSensitive(tfn, "parameters")) && r.add_generation_prompt &&
         !r.continue_final_message && r.params.n == 1;
    lm_openai_request_free(&r);
    CHECK(ok);
}

/* Every prefix of a whole request, and the request with any one byte
 * changed, parses or fails with a message (never crashes or leaks: the ASan
 * tree runs this too). */
static void test_mangled(void) {
    const char *body =
        "{\"model\":\"m\",\"max_tokens\":64,\"stop_sequences\":[\"END\"],\"system\":[{\"type\":\"text\",\"text\":\"s\"}],"
        "\"thinking\":{\"type\":\"enabled\",\"budget_tokens\":2048},"
        "\"tools\":[{\"name\":\"f\",\"input_schema\":{\"type\":\"object\"}}],\"tool_choice\":{\"type\":\"tool\",\"name\":\"f\"},"
        "\"messages\":[{\"role\":\"user\",\"content\":[{\"type\":\"text\",\"text\":\"a\"},{\"type\":\"image\","
        "\"source\":{\"type\":\"base64\",\"media_type\":\"image/png\",\"data\":\"QUJD\"}}]},"
        "{\"role\":\"assistant\",\"content\":[{\"type\":\"thinking\",\"thinking\":\"t\"},"
        "{\"type\":\"tool_use\",\"id\":\"u\",\"name\":\"f\",\"input\":{\"k\":1}}]},"
        "{\"role\":\"user\",\"content\":[{\"type\":\"tool_result\",\"tool_use_id\":\"u\",\"content\":\"r\"}]}]}";
    static const lm_image_parts parts = {.marker = MARKER};
    size_t n = strlen(body);
    char *copy = malloc(n + 1);
    static const char subst[] = {'"', '{', ']', '0', 'x', ','};
    int bad = 0;
    for (size_t i = 0; i <= n; i++) {
        for (size_t k = 0; k <= sizeof subst; k++) {
            memcpy(copy, body, n + 1);
            size_t len = n;
            if (k == sizeof subst) len = i; /* a prefix */
            else if (i < n) copy[i] = subst[k];
            else continue;
            lm_openai_request r;
            char param[64];
            lm_error err = {0};
            bool one;
            lm_status st = lm_anthropic_request_parse(copy, len, k & 1, &parts, &r, &one, param, sizeof param, &err);
            if (st != LM_OK && !err.message[0]) bad++;
            if (st == LM_OK && (!cJSON_IsArray(r.messages) || r.params.n != 1)) bad++;
            lm_openai_request_free(&r);
        }
    }
    free(copy);
    lm_openai_request r;
    char param[64];
    lm_error err = {0};
    bool one;
    lm_status st = lm_anthropic_request_parse(body, n, false, &parts, &r, &one, param, sizeof param, &err);
    lm_openai_request_free(&r);
    CHECK_MSG(st == LM_OK && bad == 0, "%d bad results; the whole body: %s", bad, err.message);
}

/* tool_choice's types; thinking disabled; a last assistant turn is a
 * prefill; count_tokens needs no max_tokens; an image block's base64 is the
 * chat path's image. */
static void test_choices_and_prefill(void) {
    static const struct {
        const char *choice;
        lm_tool_choice want;
    } cases[] = {
        {"{\"type\":\"auto\"}", LM_TOOL_CHOICE_AUTO},
        {"{\"type\":\"any\"}", LM_TOOL_CHOICE_REQUIRED},
        {"{\"type\":\"none\",\"disable_parallel_tool_use\":true}", LM_TOOL_CHOICE_NONE},
    };
    char body[1024], param[64];
    lm_error err = {0};
    lm_openai_request r;
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        snprintf(body, sizeof body,
                 "{\"max_tokens\":5,\"tools\":[{\"name\":\"f\",\"input_schema\":{}}],\"tool_choice\":%s,"
                 "\"messages\":[{\"role\":\"user\",\"content\":\"x\"}]}",
                 cases[i].choice);
        CHECK_OK(parse(body, false, &r, param, &err), &err);
        bool ok = r.tool_choice == cases[i].want && (r.tools == NULL) == (cases[i].want == LM_TOOL_CHOICE_NONE);
        lm_openai_request_free(&r);
        CHECK_MSG(ok, "%s", cases[i].choice);
    }
    CHECK_OK(parse("{\"thinking\":{\"type\":\"disabled\"},\"messages\":[{\"role\":\"user\",\"content\":\"x\"},"
                   "{\"role\":\"assistant\",\"content\":[{\"type\":\"text\",\"text\":\"I am\"}]}]}",
                   true, &r, param, &err),
             &err);
    bool ok = r.continue_final_message && !r.add_generation_prompt &&
              cJSON_IsFalse(cJSON_GetObjectItemCaseSensitive(r.template_kwargs, "enable_thinking")) &&
              str_is(cJSON_GetArrayItem(r.messages, 1), "content", "I am");
    lm_openai_request_free(&r);
    CHECK(ok);
    CHECK_OK(parse("{\"max_tokens\":5,\"messages\":[{\"role\":\"user\",\"content\":[{\"type\":\"text\",\"text\":\"see \"},"
                   "{\"type\":\"image\",\"source\":{\"type\":\"base64\",\"media_type\":\"image/png\",\"data\":\"QUJD\"}}]}]}",
                   false, &r, param, &err),
             &err);
    ok = r.n_images == 1 && r.images[0].size == 3 && memcmp(r.images[0].data, "ABC", 3) == 0 &&
         str_is(cJSON_GetArrayItem(r.messages, 0), "content", "see " MARKER);
    lm_openai_request_free(&r);
    CHECK(ok);
}

/* Bad input: LM_ERR_INVALID, the field named in param and in the message. */
static void test_errors(void) {
    static const struct {
        const char *body, *param;
    } cases[] = {
        {"[1]", ""},
        {"{\"messages\":", ""},
        {"{\"messages\":[{\"role\":\"user\",\"content\":\"x\"}]}", "max_tokens"},
        {"{\"max_tokens\":\"5\",\"messages\":[{\"role\":\"user\",\"content\":\"x\"}]}", "max_tokens"},
        {"{\"max_tokens\":0,\"messages\":[{\"role\":\"user\",\"content\":\"x\"}]}", "max_tokens"},
        {"{\"max_tokens\":5}", "messages"},
        {"{\"max_tokens\":5,\"messages\":{}}", "messages"},
        {"{\"max_tokens\":5,\"messages\":[]}", "messages"},
        {"{\"max_tokens\":5,\"messages\":[7]}", "messages[0]"},
        {"{\"max_tokens\":5,\"messages\":[{\"role\":\"tool\",\"content\":\"x\"}]}", "messages[0].role"},
        {"{\"max_tokens\":5,\"messages\":[{\"role\":\"user\"}]}", "messages[0].content"},
        {"{\"max_tokens\":5,\"messages\":[{\"role\":\"user\",\"content\":[\"x\"]}]}", "messages[0].content[0]"},
        {"{\"max_tokens\":5,\"messages\":[{\"role\":\"user\",\"content\":[{\"type\":\"text\"}]}]}", "messages[0].content[0]"},
        {"{\"max_tokens\":5,\"messages\":[{\"role\":\"user\",\"content\":[{\"type\":\"document\"}]}]}", "messages[0].content[0]"},
        {"{\"max_tokens\":5,\"messages\":[{\"role\":\"user\",\"content\":[{\"type\":\"tool_use\",\"id\":\"a\",\"name\":\"f\","
         "\"input\":{}}]}]}", "messages[0].content[0]"},
        {"{\"max_tokens\":5,\"messages\":[{\"role\":\"assistant\",\"content\":[{\"type\":\"image\"}]}]}", "messages[0].content[0]"},
        {"{\"max_tokens\":5,\"messages\":[{\"role\":\"user\",\"content\":[{\"type\":\"image\",\"source\":{\"type\":\"file\"}}]}]}",
         "messages[0].content[0].source"},
        {"{\"max_tokens\":5,\"messages\":[{\"role\":\"user\",\"content\":[{\"type\":\"image\",\"source\":{\"type\":\"base64\"}}]}]}",
         "messages[0].content[0].source"},
        {"{\"max_tokens\":5,\"messages\":[{\"role\":\"user\",\"content\":[{\"type\":\"tool_result\"}]}]}",
         "messages[0].content[0].tool_use_id"},
        {"{\"max_tokens\":5,\"messages\":[{\"role\":\"user\",\"content\":[{\"type\":\"tool_result\",\"tool_use_id\":\"a\","
         "\"content\":[{\"type\":\"image\"}]}]}]}", "messages[0].content[0].content[0]"},
        {"{\"max_tokens\":5,\"messages\":[{\"role\":\"assistant\",\"content\":[{\"type\":\"tool_use\",\"name\":\"f\",\"input\":{}}]}]}",
         "messages[0].content[0].id"},
        {"{\"max_tokens\":5,\"messages\":[{\"role\":\"assistant\",\"content\":[{\"type\":\"tool_use\",\"id\":\"a\",\"name\":\"f\","
         "\"input\":[]}]}]}", "messages[0].content[0].input"},
        {"{\"max_tokens\":5,\"messages\":[{\"role\":\"assistant\",\"content\":[{\"type\":\"tool_use\",\"id\":\"a\",\"name\":\"f\","
         "\"input\":{}}]}]}", "messages[0]"},
        {"{\"max_tokens\":5,\"system\":5,\"messages\":[{\"role\":\"user\",\"content\":\"x\"}]}", "system"},
        {"{\"max_tokens\":5,\"system\":[{\"type\":\"image\"}],\"messages\":[{\"role\":\"user\",\"content\":\"x\"}]}", "system[0]"},
        {"{\"max_tokens\":5,\"temperature\":\"hot\",\"messages\":[{\"role\":\"user\",\"content\":\"x\"}]}", "temperature"},
        {"{\"max_tokens\":5,\"top_k\":1.5,\"messages\":[{\"role\":\"user\",\"content\":\"x\"}]}", "top_k"},
        {"{\"max_tokens\":5,\"stream\":1,\"messages\":[{\"role\":\"user\",\"content\":\"x\"}]}", "stream"},
        {"{\"max_tokens\":5,\"model\":3,\"messages\":[{\"role\":\"user\",\"content\":\"x\"}]}", "model"},
        {"{\"max_tokens\":5,\"stop_sequences\":\"x\",\"messages\":[{\"role\":\"user\",\"content\":\"x\"}]}", "stop_sequences"},
        {"{\"max_tokens\":5,\"stop_sequences\":[1],\"messages\":[{\"role\":\"user\",\"content\":\"x\"}]}", "stop_sequences"},
        {"{\"max_tokens\":5,\"tools\":{},\"messages\":[{\"role\":\"user\",\"content\":\"x\"}]}", "tools"},
        {"{\"max_tokens\":5,\"tools\":[{\"name\":\"a b\",\"input_schema\":{}}],\"messages\":[{\"role\":\"user\",\"content\":\"x\"}]}",
         "tools[0].name"},
        {"{\"max_tokens\":5,\"tools\":[{\"name\":\"f\"}],\"messages\":[{\"role\":\"user\",\"content\":\"x\"}]}",
         "tools[0].input_schema"},
        {"{\"max_tokens\":5,\"tools\":[{\"name\":\"f\",\"description\":1,\"input_schema\":{}}],\"messages\":[{\"role\":\"user\","
         "\"content\":\"x\"}]}", "tools[0].description"},
        {"{\"max_tokens\":5,\"tools\":[{\"type\":\"bash_20250124\",\"name\":\"bash\"}],\"messages\":[{\"role\":\"user\","
         "\"content\":\"x\"}]}", "tools[0].type"},
        {"{\"max_tokens\":5,\"tool_choice\":\"auto\",\"messages\":[{\"role\":\"user\",\"content\":\"x\"}]}", "tool_choice"},
        {"{\"max_tokens\":5,\"tool_choice\":{\"type\":\"maybe\"},\"messages\":[{\"role\":\"user\",\"content\":\"x\"}]}",
         "tool_choice.type"},
        {"{\"max_tokens\":5,\"tool_choice\":{\"type\":\"tool\"},\"messages\":[{\"role\":\"user\",\"content\":\"x\"}]}",
         "tool_choice.name"},
        {"{\"max_tokens\":5,\"tool_choice\":{\"type\":\"any\"},\"messages\":[{\"role\":\"user\",\"content\":\"x\"}]}", "tool_choice"},
        {"{\"max_tokens\":5,\"tools\":[{\"name\":\"f\",\"input_schema\":{}}],\"tool_choice\":{\"type\":\"tool\",\"name\":\"g\"},"
         "\"messages\":[{\"role\":\"user\",\"content\":\"x\"}]}", "tool_choice"},
        {"{\"max_tokens\":5,\"thinking\":true,\"messages\":[{\"role\":\"user\",\"content\":\"x\"}]}", "thinking"},
        {"{\"max_tokens\":5,\"thinking\":{\"type\":\"on\"},\"messages\":[{\"role\":\"user\",\"content\":\"x\"}]}", "thinking.type"},
        {"{\"max_tokens\":5,\"thinking\":{\"type\":\"enabled\",\"budget_tokens\":-1},\"messages\":[{\"role\":\"user\","
         "\"content\":\"x\"}]}", "thinking.budget_tokens"},
        {"{\"max_tokens\":5,\"messages\":[{\"role\":\"user\",\"content\":\"a\\u0000b\"}]}", "messages"},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        lm_openai_request r;
        char param[64] = "unset";
        lm_error err = {0};
        lm_status st = parse(cases[i].body, false, &r, param, &err);
        bool named = strcmp(param, cases[i].param) == 0 && (!param[0] || strstr(err.message, param));
        lm_openai_request_free(&r);
        CHECK_MSG(st == LM_ERR_INVALID && named, "%s: status %d, param '%s' (want '%s'), message '%s'", cases[i].body, st,
                  param, cases[i].param, err.message);
    }
}

/* The bounds on the bytes: depth 64, values (413), before cJSON. */
static void test_bounds(void) {
    size_t n = 70;
    char *deep = malloc(2 * n + 64);
    int k = sprintf(deep, "{\"max_tokens\":5,\"x\":");
    for (size_t i = 0; i < n; i++) deep[k++] = '[';
    for (size_t i = 0; i < n; i++) deep[k++] = ']';
    strcpy(deep + k, "}");
    lm_openai_request r;
    char param[64];
    lm_error err = {0};
    lm_status st = parse(deep, false, &r, param, &err);
    free(deep);
    bool ok = st == LM_ERR_INVALID && !r.too_large && strstr(err.message, "nested");
    lm_openai_request_free(&r);
    CHECK_MSG(ok, "%s", err.message);
    size_t values = LM_REQUEST_MAX_VALUES + 10;
    char *many = malloc(2 * values + 64);
    k = sprintf(many, "{\"max_tokens\":5,\"x\":[");
    for (size_t i = 0; i < values; i++) many[k++] = '1', many[k++] = ',';
    strcpy(many + k - 1, "]}");
    st = parse(many, false, &r, param, &err);
    free(many);
    ok = st == LM_ERR_INVALID && r.too_large;
    lm_openai_request_free(&r);
    CHECK_MSG(ok, "%s", err.message);
}

static cJSON *parse_json(const char *text) { return cJSON_Parse(text); }

/* The message object: blocks in order (thinking, text, tool_use with its
 * input object), stop reasons, usage with the prefix cache's tokens. */
static void test_message(void) {
    lm_tool_call call = {.id = "call_1", .name = "f", .arguments = "{\"a\":1}"};
    lm_tool_call_list calls = {.items = &call, .n = 1, .cap = 1};
    char id[LM_ANTHROPIC_TOOL_USE_ID_SIZE];
    lm_anthropic_tool_use_id("call_1", id);
    lm_anthropic_output o = {.id = "msg_1", .model = "m", .thinking = "hm", .text = "hi", .calls = &calls,
                             .stop_reason = lm_anthropic_stop_reason(LOOM_FINISH_STOP, false, true),
                             .prompt_tokens = 10, .cached_tokens = 4, .output_tokens = 3};
    cJSON *m = lm_anthropic_message(&o);
    const cJSON *content = cJSON_GetObjectItemCaseSensitive(m, "content");
    const cJSON *use = cJSON_GetArrayItem(content, 2);
    const cJSON *usage = cJSON_GetObjectItemCaseSensitive(m, "usage");
    bool ok = str_is(m, "type", "message") && str_is(m, "role", "assistant") && str_is(m, "id", "msg_1") &&
              cJSON_GetArraySize(content) == 3 && str_is(cJSON_GetArrayItem(content, 0), "type", "thinking") &&
              str_is(cJSON_GetArrayItem(content, 0), "thinking", "hm") &&
              str_is(cJSON_GetArrayItem(content, 1), "text", "hi") && str_is(use, "type", "tool_use") &&
              str_is(use, "id", id) &&
              cJSON_GetObjectItemCaseSensitive(cJSON_GetObjectItemCaseSensitive(use, "input"), "a")->valueint == 1 &&
              str_is(m, "stop_reason", "tool_use") && cJSON_IsNull(cJSON_GetObjectItemCaseSensitive(m, "stop_sequence")) &&
              cJSON_GetObjectItemCaseSensitive(usage, "input_tokens")->valueint == 6 &&
              cJSON_GetObjectItemCaseSensitive(usage, "cache_read_input_tokens")->valueint == 4 &&
              cJSON_GetObjectItemCaseSensitive(usage, "output_tokens")->valueint == 3;
    cJSON_Delete(m);
    CHECK(ok);
    CHECK(strcmp(lm_anthropic_stop_reason(LOOM_FINISH_LENGTH, false, true), "max_tokens") == 0);
    CHECK(strcmp(lm_anthropic_stop_reason(LOOM_FINISH_STOP, true, false), "stop_sequence") == 0);
    CHECK(strcmp(lm_anthropic_stop_reason(LOOM_FINISH_STOP, false, false), "end_turn") == 0);
    /* An unparseable (cut) call's input is an empty object. */
    call.arguments = "{\"a\": tr";
    o = (lm_anthropic_output){.id = "msg_2", .model = "m", .thinking = "", .text = "", .calls = &calls,
                              .stop_reason = "max_tokens"};
    m = lm_anthropic_message(&o);
    use = cJSON_GetArrayItem(cJSON_GetObjectItemCaseSensitive(m, "content"), 0);
    ok = cJSON_GetArraySize(cJSON_GetObjectItemCaseSensitive(m, "content")) == 1 &&
         cJSON_IsObject(cJSON_GetObjectItemCaseSensitive(use, "input")) &&
         cJSON_GetArraySize(cJSON_GetObjectItemCaseSensitive(use, "input")) == 0;
    cJSON_Delete(m);
    CHECK(ok);
}

/* The stream: event names equal the data's type, blocks open and close in
 * order with consecutive indexes. */
static void test_stream(void) {
    lm_anthropic_output o = {.id = "msg_1", .model = "m", .prompt_tokens = 5, .output_tokens = 0};
    lm_sbuf out = {0};
    lm_anthropic_stream st = {0};
    lm_anthropic_stream_start(&out, &o);
    lm_anthropic_stream_delta(&st, &out, "a", "");
    lm_anthropic_stream_delta(&st, &out, "b", "c");
    lm_anthropic_stream_delta(&st, &out, "", "d");
    /* a call streamed in two fragments */
    lm_tool_delta d1 = {.index = 0, .id = "call_1", .name = "f", .first = true, .fragment = "{\"a\":", .fragment_len = 5};
    lm_tool_delta d2 = {.index = 0, .id = "call_1", .name = "f", .fragment = "1}", .fragment_len = 2,
                        .sent_before = 5, .last = true, .arguments = "{\"a\":1}"};
    lm_anthropic_stream_tool(&st, &out, &d1);
    lm_anthropic_stream_tool(&st, &out, &d2);
    o.stop_reason = "tool_use";
    o.output_tokens = 4;
    lm_anthropic_stream_end(&st, &out, &o);
    static const char *const want[] = {
        "message_start", "ping",
        "content_block_start:0", "content_block_delta:0", "content_block_delta:0", "content_block_delta:0",
        "content_block_stop:0",
        "content_block_start:1", "content_block_delta:1", "content_block_delta:1", "content_block_stop:1",
        "content_block_start:2", "content_block_delta:2", "content_block_delta:2", "content_block_stop:2",
        "message_delta", "message_stop"};
    size_t n = 0;
    bool ok = !out.failed;
    char *text = strdup(lm_sbuf_str(&out));
    for (char *p = text; ok && (p = strstr(p, "event: ")); n++) {
        char name[64];
        char *nl = strchr(p, '\n');
        snprintf(name, sizeof name, "%.*s", (int)(nl - p - 7), p + 7);
        char *data = nl + 7, *end = strstr(data, "\n\n");
        *end = 0;
        cJSON *j = parse_json(data);
        const cJSON *index = cJSON_GetObjectItemCaseSensitive(j, "index");
        char got[80];
        if (cJSON_IsNumber(index)) snprintf(got, sizeof got, "%s:%d", name, index->valueint);
        else snprintf(got, sizeof got, "%s", name);
        ok = n < sizeof want / sizeof want[0] && strcmp(got, want[n]) == 0 && str_is(j, "type", name);
        if (!ok) test_failed(__FILE__, __LINE__, "event %zu: %s (want %s)", n, got, n < sizeof want / sizeof want[0] ? want[n] : "none");
        cJSON_Delete(j);
        p = end + 2;
    }
    free(text);
    /* the streamed block has the id the whole message gives the call */
    char id[LM_ANTHROPIC_TOOL_USE_ID_SIZE], quoted[64];
    lm_anthropic_tool_use_id("call_1", id);
    snprintf(quoted, sizeof quoted, "\"id\":\"%s\"", id);
    ok = ok && strstr(lm_sbuf_str(&out), quoted) && !strstr(lm_sbuf_str(&out), "call_1");
    bool tail = strstr(lm_sbuf_str(&out), "\"stop_reason\":\"tool_use\"") &&
                strstr(lm_sbuf_str(&out), "\"partial_json\":\"{\\\"a\\\":\"") &&
                strstr(lm_sbuf_str(&out), "\"partial_json\":\"1}\"") &&
                strstr(lm_sbuf_str(&out), "\"type\":\"signature_delta\"");
    lm_sbuf_free(&out);
    CHECK(ok && n == sizeof want / sizeof want[0] && tail);
}

static void test_error_bodies(void) {
    static const struct {
        unsigned status;
        const char *type;
    } cases[] = {{400, "invalid_request_error"}, {401, "authentication_error"}, {404, "not_found_error"},
                 {413, "request_too_large"},    {503, "overloaded_error"},     {500, "api_error"}};
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        char *text = lm_anthropic_error_body(cases[i].status, "why", "req_x");
        cJSON *j = parse_json(text);
        const cJSON *e = cJSON_GetObjectItemCaseSensitive(j, "error");
        bool ok = str_is(j, "type", "error") && str_is(e, "type", cases[i].type) && str_is(e, "message", "why");
        cJSON_Delete(j);
        cJSON_free(text);
        CHECK_MSG(ok, "%u", cases[i].status);
    }
}

/* tool_use ids: Anthropic's form ("toolu_" + 24 letters and digits), one
 * per call id (2000 distinct call ids give 2000 distinct tool_use ids). */
static void test_tool_use_ids(void) {
    enum { N = 2000 };
    static char ids[N][LM_ANTHROPIC_TOOL_USE_ID_SIZE];
    int bad = 0, same = 0;
    for (int i = 0; i < N; i++) {
        char call[40];
        snprintf(call, sizeof call, "call_%016x%08x", (unsigned)(i * 2654435761u), (unsigned)i);
        lm_anthropic_tool_use_id(call, ids[i]);
        bad += !has_form(ids[i], "toolu_", 24);
        char again[LM_ANTHROPIC_TOOL_USE_ID_SIZE];
        lm_anthropic_tool_use_id(call, again);
        bad += strcmp(again, ids[i]) != 0;
    }
    for (int i = 0; i < N; i++)
        for (int j = i + 1; j < N; j++) same += strcmp(ids[i], ids[j]) == 0;
    CHECK_MSG(bad == 0 && same == 0, "%d malformed or unstable, %d equal pairs (%s)", bad, same, ids[0]);
}

/* disable_parallel_tool_use: the answer keeps the first call (whole and
 * streamed); the flag is off for none and when not given. */
static void test_one_tool_use(void) {
    char param[64];
    lm_error err = {0};
    lm_openai_request r;
    bool one = false;
    const char *body = "{\"max_tokens\":5,\"tools\":[{\"name\":\"f\",\"input_schema\":{}}],\"tool_choice\":"
                       "{\"type\":\"any\",\"disable_parallel_tool_use\":true},\"messages\":[{\"role\":\"user\",\"content\":\"x\"}]}";
    CHECK_OK(lm_anthropic_request_parse(body, strlen(body), false, &(lm_image_parts){0}, &r, &one, param, 64, &err), &err);
    lm_openai_request_free(&r);
    CHECK(one);
    body = "{\"max_tokens\":5,\"tools\":[{\"name\":\"f\",\"input_schema\":{}}],\"tool_choice\":{\"type\":\"any\"},"
           "\"messages\":[{\"role\":\"user\",\"content\":\"x\"}]}";
    CHECK_OK(lm_anthropic_request_parse(body, strlen(body), false, &(lm_image_parts){0}, &r, &one, param, 64, &err), &err);
    lm_openai_request_free(&r);
    CHECK(!one);

    lm_tool_call two[2] = {{.id = "call_1", .name = "f", .arguments = "{}"}, {.id = "call_2", .name = "g", .arguments = "{}"}};
    lm_tool_call_list calls = {.items = two, .n = 2, .cap = 2};
    lm_anthropic_output o = {.id = "msg_1", .model = "m", .text = "", .thinking = "", .calls = &calls,
                             .stop_reason = "tool_use", .one_tool_use = true};
    cJSON *m = lm_anthropic_message(&o);
    const cJSON *content = cJSON_GetObjectItemCaseSensitive(m, "content");
    bool ok = cJSON_GetArraySize(content) == 1 && str_is(cJSON_GetArrayItem(content, 0), "name", "f");
    cJSON_Delete(m);
    o.one_tool_use = false;
    m = lm_anthropic_message(&o);
    ok = ok && cJSON_GetArraySize(cJSON_GetObjectItemCaseSensitive(m, "content")) == 2;
    cJSON_Delete(m);
    CHECK(ok);
    lm_sbuf out = {0};
    lm_anthropic_stream st = {.one_tool_use = true};
    for (int i = 0; i < 2; i++) {
        lm_tool_delta d = {.index = i, .id = two[i].id, .name = two[i].name, .first = true, .fragment = "{}",
                           .fragment_len = 2, .last = true, .arguments = "{}"};
        lm_anthropic_stream_tool(&st, &out, &d);
    }
    CHECK(strstr(lm_sbuf_str(&out), "\"name\":\"f\"") && !strstr(lm_sbuf_str(&out), "\"name\":\"g\"") &&
          st.next_index == 1);
    lm_sbuf_free(&out);
}

/* output_config.format (and the beta's output_format) become the chat
 * request's JSON-schema grammar; strict tools keep strict; shapes that are
 * not a json_schema format are 400s naming the Anthropic field. */
static void test_output_format(void) {
    char param[64], body[1024];
    lm_error err = {0};
    lm_openai_request r;
    static const char *const formats[] = {
        "\"output_config\":{\"format\":{\"type\":\"json_schema\",\"schema\":{\"type\":\"object\",\"properties\":"
        "{\"a\":{\"type\":\"integer\"}},\"required\":[\"a\"],\"additionalProperties\":false}},\"effort\":\"low\"}",
        "\"output_format\":{\"type\":\"json_schema\",\"schema\":{\"type\":\"string\"}}",
    };
    for (size_t i = 0; i < sizeof formats / sizeof formats[0]; i++) {
        snprintf(body, sizeof body, "{\"max_tokens\":5,%s,\"messages\":[{\"role\":\"user\",\"content\":\"x\"}]}", formats[i]);
        CHECK_OK(parse(body, false, &r, param, &err), &err);
        bool ok = r.grammar && r.params.grammar == r.grammar;
        lm_openai_request_free(&r);
        CHECK_MSG(ok, "%s", formats[i]);
    }
    /* counting tokens reads no format */
    CHECK_OK(parse("{\"output_config\":{\"format\":{\"type\":\"json_schema\",\"schema\":{}}},"
                   "\"messages\":[{\"role\":\"user\",\"content\":\"x\"}]}", true, &r, param, &err), &err);
    CHECK(!r.grammar);
    lm_openai_request_free(&r);
    CHECK_OK(parse("{\"max_tokens\":5,\"tools\":[{\"name\":\"f\",\"strict\":true,\"input_schema\":{\"type\":\"object\"}},"
                   "{\"name\":\"g\",\"input_schema\":{}}],\"tool_choice\":{\"type\":\"tool\",\"name\":\"f\"},"
                   "\"messages\":[{\"role\":\"user\",\"content\":\"x\"}]}", false, &r, param, &err), &err);
    const cJSON *f = cJSON_GetObjectItemCaseSensitive(cJSON_GetArrayItem(r.tools, 0), "function");
    const cJSON *g = cJSON_GetObjectItemCaseSensitive(cJSON_GetArrayItem(r.tools, 1), "function");
    bool ok = cJSON_IsTrue(cJSON_GetObjectItemCaseSensitive(f, "strict")) &&
              !cJSON_GetObjectItemCaseSensitive(g, "strict") && r.tool_choice == LM_TOOL_CHOICE_NAMED &&
              strcmp(r.tool_name, "f") == 0;
    lm_openai_request_free(&r);
    CHECK(ok);
    static const struct {
        const char *fields, *param;
    } bad[] = {
        {"\"output_config\":7", "output_config"},
        {"\"output_config\":{\"effort\":1}", "output_config.effort"},
        {"\"output_config\":{\"format\":{\"type\":\"text\"}}", "output_config.format"},
        {"\"output_config\":{\"format\":{\"type\":\"json_schema\"}}", "output_config.format.schema"},
        {"\"output_format\":{\"type\":\"json_schema\",\"schema\":[]}", "output_format.schema"},
        {"\"output_format\":{\"type\":\"json_schema\",\"schema\":{}},\"output_config\":{\"format\":"
         "{\"type\":\"json_schema\",\"schema\":{}}}", "output_format"},
        /* a schema loom cannot enforce: the OpenAI parser's 400, in Anthropic's terms */
        {"\"output_config\":{\"format\":{\"type\":\"json_schema\",\"schema\":{\"type\":\"nonsense\"}}}", "output_config.format"},
        {"\"tools\":[{\"name\":\"f\",\"strict\":\"yes\",\"input_schema\":{}}]", "tools[0].strict"},
    };
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        snprintf(body, sizeof body, "{\"max_tokens\":5,%s,\"messages\":[{\"role\":\"user\",\"content\":\"x\"}]}", bad[i].fields);
        err.message[0] = 0;
        lm_status st = parse(body, false, &r, param, &err);
        lm_openai_request_free(&r);
        CHECK_MSG(st == LM_ERR_INVALID && strcmp(param, bad[i].param) == 0 && strstr(err.message, bad[i].param) &&
                  !strstr(err.message, "response_format"),
                  "%s: param '%s', message %s", bad[i].fields, param, err.message);
    }
}

/* The error table: each API's type for the statuses the SDKs map to their
 * exception classes; Anthropic's body carries the request id. */
static void test_error_types(void) {
    static const struct {
        unsigned status;
        const char *openai, *anthropic;
    } cases[] = {{400, "invalid_request_error", "invalid_request_error"}, {401, "authentication_error", "authentication_error"},
                 {403, "permission_error", "permission_error"},          {404, "not_found_error", "not_found_error"},
                 {408, "invalid_request_error", "timeout_error"},        {413, "invalid_request_error", "request_too_large"},
                 {429, "rate_limit_error", "rate_limit_error"},          {500, "server_error", "api_error"},
                 {503, "server_error", "overloaded_error"},              {529, "server_error", "overloaded_error"},
                 {422, "invalid_request_error", "invalid_request_error"}, {502, "server_error", "api_error"}};
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        char *text = lm_error_json_body(cases[i].status, "why", i == 0 ? "model" : NULL);
        cJSON *j = parse_json(text);
        const cJSON *e = cJSON_GetObjectItemCaseSensitive(j, "error");
        const cJSON *param = cJSON_GetObjectItemCaseSensitive(e, "param");
        bool ok = str_is(e, "message", "why") && str_is(e, "type", cases[i].openai) &&
                  (i == 0 ? str_is(e, "param", "model") : cJSON_IsNull(param)) &&
                  cJSON_GetObjectItemCaseSensitive(e, "code")->valueint == (int)cases[i].status;
        cJSON_Delete(j);
        cJSON_free(text);
        ok = ok && strcmp(lm_anthropic_error_type(cases[i].status), cases[i].anthropic) == 0;
        CHECK_MSG(ok, "%u", cases[i].status);
    }
    char *text = lm_anthropic_error_body(404, "gone", "req_abc");
    cJSON *j = parse_json(text);
    CHECK(str_is(j, "request_id", "req_abc") && cJSON_GetArraySize(j) == 3);
    cJSON_Delete(j);
    cJSON_free(text);
    text = lm_anthropic_error_body(404, "gone", NULL);
    j = parse_json(text);
    CHECK(!cJSON_GetObjectItemCaseSensitive(j, "request_id") && cJSON_GetArraySize(j) == 2);
    cJSON_Delete(j);
    cJSON_free(text);
}

/* Request ids: Anthropic's "req_" + 24 letters and digits, OpenAI's
 * "req_" + 32 hex digits or the client's X-Request-Id when it is sane. */
static void test_request_ids(void) {
    char a[LM_REQUEST_ID_SIZE], b[LM_REQUEST_ID_SIZE];
    lm_request_id_make(true, "mine", 1, a);
    lm_request_id_make(true, NULL, 2, b);
    CHECK(has_form(a, "req_", 24) && has_form(b, "req_", 24) && strcmp(a, b) != 0);
    lm_request_id_make(false, NULL, 3, a);
    bool hex = strlen(a) == 36 && strspn(a + 4, "0123456789abcdef") == 32 && strncmp(a, "req_", 4) == 0;
    CHECK_MSG(hex, "%s", a);
    lm_request_id_make(false, "trace-42", 4, a);
    CHECK(strcmp(a, "trace-42") == 0);
    char long_id[80];
    memset(long_id, 'x', 65);
    long_id[65] = 0;
    const char *const refused[] = {"", "a b", "\x01", long_id};
    for (size_t i = 0; i < sizeof refused / sizeof refused[0]; i++) {
        lm_request_id_make(false, refused[i], 5, a);
        CHECK_MSG(strncmp(a, "req_", 4) == 0 && strlen(a) == 36, "'%s' gave %s", refused[i], a);
    }
}

int main(void) {
    RUN_TEST(test_translation);
    RUN_TEST(test_choices_and_prefill);
    RUN_TEST(test_errors);
    RUN_TEST(test_bounds);
    RUN_TEST(test_mangled);
    RUN_TEST(test_message);
    RUN_TEST(test_stream);
    RUN_TEST(test_error_bodies);
    RUN_TEST(test_tool_use_ids);
    RUN_TEST(test_one_tool_use);
    RUN_TEST(test_output_format);
    RUN_TEST(test_error_types);
    RUN_TEST(test_request_ids);
    return test_summary("test_anthropic_request");
}
