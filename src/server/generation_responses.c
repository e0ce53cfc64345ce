/* The /v1/responses row of the pipeline: the body parsed as the
 * Responses API's (translated into a chat request, with the fields the
 * response echoes), the (only) choice written as a response object or as
 * its sequence-numbered events (responses_response.c writes them). */
#include "server/generation.h"
#include "server/responses_request.h"

/* The Responses API's view of the (only) choice. */
static void responses_output(const gen_ctx *g, lm_responses_output *o) {
    const choice_state *ch = &g->choices[0];
    *o = (lm_responses_output){.id = g->id,
                               .model = g->server->options.served_model_name,
                               .created_at = g->created,
                               .echo = g->responses_echo,
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

static cJSON *responses_whole(gen_ctx *g) {
    lm_responses_output o;
    responses_output(g, &o);
    return lm_responses_object(&o);
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
    else
        lm_responses_stream_end(&g->rstream, &g->out, &o);
    g->final_sent = true;
}

static lm_status parse_responses(gen_ctx *g, const char *body, size_t len, char *param, size_t param_size,
                                 lm_error *err) {
    return lm_responses_request_parse(body, len, &g->server->image_parts, &g->req, &g->responses_echo, param,
                                      param_size, err);
}

const lm_generation_api lm_responses_api = {
    LM_API_CHAT, LM_WIRE_RESPONSES, "/v1/responses", "resp_", parse_responses, responses_whole,
    responses_stream_start, responses_stream_update, responses_stream_end};
