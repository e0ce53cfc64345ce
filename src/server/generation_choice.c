/* One choice of a generation request: the engine's events applied to it
 * (time to first token and between tokens, logprobs, token ids), its text
 * split by the reasoning and tool-call parsers into reasoning, content and
 * calls. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "server/generation.h"
#include "server/json_text.h"

void lm_choice_free(choice_state *ch) {
    lm_reasoning_parser_free(&ch->reasoning_parser);
    lm_tool_parser_free(&ch->tool_parser);
    lm_sbuf_free(&ch->reasoning);
    lm_sbuf_free(&ch->content);
    lm_sbuf_free(&ch->middle);
    lm_tool_call_list_free(&ch->calls);
    cJSON_Delete(ch->logprobs);
    cJSON_Delete(ch->token_ids);
}

/* Content text through the tool parser when tools are on. */
static void route_content(choice_state *ch, const char *text, size_t len) {
    if (ch->use_tools) lm_tool_parser_feed(&ch->tool_parser, text, len, &ch->content, &ch->calls);
    else lm_sbuf_append(&ch->content, text, len);
}

static void feed_plain_text(choice_state *ch, const char *text, size_t len) {
    if (!ch->use_reasoning) {
        route_content(ch, text, len);
        return;
    }
    lm_reasoning_parser_feed(&ch->reasoning_parser, text, len, &ch->reasoning, &ch->middle);
    route_content(ch, lm_sbuf_str(&ch->middle), ch->middle.len);
    lm_sbuf_clear(&ch->middle);
}

/* The engine's text, NUL bytes marked for cJSON (json_text.h). */
static void feed_text(choice_state *ch, const char *text, size_t len) {
    if (!len) return;
    if (!memchr(text, '\0', len)) {
        feed_plain_text(ch, text, len);
        return;
    }
    lm_sbuf marked = {0};
    lm_text_append_marked(&marked, text, len);
    feed_plain_text(ch, lm_sbuf_str(&marked), marked.len);
    lm_sbuf_free(&marked);
}

static void finish_text(choice_state *ch) {
    if (ch->use_reasoning) {
        lm_reasoning_parser_finish(&ch->reasoning_parser, &ch->reasoning, &ch->middle);
        route_content(ch, lm_sbuf_str(&ch->middle), ch->middle.len);
        lm_sbuf_clear(&ch->middle);
    }
    if (ch->use_tools) lm_tool_parser_finish(&ch->tool_parser, &ch->content, &ch->calls);
}

static cJSON *bytes_array(const char *s, size_t n) {
    cJSON *a = cJSON_CreateArray();
    for (size_t i = 0; i < n; i++) cJSON_AddItemToArray(a, cJSON_CreateNumber((unsigned char)s[i]));
    return a;
}

/* The text of one token for logprobs (its decoded bytes, lossy UTF-8). */
static char *token_text(const gen_ctx *g, int32_t token) {
    if (g->server->tokenizer) {
        char *text = NULL;
        size_t len = 0;
        lm_error err = {0};
        if (lm_tokenizer_decode(g->server->tokenizer, &token, 1, false, &text, &len, &err) == LM_OK) return text;
    }
    char *fallback = malloc(32);
    if (fallback) snprintf(fallback, 32, "token_id:%d", (int)token);
    return fallback;
}

/* Chat: an entry {token, logprob, bytes, top_logprobs}.  Completions: the
 * entry is {token, logprob, top: {text: logprob}} and is reshaped later. */
static cJSON *logprob_entry(const gen_ctx *g, const loom_event *ev) {
    cJSON *e = cJSON_CreateObject();
    char *t = token_text(g, ev->token);
    cJSON_AddStringToObject(e, "token", t ? t : "");
    cJSON_AddNumberToObject(e, "logprob", ev->logprob);
    cJSON_AddItemToObject(e, "bytes", bytes_array(t ? t : "", t ? strlen(t) : 0));
    free(t);
    cJSON *top = cJSON_AddArrayToObject(e, "top_logprobs");
    for (int i = 0; i < ev->n_top && i < g->req.top_logprobs; i++) {
        cJSON *o = cJSON_CreateObject();
        char *tt = token_text(g, ev->top[i].token);
        cJSON_AddStringToObject(o, "token", tt ? tt : "");
        cJSON_AddNumberToObject(o, "logprob", ev->top[i].logprob);
        cJSON_AddItemToObject(o, "bytes", bytes_array(tt ? tt : "", tt ? strlen(tt) : 0));
        free(tt);
        cJSON_AddItemToArray(top, o);
    }
    return e;
}

const char *lm_finish_reason_name(const choice_state *ch) {
    if (ch->calls.n > 0 && ch->reason == LOOM_FINISH_STOP) return "tool_calls";
    switch (ch->reason) {
    case LOOM_FINISH_STOP: return "stop";
    case LOOM_FINISH_LENGTH: return "length";
    case LOOM_FINISH_CANCELLED: return "abort";
    case LOOM_FINISH_ERROR: return "error";
    default: return "stop";
    }
}

/* Applies one engine event to its choice; returns the choice index. */
int lm_generation_apply_event(gen_ctx *g, int prompt, const loom_event *ev, cJSON **logprob_out) {
    if (ev->choice < 0 || ev->choice >= g->n_per) return -1;
    int i = prompt * g->n_per + ev->choice;
    choice_state *ch = &g->choices[i];
    double now = lm_monotonic_seconds();
    /* every token tells them too: a request cut off before its finish has them */
    if (ev->prompt_tokens > 0) g->prompts[prompt].prompt_tokens = ev->prompt_tokens;
    if (ev->cached_tokens > g->prompts[prompt].cached_tokens) g->prompts[prompt].cached_tokens = ev->cached_tokens;
    if (ev->type == LOOM_EVENT_TOKEN) {
        if (!g->got_first_token) {
            g->got_first_token = true;
            g->first_token_time = now;
            lm_metrics_observe_ttft(&g->server->metrics, now - g->arrival);
        } else if (ch->last_token_time > 0) {
            lm_metrics_observe_itl(&g->server->metrics, now - ch->last_token_time);
        }
        ch->last_token_time = now;
        ch->completion_tokens++;
        if (g->req.logprobs) {
            cJSON *e = logprob_entry(g, ev);
            if (logprob_out) *logprob_out = e;
            else cJSON_AddItemToArray(ch->logprobs, e);
        }
        if (ch->token_ids) cJSON_AddItemToArray(ch->token_ids, cJSON_CreateNumber(ev->token));
        bool thinking = ch->use_reasoning && ch->reasoning_parser.state == LM_REASONING_INSIDE;
        if (ev->text) feed_text(ch, ev->text, ev->text_len);
        if (thinking || (ch->use_reasoning && ch->reasoning_parser.state == LM_REASONING_INSIDE)) ch->reasoning_tokens++;
    } else {
        if (ev->type == LOOM_EVENT_FINISH && ev->text) feed_text(ch, ev->text, ev->text_len);
        finish_text(ch);
        ch->finished = true;
        ch->reason = ev->type == LOOM_EVENT_ERROR ? LOOM_FINISH_ERROR : ev->finish_reason;
        ch->stop_string = ev->stop_string;
        ch->stop_token = ev->stop_token;
        ch->completion_tokens = ev->completion_tokens > 0 ? ev->completion_tokens : ch->completion_tokens;
        ch->drafted_tokens = ev->drafted_tokens;
        ch->accepted_tokens = ev->accepted_tokens;
        if (ev->type == LOOM_EVENT_ERROR) {
            ch->has_error = true;
            snprintf(g->error_message, sizeof g->error_message, "%s", ev->error ? ev->error : "engine error");
        }
        g->open_choices--;
    }
    return i;
}
