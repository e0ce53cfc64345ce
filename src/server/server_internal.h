/* Shared between the server's files: the server object and reply helpers. */
#ifndef LOOM_SERVER_SERVER_INTERNAL_H
#define LOOM_SERVER_SERVER_INTERNAL_H

#include <cjson/cJSON.h>
#include <microhttpd.h>
#include <stdatomic.h>

#include "base/clock.h"
#include "server/metrics.h"
#include "server/openai_request.h"
#include "server/server.h"
#include "server/wakeup.h"

struct lm_server {
    lm_server_options options;
    const lm_log *log;   /* options.log, else fallback_log (stderr) */
    lm_log fallback_log;
    loom_engine *engine;
    const lm_tokenizer *tokenizer;
    const lm_chat_template *chat_template;
    bool template_has_think; /* the template writes <think>: split reasoning */
    /* images: how image parts are read (each becomes the engine's image
     * marker in its content), the placeholder id (-1: no images), the media
     * folder's realpath */
    lm_image_parts image_parts;
    int32_t image_token_id;
    char *media_dir;
    /* requests' grammars, kept by their text, a few compiles at once
     * (image_parts.grammars points here) */
    struct lm_grammar_cache *grammars;
    struct MHD_Daemon *daemon;
    int port;
    lm_metrics metrics;
    atomic_uint_fast64_t next_id;
    atomic_int active;       /* generation requests in flight */
    atomic_bool cancel_all;  /* shutdown: cancel what is still running */
    atomic_bool ready;       /* lm_server_set_ready was called: engine, tokenizer and template are set */
    struct lm_http *http;    /* http.c's connection table, worker count and waker */
    struct lm_front_door *door; /* front_door.c: the listener and the relay in front of MHD */
    struct lm_throughput_log *throughput; /* throughput_log.c: the periodic line while busy, or NULL */
    lm_responses_store *responses; /* stored Responses (responses_store.h), NULL with keep_no_responses */
};

typedef enum { LM_ROUTE_NONE, LM_ROUTE_CHAT, LM_ROUTE_COMPLETIONS, LM_ROUTE_MODELS, LM_ROUTE_HEALTH,
               LM_ROUTE_METRICS, LM_ROUTE_TOKENIZE, LM_ROUTE_DETOKENIZE, LM_ROUTE_MODEL,
               LM_ROUTE_RESET_PREFIX_CACHE, LM_ROUTE_VERSION, LM_ROUTE_MESSAGES,
               LM_ROUTE_COUNT_TOKENS, LM_ROUTE_RESPONSES, LM_ROUTE_STORED_RESPONSE } lm_route;

/* The API a generation request speaks: its replies and errors take its shape. */
typedef enum { LM_WIRE_OPENAI, LM_WIRE_ANTHROPIC, LM_WIRE_RESPONSES } lm_wire;

/* Whether a request naming its model `name` (NULL: none) is served here:
 * served_model_name or one of model_aliases. */
bool lm_server_serves_model(const lm_server *s, const char *name);
/* The 404's message: the name asked for and every name served. */
void lm_server_unknown_model_message(const lm_server *s, const char *name, char *out, size_t size);
/* GET /v1/models/{id}'s object and /v1/models' list (id: served_model_name,
 * then the listed aliases): OpenAI's shape, or Anthropic's (ModelInfo:
 * type, id, display_name, created_at; the page's has_more, first_id,
 * last_id).  NULL when out of memory. */
cJSON *lm_model_object(const lm_server *s, const char *id, bool anthropic);
cJSON *lm_model_list(const lm_server *s, bool anthropic);

/* Replies; all return MHD's result of queueing the response. */
enum MHD_Result lm_reply_text(struct MHD_Connection *c, unsigned status, const char *content_type,
                              const char *body, size_t len);
enum MHD_Result lm_reply_json(struct MHD_Connection *c, unsigned status, const cJSON *json);
/* {"error": {"message", "type", "param", "code"}}, or Anthropic's shape when
 * the client speaks Anthropic's API (its route, or the anthropic-version
 * header on /v1/models and unknown routes); error_body.h has the types. */
enum MHD_Result lm_reply_error(struct MHD_Connection *c, unsigned status, const char *message,
                               const char *param);

/* lm_reply_error in the shape of the wire's API (Anthropic:
 * {"type": "error", "error": {"type", "message"}}). */
enum MHD_Result lm_reply_error_as(struct MHD_Connection *c, lm_wire wire, unsigned status, const char *message,
                                  const char *param);

/* The Access-Control-Allow-Origin value for a request's Origin under
 * --allowed-origins ("*", the origin itself, or NULL: no CORS header). */
const char *lm_cors_allow_origin(const char *allowed_origins, const char *origin);

/* Queues a response and releases the caller's reference to it (use it in
 * place of MHD_queue_response + MHD_destroy_response).  Requests handled on
 * a preparation thread have their response held here and queued by the
 * connection's I/O thread when it resumes. */
enum MHD_Result lm_queue_response(struct MHD_Connection *c, unsigned status, struct MHD_Response *response);
/* A suspended generation request's wakeup, looked at by the server's
 * sweep (every 100 ms) so that a gone client or a shutdown is noticed while
 * no event comes; unwatch before the wakeup is destroyed. */
lm_status lm_server_watch(lm_server *s, lm_wakeup *w, lm_error *err);
void lm_server_unwatch(lm_server *s, lm_wakeup *w);
/* False once the server stops for good: readers then poll (MHD must not
 * stop with a connection suspended). */
bool lm_server_may_suspend(const lm_server *s);
/* The thread that resumes connections woken by the engine (server/wakeup.h). */
lm_resumer *lm_server_resumer(lm_server *s);

/* True when the client closed the connection (a peek at its socket). */
bool lm_client_gone(struct MHD_Connection *c);

/* POST /v1/chat/completions and /v1/completions (wire OPENAI),
 * /v1/messages (wire ANTHROPIC, kind CHAT) and /v1/responses (wire
 * RESPONSES, kind CHAT; errors in the OpenAI shape): generation.c and the
 * files it names (generation.h). */
typedef struct gen_ctx lm_generation;
/* Parses, renders, submits.  A stream's response is queued at once; a
 * blocking request comes back in *pending (the caller suspends nothing:
 * lm_generation_resume does) and is answered by lm_generation_resume. */
enum MHD_Result lm_handle_generation(lm_server *s, struct MHD_Connection *c, lm_api_kind kind, lm_wire wire,
                                     const char *body, size_t len, double arrival, lm_generation **pending);
/* On the connection's I/O thread: reads the blocking request's events
 * without waiting; once it finished, answers and frees it (*g = NULL),
 * else suspends the connection until the engine has more. */
enum MHD_Result lm_generation_resume(lm_generation **g, struct MHD_Connection *c);
/* Frees a request never answered (its connection closed). */
void lm_generation_abandon(lm_generation *g);
/* GET and DELETE /v1/responses/{id}, GET /v1/responses/{id}/input_items
 * (stored_responses.c; url is the whole path). */
enum MHD_Result lm_handle_stored_response(lm_server *s, struct MHD_Connection *c, const char *method, const char *url);
/* POST /v1/messages/count_tokens: {"input_tokens": N} of the rendered prompt. */
enum MHD_Result lm_handle_count_tokens(lm_server *s, struct MHD_Connection *c, const char *body, size_t len);


/* Image input (chat_prompt.c): the model's image tokens, the marker image
 * parts become, the media folder; a failure (a bad folder) stops the start. */
lm_status lm_server_images_init(lm_server *s, lm_error *err);

/* LM_OK when text of this many bytes may fit the context; else
 * LM_ERR_INVALID with vLLM's context-length message and the floor on its
 * tokens (lm_tokenizer_min_tokens): checked before tokenizing, which for
 * megabytes of text costs seconds (chat_prompt.c). */
lm_status lm_prompt_bytes_fit(const lm_server *s, size_t text_bytes, lm_error *err);

/* Renders the chat prompt of a parsed chat request (malloc'd text;
 * chat_prompt.c). */
lm_status lm_render_chat_prompt(const lm_server *s, const lm_openai_request *r, char **text,
                                size_t *len, lm_error *err);
#endif
