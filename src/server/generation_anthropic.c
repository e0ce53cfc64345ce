/* The /v1/messages row of the pipeline: the body parsed as Anthropic's
 * (translated into a chat request), the (only) choice written as a message
 * or as the stream's events (anthropic_response.c writes them). */
#include "server/anthropic_request.h"
#include "server/generation.h"

/* Anthropic's view of the (only) choice. */
static void anthropic_output(const gen_ctx *g, lm_anthropic_output *o) {
    const choice_state *ch = &g->choices[0];
    bool by_stop = ch->stop_string >= 0 && ch->stop_string < g->req.params.n_stop;
    *o = (lm_anthropic_output){.id = g->id,
                               .model = g->server->options.served_model_name,
                               .thinking = lm_sbuf_str(&ch->reasoning),
                               .text = lm_sbuf_str(&ch->content),
                               .calls = &ch->calls,
                               .stop_reason = ch->finished ? lm_anthropic_stop_reason(ch->reason, by_stop, ch->calls.n > 0)
                                                           : NULL,
                               .stop_sequence = ch->finished && by_stop ? g->req.stop[ch->stop_string] : NULL,
                               .prompt_tokens = g->prompts[0].prompt_tokens,
                               .cached_tokens = g->prompts[0].cached_tokens,
                               .output_tokens = ch->completion_tokens,
                               .one_tool_use = g->astream.one_tool_use};
}

static cJSON *anthropic_whole(gen_ctx *g) {
    lm_anthropic_output o;
    anthropic_output(g, &o);
    return lm_anthropic_message(&o);
}

static void anthropic_stream_start(gen_ctx *g) {
    lm_anthropic_output o;
    anthropic_output(g, &o);
    lm_anthropic_stream_start(&g->out, &o);
}

static void anthropic_stream_update(gen_ctx *g, int i, cJSON *logprob) {
    choice_state *ch = &g->choices[i];
    lm_tool_delta td;
    cJSON_Delete(logprob);
    lm_anthropic_stream_delta(&g->astream, &g->out, lm_sbuf_str(&ch->reasoning), lm_sbuf_str(&ch->content));
    while (lm_tool_delta_next(&ch->tool_cursor, &ch->calls, &ch->tool_parser, &td))
        lm_anthropic_stream_tool(&g->astream, &g->out, &td);
    lm_sbuf_clear(&ch->content);
    lm_sbuf_clear(&ch->reasoning);
}

static void anthropic_stream_end(gen_ctx *g) {
    const choice_state *ch = &g->choices[0];
    if (g->error_message[0]) {
        lm_anthropic_stream_error(&g->out, 500, g->error_message);
    } else if (!ch->finished || ch->reason == LOOM_FINISH_CANCELLED) { /* shutdown (a gone client reads nothing) */
        lm_anthropic_stream_error(&g->out, 503, "the server is shutting down: the request was cancelled");
    } else {
        lm_anthropic_output o;
        anthropic_output(g, &o);
        lm_anthropic_stream_end(&g->astream, &g->out, &o);
    }
    g->final_sent = true;
}

static lm_status parse_messages(gen_ctx *g, const char *body, size_t len, char *param, size_t param_size,
                                lm_error *err) {
    return lm_anthropic_request_parse(body, len, false, &g->server->image_parts, &g->req, &g->astream.one_tool_use,
                                      param, param_size, err);
}

const lm_generation_api lm_messages_api = {
    LM_API_CHAT, LM_WIRE_ANTHROPIC, "/v1/messages", "msg_", parse_messages, anthropic_whole, anthropic_stream_start,
    anthropic_stream_update, anthropic_stream_end};
