/* loom's OpenAI-compatible HTTP server (libmicrohttpd: epoll and a small
 * pool of I/O threads; requests are prepared on a fixed pool of threads
 * while the connection is suspended) in front of an engine from
 * include/loom.h. */
#ifndef LOOM_SERVER_SERVER_H
#define LOOM_SERVER_SERVER_H

#include <stdbool.h>
#include <stddef.h>

#include "base/error.h"
#include "base/log.h"
#include "loom.h"
#include "server/generation_defaults.h"
#include "server/responses_store.h"
#include "text/chat_template.h"
#include "text/tokenizer.h"

#define LM_DEFAULT_MAX_BODY_BYTES ((size_t)32 << 20)

typedef struct {
    const char *host;              /* default 127.0.0.1 */
    int port;                      /* 0: any free port (see lm_server_port) */
    const char *api_key;           /* NULL: no authentication */
    const char *served_model_name; /* the id /v1/models lists first and answers carry */
    const char *const *model_aliases; /* other names requests may give; the first n_listed_aliases
                                         (--served-model-name's) are listed by /v1/models too, the
                                         rest (the folder as given, its basename) are only accepted */
    int n_model_aliases, n_listed_aliases;
    size_t max_body_bytes;         /* larger bodies get 413 (default 32 MiB: base64 images) */
    int max_model_len;             /* the engine's context limit (for the default max_tokens) */
    int max_connections;           /* open connections at once; more are closed at accept (default 4096) */
    int timeout_keep_alive_s;      /* an idle connection (no request under way) is closed after this
                                      many seconds of silence (default 5) */
    int timeout_header_s;          /* a request's headers must be complete this many seconds after the
                                      connection opened or the previous response ended (default 10) */
    int timeout_body_s;            /* a request's body must be complete this many seconds after its
                                      headers; also the silence allowed while a request is under way
                                      (default 60) */
    int http_threads;              /* I/O threads (default 4) */
    int prepare_threads;           /* threads preparing requests (parse, render, tokenize, submit) while their
                                      connection is suspended (default 4) */
    int prepare_queue;             /* requests waiting for a preparation thread; more get 503 with
                                      Retry-After (default 1024) */
    const char *allowed_origins;   /* CORS: NULL (off), "*" or a comma-separated list of origins */
    const char *allowed_local_media_path; /* image parts may name files inside this folder (file://
                                             URIs or paths); NULL: data: URIs only */
    bool images_off;               /* the engine was told max_image_pixels -1 (for the refusal's words) */
    const lm_log *log;             /* where request and throughput lines go (NULL: nowhere) */
    bool log_requests;             /* one line per generation request (request_log.h) */
    double stats_interval_s;       /* a throughput line this often while busy (<= 0: none) */
    /* Sampling defaults for the fields a request leaves out (the
     * checkpoint's generation_config.json); NULL: loom's own. */
    const lm_generation_defaults *generation_defaults;
    /* Stored Responses (responses_store.h): in memory unless a path is
     * given; keep_no_responses: none at all (store: true keeps nothing). */
    lm_responses_store_options responses_store;
    bool keep_no_responses;
} lm_server_options;

typedef struct lm_server lm_server;

/* The listening socket, bound before the engine loads its weights so that
 * a taken port fails at once.  options->host may be an IPv4 or IPv6
 * address ("::1", "[::1]") or a host name. */
typedef struct lm_front_door lm_server_listener;
lm_status lm_server_listen(const lm_server_options *options, lm_server_listener **out, lm_error *err);
int lm_server_listener_port(const lm_server_listener *listener);
/* For a listener never handed to lm_server_start. */
void lm_server_listener_close(lm_server_listener *listener);

/* Starts serving on listener (taken over, freed with the server, also when
 * the start fails; NULL: bind one here) before the model is there: until
 * lm_server_set_ready, /health answers 503 {"status":"loading"}, /version
 * answers, and every other route 503 with Retry-After (vLLM's and
 * llama-server's habit; orchestrators wait on /health). */
lm_status lm_server_start(const lm_server_options *options, lm_server_listener *listener, lm_server **out,
                          lm_error *err);
/* Hands the server its model, once: from then on every route is served.
 * The engine, tokenizer and template stay owned by the caller and must
 * outlive the server; tokenizer and template may be NULL (then chat is
 * refused and completions take token ids only).  On failure the server
 * stays loading (stop it). */
lm_status lm_server_set_ready(lm_server *s, loom_engine *engine, const lm_tokenizer *tokenizer,
                              const lm_chat_template *chat_template, lm_error *err);
int lm_server_port(const lm_server *server);
/* Graceful stop: closes the listening socket at once (new connections are
 * refused), lets in-flight requests finish for up to grace_ms, then cancels
 * the rest (streams end with finish_reason "abort" and [DONE], blocking
 * requests get a 503), waits for those last replies to go out, and frees
 * the server. */
void lm_server_stop(lm_server *server, int grace_ms);

#endif
