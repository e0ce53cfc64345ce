/* The generation routes' shared state, between the files of the request
 * pipeline (generation.c: parse, validate, render, submit;
 * generation_events.c: the engine's events read, streamed or answered
 * whole; generation_choice.c: one choice's text through the output
 * parsers) and the rows each API brings (generation_openai.c,
 * generation_anthropic.c, generation_responses.c). */
#ifndef LOOM_SERVER_GENERATION_H
#define LOOM_SERVER_GENERATION_H

#include <cjson/cJSON.h>

#include "server/anthropic_response.h"
#include "server/reasoning_parser.h"
#include "server/responses_request.h"
#include "server/responses_response.h"
#include "server/server_internal.h"
#include "server/tool_call_delta.h"
#include "server/tool_parser.h"

typedef struct {
    bool use_reasoning, use_tools;
    lm_reasoning_parser reasoning_parser;
    lm_tool_parser tool_parser;
    lm_sbuf reasoning, content, middle; /* middle: reasoning parser's content, before tool parsing */
    lm_tool_call_list calls;
    lm_tool_delta_cursor tool_cursor; /* streaming: what of the calls was sent */
    cJSON *logprobs;        /* chat: [{token, logprob, bytes, top_logprobs}]; see logprob_entry */
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
    lm_responses_parsed responses; /* /v1/responses: the fields the response repeats, its whole input, store */
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

/* The API rows (what each route brings to the pipeline). */
extern const lm_generation_api lm_chat_completions_api, lm_completions_api, lm_messages_api, lm_responses_api;

/* generation.c: frees the request (cancels what still runs, uncounts it). */
void lm_generation_free(gen_ctx *g);
/* generation.c: the error reply in the request's shape, its log line, and
 * the request freed. */
enum MHD_Result lm_generation_fail(gen_ctx *g, struct MHD_Connection *c, unsigned status, const char *message,
                                   const char *param);

/* generation_choice.c: a choice's parsers and buffers freed. */
void lm_choice_free(choice_state *ch);
/* generation_choice.c: applies one engine event of prompt `prompt` to its
 * choice (metrics, logprobs, text through the parsers); returns the
 * choice's index, -1 for an event of no choice.  With logprob_out the
 * token's logprob entry goes there (a stream sends it), else to the
 * choice's list. */
int lm_generation_apply_event(gen_ctx *g, int prompt, const loom_event *ev, cJSON **logprob_out);
/* OpenAI's finish_reason of a finished choice ("tool_calls" for calls). */
const char *lm_finish_reason_name(const choice_state *ch);

/* generation_events.c: the request's log line (finish: the first choice's
 * reason, or what went wrong). */
void lm_generation_log(const gen_ctx *g, unsigned status, const char *finish);
/* generation_events.c: step 5, once submitted: a stream's response goes
 * out now, a blocking request comes back in *pending. */
enum MHD_Result lm_generation_start_answer(gen_ctx *g, struct MHD_Connection *c, lm_generation **pending);

/* chat_prompt.c: the image placeholders in a prompt. */
int lm_count_image_tokens(const lm_server *s, const int32_t *ids, size_t n);

#endif
