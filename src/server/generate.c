/* POST /v1/chat/completions and /v1/completions: prompt building, engine
 * submission, and turning the engine's per-choice events into OpenAI JSON
 * responses or Server-Sent Event chunks (with reasoning and tool calls split
 * out of the text). */
#include <malloc.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/random.h>
#include <time.h>
#include <unistd.h>

#include "io/image_decode.h"
#include "server/anthropic_request.h"
#include "server/anthropic_response.h"
#include "server/media.h"
#include "server/reasoning_parser.h"
#include "server/request_log.h"
#include "server/responses_request.h"
#include "server/responses_response.h"
#include "server/server_internal.h"
#include "server/tool_call_delta.h"
#include "server/tool_choice.h"
#include "server/tool_parser.h"
#include "server/json_text.h"

#define EVENT_POLL_MS 50
#define COMPLETION_IMAGES                                                                                  \
    "the prompt holds the model's image placeholder token: /v1/completions takes no images; send them as " \
    "image_url parts of /v1/chat/completions messages"
#define MULTI_POLL_MS 2 /* a list of prompts: the wait on one request while the others may have events */
/* After a request whose body was at least this large, free heap pages go
 * back to the system (glibc keeps them in the connection thread's arena). */
#define TRIM_AFTER_BODY_BYTES ((size_t)1 << 20)

typedef struct {
    bool use_reasoning, use_tools;
    lm_reasoning_parser reasoning_parser;
    lm_tool_parser tool_parser;
    lm_sbuf reasoning, content, middle; /* middle: reasoning parser's content, before tool parsing */
    lm_tool_call_list calls;
    lm_tool_delta_cursor tool_cursor; /* streaming: what of the calls was sent */
    cJSON *logprobs;        /* chat: [{token, logprob, bytes, top_logprobs}]; see add_logprob */
    cJSON *token_ids;       /* completions without a tokenizer */
    bool finished;
    loom_finish_reason reason;
    int stop_string;
    int32_t stop_token;
    int completion_tokens;
    int reasoning_tokens;   /* of them, those written inside the reasoning (Responses' usage) */
    int drafted_tokens, accepted_tokens;
    double last_token_time;
    bool has_error;
} choice_state;

typedef struct {
    loom_request *handle; /* NULL until submitted */
    bool done;            /* every event read */
    int prompt_tokens;
    int cached_tokens;    /* of them, from the prefix cache */
    char *echo_text;      /* completions with echo */
} prompt_state;

typedef struct gen_ctx gen_ctx;

/* What one API brings to the request pipeline. */
typedef struct {
    lm_api_kind kind;
    lm_wire wire;
    const char *route, *id_prefix; /* the log line's route; the response id's prefix */
    lm_status (*parse)(gen_ctx *g, const char *body, size_t len, char *param, size_t param_size, lm_error *err);
    cJSON *(*whole)(gen_ctx *g);                                  /* a blocking request's answer */
    void (*stream_start)(gen_ctx *g);                             /* what a stream opens with */
    void (*stream_update)(gen_ctx *g, int choice, cJSON *logprob); /* a choice's news (logprob owned) */
    void (*stream_end)(gen_ctx *g);                               /* once every event was read */
} lm_generation_api;

struct gen_ctx {
    const lm_generation_api *api;
    lm_server *server;
    struct MHD_Connection *connection;
    lm_wakeup wakeup;      /* resumed by the engine's notify (wakeup.h) */
    bool watched;          /* in the server's sweep */
    double next_look;      /* blocking: when the client's socket is looked at next */
    lm_openai_request req;
    lm_wire wire;               /* OpenAI's shapes, or Anthropic's (/v1/messages: one chat choice) */
    lm_anthropic_stream astream;
    cJSON *responses_echo;      /* /v1/responses: the request's fields the response repeats */
    lm_responses_stream rstream;
    /* One engine request per prompt (completions may list several); choice
     * i belongs to prompt i / n_per and is that request's choice i % n_per. */
    prompt_state *prompts;
    int n_prompts, n_per, next_poll;
    bool submitted;        /* counted in server->active */
    int n;                 /* n_prompts * n_per */
    choice_state *choices;
    char id[48];
    long long created;
    double arrival;
    size_t body_len;
    bool got_first_token;
    double first_token_time;
    int open_choices;
    /* streaming */
    lm_sbuf out;
    size_t out_pos;
    bool stream_done, final_sent;
    bool observed; /* counted in /metrics (outcome and end-to-end latency) */
    bool client_gone; /* cancelled because the client closed its connection (logged as such, at INFO) */
    char error_message[256];
    int32_t keep_special[LM_OUTPUT_MARKERS]; /* chat: the markers the output parsers read, kept by the detokenizer */
    int32_t **ids;         /* per prompt, until submitted */
    size_t *n_ids;
    char refused_param[64];
};

/* ------------------------------------------------------------ prompts */

lm_status lm_server_images_init(lm_server *s, lm_error *err) {
    lm_image_parts *p = &s->image_parts;
    s->image_token_id = -1;
    if (s->options.allowed_local_media_path) {
        lm_status st = lm_media_dir(s->options.allowed_local_media_path, &s->media_dir, err);
        if (st != LM_OK) return st;
        p->local_dir = s->media_dir;
    }
    p->max_image_bytes = LM_IMAGE_DEFAULT_MAX_BYTES;
    /* An image part is written as the chat template would write it: the
     * engine's marker (vision start, one placeholder, vision end), text the
     * tokenizer reads back as those tokens; the placeholder is its middle. */
    const char *marker = loom_engine_image_marker(s->engine);
    p->refusal = s->options.images_off ? "images are turned off on this server (--max-image-pixels -1)"
                                       : "this model does not take images";
    if (!marker || !s->tokenizer) return LM_OK;
    int32_t *ids = NULL;
    size_t n = 0;
    lm_error why = {0};
    if (lm_tokenizer_encode(s->tokenizer, marker, strlen(marker), false, &ids, &n, &why) == LM_OK && n == 3) {
        s->image_token_id = ids[1];
        p->marker = marker;
    } else {
        p->refusal = "this model's image marker is not three tokens of its tokenizer, so images cannot be placed "
                     "in a prompt";
    }
    free(ids);
    return LM_OK;
}

/* The image placeholders in a prompt. */
static int count_image_tokens(const lm_server *s, const int32_t *ids, size_t n) {
    int count = 0;
    for (size_t i = 0; s->image_token_id >= 0 && i < n; i++) count += ids[i] == s->image_token_id;
    return count;
}

lm_status lm_prompt_bytes_fit(const lm_server *s, size_t text_bytes, lm_error *err) {
    size_t floor = s->tokenizer ? lm_tokenizer_min_tokens(s->tokenizer, text_bytes) : 0;
    if (floor <= (size_t)s->options.max_model_len) return LM_OK;
    return lm_fail(err, LM_ERR_INVALID,
                   "This model's maximum context length is %d tokens. However, your request has at least %zu input "
                   "tokens (%zu bytes of text).",
                   s->options.max_model_len, floor, text_bytes);
}

/* The bytes of every string in v (the messages' text, a floor on what the
 * template renders), stopping once past `enough`. */
static size_t string_bytes(const cJSON *v, size_t enough) {
    size_t n = 0;
    for (const cJSON *c = v ? v->child : NULL; c && n <= enough; c = c->next) {
        if (cJSON_IsString(c)) n += strlen(c->valuestring);
        else if (c->child) n += string_bytes(c, enough - n);
    }
    return n;
}

lm_status lm_render_chat_prompt(const lm_server *s, const lm_openai_request *r, char **text,
                                size_t *len, lm_error *err) {
    if (!s->chat_template) return lm_fail(err, LM_ERR_INVALID, "this model has no chat template");
    /* A conversation that cannot fit is refused before the template runs
     * over it (the template engine bounds its strings at 16 MiB). */
    lm_status fits = lm_prompt_bytes_fit(s, string_bytes(r->messages, SIZE_MAX / 2), err);
    if (fits != LM_OK) return fits;
    cJSON *ctx = cJSON_CreateObject();
    if (!ctx) return lm_fail(err, LM_ERR_NOMEM, "out of memory building the chat template's context");
    const cJSON *kw;
    cJSON_ArrayForEach(kw, r->template_kwargs) cJSON_AddItemToObject(ctx, kw->string, cJSON_Duplicate(kw, true));
    cJSON_DeleteItemFromObjectCaseSensitive(ctx, "messages");
    cJSON_DeleteItemFromObjectCaseSensitive(ctx, "add_generation_prompt");
    cJSON_AddItemToObject(ctx, "messages", cJSON_Duplicate(r->messages, true));
    if (r->tools) {
        cJSON *tools = cJSON_CreateArray();
        const cJSON *t;
        cJSON_ArrayForEach(t, r->tools) {
            const cJSON *name = cJSON_GetObjectItemCaseSensitive(cJSON_GetObjectItemCaseSensitive(t, "function"), "name");
            /* A named tool_choice shows the model only that function. */
            if (r->tool_choice != LM_TOOL_CHOICE_NAMED || strcmp(name->valuestring, r->tool_name) == 0)
                cJSON_AddItemToArray(tools, cJSON_Duplicate(t, true));
        }
        cJSON_DeleteItemFromObjectCaseSensitive(ctx, "tools");
        cJSON_AddItemToObject(ctx, "tools", tools);
    }
    cJSON_AddBoolToObject(ctx, "add_generation_prompt", r->add_generation_prompt);
    lm_status st = lm_chat_template_render(s->chat_template, ctx, text, len, err);
    cJSON_Delete(ctx);
    if (st != LM_OK || !r->continue_final_message) return st;
    /* continue_final_message: cut after the last message's content so the
     * model continues it (the template closed it with an end marker). */
    const cJSON *last = cJSON_GetArrayItem(r->messages, cJSON_GetArraySize(r->messages) - 1);
    const char *content = cJSON_GetObjectItemCaseSensitive(last, "content")->valuestring;
    size_t cl = strlen(content);
    if (cl == 0) return LM_OK;
    for (size_t i = *len >= cl ? *len - cl + 1 : 0; i-- > 0;)
        if (memcmp(*text + i, content, cl) == 0) {
            *len = i + cl;
            (*text)[*len] = 0;
            return LM_OK;
        }
    return LM_OK;
}

static unsigned status_of(int code) {
    switch (code) {
    case LOOM_ERR_BUSY: case LOOM_ERR_SHUTDOWN: return 503;
    case LOOM_ERR_TOO_LONG: case LOOM_ERR_INVALID: return 400;
    case LOOM_ERR_NOMEM: case LOOM_ERR_INTERNAL: default: return 500;
    }
}

/* ------------------------------------------------------------ choices */

static void choice_free(choice_state *ch) {
    lm_reasoning_parser_free(&ch->reasoning_parser);
    lm_tool_parser_free(&ch->tool_parser);
    lm_sbuf_free(&ch->reasoning);
    lm_sbuf_free(&ch->content);
    lm_sbuf_free(&ch->middle);
    lm_tool_call_list_free(&ch->calls);
    cJSON_Delete(ch->logprobs);
    cJSON_Delete(ch->token_ids);
}

static void gen_free(gen_ctx *g) {
    if (!g) return;
    if (g->watched) lm_server_unwatch(g->server, &g->wakeup);
    for (int p = 0; g->prompts && p < g->n_prompts; p++) {
        loom_request_free(g->prompts[p].handle); /* cancels what still runs; no notify after it */
        free(g->prompts[p].echo_text);
    }
    lm_wakeup_destroy(&g->wakeup);
    if (g->submitted) atomic_fetch_sub(&g->server->active, 1);
    free(g->prompts);
    for (int p = 0; g->ids && p < g->n_prompts; p++) free(g->ids[p]);
    free(g->ids);
    free(g->n_ids);
    for (int i = 0; g->choices && i < g->n; i++) choice_free(&g->choices[i]);
    free(g->choices);
    lm_sbuf_free(&g->out);
    cJSON_Delete(g->responses_echo);
    lm_responses_stream_free(&g->rstream);
    lm_openai_request_free(&g->req);
    bool trim = g->body_len >= TRIM_AFTER_BODY_BYTES;
    free(g);
    if (trim) malloc_trim(0);
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

/* Completions' logprobs object from chat-shaped entries. */
static cJSON *completion_logprobs(const cJSON *entries, size_t text_offset) {
    cJSON *o = cJSON_CreateObject();
    cJSON *tokens = cJSON_AddArrayToObject(o, "tokens");
    cJSON *lps = cJSON_AddArrayToObject(o, "token_logprobs");
    cJSON *tops = cJSON_AddArrayToObject(o, "top_logprobs");
    cJSON *offsets = cJSON_AddArrayToObject(o, "text_offset");
    const cJSON *e;
    cJSON_ArrayForEach(e, entries) {
        const char *tok = cJSON_GetObjectItemCaseSensitive(e, "token")->valuestring;
        cJSON_AddItemToArray(tokens, cJSON_CreateString(tok));
        cJSON_AddItemToArray(lps, cJSON_CreateNumber(cJSON_GetObjectItemCaseSensitive(e, "logprob")->valuedouble));
        cJSON *top = cJSON_CreateObject();
        const cJSON *t;
        cJSON_ArrayForEach(t, cJSON_GetObjectItemCaseSensitive(e, "top_logprobs")) {
            const char *tt = cJSON_GetObjectItemCaseSensitive(t, "token")->valuestring;
            if (!cJSON_HasObjectItem(top, tt))
                cJSON_AddNumberToObject(top, tt, cJSON_GetObjectItemCaseSensitive(t, "logprob")->valuedouble);
        }
        cJSON_AddItemToArray(tops, top);
        cJSON_AddItemToArray(offsets, cJSON_CreateNumber((double)text_offset));
        text_offset += strlen(tok);
    }
    return o;
}

static const char *finish_reason_name(const choice_state *ch) {
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
static int apply_event(gen_ctx *g, int prompt, const loom_event *ev, cJSON **logprob_out) {
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

static cJSON *usage_json(const gen_ctx *g) {
    int completion = 0, prompt_tokens = 0;
    for (int i = 0; i < g->n; i++) completion += g->choices[i].completion_tokens;
    for (int p = 0; p < g->n_prompts; p++) prompt_tokens += g->prompts[p].prompt_tokens;
    cJSON *u = cJSON_CreateObject();
    cJSON_AddNumberToObject(u, "prompt_tokens", prompt_tokens);
    cJSON_AddNumberToObject(u, "total_tokens", prompt_tokens + completion);
    cJSON_AddNumberToObject(u, "completion_tokens", completion);
    int cached = 0; /* as OpenAI reports it: prompt tokens served from the prefix cache */
    for (int p = 0; p < g->n_prompts; p++) cached += g->prompts[p].cached_tokens;
    cJSON *details = cJSON_AddObjectToObject(u, "prompt_tokens_details");
    cJSON_AddNumberToObject(details, "cached_tokens", cached);
    int drafted = 0, accepted = 0;
    for (int i = 0; i < g->n; i++) {
        drafted += g->choices[i].drafted_tokens;
        accepted += g->choices[i].accepted_tokens;
    }
    if (drafted > 0) { /* speculative decoding: MTP drafts verified and accepted */
        cJSON *spec = cJSON_AddObjectToObject(u, "speculative");
        cJSON_AddNumberToObject(spec, "drafted_tokens", drafted);
        cJSON_AddNumberToObject(spec, "accepted_tokens", accepted);
        cJSON_AddNumberToObject(spec, "acceptance_rate", (double)accepted / drafted);
    }
    return u;
}

/* As vLLM: stop_reason names a stop token the request listed in
 * stop_token_ids; an end of turn (the model's eos ids, the tokenizer's eos
 * token) is a normal end and gives null. */
static bool stopped_by_request_token(const gen_ctx *g, int32_t token) {
    const lm_tokenizer *tok = g->server->tokenizer;
    const char *eos = tok ? lm_tokenizer_eos_token(tok) : NULL;
    if (eos && lm_tokenizer_token_to_id(tok, eos) == token) return false;
    for (int i = 0; i < g->req.params.n_stop_token_ids; i++)
        if (g->req.stop_token_ids[i] == token) return true;
    return false;
}

static void add_stop_reason(cJSON *choice, const gen_ctx *g, const choice_state *ch) {
    if (ch->stop_string >= 0 && ch->stop_string < g->req.params.n_stop)
        cJSON_AddStringToObject(choice, "stop_reason", g->req.stop[ch->stop_string]);
    else if (ch->stop_token >= 0 && stopped_by_request_token(g, ch->stop_token))
        cJSON_AddNumberToObject(choice, "stop_reason", ch->stop_token);
    else /* eos, the end of the turn, or not stopped */
        cJSON_AddNullToObject(choice, "stop_reason");
}

static cJSON *tool_call_json(const lm_tool_call *call, int index, bool with_index) {
    cJSON *t = cJSON_CreateObject();
    if (with_index) cJSON_AddNumberToObject(t, "index", index);
    cJSON_AddStringToObject(t, "id", call->id);
    cJSON_AddStringToObject(t, "type", "function");
    cJSON *fn = cJSON_AddObjectToObject(t, "function");
    cJSON_AddStringToObject(fn, "name", call->name);
    cJSON_AddStringToObject(fn, "arguments", call->arguments);
    return t;
}

static cJSON *envelope(const gen_ctx *g, const char *object) {
    cJSON *root = cJSON_CreateObject();
    cJSON_AddStringToObject(root, "id", g->id);
    cJSON_AddStringToObject(root, "object", object);
    cJSON_AddNumberToObject(root, "created", (double)g->created);
    cJSON_AddStringToObject(root, "model", g->server->options.served_model_name);
    return root;
}

/* ------------------------------------------------------------ whole responses */

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
                               .output_tokens = ch->completion_tokens};
}

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

static cJSON *anthropic_whole(gen_ctx *g) {
    lm_anthropic_output o;
    anthropic_output(g, &o);
    return lm_anthropic_message(&o);
}

/* Chat completions and completions: every choice. */
static cJSON *openai_whole(gen_ctx *g) {
    bool chat = g->req.kind == LM_API_CHAT;
    cJSON *root = envelope(g, chat ? "chat.completion" : "text_completion");
    cJSON *choices = cJSON_AddArrayToObject(root, "choices");
    for (int i = 0; i < g->n; i++) {
        choice_state *ch = &g->choices[i];
        cJSON *c = cJSON_CreateObject();
        cJSON_AddNumberToObject(c, "index", i);
        if (chat) {
            cJSON *m = cJSON_AddObjectToObject(c, "message");
            cJSON_AddStringToObject(m, "role", "assistant");
            if (ch->content.len || ch->calls.n == 0) cJSON_AddStringToObject(m, "content", lm_sbuf_str(&ch->content));
            else cJSON_AddNullToObject(m, "content");
            if (ch->use_reasoning && ch->reasoning.len) {
                cJSON_AddStringToObject(m, "reasoning_content", lm_sbuf_str(&ch->reasoning));
                cJSON_AddStringToObject(m, "reasoning", lm_sbuf_str(&ch->reasoning));
            }
            if (ch->calls.n) {
                cJSON *calls = cJSON_AddArrayToObject(m, "tool_calls");
                for (int k = 0; k < ch->calls.n; k++)
                    cJSON_AddItemToArray(calls, tool_call_json(&ch->calls.items[k], k, false));
            }
            if (ch->logprobs) {
                cJSON *lp = cJSON_AddObjectToObject(c, "logprobs");
                cJSON_AddItemReferenceToObject(lp, "content", ch->logprobs);
            } else {
                cJSON_AddNullToObject(c, "logprobs");
            }
        } else {
            lm_sbuf text = {0};
            const char *echo = g->prompts[i / g->n_per].echo_text;
            if (echo) lm_sbuf_puts(&text, echo);
            lm_sbuf_append(&text, lm_sbuf_str(&ch->content), ch->content.len);
            cJSON_AddStringToObject(c, "text", lm_sbuf_str(&text));
            if (ch->logprobs) cJSON_AddItemToObject(c, "logprobs", completion_logprobs(ch->logprobs,
                                                    echo ? strlen(echo) : 0));
            else cJSON_AddNullToObject(c, "logprobs");
            if (ch->token_ids) cJSON_AddItemReferenceToObject(c, "token_ids", ch->token_ids);
            lm_sbuf_free(&text);
        }
        cJSON_AddStringToObject(c, "finish_reason", finish_reason_name(ch));
        add_stop_reason(c, g, ch);
        cJSON_AddItemToArray(choices, c);
    }
    cJSON_AddItemToObject(root, "usage", usage_json(g));
    return root;
}

/* ------------------------------------------------------------ streaming */

static void sse(gen_ctx *g, cJSON *chunk) {
    char *text = lm_json_print(chunk);
    cJSON_Delete(chunk);
    if (!text) {
        g->out.failed = true;
        return;
    }
    lm_sbuf_puts(&g->out, "data: ");
    lm_sbuf_puts(&g->out, text);
    lm_sbuf_puts(&g->out, "\n\n");
    cJSON_free(text);
}

static cJSON *chunk_choice(gen_ctx *g, cJSON **root, int index) {
    bool chat = g->req.kind == LM_API_CHAT;
    *root = envelope(g, chat ? "chat.completion.chunk" : "text_completion");
    cJSON *choices = cJSON_AddArrayToObject(*root, "choices");
    cJSON *c = cJSON_CreateObject();
    cJSON_AddNumberToObject(c, "index", index);
    cJSON_AddItemToArray(choices, c);
    return c;
}

/* Chat: the tool calls' deltas as OpenAI streams them: a call's first
 * delta has its index, id, type and name, the later ones its index and
 * argument fragments. */
static cJSON *tool_call_deltas(choice_state *ch) {
    cJSON *list = cJSON_CreateArray();
    lm_tool_delta d;
    while (list && lm_tool_delta_next(&ch->tool_cursor, &ch->calls, &ch->tool_parser, &d)) {
        if (!d.first && d.fragment_len == 0) continue;
        cJSON *t = cJSON_CreateObject();
        cJSON_AddNumberToObject(t, "index", d.index);
        if (d.first) {
            cJSON_AddStringToObject(t, "id", d.id);
            cJSON_AddStringToObject(t, "type", "function");
        }
        cJSON *fn = cJSON_AddObjectToObject(t, "function");
        if (d.first) cJSON_AddStringToObject(fn, "name", d.name);
        char *fragment = strndup(d.fragment, d.fragment_len);
        cJSON_AddStringToObject(fn, "arguments", fragment ? fragment : "");
        free(fragment);
        cJSON_AddItemToArray(list, t);
    }
    return list;
}

static void responses_stream_start(gen_ctx *g) {
    lm_responses_output o;
    responses_output(g, &o);
    lm_responses_stream_start(&g->rstream, &g->out, &o);
}

static void anthropic_stream_start(gen_ctx *g) {
    lm_anthropic_output o;
    anthropic_output(g, &o);
    lm_anthropic_stream_start(&g->out, &o);
}

/* The role chunks (chat), or the echoed prompts (completions). */
static void openai_stream_start(gen_ctx *g) {
    for (int i = 0; i < g->n; i++) {
        cJSON *root;
        cJSON *c = chunk_choice(g, &root, i);
        const char *echo = NULL;
        if (g->req.kind == LM_API_CHAT) {
            cJSON *d = cJSON_AddObjectToObject(c, "delta");
            cJSON_AddStringToObject(d, "role", "assistant");
            cJSON_AddStringToObject(d, "content", "");
        } else {
            echo = g->prompts[i / g->n_per].echo_text;
            cJSON_AddStringToObject(c, "text", echo ? echo : "");
        }
        cJSON_AddNullToObject(c, "logprobs");
        cJSON_AddNullToObject(c, "finish_reason");
        if (g->req.kind == LM_API_CHAT || echo) sse(g, root);
        else cJSON_Delete(root);
    }
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

/* Emits what a choice gained from one event: a delta chunk, then a finish chunk. */
static void openai_stream_update(gen_ctx *g, int i, cJSON *logprob) {
    choice_state *ch = &g->choices[i];
    bool chat = g->req.kind == LM_API_CHAT;
    cJSON *call_deltas = chat ? tool_call_deltas(ch) : NULL;
    bool new_calls = cJSON_GetArraySize(call_deltas) > 0;
    if (ch->content.len || ch->reasoning.len || new_calls || logprob || (ch->token_ids && cJSON_GetArraySize(ch->token_ids))) {
        cJSON *root;
        cJSON *c = chunk_choice(g, &root, i);
        if (chat) {
            cJSON *d = cJSON_AddObjectToObject(c, "delta");
            if (ch->reasoning.len) {
                cJSON_AddStringToObject(d, "reasoning_content", lm_sbuf_str(&ch->reasoning));
                cJSON_AddStringToObject(d, "reasoning", lm_sbuf_str(&ch->reasoning));
            }
            if (ch->content.len || (!ch->reasoning.len && !new_calls)) cJSON_AddStringToObject(d, "content", lm_sbuf_str(&ch->content));
            if (new_calls) {
                cJSON_AddItemToObject(d, "tool_calls", call_deltas);
                call_deltas = NULL;
            }
            if (logprob) {
                cJSON *lp = cJSON_AddObjectToObject(c, "logprobs");
                cJSON *content = cJSON_AddArrayToObject(lp, "content");
                cJSON_AddItemToArray(content, logprob);
            } else {
                cJSON_AddNullToObject(c, "logprobs");
            }
        } else {
            cJSON_AddStringToObject(c, "text", lm_sbuf_str(&ch->content));
            if (logprob) {
                cJSON *entries = cJSON_CreateArray();
                cJSON_AddItemToArray(entries, logprob);
                cJSON_AddItemToObject(c, "logprobs", completion_logprobs(entries, 0));
                cJSON_Delete(entries);
            } else {
                cJSON_AddNullToObject(c, "logprobs");
            }
            if (ch->token_ids) {
                cJSON_AddItemToObject(c, "token_ids", ch->token_ids);
                ch->token_ids = cJSON_CreateArray();
            }
        }
        cJSON_AddNullToObject(c, "finish_reason");
        sse(g, root);
        lm_sbuf_clear(&ch->content);
        lm_sbuf_clear(&ch->reasoning);
    } else if (logprob) {
        cJSON_Delete(logprob);
    }
    cJSON_Delete(call_deltas);
    if (ch->finished) {
        cJSON *root;
        cJSON *c = chunk_choice(g, &root, i);
        if (chat) cJSON_AddObjectToObject(c, "delta");
        else cJSON_AddStringToObject(c, "text", "");
        cJSON_AddNullToObject(c, "logprobs");
        cJSON_AddStringToObject(c, "finish_reason", finish_reason_name(ch));
        add_stop_reason(c, g, ch);
        sse(g, root);
    }
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

static void openai_stream_end(gen_ctx *g) {
    if (g->req.include_usage) {
        cJSON *root = envelope(g, g->req.kind == LM_API_CHAT ? "chat.completion.chunk" : "text_completion");
        cJSON_AddArrayToObject(root, "choices");
        cJSON_AddItemToObject(root, "usage", usage_json(g));
        sse(g, root);
    }
    lm_sbuf_puts(&g->out, "data: [DONE]\n\n");
    g->final_sent = true;
}

static int outcome_of(const gen_ctx *g) {
    int outcome = 0;
    for (int i = 0; i < g->n; i++) {
        if (g->choices[i].reason == LOOM_FINISH_CANCELLED) outcome = 2;
        if (g->choices[i].has_error && outcome == 0) outcome = 1;
    }
    return outcome;
}

/* The next event of any prompt's request: 1 (*prompt says whose), 0 when
 * none came within the poll interval, -1 when all were read. */
static int next_event(gen_ctx *g, loom_event *ev, int *prompt, int wait_ms) {
    if (g->n_prompts == 1) {
        *prompt = 0;
        if (g->prompts[0].done) return -1;
        int got = loom_next_event(g->prompts[0].handle, ev, wait_ms);
        if (got < 0) g->prompts[0].done = true;
        return got;
    }
    /* Several: a look at each (round robin), then a short wait on one. */
    int first_open = -1;
    for (int k = 0; k < g->n_prompts; k++) {
        int p = (g->next_poll + k) % g->n_prompts;
        if (g->prompts[p].done) continue;
        int got = loom_next_event(g->prompts[p].handle, ev, 0);
        if (got > 0) {
            *prompt = p;
            g->next_poll = p + 1;
            return 1;
        }
        if (got < 0) g->prompts[p].done = true;
        else if (first_open < 0) first_open = p;
    }
    if (first_open < 0) return -1;
    int got = loom_next_event(g->prompts[first_open].handle, ev,
                              wait_ms < MULTI_POLL_MS ? wait_ms : MULTI_POLL_MS);
    if (got < 0) g->prompts[first_open].done = true;
    *prompt = first_open;
    return got > 0 ? 1 : 0;
}

static void cancel_all(gen_ctx *g) {
    for (int p = 0; p < g->n_prompts; p++) loom_cancel(g->prompts[p].handle);
}

/* The request's log line (finish: the first choice's reason, or what
 * went wrong). */
static void log_request(const gen_ctx *g, unsigned status, const char *finish) {
    const lm_server_options *o = &g->server->options;
    if (!o->log_requests) return;
    lm_request_record rec = {.id = g->id[0] ? g->id : "-",
                             .route = g->api->route,
                             .status = status,
                             .seconds = lm_monotonic_seconds() - g->arrival,
                             .ttft = g->got_first_token ? g->first_token_time - g->arrival : -1,
                             .finish = finish,
                             .cancelled_by_client = g->client_gone};
    for (int p = 0; p < g->n_prompts && g->prompts; p++) {
        rec.prompt_tokens += g->prompts[p].prompt_tokens;
        rec.cached_tokens += g->prompts[p].cached_tokens;
    }
    for (int i = 0; i < g->n && g->choices; i++) rec.output_tokens += g->choices[i].completion_tokens;
    lm_request_log(o->log, &rec);
}

/* How the request ended, as /metrics counts it (vLLM's finished_reason:
 * the first choice's, as the log line says). */
static lm_request_end request_end(const gen_ctx *g, int outcome) {
    if (outcome == 2) return LM_REQUEST_ABORT;
    if (outcome == 1) return LM_REQUEST_ERROR;
    return g->n > 0 && g->choices[0].reason == LOOM_FINISH_LENGTH ? LM_REQUEST_LENGTH : LM_REQUEST_STOP;
}

/* Counts the request in /metrics once, however it ends, and logs it.
 * outcome: 0 finished, 1 error, 2 aborted (cancelled or client gone). */
static void observe_end(gen_ctx *g, int outcome) {
    if (g->observed) return;
    g->observed = true;
    lm_metrics_observe_request(&g->server->metrics, lm_monotonic_seconds() - g->arrival, request_end(g, outcome));
    bool blocking = !g->req.stream;
    log_request(g, outcome == 2 && atomic_load(&g->server->cancel_all) && blocking ? 503
                   : outcome == 1 && blocking                                     ? 500
                                                                                  : 200,
                outcome == 2 ? "abort" : outcome == 1 ? "error" : g->n > 0 ? finish_reason_name(&g->choices[0]) : "stop");
}

static ssize_t stream_reader(void *cls, uint64_t pos, char *buf, size_t max) {
    gen_ctx *g = cls;
    (void)pos;
    while (g->out_pos >= g->out.len) {
        lm_sbuf_clear(&g->out);
        g->out_pos = 0;
        if (g->final_sent) return MHD_CONTENT_READER_END_OF_STREAM;
        if (g->out.failed) return MHD_CONTENT_READER_END_WITH_ERROR;
        loom_event ev;
        if (atomic_load(&g->server->cancel_all)) cancel_all(g);
        int prompt;
        int got = next_event(g, &ev, &prompt, 0);
        if (got == 0) {
            if (lm_client_gone(g->connection)) {
                g->client_gone = true;
                cancel_all(g); /* blocks are freed at the engine's next step */
                observe_end(g, 2);
                return MHD_CONTENT_READER_END_WITH_ERROR;
            }
            /* Nothing yet: free the I/O thread until the engine resumes us
             * (or, told meanwhile, look again; at the very end, poll). */
            if (!lm_server_may_suspend(g->server) || lm_wakeup_suspend(&g->wakeup)) return 0;
            continue;
        }
        if (got < 0) {
            observe_end(g, outcome_of(g));
            g->api->stream_end(g);
            continue;
        }
        cJSON *logprob = NULL;
        int i = apply_event(g, prompt, &ev, &logprob);
        if (i >= 0) g->api->stream_update(g, i, logprob);
        else cJSON_Delete(logprob);
    }
    size_t n = g->out.len - g->out_pos;
    if (n > max) n = max;
    memcpy(buf, g->out.data + g->out_pos, n);
    g->out_pos += n;
    return (ssize_t)n;
}

/* MHD is done with the stream: normally after its end, but also when the
 * client went away while a chunk was being sent (then no reader call saw it):
 * such a stream counts as aborted, one that could not be written as an error. */
static void stream_free(void *cls) {
    gen_ctx *g = cls;
    if (g->submitted && !g->observed && !g->out.failed && !atomic_load(&g->server->cancel_all)) g->client_gone = true;
    if (g->submitted) observe_end(g, g->out.failed ? 1 : 2);
    gen_free(g);
}

/* ------------------------------------------------------------ the APIs */

static lm_status parse_chat(gen_ctx *g, const char *body, size_t len, char *param, size_t param_size, lm_error *err) {
    return lm_openai_request_parse(LM_API_CHAT, body, len, &g->server->image_parts, &g->req, param, param_size, err);
}

static lm_status parse_completion(gen_ctx *g, const char *body, size_t len, char *param, size_t param_size,
                                  lm_error *err) {
    return lm_openai_request_parse(LM_API_COMPLETION, body, len, &g->server->image_parts, &g->req, param, param_size,
                                   err);
}

static lm_status parse_messages(gen_ctx *g, const char *body, size_t len, char *param, size_t param_size,
                                lm_error *err) {
    return lm_anthropic_request_parse(body, len, false, &g->server->image_parts, &g->req, param, param_size, err);
}

static lm_status parse_responses(gen_ctx *g, const char *body, size_t len, char *param, size_t param_size,
                                 lm_error *err) {
    return lm_responses_request_parse(body, len, &g->server->image_parts, &g->req, &g->responses_echo, param,
                                      param_size, err);
}

/* Each route's API: its parser and its writers; the pipeline (the
 * handler below, the stream reader, lm_generation_resume) does the rest. */
static const lm_generation_api apis[] = {
    {LM_API_CHAT, LM_WIRE_OPENAI, "/v1/chat/completions", "chatcmpl-", parse_chat, openai_whole, openai_stream_start,
     openai_stream_update, openai_stream_end},
    {LM_API_COMPLETION, LM_WIRE_OPENAI, "/v1/completions", "cmpl-", parse_completion, openai_whole,
     openai_stream_start, openai_stream_update, openai_stream_end},
    {LM_API_CHAT, LM_WIRE_ANTHROPIC, "/v1/messages", "msg_", parse_messages, anthropic_whole, anthropic_stream_start,
     anthropic_stream_update, anthropic_stream_end},
    {LM_API_CHAT, LM_WIRE_RESPONSES, "/v1/responses", "resp_", parse_responses, responses_whole,
     responses_stream_start, responses_stream_update, responses_stream_end},
};

static const lm_generation_api *api_of(lm_api_kind kind, lm_wire wire) {
    for (size_t i = 0; i < sizeof apis / sizeof apis[0]; i++)
        if (apis[i].wire == wire && (wire != LM_WIRE_OPENAI || apis[i].kind == kind)) return &apis[i];
    return &apis[0];
}

/* ------------------------------------------------------------ the handler */

/* 64 random bits from the kernel; should that fail, the clock, the pid and
 * the server's counter, mixed (still unique across starts). */
static uint64_t random_u64(lm_server *s) {
    uint64_t v;
    if (getrandom(&v, sizeof v, GRND_NONBLOCK) == (ssize_t)sizeof v) return v;
    struct timespec t;
    clock_gettime(CLOCK_REALTIME, &t);
    uint64_t z = (uint64_t)t.tv_sec * 1000000000ull + (uint64_t)t.tv_nsec + ((uint64_t)getpid() << 40) +
                 atomic_fetch_add(&s->next_id, 1) * 0x9e3779b97f4a7c15ull;
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
    return z ^ (z >> 31);
}

/* Why a request is refused before it runs: its status, message and the
 * field the message is about. */
typedef struct {
    unsigned status;
    char message[1200];
    const char *param;
} refusal;

static bool refuse(refusal *no, unsigned status, const char *message, const char *param) {
    no->status = status;
    snprintf(no->message, sizeof no->message, "%s", message);
    no->param = param;
    return false;
}

static enum MHD_Result fail(gen_ctx *g, struct MHD_Connection *c, unsigned status, const char *message,
                            const char *param) {
    enum MHD_Result ret = lm_reply_error_as(c, g->wire, status, message, param);
    log_request(g, status, message);
    gen_free(g);
    return ret;
}

/* 1. The body, through the route's parser, with the server's defaults,
 * for a model this server serves. */
static bool parse_request(gen_ctx *g, const char *body, size_t len, refusal *no) {
    lm_server *s = g->server;
    char param[64] = "";
    lm_error err = {0};
    if (g->api->parse(g, body, len, param, sizeof param, &err) != LM_OK) {
        refuse(no, g->req.too_large ? 413 : err.code == LM_ERR_NOMEM ? 500 : 400, err.message, "");
        snprintf(g->refused_param, sizeof g->refused_param, "%s", param);
        no->param = g->refused_param;
        return false;
    }
    lm_openai_request *r = &g->req;
    lm_generation_defaults_apply(s->options.generation_defaults, r->doc, &r->params.sampling);
    if (!lm_server_serves_model(s, r->model)) {
        lm_server_unknown_model_message(s, r->model, no->message, sizeof no->message);
        no->status = 404;
        no->param = "model";
        return false;
    }
    /* One prompt for chat, one or more for completions; choices for all. */
    g->n_per = r->params.n;
    g->n_prompts = g->api->kind == LM_API_CHAT ? 1 : r->n_prompts;
    g->n = g->n_prompts * g->n_per;
    g->prompts = calloc((size_t)g->n_prompts, sizeof *g->prompts);
    g->choices = calloc((size_t)g->n, sizeof *g->choices);
    g->ids = calloc((size_t)g->n_prompts, sizeof *g->ids);
    g->n_ids = calloc((size_t)g->n_prompts, sizeof *g->n_ids);
    if (!g->prompts || !g->choices || !g->ids || !g->n_ids)
        return refuse(no, 500, "out of memory allocating the prompts and choices", NULL);
    return true;
}

/* The chat template's text for the messages, with a forced call's bridge,
 * tokenized; *opens: the prompt leaves a reasoning block open. */
static bool chat_prompt_ids(gen_ctx *g, bool forced, lm_tool_form form, bool *opens, refusal *no) {
    lm_server *s = g->server;
    lm_error err = {0};
    char *text = NULL;
    size_t text_len = 0;
    lm_status st = lm_render_chat_prompt(s, &g->req, &text, &text_len, &err);
    /* A bound of the template engine (a string over 16 MiB) is the
     * request's size, not the server's failure. */
    if (st == LM_ERR_NOMEM) return refuse(no, 413, err.message, "messages");
    /* tool_choice required / named: the prompt ends with the opening of
     * the call, after what makes the turn read as the template writes a
     * call without reasoning (closing a thinking block the template
     * opened; GLM's empty <think></think>). */
    const char *think_close =
        st == LM_OK && forced ? lm_forced_call_bridge(form, text, text_len, s->template_has_think) : "";
    if (*think_close) {
        size_t extra = strlen(think_close);
        char *grown = realloc(text, text_len + extra + 1);
        if (grown) {
            memcpy(grown + text_len, think_close, extra + 1);
            text = grown;
            text_len += extra;
        } else {
            st = lm_fail(&err, LM_ERR_NOMEM, "out of memory ending the reasoning before a forced call");
        }
    }
    if (st == LM_OK) st = lm_prompt_bytes_fit(s, text_len, &err);
    if (st == LM_OK) st = lm_tokenizer_encode(s->tokenizer, text, text_len, false, &g->ids[0], &g->n_ids[0], &err);
    *opens = st == LM_OK && s->template_has_think && lm_prompt_opens_reasoning(text, text_len);
    free(text);
    if (st != LM_OK) return refuse(no, st == LM_ERR_NOMEM ? 500 : 400, err.message, "messages");
    return true;
}

/* One placeholder per image part: the same token typed as text would take
 * an image's place (or ask for one that is not there). */
static bool image_placeholders_match(gen_ctx *g, refusal *no) {
    lm_server *s = g->server;
    int placeholders = count_image_tokens(s, g->ids[0], g->n_ids[0]);
    if (placeholders == g->req.n_images) return true;
    const char *name = lm_tokenizer_id_to_token(s->tokenizer, s->image_token_id);
    if (placeholders > g->req.n_images)
        snprintf(no->message, sizeof no->message,
                 "the messages' text holds the image placeholder %.64s outside image parts (%d times): "
                 "images are sent as image_url parts",
                 name ? name : "token", placeholders - g->req.n_images);
    else
        snprintf(no->message, sizeof no->message, "the chat template wrote %d of the request's %d images into the prompt",
                 placeholders, g->req.n_images);
    no->status = 400;
    no->param = "messages";
    return false;
}

/* skip_special_tokens (default true) drops special tokens from the text,
 * except the markers the output parsers consume: <think> and </think> when
 * reasoning is split, <tool_call> and </tool_call> when tools are on, and
 * GLM's <arg_key> </arg_key> <arg_value> </arg_value> inside its calls
 * (tokenizers may mark any of them special).  Those the parsers do not
 * consume (a stray </tool_call>) are dropped there. */
static void keep_output_markers(gen_ctx *g, bool forced, lm_tool_form form) {
    lm_server *s = g->server;
    lm_openai_request *r = &g->req;
    const char *markers[LM_OUTPUT_MARKERS];
    lm_output_markers(s->template_has_think && !forced, r->tools != NULL, form, markers);
    int n_keep = 0;
    bool special[LM_OUTPUT_MARKERS] = {false};
    for (int k = 0; k < LM_OUTPUT_MARKERS && r->params.skip_special_tokens; k++) {
        int32_t id = markers[k] ? lm_tokenizer_token_to_id(s->tokenizer, markers[k]) : -1;
        special[k] = id >= 0 && lm_tokenizer_is_special(s->tokenizer, id);
        if (special[k]) g->keep_special[n_keep++] = id;
    }
    for (int i = 0; i < g->n; i++) {
        g->choices[i].reasoning_parser.drop_stray = special[0] || special[1];
        g->choices[i].tool_parser.drop_stray = special[2] || special[3];
        /* streamed: calls go out as they are written (tool_call_delta.h) */
        g->choices[i].tool_parser.stream_calls = r->stream;
    }
    r->params.keep_special_token_ids = g->keep_special;
    r->params.n_keep_special_token_ids = n_keep;
}

/* 2a. Chat: the rendered prompt, a forced call's opening and grammar, and
 * each choice's output parsers. */
static bool prepare_chat(gen_ctx *g, struct MHD_Connection *c, refusal *no) {
    lm_server *s = g->server;
    lm_openai_request *r = &g->req;
    lm_error err = {0};
    if (!s->tokenizer) return refuse(no, 400, "this model has no tokenizer, so chat is not available", NULL);
    bool forced = lm_tool_choice_forces_call(r), opens = false;
    lm_tool_form form = lm_tool_form_of_template(lm_tokenizer_chat_template(s->tokenizer));
    if (!chat_prompt_ids(g, forced, form, &opens, no)) return false;
    const char *forced_name = NULL;
    if (forced) {
        int32_t *with_call = NULL;
        unsigned status = 400;
        lm_status st = lm_forced_call_prompt(s, c, r, form, g->ids[0], g->n_ids[0], &with_call, &g->n_ids[0],
                                             &forced_name, &status, &err);
        free(g->ids[0]);
        g->ids[0] = with_call;
        if (st != LM_OK) return refuse(no, status, err.message, "tool_choice");
        if (lm_forced_call_grammar(r, form, forced_name, &err) != LM_OK) return refuse(no, 400, err.message, "tools");
    }
    if (!image_placeholders_match(g, no)) return false;
    uint64_t seed = random_u64(s);
    for (int i = 0; i < g->n; i++) {
        choice_state *ch = &g->choices[i];
        /* A forced call's output is its arguments: no reasoning to split. */
        ch->use_reasoning = s->template_has_think && !forced;
        ch->use_tools = r->tools != NULL;
        lm_reasoning_parser_init(&ch->reasoning_parser, opens);
        lm_tool_parser_init(&ch->tool_parser, r->tools, seed + (uint64_t)i * 0x9e3779b97f4a7c15ull);
        lm_status st;
        if (forced && (st = lm_tool_parser_start_forced(&ch->tool_parser, form, forced_name, &err)) != LM_OK)
            return refuse(no, st == LM_ERR_NOMEM ? 500 : 400, err.message, "tool_choice");
    }
    keep_output_markers(g, forced, form);
    return true;
}

/* 2b. Completions: each prompt's ids (text tokenized, or ids as given),
 * and its echo. */
static bool prepare_completions(gen_ctx *g, refusal *no) {
    lm_server *s = g->server;
    lm_openai_request *r = &g->req;
    lm_error err = {0};
    lm_status st;
    for (int p = 0; p < g->n_prompts; p++) {
        lm_prompt_input *in = &r->prompts[p];
        if (in->text) {
            if (!s->tokenizer) return refuse(no, 400, "this model has no tokenizer: send the prompt as token ids", "prompt");
            if (lm_prompt_bytes_fit(s, in->text_len, &err) != LM_OK) return refuse(no, 400, err.message, "prompt");
            st = lm_tokenizer_encode(s->tokenizer, in->text, in->text_len, true, &g->ids[p], &g->n_ids[p], &err);
            if (st != LM_OK) return refuse(no, st == LM_ERR_NOMEM ? 500 : 400, err.message, "prompt");
            if (count_image_tokens(s, g->ids[p], g->n_ids[p]) > 0) return refuse(no, 400, COMPLETION_IMAGES, "prompt");
            if (r->echo && !(g->prompts[p].echo_text = strdup(in->text)))
                return refuse(no, 500, "out of memory copying the prompt to echo", NULL);
        } else {
            g->ids[p] = in->ids;
            in->ids = NULL;
            g->n_ids[p] = (size_t)in->n_ids;
            if (count_image_tokens(s, g->ids[p], g->n_ids[p]) > 0) return refuse(no, 400, COMPLETION_IMAGES, "prompt");
            if (r->echo && s->tokenizer && g->n_ids[p]) {
                size_t tl;
                st = lm_tokenizer_decode(s->tokenizer, g->ids[p], g->n_ids[p], false, &g->prompts[p].echo_text, &tl, &err);
                if (st != LM_OK) return refuse(no, st == LM_ERR_NOMEM ? 500 : 400, err.message, "prompt");
            }
        }
    }
    for (int i = 0; i < g->n; i++)
        if (!s->tokenizer) g->choices[i].token_ids = cJSON_CreateArray();
    return true;
}

/* 3. Every prompt is neither empty nor past the context. */
static bool check_prompts(gen_ctx *g, refusal *no) {
    const char *prompt_param = g->api->kind == LM_API_CHAT ? "messages" : "prompt";
    int max_len = g->server->options.max_model_len;
    for (int i = 0; i < g->n; i++) {
        g->choices[i].stop_string = -1;
        g->choices[i].stop_token = -1;
        if (g->req.logprobs) g->choices[i].logprobs = cJSON_CreateArray();
    }
    for (int p = 0; p < g->n_prompts; p++) {
        no->status = 400;
        no->param = prompt_param;
        if (g->n_ids[p] == 0) {
            if (g->n_prompts == 1) snprintf(no->message, sizeof no->message, "the prompt is empty");
            else snprintf(no->message, sizeof no->message, "prompt %d of the list is empty", p);
            return false;
        }
        if ((int64_t)g->n_ids[p] >= max_len) {
            snprintf(no->message, sizeof no->message,
                     "This model's maximum context length is %d tokens. However, your request has %zu input tokens%s.",
                     max_len, g->n_ids[p], g->n_prompts > 1 ? " in one of its prompts" : "");
            return false;
        }
    }
    return true;
}

/* 4. One engine request per prompt, each told to wake this connection
 * when it has events. */
static bool submit_prompts(gen_ctx *g, refusal *no) {
    lm_server *s = g->server;
    lm_openai_request *r = &g->req;
    const char *prompt_param = g->api->kind == LM_API_CHAT ? "messages" : "prompt";
    lm_error err = {0};
    if (lm_server_watch(s, &g->wakeup, &err) != LM_OK) return refuse(no, 503, err.message, NULL);
    g->watched = true;
    bool max_tokens_given = r->max_tokens_given;
    for (int p = 0; p < g->n_prompts; p++) {
        /* No max_tokens: what the context leaves, which for images is known
         * once the engine has read them. */
        if (!max_tokens_given) r->params.max_tokens = s->options.max_model_len - (int)g->n_ids[p];
        r->params.max_tokens_fit = !max_tokens_given;
        r->params.prompt = g->ids[p];
        r->params.n_prompt = (int)g->n_ids[p];
        char engine_error[512] = "";
        int rc = loom_submit(s->engine, &r->params, &g->prompts[p].handle, engine_error, sizeof engine_error);
        r->params.prompt = NULL;
        if (rc != LOOM_OK) {
            g->prompts[p].handle = NULL; /* the ones submitted are cancelled by gen_free */
            /* Bad image files come back as LOOM_ERR_INVALID "image N: ..." */
            bool about_images = r->n_images > 0 && rc == LOOM_ERR_INVALID && strstr(engine_error, "image");
            return refuse(no, status_of(rc), engine_error,
                          rc == LOOM_ERR_TOO_LONG ? (max_tokens_given ? "max_tokens" : prompt_param)
                          : about_images          ? prompt_param
                                                  : NULL);
        }
        loom_request_set_notify(g->prompts[p].handle, lm_wakeup_notify, &g->wakeup);
        g->prompts[p].prompt_tokens = (int)g->n_ids[p];
        if (!g->submitted) atomic_fetch_add(&s->active, 1);
        g->submitted = true;
    }
    g->open_choices = g->n;
    /* Ids unique across server starts: 128 random bits. */
    uint64_t a = random_u64(s), b = random_u64(s);
    snprintf(g->id, sizeof g->id, "%s%016llx%016llx", g->api->id_prefix, (unsigned long long)a, (unsigned long long)b);
    return true;
}

/* 5. A stream's response goes out now, its events as the engine has them
 * (stream_reader); a blocking request waits, suspended, for its end. */
static enum MHD_Result start_answer(gen_ctx *g, struct MHD_Connection *c, lm_generation **pending) {
    if (g->req.stream) {
        g->api->stream_start(g);
        struct MHD_Response *resp = MHD_create_response_from_callback(MHD_SIZE_UNKNOWN, 16384, stream_reader, g, stream_free);
        if (!resp) return fail(g, c, 500, "cannot create the streaming response", NULL);
        MHD_add_response_header(resp, "Content-Type", "text/event-stream");
        MHD_add_response_header(resp, "Cache-Control", "no-cache");
        return lm_queue_response(c, 200, resp); /* frees g through stream_free when the connection is done */
    }
    g->next_look = lm_monotonic_seconds() + EVENT_POLL_MS * 1e-3;
    *pending = g; /* answered by lm_generation_resume once it finished */
    return MHD_YES;
}

enum MHD_Result lm_handle_generation(lm_server *s, struct MHD_Connection *c, lm_api_kind kind, lm_wire wire,
                                     const char *body, size_t len, double arrival, lm_generation **pending) {
    *pending = NULL;
    gen_ctx *g = calloc(1, sizeof *g);
    if (!g) return lm_reply_error_as(c, wire, 500, "out of memory allocating the request's state", NULL);
    lm_wakeup_init(&g->wakeup, c);
    g->server = s;
    g->api = api_of(kind, wire);
    g->wire = wire;
    g->connection = c;
    g->arrival = arrival;
    g->body_len = len;
    g->created = (long long)time(NULL);
    refusal no = {0};
    bool ready = parse_request(g, body, len, &no) &&
                 (kind == LM_API_CHAT ? prepare_chat(g, c, &no) : prepare_completions(g, &no)) &&
                 check_prompts(g, &no) && submit_prompts(g, &no);
    if (!ready) return fail(g, c, no.status, no.message, no.param);
    return start_answer(g, c, pending);
}

/* The blocking request's answer, once every event was read. */
static enum MHD_Result answer(gen_ctx *g, struct MHD_Connection *c) {
    lm_server *s = g->server;
    observe_end(g, outcome_of(g));
    enum MHD_Result ret;
    if (atomic_load(&s->cancel_all) && outcome_of(g) == 2) {
        ret = lm_reply_error_as(c, g->wire, 503, "the server is shutting down: the request was cancelled", NULL);
    } else if (g->error_message[0]) {
        ret = lm_reply_error_as(c, g->wire, 500, g->error_message, NULL);
    } else {
        cJSON *resp = g->api->whole(g);
        ret = lm_reply_json(c, 200, resp);
        cJSON_Delete(resp);
    }
    gen_free(g);
    return ret;
}

enum MHD_Result lm_generation_resume(lm_generation **pending, struct MHD_Connection *c) {
    gen_ctx *g = *pending;
    lm_server *s = g->server;
    for (;;) {
        /* At the very end (no suspending) a short wait here instead. */
        bool may_suspend = lm_server_may_suspend(s);
        loom_event ev;
        int prompt;
        int got = next_event(g, &ev, &prompt, may_suspend ? 0 : 10);
        if (got < 0) break;
        if (atomic_load(&s->cancel_all)) cancel_all(g);
        /* The client's socket is looked at every EVENT_POLL_MS, events or
         * not: a steady stream of tokens must not hide that it went away
         * (while suspended, the server's sweep looks). */
        if (!g->client_gone && (got == 0 || lm_monotonic_seconds() >= g->next_look)) {
            g->next_look = lm_monotonic_seconds() + EVENT_POLL_MS * 1e-3;
            if (lm_client_gone(c)) {
                g->client_gone = true;
                cancel_all(g);
            }
        }
        if (got > 0) apply_event(g, prompt, &ev, NULL);
        else if (may_suspend && lm_wakeup_suspend(&g->wakeup)) return MHD_YES;
    }
    *pending = NULL;
    return answer(g, c);
}

void lm_generation_abandon(lm_generation *g) {
    if (!g) return;
    if (g->submitted) observe_end(g, 2);
    gen_free(g);
}
