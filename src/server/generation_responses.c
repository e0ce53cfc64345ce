/* The /v1/responses row of the pipeline: the body parsed as the
 * Responses API's (translated into a chat request, with the fields the
 * response echoes and its whole input, stored context included), the
 * (only) choice written as a response object or as its sequence-numbered
 * events (responses_response.c writes them), and, with store, the finished
 * response kept (responses_store.h) as the client got it, beside its whole
 * input.  The store is read on the preparation thread (the parse) and
 * written on the connection's I/O thread as the answer is written: an
 * SQLite insert, never on the engine's thread. */
#include <stdio.h>
#include <string.h>
#include <time.h>

#include "server/generation.h"
#include "server/json_text.h"
#include "server/responses_context.h"
#include "server/responses_request.h"

/* The Responses API's view of the (only) choice. */
static void responses_output(const gen_ctx *g, lm_responses_output *o) {
    const choice_state *ch = &g->choices[0];
    *o = (lm_responses_output){.id = g->id,
                               .model = g->server->options.served_model_name,
                               .created_at = g->created,
                               .echo = g->responses.echo,
                               .reasoning = lm_sbuf_str(&ch->reasoning),
                               .text = lm_sbuf_str(&ch->content),
                               .calls = &ch->calls,
                               .incomplete = ch->finished && ch->reason == LOOM_FINISH_LENGTH,
                               .prompt_tokens = g->prompts[0].prompt_tokens,
                               .cached_tokens = g->prompts[0].cached_tokens,
                               .output_tokens = ch->completion_tokens,
                               .reasoning_tokens = ch->reasoning_tokens < ch->completion_tokens ? ch->reasoning_tokens
                                                                                               : ch->completion_tokens};
}

/* The prefix of an input item's id, by its type. */
static const char *item_prefix(const cJSON *item) {
    const cJSON *type = cJSON_GetObjectItemCaseSensitive(item, "type");
    const char *t = cJSON_IsString(type) ? type->valuestring : "message";
    return strcmp(t, "function_call") == 0 ? "fc" : strcmp(t, "function_call_output") == 0 ? "fco"
           : strcmp(t, "reasoning") == 0  ? "rs" : "msg";
}

/* The input items without an id get one made from the response's, so that
 * input_items lists them and an item_reference finds them. */
static void name_input_items(const gen_ctx *g, cJSON *input) {
    const char *base = strncmp(g->id, "resp_", 5) == 0 ? g->id + 5 : g->id;
    cJSON *item;
    int i = 0;
    cJSON_ArrayForEach(item, input) {
        int index = i++;
        if (!cJSON_IsObject(item) || cJSON_GetObjectItemCaseSensitive(item, "id")) continue;
        char id[96];
        snprintf(id, sizeof id, "%s_%s%04x", item_prefix(item), base,
                 (unsigned)(LM_RESPONSES_INPUT_ID_BASE + index) & 0xffffu);
        cJSON_AddStringToObject(item, "id", id);
    }
}

/* With store: the finished response (completed or incomplete) and its
 * whole input, kept; a failure to keep it is logged (the answer stands). */
static void keep_response(gen_ctx *g, const cJSON *response) {
    lm_server *s = g->server;
    if (!g->responses.store || !s->responses || !response || !g->responses.input) return;
    name_input_items(g, g->responses.input);
    char *response_text = lm_json_print(response), *input_text = lm_json_print(g->responses.input);
    lm_error err = {0};
    lm_status st = !response_text || !input_text ? lm_fail(&err, LM_ERR_NOMEM, "out of memory printing it")
                   : lm_responses_store_put(s->responses,
                                            &(lm_stored_response){.id = g->id, .created_at = g->created,
                                                                  .response = response_text, .input = input_text},
                                            (long long)time(NULL), &err);
    if (st != LM_OK) lm_log_printf(s->log, LM_LOG_WARNING, "response %s not stored: %s", g->id, err.message);
    cJSON_free(response_text);
    cJSON_free(input_text);
}

static cJSON *responses_whole(gen_ctx *g) {
    lm_responses_output o;
    responses_output(g, &o);
    cJSON *r = lm_responses_object(&o);
    keep_response(g, r);
    return r;
}

static void responses_stream_start(gen_ctx *g) {
    lm_responses_output o;
    responses_output(g, &o);
    lm_responses_stream_start(&g->rstream, &g->out, &o);
}

/* What a choice gained from one event (the end comes with the stream's end). */
static void responses_stream_update(gen_ctx *g, int i, cJSON *logprob) {
    choice_state *ch = &g->choices[i];
    lm_tool_delta td;
    cJSON_Delete(logprob);
    lm_responses_stream_delta(&g->rstream, &g->out, lm_sbuf_str(&ch->reasoning), lm_sbuf_str(&ch->content));
    while (lm_tool_delta_next(&ch->tool_cursor, &ch->calls, &ch->tool_parser, &td))
        lm_responses_stream_tool(&g->rstream, &g->out, &td);
    lm_sbuf_clear(&ch->content);
    lm_sbuf_clear(&ch->reasoning);
}

/* The stream's end, once every event was read. */
static void responses_stream_end(gen_ctx *g) {
    const choice_state *ch = &g->choices[0];
    lm_responses_output o;
    responses_output(g, &o);
    if (g->error_message[0])
        lm_responses_stream_error(&g->rstream, &g->out, &o, 500, g->error_message);
    else if (!ch->finished || ch->reason == LOOM_FINISH_CANCELLED) /* shutdown (a gone client reads nothing) */
        lm_responses_stream_error(&g->rstream, &g->out, &o, 503, "the server is shutting down: the request was cancelled");
    else {
        lm_responses_stream_end(&g->rstream, &g->out, &o);
        keep_response(g, g->rstream.final);
    }
    g->final_sent = true;
}

static lm_status parse_responses(gen_ctx *g, const char *body, size_t len, char *param, size_t param_size,
                                 lm_error *err) {
    return lm_responses_request_parse(body, len, &g->server->image_parts, g->server->responses, (long long)time(NULL),
                                      &g->req, &g->responses, param, param_size, err);
}

const lm_generation_api lm_responses_api = {
    LM_API_CHAT, LM_WIRE_RESPONSES, "/v1/responses", "resp_", parse_responses, responses_whole,
    responses_stream_start, responses_stream_update, responses_stream_end};
