/* POST /v1/chat/completions, /v1/completions, /v1/messages and
 * /v1/responses: the request pipeline shared by the four routes, up to the
 * engine: the body through its API's parser (generation_openai.c,
 * generation_anthropic.c, generation_responses.c), validated, the prompt
 * rendered and tokenized (chat_prompt.c; a forced tool call's opening), the
 * output parsers set up, and one engine request submitted per prompt; the
 * events are read in generation_events.c.  Runs on a preparation thread
 * (prepare_pool.h) while the connection is suspended. */
#include <malloc.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/random.h>
#include <time.h>
#include <unistd.h>

#include "server/generation.h"
#include "server/tool_choice.h"

#define COMPLETION_IMAGES                                                                                  \
    "the prompt holds the model's image placeholder token: /v1/completions takes no images; send them as " \
    "image_url parts of /v1/chat/completions messages"
/* After a request whose body was at least this large, free heap pages go
 * back to the system (glibc keeps them in the preparing thread's arena). */
#define TRIM_AFTER_BODY_BYTES ((size_t)1 << 20)

/* The HTTP status of an engine error. */
static unsigned status_of(int code) {
    switch (code) {
    case LOOM_ERR_BUSY: case LOOM_ERR_SHUTDOWN: return 503;
    case LOOM_ERR_TOO_LONG: case LOOM_ERR_INVALID: return 400;
    case LOOM_ERR_NOMEM: case LOOM_ERR_INTERNAL: default: return 500;
    }
}

void lm_generation_free(gen_ctx *g) {
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
    for (int i = 0; g->choices && i < g->n; i++) lm_choice_free(&g->choices[i]);
    free(g->choices);
    lm_sbuf_free(&g->out);
    lm_responses_parsed_free(&g->responses);
    lm_responses_stream_free(&g->rstream);
    lm_openai_request_free(&g->req);
    bool trim = g->body_len >= TRIM_AFTER_BODY_BYTES;
    free(g);
    if (trim) malloc_trim(0);
}

/* Each route's API: its parser and its writers (the generation_*.c rows);
 * the pipeline (the handler below, generation_events.c) does the rest. */
static const lm_generation_api *const apis[] = {&lm_chat_completions_api, &lm_completions_api, &lm_messages_api,
                                                &lm_responses_api};

static const lm_generation_api *api_of(lm_api_kind kind, lm_wire wire) {
    for (size_t i = 0; i < sizeof apis / sizeof apis[0]; i++)
        if (apis[i]->wire == wire && (wire != LM_WIRE_OPENAI || apis[i]->kind == kind)) return apis[i];
    return apis[0];
}

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

enum MHD_Result lm_generation_fail(gen_ctx *g, struct MHD_Connection *c, unsigned status, const char *message,
                                   const char *param) {
    enum MHD_Result ret = lm_reply_error_as(c, g->wire, status, message, param);
    lm_generation_log(g, status, message);
    lm_generation_free(g);
    return ret;
}

/* 1. The body, through the route's parser, with the server's defaults,
 * for a model this server serves. */
static bool parse_request(gen_ctx *g, const char *body, size_t len, refusal *no) {
    lm_server *s = g->server;
    char param[64] = "";
    lm_error err = {0};
    if (g->api->parse(g, body, len, param, sizeof param, &err) != LM_OK) {
        refuse(no, g->req.too_large ? 413 : g->req.not_found ? 404 : err.code == LM_ERR_NOMEM ? 500 : 400, err.message, "");
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
    int placeholders = lm_count_image_tokens(s, g->ids[0], g->n_ids[0]);
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
            if (lm_count_image_tokens(s, g->ids[p], g->n_ids[p]) > 0) return refuse(no, 400, COMPLETION_IMAGES, "prompt");
            if (r->echo && !(g->prompts[p].echo_text = strdup(in->text)))
                return refuse(no, 500, "out of memory copying the prompt to echo", NULL);
        } else {
            g->ids[p] = in->ids;
            in->ids = NULL;
            g->n_ids[p] = (size_t)in->n_ids;
            if (lm_count_image_tokens(s, g->ids[p], g->n_ids[p]) > 0) return refuse(no, 400, COMPLETION_IMAGES, "prompt");
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

enum MHD_Result lm_handle_generation(lm_server *s, struct MHD_Connection *c, lm_api_kind kind, lm_wire wire,
                                     const char *body, size_t len, double arrival, lm_generation **pending) {
    *pending = NULL;
    gen_ctx *g = calloc(1, sizeof *g);
    if (!g) return lm_reply_error_as(c, wire, 500, "out of memory allocating the request's state", NULL);
    lm_wakeup_init(&g->wakeup, c, lm_server_resumer(s));
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
    if (!ready) return lm_generation_fail(g, c, no.status, no.message, no.param);
    return lm_generation_start_answer(g, c, pending);
}
