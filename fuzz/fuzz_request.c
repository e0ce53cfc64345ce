/* libFuzzer target for the request-body parsers (src/server/openai_request.c,
 * src/server/anthropic_request.c).  The first byte picks chat or completions,
 * or (bit 2) an Anthropic Messages body ((bit 3) of count_tokens), or (bit
 * 4) a Responses body; bit 5 streams the tool calls; the rest is the body.  Any body
 * must parse or fail with a message (never crash, leak or read out of
 * bounds); a parsed request must satisfy the bounds the server relies on,
 * and the reasoning and tool-call parsers, given the body as model output,
 * must not crash and must produce only JSON-object arguments. */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "io/image_decode.h"
#include "server/anthropic_request.h"
#include "server/openai_request.h"
#include "server/reasoning_parser.h"
#include "server/responses_request.h"
#include "server/tool_parser.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    if (size < 1) return 0;
    bool anthropic = data[0] & 4, responses = !anthropic && (data[0] & 16);
    lm_api_kind kind = data[0] & 1 || anthropic || responses ? LM_API_CHAT : LM_API_COMPLETION;
    lm_responses_parsed parsed = {0};
    const char *body = (const char *)data + 1;
    size_t len = size - 1;
    lm_openai_request r;
    char param[64];
    lm_error err = {0};
    bool one_tool_use;
    /* Image parts are read as a server with images on and no media folder
     * reads them (data: URIs decoded, everything else refused). */
    const lm_image_parts images = {.marker = "<|vision_start|><|image_pad|><|vision_end|>"};
    lm_status st = anthropic ? lm_anthropic_request_parse(body, len, data[0] & 8, &images, &r, &one_tool_use, param, sizeof param, &err)
                   : responses ? lm_responses_request_parse(body, len, &images, NULL, 0, &r, &parsed, param, sizeof param, &err)
                               : lm_openai_request_parse(kind, body, len, &images, &r, param, sizeof param, &err);
    if (responses && (st == LM_OK) != (parsed.echo != NULL)) abort(); /* the echo exists exactly when it parsed */
    if (responses && (st == LM_OK) != cJSON_IsArray(parsed.input)) abort();
    lm_responses_parsed_free(&parsed);
    if (st != LM_OK) {
        if (!err.message[0]) abort(); /* every failure explains itself */
    } else {
        if (r.params.n < 1 || r.params.n > 64 || r.params.n_stop > LM_REQUEST_MAX_STOP ||
            r.params.sampling.n_logit_bias > LM_REQUEST_MAX_LOGIT_BIAS || r.top_logprobs < 0 ||
            r.top_logprobs > LM_REQUEST_MAX_TOP_LOGPROBS || r.params.max_tokens < 1)
            abort();
        if (kind == LM_API_CHAT && !cJSON_IsArray(r.messages)) abort();
        if (r.n_images < 0 || r.n_images > LOOM_MAX_IMAGES || r.params.n_images != r.n_images) abort();
        for (int i = 0; i < r.n_images; i++)
            if (!r.images[i].data || r.images[i].size == 0 || r.images[i].size > LM_IMAGE_DEFAULT_MAX_BYTES) abort();
        if (kind == LM_API_COMPLETION && (r.n_prompts < 1 || r.n_prompts > LM_REQUEST_MAX_PROMPTS)) abort();
        for (int i = 0; kind == LM_API_COMPLETION && i < r.n_prompts; i++)
            if (!r.prompts[i].text && r.prompts[i].n_ids > 0 && !r.prompts[i].ids) abort();
    }
    /* The body as model output, fed in two pieces, through both output parsers. */
    size_t cut = len ? data[0] % (len + 1) : 0;
    lm_reasoning_parser rp;
    lm_reasoning_parser_init(&rp, data[0] & 2);
    lm_tool_parser tp;
    lm_tool_parser_init(&tp, st == LM_OK ? r.tools : NULL, 1);
    tp.stream_calls = data[0] & 32;
    lm_sbuf reasoning = {0}, content = {0}, final_content = {0};
    lm_tool_call_list calls = {0};
    lm_reasoning_parser_feed(&rp, body, cut, &reasoning, &content);
    lm_reasoning_parser_feed(&rp, body + cut, len - cut, &reasoning, &content);
    lm_reasoning_parser_finish(&rp, &reasoning, &content);
    /* streamed calls: what is shown of the open call only grows, and the
     * finished call continues it */
    size_t tcut = content.len ? (size_t)data[0] * 7 % (content.len + 1) : 0;
    lm_tool_parser_feed(&tp, lm_sbuf_str(&content), tcut, &final_content, &calls);
    lm_tool_call_view open;
    char *shown = lm_tool_parser_open_call(&tp, &open) ? strdup(open.arguments) : NULL;
    int open_index = calls.n;
    lm_tool_parser_feed(&tp, lm_sbuf_str(&content) + tcut, content.len - tcut, &final_content, &calls);
    if (shown && lm_tool_parser_open_call(&tp, &open) && calls.n == open_index &&
        strncmp(open.arguments, shown, strlen(shown)) != 0)
        abort();
    lm_tool_parser_finish(&tp, &final_content, &calls);
    if (shown && (calls.n <= open_index || strncmp(calls.items[open_index].arguments, shown, strlen(shown)) != 0)) abort();
    free(shown);
    for (int i = 0; i < calls.n; i++) {
        cJSON *args = cJSON_Parse(calls.items[i].arguments);
        if (!cJSON_IsObject(args)) abort(); /* arguments are always a JSON object */
        cJSON_Delete(args);
    }
    lm_tool_call_list_free(&calls);
    lm_sbuf_free(&reasoning);
    lm_sbuf_free(&content);
    lm_sbuf_free(&final_content);
    lm_reasoning_parser_free(&rp);
    lm_tool_parser_free(&tp);
    lm_openai_request_free(&r); /* also after a failure: frees what was parsed */
    return 0;
}
