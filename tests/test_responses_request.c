/* The Responses API's translation (src/server/responses_request.c) into the
 * chat request the OpenAI path serves, its errors (400s naming the field in
 * the Responses API's terms), and the output shapes
 * (src/server/responses_response.c): the response object and the stream's
 * events with their sequence numbers. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "harness.h"
#include "server/responses_context.h"
#include "server/responses_request.h"
#include "server/responses_response.h"

#define MARKER "<|vision_start|><|image_pad|><|vision_end|>"

static const lm_image_parts parts = {.marker = MARKER};

/* The parse without a store (test_server_responses.sh has one), keeping
 * only the echo. */
static lm_status parse_n(const char *body, size_t len, lm_openai_request *r, cJSON **echo, char *param,
                         size_t param_size, lm_error *err) {
    lm_responses_parsed parsed;
    lm_status st = lm_responses_request_parse(body, len, &parts, NULL, 0, r, &parsed, param, param_size, err);
    *echo = parsed.echo;
    parsed.echo = NULL;
    lm_responses_parsed_free(&parsed);
    return st;
}

static lm_status parse(const char *body, lm_openai_request *r, cJSON **echo, char *param, lm_error *err) {
    return parse_n(body, strlen(body), r, echo, param, 64, err);
}

static bool str_is(const cJSON *obj, const char *key, const char *want) {
    const cJSON *v = cJSON_GetObjectItemCaseSensitive(obj, key);
    return cJSON_IsString(v) && strcmp(v->valuestring, want) == 0;
}

/* A whole round trip: instructions, a user message of parts (text and an
 * image), a reasoning item, an assistant message and its two calls, their
 * outputs, tools, a named tool_choice, text.format, reasoning, sampling. */
static void test_translation(void) {
    const char *body =
        "{\"model\":\"m\",\"instructions\":\"be brief\",\"max_output_tokens\":64,\"temperature\":0.5,\"top_p\":0.9,"
        "\"stream\":true,\"store\":false,\"metadata\":{\"k\":\"v\"},\"parallel_tool_calls\":true,"
        "\"reasoning\":{\"effort\":\"high\"},\"text\":{\"format\":{\"type\":\"json_schema\",\"name\":\"a\","
        "\"schema\":{\"type\":\"object\"},\"strict\":true}},"
        "\"tools\":[{\"type\":\"function\",\"name\":\"get_weather\",\"description\":\"d\",\"strict\":true,"
        "\"parameters\":{\"type\":\"object\"}}],\"tool_choice\":{\"type\":\"function\",\"name\":\"get_weather\"},"
        "\"input\":[{\"role\":\"user\",\"content\":[{\"type\":\"input_text\",\"text\":\"Weather \"},"
        "{\"type\":\"input_image\",\"image_url\":\"data:image/png;base64,QUJD\",\"detail\":\"auto\"},"
        "{\"type\":\"input_text\",\"text\":\"here?\"}]},"
        "{\"type\":\"reasoning\",\"id\":\"rs_1\",\"summary\":[],\"content\":[{\"type\":\"reasoning_text\",\"text\":\"hm\"}]},"
        "{\"type\":\"message\",\"role\":\"assistant\",\"content\":[{\"type\":\"output_text\",\"text\":\"Looking.\"}]},"
        "{\"type\":\"function_call\",\"call_id\":\"c1\",\"name\":\"get_weather\",\"arguments\":\"{\\\"city\\\":\\\"Paris\\\"}\"},"
        "{\"type\":\"function_call\",\"call_id\":\"c2\",\"name\":\"get_weather\",\"arguments\":\"{}\"},"
        "{\"type\":\"function_call_output\",\"call_id\":\"c1\",\"output\":\"sunny\"},"
        "{\"type\":\"function_call_output\",\"call_id\":\"c2\",\"output\":[{\"type\":\"input_text\",\"text\":\"rain\"}]},"
        "{\"role\":\"developer\",\"content\":\"thanks\"}]}";
    lm_openai_request r;
    cJSON *echo = NULL;
    char param[64];
    lm_error err = {0};
    CHECK_OK(parse(body, &r, &echo, param, &err), &err);
    const cJSON *m = r.messages;
    const cJSON *sys = cJSON_GetArrayItem(m, 0), *user = cJSON_GetArrayItem(m, 1), *asst = cJSON_GetArrayItem(m, 2);
    const cJSON *t1 = cJSON_GetArrayItem(m, 3), *t2 = cJSON_GetArrayItem(m, 4), *dev = cJSON_GetArrayItem(m, 5);
    const cJSON *calls = cJSON_GetObjectItemCaseSensitive(asst, "tool_calls");
    const cJSON *fn = cJSON_GetObjectItemCaseSensitive(cJSON_GetArrayItem(calls, 0), "function");
    const cJSON *args = cJSON_GetObjectItemCaseSensitive(fn, "arguments");
    bool ok = cJSON_GetArraySize(m) == 6 && str_is(sys, "role", "system") && str_is(sys, "content", "be brief") &&
              str_is(user, "role", "user") && str_is(user, "content", "Weather " MARKER "here?") &&
              str_is(asst, "role", "assistant") && str_is(asst, "content", "Looking.") &&
              str_is(asst, "reasoning_content", "hm") && cJSON_GetArraySize(calls) == 2 &&
              str_is(cJSON_GetArrayItem(calls, 0), "id", "c1") && str_is(cJSON_GetArrayItem(calls, 1), "id", "c2") &&
              str_is(fn, "name", "get_weather") && str_is(args, "city", "Paris") && str_is(t1, "role", "tool") &&
              str_is(t1, "tool_call_id", "c1") && str_is(t1, "content", "sunny") && str_is(t2, "content", "rain") &&
              str_is(dev, "role", "system") && str_is(dev, "content", "thanks");
    CHECK_MSG(ok, "messages: %s", cJSON_PrintUnformatted(r.messages));
    const cJSON *tfn = cJSON_GetObjectItemCaseSensitive(cJSON_GetArrayItem(r.tools, 0), "function");
    ok = r.model && strcmp(r.model, "m") == 0 && r.params.max_tokens == 64 && r.max_tokens_given && r.stream &&
         r.params.sampling.temperature == 0.5f && r.params.sampling.top_p == 0.9f && r.n_images == 1 &&
         r.images[0].size == 3 && memcmp(r.images[0].data, "ABC", 3) == 0 &&
         cJSON_IsTrue(cJSON_GetObjectItemCaseSensitive(r.template_kwargs, "enable_thinking")) &&
         r.tool_choice == LM_TOOL_CHOICE_NAMED && strcmp(r.tool_name, "get_weather") == 0 &&
         str_is(tfn, "name", "get_weather") && str_is(tfn, "description", "d") &&
         cJSON_IsTrue(cJSON_GetObjectItemCaseSensitive(tfn, "strict")) && r.params.n == 1;
    CHECK(ok);
    /* the echo: the response repeats these */
    const cJSON *fmt = cJSON_GetObjectItemCaseSensitive(cJSON_GetObjectItemCaseSensitive(echo, "text"), "format");
    ok = str_is(echo, "instructions", "be brief") && str_is(fmt, "type", "json_schema") && str_is(fmt, "name", "a") &&
         str_is(cJSON_GetObjectItemCaseSensitive(echo, "metadata"), "k", "v") &&
         cJSON_IsFalse(cJSON_GetObjectItemCaseSensitive(echo, "store")) &&
         cJSON_GetArraySize(cJSON_GetObjectItemCaseSensitive(echo, "tools")) == 1 &&
         cJSON_GetObjectItemCaseSensitive(echo, "max_output_tokens")->valuedouble == 64;
    CHECK_MSG(ok, "echo: %s", cJSON_PrintUnformatted(echo));
    cJSON_Delete(echo);
    lm_openai_request_free(&r);
    /* a string input is one user message; effort none turns thinking off */
    CHECK_OK(parse("{\"input\":\"hi\",\"reasoning\":{\"effort\":\"none\"},\"tool_choice\":\"none\"}", &r, &echo, param,
                   &err), &err);
    ok = cJSON_GetArraySize(r.messages) == 1 && str_is(cJSON_GetArrayItem(r.messages, 0), "content", "hi") &&
         cJSON_IsFalse(cJSON_GetObjectItemCaseSensitive(r.template_kwargs, "enable_thinking")) && !r.tools &&
         str_is(echo, "tool_choice", "none") && cJSON_IsNull(cJSON_GetObjectItemCaseSensitive(echo, "instructions"));
    cJSON_Delete(echo);
    lm_openai_request_free(&r);
    CHECK(ok);
}

/* Every prefix of a whole request, and the request with any one byte
 * changed, parses or fails with a message (never crashes or leaks: the ASan
 * tree runs this too); the echo exists exactly when it parses. */
static void test_mangled(void) {
    const char *body =
        "{\"model\":\"m\",\"instructions\":\"s\",\"max_output_tokens\":64,\"reasoning\":{\"effort\":\"low\"},"
        "\"text\":{\"format\":{\"type\":\"json_schema\",\"name\":\"a\",\"schema\":{}}},\"metadata\":{\"a\":\"b\"},"
        "\"tools\":[{\"type\":\"function\",\"name\":\"f\",\"parameters\":{\"type\":\"object\"}}],"
        "\"tool_choice\":{\"type\":\"function\",\"name\":\"f\"},"
        "\"input\":[{\"role\":\"user\",\"content\":[{\"type\":\"input_text\",\"text\":\"a\"},{\"type\":\"input_image\","
        "\"image_url\":\"data:image/png;base64,QUJD\"}]},{\"type\":\"reasoning\",\"summary\":[{\"type\":\"summary_text\","
        "\"text\":\"t\"}]},{\"type\":\"function_call\",\"call_id\":\"u\",\"name\":\"f\",\"arguments\":\"{\\\"k\\\":1}\"},"
        "{\"type\":\"function_call_output\",\"call_id\":\"u\",\"output\":\"r\"}]}";
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
            cJSON *echo = NULL;
            char param[64];
            lm_error err = {0};
            lm_status st = parse_n(copy, len, &r, &echo, param, sizeof param, &err);
            if (st != LM_OK && (!err.message[0] || echo)) bad++;
            if (st == LM_OK && (!cJSON_IsArray(r.messages) || r.params.n != 1 || !cJSON_IsObject(echo))) bad++;
            cJSON_Delete(echo);
            lm_openai_request_free(&r);
        }
    }
    free(copy);
    lm_openai_request r;
    cJSON *echo = NULL;
    char param[64];
    lm_error err = {0};
    lm_status st = parse_n(body, n, &r, &echo, param, sizeof param, &err);
    cJSON_Delete(echo);
    lm_openai_request_free(&r);
    CHECK_MSG(st == LM_OK && bad == 0, "%d bad results; the whole body: %s", bad, err.message);
}

/* 400s name the field in the Responses API's terms and say why. */
static void test_errors(void) {
    static const struct {
        const char *body, *param, *says;
    } cases[] = {
        {"{\"input\":\"a\",\"previous_response_id\":\"resp_1\"}", "previous_response_id", "keeps no responses"},
        {"{\"input\":\"a\",\"store\":1}", "store", "boolean"},
        {"{\"input\":\"a\",\"background\":true}", "background", "foreground"},
        {"{\"input\":[{\"type\":\"item_reference\",\"id\":\"x\"}]}", "input[0]", "keeps no responses"},
        {"{\"input\":\"a\",\"tools\":[{\"type\":\"file_search\"}]}", "tools[0].type", "function tools"},
        {"{\"input\":\"a\",\"tools\":[{\"type\":\"function\",\"name\":\"a b\"}]}", "tools[0].name", "a-z"},
        {"{}", "input", "required"},
        {"{\"input\":5}", "input", "string or a list"},
        {"{\"input\":[5]}", "input[0]", "object"},
        {"{\"input\":[{\"type\":\"web_search_call\"}]}", "input[0].type", "not supported"},
        {"{\"input\":[{\"role\":\"user\",\"content\":[{\"type\":\"input_audio\"}]}]}", "input[0].content[0]",
         "not supported"},
        {"{\"input\":[{\"role\":\"user\",\"content\":[{\"type\":\"input_image\",\"file_id\":\"f\"}]}]}",
         "input[0].content[0]", "file_id"},
        {"{\"input\":[{\"role\":\"assistant\",\"content\":[{\"type\":\"input_image\",\"image_url\":\"x\"}]}]}",
         "input[0].content[0]", "user messages"},
        {"{\"input\":[{\"type\":\"function_call\",\"call_id\":\"c\",\"name\":\"f\"}]}", "input[0].arguments", "string"},
        {"{\"input\":[{\"type\":\"function_call_output\",\"call_id\":\"c\",\"output\":5}]}", "input[0].output",
         "string"},
        {"{\"input\":[{\"type\":\"reasoning\",\"summary\":5}]}", "input[0].summary", "list"},
        {"{\"input\":\"a\",\"max_output_tokens\":0}", "max_output_tokens", "'max_output_tokens'"},
        {"{\"input\":\"a\",\"text\":{\"format\":{\"type\":\"xml\"}}}", "text.format.type", "json_schema"},
        {"{\"input\":\"a\",\"text\":{\"format\":{\"type\":\"json_schema\",\"schema\":{}}}}", "text.format.name", "string"},
        {"{\"input\":\"a\",\"reasoning\":{\"effort\":\"max\"}}", "reasoning.effort", "effort"},
        {"{\"input\":\"a\",\"tool_choice\":{\"type\":\"mcp\"}}", "tool_choice.type", "function"},
        {"{\"input\":\"a\",\"tool_choice\":\"sometimes\"}", "tool_choice", "none, auto"},
        {"{\"input\":\"a\",\"metadata\":{\"k\":5}}", "metadata", "strings"},
        {"{\"input\":\"a\",\"top_logprobs\":3}", "top_logprobs", "not supported"},
        {"{\"input\":\"a\\u0000\"}", "input", "NUL"},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        lm_openai_request r;
        cJSON *echo = NULL;
        char param[64] = "";
        lm_error err = {0};
        lm_status st = parse(cases[i].body, &r, &echo, param, &err);
        CHECK_MSG(st == LM_ERR_INVALID && strcmp(param, cases[i].param) == 0 && strstr(err.message, cases[i].says) &&
                      !echo,
                  "%s: param '%s', '%s'", cases[i].body, param, err.message);
        lm_openai_request_free(&r);
    }
}

static void test_bounds(void) {
    size_t values = LM_REQUEST_MAX_VALUES + 10;
    char *many = malloc(2 * values + 64);
    int k = sprintf(many, "{\"input\":\"a\",\"x\":[");
    for (size_t i = 0; i < values; i++) many[k++] = '1', many[k++] = ',';
    strcpy(many + k - 1, "]}");
    lm_openai_request r;
    cJSON *echo = NULL;
    char param[64];
    lm_error err = {0};
    lm_status st = parse(many, &r, &echo, param, &err);
    free(many);
    bool ok = st == LM_ERR_INVALID && r.too_large && !echo;
    lm_openai_request_free(&r);
    CHECK_MSG(ok, "%s", err.message);
}

/* The object: reasoning, message and call items in that order, the status
 * and usage. */
static void test_object(void) {
    lm_tool_call call = {.id = "call_1", .name = "f", .arguments = "{\"a\":1}"};
    lm_tool_call_list calls = {.items = &call, .n = 1, .cap = 1};
    cJSON *echo = cJSON_Parse("{\"store\":false,\"tools\":[]}");
    lm_responses_output o = {.id = "resp_ab", .model = "m", .created_at = 5, .echo = echo, .reasoning = "think",
                             .text = "hi", .calls = &calls, .incomplete = false, .prompt_tokens = 10,
                             .cached_tokens = 4, .output_tokens = 6, .reasoning_tokens = 2};
    cJSON *r = lm_responses_object(&o);
    const cJSON *out = cJSON_GetObjectItemCaseSensitive(r, "output");
    const cJSON *rs = cJSON_GetArrayItem(out, 0), *msg = cJSON_GetArrayItem(out, 1), *fc = cJSON_GetArrayItem(out, 2);
    const cJSON *u = cJSON_GetObjectItemCaseSensitive(r, "usage");
    const cJSON *part = cJSON_GetArrayItem(cJSON_GetObjectItemCaseSensitive(msg, "content"), 0);
    bool ok = str_is(r, "id", "resp_ab") && str_is(r, "object", "response") && str_is(r, "status", "completed") &&
              cJSON_IsNull(cJSON_GetObjectItemCaseSensitive(r, "incomplete_details")) && cJSON_GetArraySize(out) == 3 &&
              str_is(rs, "type", "reasoning") && str_is(msg, "type", "message") && str_is(part, "text", "hi") &&
              str_is(part, "type", "output_text") && str_is(fc, "type", "function_call") &&
              str_is(fc, "call_id", "call_1") && str_is(fc, "arguments", "{\"a\":1}") &&
              cJSON_IsFalse(cJSON_GetObjectItemCaseSensitive(r, "store")) &&
              cJSON_GetObjectItemCaseSensitive(u, "total_tokens")->valuedouble == 16 &&
              cJSON_GetObjectItemCaseSensitive(cJSON_GetObjectItemCaseSensitive(u, "input_tokens_details"),
                                               "cached_tokens")->valuedouble == 4 &&
              cJSON_GetObjectItemCaseSensitive(cJSON_GetObjectItemCaseSensitive(u, "output_tokens_details"),
                                               "reasoning_tokens")->valuedouble == 2;
    CHECK_MSG(ok, "%s", cJSON_PrintUnformatted(r));
    cJSON_Delete(r);
    /* cut by max_output_tokens, nothing written: an empty incomplete message */
    o = (lm_responses_output){.id = "resp_ab", .model = "m", .echo = echo, .reasoning = "", .text = "",
                              .incomplete = true};
    r = lm_responses_object(&o);
    out = cJSON_GetObjectItemCaseSensitive(r, "output");
    ok = str_is(r, "status", "incomplete") &&
         str_is(cJSON_GetObjectItemCaseSensitive(r, "incomplete_details"), "reason", "max_output_tokens") &&
         cJSON_GetArraySize(out) == 1 && str_is(cJSON_GetArrayItem(out, 0), "status", "incomplete");
    CHECK_MSG(ok, "%s", cJSON_PrintUnformatted(r));
    cJSON_Delete(r);
    cJSON_Delete(echo);
}

/* The stream: each event's type names its data, sequence numbers count
 * from 0, items open and close in order, the final response lists them. */
static void test_stream(void) {
    lm_responses_output o = {.id = "resp_ab", .model = "m", .reasoning = "", .text = ""};
    lm_responses_stream st = {0};
    lm_sbuf out = {0};
    lm_responses_stream_start(&st, &out, &o);
    lm_responses_stream_delta(&st, &out, "th", "");
    lm_responses_stream_delta(&st, &out, "ink", "Hel");
    lm_responses_stream_delta(&st, &out, "", "lo");
    lm_tool_delta d1 = {.index = 0, .id = "call_1", .name = "f", .first = true, .fragment = "{\"a\":", .fragment_len = 5};
    lm_tool_delta d2 = {.index = 0, .id = "call_1", .name = "f", .fragment = "1}", .fragment_len = 2, .sent_before = 5,
                        .last = true, .arguments = "{\"a\":1}"};
    lm_responses_stream_tool(&st, &out, &d1);
    lm_responses_stream_tool(&st, &out, &d2);
    lm_responses_stream_end(&st, &out, &o);
    static const char *const want[] = {
        "response.created", "response.in_progress",
        "response.output_item.added", "response.content_part.added", "response.reasoning_text.delta",
        "response.reasoning_text.delta", "response.reasoning_text.done", "response.content_part.done",
        "response.output_item.done",
        "response.output_item.added", "response.content_part.added", "response.output_text.delta",
        "response.output_text.delta", "response.output_text.done", "response.content_part.done",
        "response.output_item.done",
        "response.output_item.added", "response.function_call_arguments.delta",
        "response.function_call_arguments.delta", "response.function_call_arguments.done", "response.output_item.done",
        "response.completed"};
    size_t n = 0;
    bool ok = !out.failed;
    char *text = strdup(lm_sbuf_str(&out));
    cJSON *last = NULL;
    for (char *p = text; ok && (p = strstr(p, "event: ")); n++) {
        char *nl = strchr(p, '\n');
        char name[64];
        snprintf(name, sizeof name, "%.*s", (int)(nl - p - 7), p + 7);
        char *data = nl + 7, *end = strstr(data, "\n\n");
        *end = 0;
        cJSON *j = cJSON_Parse(data);
        const cJSON *seq = cJSON_GetObjectItemCaseSensitive(j, "sequence_number");
        ok = n < sizeof want / sizeof want[0] && strcmp(name, want[n]) == 0 && str_is(j, "type", name) &&
             cJSON_IsNumber(seq) && seq->valuedouble == (double)n;
        if (!ok) test_failed(__FILE__, __LINE__, "event %zu: %s %s", n, name, data);
        if (strcmp(name, "response.output_text.done") == 0) ok = ok && str_is(j, "text", "Hello");
        if (strcmp(name, "response.function_call_arguments.done") == 0) ok = ok && str_is(j, "arguments", "{\"a\":1}");
        cJSON_Delete(last);
        last = j;
        p = end + 2;
    }
    free(text);
    const cJSON *output = cJSON_GetObjectItemCaseSensitive(cJSON_GetObjectItemCaseSensitive(last, "response"), "output");
    ok = ok && n == sizeof want / sizeof want[0] && cJSON_GetArraySize(output) == 3 &&
         str_is(cJSON_GetArrayItem(output, 2), "arguments", "{\"a\":1}") &&
         str_is(cJSON_GetArrayItem(output, 1), "id", "msg_ab0001");
    CHECK_MSG(ok, "%zu events; last %s", n, cJSON_PrintUnformatted(last));
    cJSON_Delete(last);
    lm_sbuf_free(&out);
    lm_responses_stream_free(&st);
    /* a failure: an error event, then response.failed */
    lm_responses_stream_start(&st, &out, &o);
    lm_responses_stream_error(&st, &out, &o, 503, "shutting down");
    ok = strstr(lm_sbuf_str(&out), "event: error\ndata: {\"type\":\"error\",\"code\":\"server_is_overloaded\"") &&
         strstr(lm_sbuf_str(&out), "event: response.failed") && strstr(lm_sbuf_str(&out), "\"sequence_number\":3");
    CHECK_MSG(ok, "%s", lm_sbuf_str(&out));
    lm_sbuf_free(&out);
    lm_responses_stream_free(&st);
}


/* With a store: previous_response_id puts the stored input and output
 * before the new input (the same chat messages as the conversation sent
 * whole, without the earlier instructions); item_reference is the item it
 * names; a response or item not kept is a 404 (not_found), naming it. */
static void test_stored_context(void) {
    lm_responses_store *store = NULL;
    lm_error err = {0};
    CHECK_OK(lm_responses_store_open(NULL, &store, &err), &err);
    const char *hex = "0123456789abcdef0123456789abcdef";
    char id[64], response[512], msg_id[64];
    snprintf(id, sizeof id, "resp_%s", hex);
    snprintf(msg_id, sizeof msg_id, "msg_%s0000", hex);
    snprintf(response, sizeof response,
             "{\"id\":\"%s\",\"object\":\"response\",\"output\":[{\"id\":\"%s\",\"type\":\"message\",\"role\":"
             "\"assistant\",\"status\":\"completed\",\"content\":[{\"type\":\"output_text\",\"text\":\"Hi!\"}]}]}",
             id, msg_id);
    lm_stored_response r = {.id = id, .created_at = 1, .response = response,
                            .input = "[{\"type\":\"message\",\"role\":\"user\",\"content\":[{\"type\":\"input_text\","
                                     "\"text\":\"Hello\"}]}]"};
    CHECK_OK(lm_responses_store_put(store, &r, 100, &err), &err);
    char owner[64];
    CHECK(lm_responses_item_owner(msg_id, owner, sizeof owner) && strcmp(owner, id) == 0);
    CHECK(!lm_responses_item_owner("msg_1", owner, sizeof owner) && !lm_responses_item_owner("call_abc", owner, sizeof owner));

    /* the conversation whole, as a chat body, and the messages it gives */
    const char *whole = "{\"input\":[{\"role\":\"user\",\"content\":\"Hello\"},{\"role\":\"assistant\",\"content\":"
                        "\"Hi!\"},{\"role\":\"user\",\"content\":\"More\"}]}";
    char body[600], param[64];
    lm_openai_request a, b;
    lm_responses_parsed pa, pb;
    CHECK_OK(lm_responses_request_parse(whole, strlen(whole), &parts, store, 100, &a, &pa, param, 64, &err), &err);
    snprintf(body, sizeof body, "{\"instructions\":\"new rules\",\"previous_response_id\":\"%s\",\"input\":\"More\"}", id);
    CHECK_OK(lm_responses_request_parse(body, strlen(body), &parts, store, 100, &b, &pb, param, 64, &err), &err);
    char *ma = cJSON_PrintUnformatted(a.messages), *mb = cJSON_PrintUnformatted(b.messages);
    /* the same turns, the new instructions first (the stored ones would not be there) */
    char want[700];
    snprintf(want, sizeof want, "[{\"role\":\"system\",\"content\":\"new rules\"},%s", ma + 1);
    bool same = strcmp(want, mb) == 0;
    CHECK_MSG(same, "%s vs %s", want, mb);
    CHECK(cJSON_GetArraySize(pb.input) == 3 && pb.store &&
          strcmp(cJSON_GetObjectItemCaseSensitive(pb.echo, "previous_response_id")->valuestring, id) == 0);
    free(ma);
    free(mb);
    lm_openai_request_free(&b);
    lm_responses_parsed_free(&pb);

    /* item_reference: the stored output item in its place */
    snprintf(body, sizeof body, "{\"store\":false,\"input\":[{\"role\":\"user\",\"content\":\"Hello\"},{\"type\":"
             "\"item_reference\",\"id\":\"%s\"},{\"role\":\"user\",\"content\":\"More\"}]}", msg_id);
    CHECK_OK(lm_responses_request_parse(body, strlen(body), &parts, store, 100, &b, &pb, param, 64, &err), &err);
    ma = cJSON_PrintUnformatted(a.messages);
    mb = cJSON_PrintUnformatted(b.messages);
    same = strcmp(ma, mb) == 0;
    free(ma);
    free(mb);
    CHECK(same && !pb.store);
    lm_openai_request_free(&b);
    lm_responses_parsed_free(&pb);
    lm_openai_request_free(&a);
    lm_responses_parsed_free(&pa);

    /* not kept: 404s naming the id, and after the store's age bound too */
    static const char *const missing[][2] = {
        {"{\"previous_response_id\":\"resp_nope\",\"input\":\"x\"}", "previous_response_id"},
        {"{\"input\":[{\"type\":\"item_reference\",\"id\":\"msg_nope\"}]}", "input[0].id"},
        {"{\"input\":[{\"type\":\"item_reference\",\"id\":\"msg_ffffffffffffffffffffffffffffffff0000\"}]}",
         "input[0].id"}};
    for (size_t i = 0; i < sizeof missing / sizeof missing[0]; i++) {
        lm_status st = lm_responses_request_parse(missing[i][0], strlen(missing[i][0]), &parts, store, 100, &b, &pb,
                                                  param, 64, &err);
        CHECK_MSG(st != LM_OK && b.not_found && !b.too_large && strcmp(param, missing[i][1]) == 0 &&
                      (strstr(err.message, "_nope") || strstr(err.message, "ffff")) && !pb.echo && !pb.input,
                  "%zu: %s (%s)", i, err.message, param);
    }
    snprintf(body, sizeof body, "{\"previous_response_id\":\"%s\",\"input\":\"x\"}", id);
    long long later = 100 + LM_RESPONSES_STORE_DEFAULT_TTL_S + 1;
    CHECK(lm_responses_request_parse(body, strlen(body), &parts, store, later, &b, &pb, param, 64, &err) != LM_OK &&
          b.not_found && strstr(err.message, id));
    lm_responses_store_close(store);
}

int main(void) {
    RUN_TEST(test_translation);
    RUN_TEST(test_mangled);
    RUN_TEST(test_errors);
    RUN_TEST(test_bounds);
    RUN_TEST(test_object);
    RUN_TEST(test_stream);
    RUN_TEST(test_stored_context);
    return test_summary("test_responses_request");
}
