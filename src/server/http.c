/* The HTTP side: libmicrohttpd setup, routing, authentication, body limits
 * and the small routes (models, health, metrics, tokenize, detokenize). */
#include <arpa/inet.h>
#include <errno.h>
#include <pthread.h>
#include <stdarg.h>
#include <netinet/in.h>
#include <stdio.h>
#include <malloc.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

#include "base/build_info.h"
#include "grammar/grammar_cache.h"
#include "server/error_body.h"
#include "server/front_door.h"
#include "server/prepare_pool.h"
#include "server/request_framing.h"
#include "server/request_id.h"
#include "server/server_internal.h"
#include "server/throughput_log.h"
#include "server/wakeup.h"
#include "server/json_text.h"

#define LM_MAX_URL_BYTES LM_FRAMING_MAX_URL_BYTES       /* the front door refuses longer ones first */
#define LM_MAX_HEADER_BYTES LM_FRAMING_MAX_HEAD_BYTES /* likewise */
#define LM_MHD_MEMORY_LIMIT (128u << 10) /* MHD's per-connection pool: well above the front door's
                                            limits, so that MHD never refuses a head itself */
#define SWEEP_MS 100 /* timeouts, gone clients of suspended requests, shutdown; never a stream's tokens */
#define FINAL_WAIT_MS 5000             /* after the grace: time for the cancelled to answer */
#define FLUSH_MS 2000                  /* after MHD stopped: time for the relay to write the rest */

/* MHD's silence timer between requests.  The front door holds a request
 * head until it is complete, so MHD sees nothing while one arrives: the
 * front door enforces --timeout-keep-alive (silence while no request is
 * under way) and MHD's timer is only a backstop past the header deadline. */
static unsigned idle_timeout(const lm_server_options *o) {
    return (unsigned)(o->timeout_keep_alive_s + o->timeout_header_s);
}

typedef enum { PHASE_HEADER, PHASE_BODY, PHASE_BUSY } conn_phase;

/* One per open connection (MHD's socket context), from a fixed table. */
typedef struct {
    lm_server *server;
    MHD_socket fd;
    bool used, cut;
    conn_phase phase;
    double deadline; /* PHASE_HEADER / PHASE_BODY: when the connection is cut */
    /* A request on a preparation thread: its reply, queued on resume. */
    bool deferred;
    struct MHD_Response *pending;
    unsigned pending_status;
    unsigned status; /* the last response's, for the access line */
    /* The request under way: the API its client speaks (its errors' shape,
     * the models list's) and its id, sent back in a header. */
    lm_wire wire;
    char request_id[LM_REQUEST_ID_SIZE];
} conn_slot;

struct lm_http {
    pthread_mutex_t mutex;
    conn_slot *slots;
    int *free_slots, n_free, n_slots;
    /* watched, n_watched, sweeper_stop, no_suspend; taken before a wakeup's
     * mutex, never inside an MHD callback's lock */
    pthread_mutex_t watch_mutex;
    lm_wakeup **watched; /* generation requests' wakeups, for the sweep */
    int n_watched;
    pthread_t sweeper;
    bool sweeper_started, sweeper_stop;
    atomic_bool no_suspend;
    pthread_cond_t wake;
    /* The worker routes' requests are prepared (parsed, rendered,
     * tokenized, submitted) on this pool while their connection is
     * suspended: a fixed set of threads, a bounded queue. */
    lm_prepare_pool *pool;
    /* Resumes the connections the engine's events wake (server/wakeup.h),
     * off the engine's thread. */
    lm_resumer *resumer;
    atomic_int preparing; /* handed to the pool, their connection not yet resumed */
    atomic_int inflight;  /* requests on worker routes, dispatch to completion */
    atomic_bool stopping;
    atomic_int_fast64_t log_second, log_count;
};

typedef struct {
    lm_route route;
    bool method_ok, authorized;
    bool too_large, dispatched, counted;
    bool handled; /* reached its route's handler (generation routes log their own line there) */
    const char *url, *method; /* MHD's, valid for the request */
    struct MHD_Connection *connection; /* for the preparation thread */
    lm_sbuf body;
    double arrival;
    lm_generation *generation; /* a blocking request submitted, answered when it finishes */
} conn_ctx;

bool lm_client_gone(struct MHD_Connection *c) {
    const union MHD_ConnectionInfo *info = MHD_get_connection_info(c, MHD_CONNECTION_INFO_CONNECTION_FD);
    if (!info) return false;
    char byte;
    ssize_t n = recv(info->connect_fd, &byte, 1, MSG_PEEK | MSG_DONTWAIT);
    return n == 0 || (n < 0 && errno != EAGAIN && errno != EWOULDBLOCK && errno != EINTR);
}

static conn_slot *slot_of(struct MHD_Connection *c) {
    const union MHD_ConnectionInfo *info = MHD_get_connection_info(c, MHD_CONNECTION_INFO_SOCKET_CONTEXT);
    return info ? (conn_slot *)info->socket_context : NULL;
}

const char *lm_cors_allow_origin(const char *allowed, const char *origin) {
    if (!allowed || !allowed[0] || !origin || !origin[0]) return NULL;
    size_t ol = strlen(origin);
    for (const char *p = allowed; *p;) {
        while (*p == ' ' || *p == ',') p++;
        const char *e = p;
        while (*e && *e != ',') e++;
        const char *t = e;
        while (t > p && t[-1] == ' ') t--;
        if (t - p == 1 && *p == '*') return "*";
        if ((size_t)(t - p) == ol && strncasecmp(p, origin, ol) == 0) return origin;
        p = e;
    }
    return NULL;
}

/* The Access-Control-Allow-Origin value for this request's Origin, or NULL. */
static const char *cors_origin(const lm_server *s, struct MHD_Connection *c) {
    const char *allowed = s->options.allowed_origins;
    if (!allowed || !allowed[0]) return NULL;
    return lm_cors_allow_origin(allowed, MHD_lookup_connection_value(c, MHD_HEADER_KIND, "Origin"));
}

enum MHD_Result lm_queue_response(struct MHD_Connection *c, unsigned status, struct MHD_Response *r) {
    conn_slot *slot = slot_of(c);
    if (slot) {
        lm_server *s = slot->server;
        const char *origin = cors_origin(s, c);
        if (origin) {
            MHD_add_response_header(r, "Access-Control-Allow-Origin", origin);
            if (strcmp(origin, "*") != 0) MHD_add_response_header(r, "Vary", "Origin");
        }
        if (atomic_load(&s->http->stopping)) MHD_add_response_header(r, "Connection", "close");
        if (slot->request_id[0])
            MHD_add_response_header(r, slot->wire == LM_WIRE_ANTHROPIC ? "request-id" : "x-request-id",
                                    slot->request_id);
        slot->status = status;
        if (slot->deferred) {
            if (slot->pending) MHD_destroy_response(slot->pending);
            slot->pending = r;
            slot->pending_status = status;
            return MHD_YES;
        }
    }
    enum MHD_Result ret = MHD_queue_response(c, status, r);
    MHD_destroy_response(r);
    return ret;
}

static enum MHD_Result reply_with_allow(struct MHD_Connection *c, unsigned status, const char *content_type,
                                        const char *body, size_t len, const char *allow) {
    struct MHD_Response *r = MHD_create_response_from_buffer(len, (void *)body, MHD_RESPMEM_MUST_COPY);
    if (!r) return MHD_NO;
    MHD_add_response_header(r, "Content-Type", content_type);
    if (status == 503) MHD_add_response_header(r, "Retry-After", "1");
    if (status == 401) MHD_add_response_header(r, "WWW-Authenticate", "Bearer");
    if (allow) MHD_add_response_header(r, "Allow", allow);
    return lm_queue_response(c, status, r);
}

enum MHD_Result lm_reply_text(struct MHD_Connection *c, unsigned status, const char *content_type,
                              const char *body, size_t len) {
    return reply_with_allow(c, status, content_type, body, len, NULL);
}

enum MHD_Result lm_reply_json(struct MHD_Connection *c, unsigned status, const cJSON *json) {
    char *text = lm_json_print(json);
    if (!text) {
        static const char oom[] = "{\"error\":{\"message\":\"out of memory\",\"type\":"
                                  "\"server_error\",\"param\":null,\"code\":500}}";
        return lm_reply_text(c, 500, "application/json", oom, sizeof oom - 1);
    }
    enum MHD_Result ret = lm_reply_text(c, status, "application/json", text, strlen(text));
    cJSON_free(text);
    return ret;
}

static enum MHD_Result reply_error_allow(struct MHD_Connection *c, unsigned status, const char *message,
                                         const char *param, const char *allow) {
    char *text = lm_error_json_body(status, message, param);
    if (!text) {
        static const char oom[] = "{\"error\":{\"message\":\"out of memory\",\"type\":"
                                  "\"server_error\",\"param\":null,\"code\":500}}";
        return lm_reply_text(c, 500, "application/json", oom, sizeof oom - 1);
    }
    enum MHD_Result ret = reply_with_allow(c, status, "application/json", text, strlen(text), allow);
    cJSON_free(text);
    return ret;
}

static enum MHD_Result reply_error_wire(struct MHD_Connection *c, lm_wire wire, unsigned status, const char *message,
                                        const char *param, const char *allow) {
    if (wire != LM_WIRE_ANTHROPIC) return reply_error_allow(c, status, message, param, allow);
    const conn_slot *slot = slot_of(c);
    char *text = lm_anthropic_error_body(status, message, slot ? slot->request_id : NULL);
    if (!text) {
        static const char oom[] = "{\"type\":\"error\",\"error\":{\"type\":\"api_error\",\"message\":\"out of memory\"}}";
        return lm_reply_text(c, 500, "application/json", oom, sizeof oom - 1);
    }
    enum MHD_Result ret = reply_with_allow(c, status, "application/json", text, strlen(text), allow);
    cJSON_free(text);
    return ret;
}

enum MHD_Result lm_reply_error_as(struct MHD_Connection *c, lm_wire wire, unsigned status, const char *message,
                                  const char *param) {
    return reply_error_wire(c, wire, status, message, param, NULL);
}

/* In the shape of the API the request's client speaks (client_wire). */
enum MHD_Result lm_reply_error(struct MHD_Connection *c, unsigned status, const char *message,
                               const char *param) {
    const conn_slot *slot = slot_of(c);
    return reply_error_wire(c, slot ? slot->wire : LM_WIRE_OPENAI, status, message, param, NULL);
}

typedef struct {
    const char *path, *method; /* method: "GET" also answers HEAD */
    lm_route route;
    bool prefix;
} route_entry;

static const route_entry routes[] = {
    {"/v1/chat/completions", "POST", LM_ROUTE_CHAT, false},
    {"/v1/completions", "POST", LM_ROUTE_COMPLETIONS, false},
    {"/v1/models", "GET", LM_ROUTE_MODELS, false},
    {"/v1/models/", "GET", LM_ROUTE_MODEL, true},
    {"/health", "GET", LM_ROUTE_HEALTH, false},
    {"/metrics", "GET", LM_ROUTE_METRICS, false},
    {"/tokenize", "POST", LM_ROUTE_TOKENIZE, false},
    {"/detokenize", "POST", LM_ROUTE_DETOKENIZE, false},
    {"/reset_prefix_cache", "POST", LM_ROUTE_RESET_PREFIX_CACHE, false}, /* vLLM's admin route */
    {"/version", "GET", LM_ROUTE_VERSION, false},
    {"/v1/messages", "POST", LM_ROUTE_MESSAGES, false},                  /* Anthropic's Messages API */
    {"/v1/messages/count_tokens", "POST", LM_ROUTE_COUNT_TOKENS, false},
    {"/v1/responses", "POST", LM_ROUTE_RESPONSES, false},                /* OpenAI's Responses API */
    {"/v1/responses/", "GET", LM_ROUTE_STORED_RESPONSE, true},           /* {id}, {id}/input_items; DELETE too */
};

static lm_wire wire_of(lm_route route) {
    return route == LM_ROUTE_MESSAGES || route == LM_ROUTE_COUNT_TOKENS ? LM_WIRE_ANTHROPIC : LM_WIRE_OPENAI;
}

/* The API a request's client speaks: the route's, or Anthropic's on the
 * shared routes (/v1/models, an unknown path) when it sends the
 * anthropic-version header every Anthropic SDK sends. */
static lm_wire client_wire(struct MHD_Connection *c, lm_route route) {
    bool shared = route != LM_ROUTE_CHAT && route != LM_ROUTE_COMPLETIONS && route != LM_ROUTE_RESPONSES;
    if (shared && MHD_lookup_connection_value(c, MHD_HEADER_KIND, "anthropic-version")) return LM_WIRE_ANTHROPIC;
    return wire_of(route);
}

/* The path of a route, for the log ("-" for none). */
static const char *route_name(lm_route route) {
    for (size_t i = 0; i < sizeof routes / sizeof routes[0]; i++)
        if (routes[i].route == route) return routes[i].path;
    return "-";
}

static const route_entry *route_of(const char *url) {
    for (size_t i = 0; i < sizeof routes / sizeof routes[0]; i++) {
        const route_entry *r = &routes[i];
        size_t n = strlen(r->path);
        if (r->prefix ? strncmp(url, r->path, n) == 0 && url[n] : strcmp(url, r->path) == 0) return r;
    }
    return NULL;
}

static bool method_allowed(const route_entry *r, const char *method) {
    if (strcmp(method, r->method) == 0) return true;
    if (r->route == LM_ROUTE_STORED_RESPONSE && strcmp(method, "DELETE") == 0) return true; /* the one with two */
    return strcmp(r->method, "GET") == 0 && strcmp(method, "HEAD") == 0;
}

static const char *allow_of(const lm_server *s, const route_entry *r) {
    bool cors = s->options.allowed_origins && s->options.allowed_origins[0];
    if (r->route == LM_ROUTE_STORED_RESPONSE) return cors ? "GET, HEAD, DELETE, OPTIONS" : "GET, HEAD, DELETE";
    if (strcmp(r->method, "GET") == 0) return cors ? "GET, HEAD, OPTIONS" : "GET, HEAD";
    return cors ? "POST, OPTIONS" : "POST";
}

static bool is_worker_route(lm_route r) {
    return r == LM_ROUTE_CHAT || r == LM_ROUTE_COMPLETIONS || r == LM_ROUTE_TOKENIZE || r == LM_ROUTE_DETOKENIZE ||
           r == LM_ROUTE_MESSAGES || r == LM_ROUTE_COUNT_TOKENS || r == LM_ROUTE_RESPONSES ||
           r == LM_ROUTE_STORED_RESPONSE; /* the store's reads and writes stay off the I/O threads */
}

/* The key compared in time independent of where the strings differ. */
static bool key_matches(const char *got, const char *want) {
    size_t gl = strlen(got), wl = strlen(want);
    unsigned diff = (unsigned)(gl != wl);
    for (size_t i = 0; i < wl; i++) diff |= (unsigned)(want[i] ^ (i < gl ? got[i] : 0));
    return diff == 0;
}

static bool authorized(const lm_server *s, struct MHD_Connection *c, lm_route route) {
    if (!s->options.api_key) return true;
    if (route == LM_ROUTE_HEALTH || route == LM_ROUTE_METRICS || route == LM_ROUTE_VERSION) return true;
    /* Anthropic's clients send the key as x-api-key. */
    const char *x = MHD_lookup_connection_value(c, MHD_HEADER_KIND, "x-api-key");
    if (x && key_matches(x, s->options.api_key)) return true;
    const char *h = MHD_lookup_connection_value(c, MHD_HEADER_KIND, "Authorization");
    /* RFC 7235: the scheme is case-insensitive, then one or more spaces. */
    if (!h || strncasecmp(h, "Bearer", 6) != 0 || (h[6] != ' ' && h[6] != '\t')) return false;
    const char *got = h + 6;
    while (*got == ' ' || *got == '\t') got++;
    return key_matches(got, s->options.api_key);
}

/* RFC 9110 5.5: field values are visible characters, spaces and tabs. */
static enum MHD_Result check_header(void *cls, enum MHD_ValueKind kind, const char *key, const char *value) {
    (void)kind;
    bool *bad = cls;
    for (const unsigned char *p = (const unsigned char *)key; p && *p; p++)
        if (*p <= 0x20 || *p == 0x7f || *p == ':') *bad = true;
    for (const unsigned char *p = (const unsigned char *)value; p && *p; p++)
        if ((*p < 0x20 && *p != '\t') || *p == 0x7f) *bad = true;
    return *bad ? MHD_NO : MHD_YES;
}

/* GET /v1/models: OpenAI's list, or Anthropic's for an Anthropic client
 * (model_names.c writes both). */
static enum MHD_Result handle_models(lm_server *s, struct MHD_Connection *c) {
    const conn_slot *slot = slot_of(c);
    cJSON *root = lm_model_list(s, slot && slot->wire == LM_WIRE_ANTHROPIC);
    enum MHD_Result ret = root ? lm_reply_json(c, 200, root) : lm_reply_error(c, 500, "out of memory listing models", NULL);
    cJSON_Delete(root);
    return ret;
}

static enum MHD_Result model_not_found(const lm_server *s, struct MHD_Connection *c, const char *model);

/* GET /v1/models/{id}: the served model under any of its names, or 404. */
static enum MHD_Result handle_model(lm_server *s, struct MHD_Connection *c, const char *url) {
    const char *id = url + strlen("/v1/models/");
    if (!lm_server_serves_model(s, id)) return model_not_found(s, c, id);
    const conn_slot *slot = slot_of(c);
    cJSON *m = lm_model_object(s, id, slot && slot->wire == LM_WIRE_ANTHROPIC);
    enum MHD_Result ret = m ? lm_reply_json(c, 200, m) : lm_reply_error(c, 500, "out of memory describing a model", NULL);
    cJSON_Delete(m);
    return ret;
}

static enum MHD_Result handle_metrics(lm_server *s, struct MHD_Connection *c) {
    loom_stats stats;
    loom_engine_stats(s->engine, &stats);
    loom_engine_info info; /* fixed at engine create: the KV cache's shape */
    loom_engine_describe(s->engine, &info);
    lm_metrics_cache_config cache = {.block_size = info.kv_block_size, .prefix_caching = info.prefix_caching};
    snprintf(cache.cache_dtype, sizeof cache.cache_dtype, "%s", info.kv_cache_dtype);
    lm_sbuf out = {0};
    lm_metrics_render(&s->metrics, &stats, &cache, s->options.served_model_name, &out);
    enum MHD_Result ret = out.failed ? lm_reply_error(c, 500, "out of memory rendering /metrics", NULL)
                                     : lm_reply_text(c, 200, "text/plain; version=0.0.4", lm_sbuf_str(&out), out.len);
    lm_sbuf_free(&out);
    return ret;
}

/* Empties the prefix cache (every cached block no request holds, every
 * snapshot); /metrics then shows what is still held. */
static enum MHD_Result handle_reset_prefix_cache(lm_server *s, struct MHD_Connection *c) {
    char error[256];
    if (loom_engine_reset_prefix_cache(s->engine, error, sizeof error) != LOOM_OK)
        return lm_reply_error(c, 503, error, NULL);
    static const char ok[] = "{\"reset\":true}";
    return lm_reply_text(c, 200, "application/json", ok, sizeof ok - 1);
}

/* GET /version: what `loom --version` prints. */
static enum MHD_Result handle_version(struct MHD_Connection *c) {
    lm_build_info b;
    lm_build_info_get(&b);
    cJSON *root = cJSON_CreateObject();
    cJSON_AddStringToObject(root, "version", b.version);
    cJSON_AddStringToObject(root, "git_commit", b.git_commit);
    cJSON_AddStringToObject(root, "compiler", b.compiler);
    cJSON_AddStringToObject(root, "cpu_features", b.cpu_features);
    cJSON_AddStringToObject(root, "kernel_sets", b.kernel_sets);
    if (b.cpu_kernels) cJSON_AddStringToObject(root, "cpu_kernels", b.cpu_kernels);
    else cJSON_AddNullToObject(root, "cpu_kernels");
    cJSON_AddStringToObject(root, "backends", b.backends);
    enum MHD_Result ret = lm_reply_json(c, 200, root);
    cJSON_Delete(root);
    return ret;
}

static enum MHD_Result model_not_found(const lm_server *s, struct MHD_Connection *c, const char *model) {
    char message[1200];
    lm_server_unknown_model_message(s, model, message, sizeof message);
    return lm_reply_error(c, 404, message, "model");
}

#define LM_LARGE_BODY_BYTES ((size_t)1 << 20)

/* A /tokenize or /detokenize body within the request parser's bounds
 * (depth, values, no \u0000 anywhere), parsed; NULL otherwise. */
static cJSON *parse_small_body(const char *body, size_t len) {
    lm_json_scan scan;
    lm_json_prescan(body, len, LM_REQUEST_MAX_DEPTH, LM_REQUEST_MAX_VALUES, NULL, 0, &scan);
    if (scan.depth > LM_REQUEST_MAX_DEPTH || scan.values > LM_REQUEST_MAX_VALUES || scan.nul) return NULL;
    return cJSON_ParseWithLength(body, len);
}

/* POST /tokenize: {"prompt": text, "add_special_tokens": true} or a chat
 * {"messages": [...]} -> {"count", "max_model_len", "tokens"}. */
static enum MHD_Result handle_tokenize(lm_server *s, struct MHD_Connection *c, const char *body, size_t len) {
    if (!s->tokenizer) return lm_reply_error(c, 400, "this model has no tokenizer", NULL);
    cJSON *doc = parse_small_body(body, len);
    if (!cJSON_IsObject(doc)) {
        cJSON_Delete(doc);
        return lm_reply_error(c, 400, "the request body must be a JSON object", NULL);
    }
    const cJSON *model = cJSON_GetObjectItemCaseSensitive(doc, "model");
    if (model && !cJSON_IsString(model) && !cJSON_IsNull(model)) {
        cJSON_Delete(doc);
        return lm_reply_error(c, 400, "'model' must be a string", "model");
    }
    if (cJSON_IsString(model) && !lm_server_serves_model(s, model->valuestring)) {
        enum MHD_Result r = model_not_found(s, c, model->valuestring);
        cJSON_Delete(doc);
        return r;
    }
    char param[64] = "";
    lm_error err = {0};
    char *text = NULL;
    size_t text_len = 0;
    bool add_special = true, owned = false;
    const cJSON *prompt = cJSON_GetObjectItemCaseSensitive(doc, "prompt");
    const cJSON *as = cJSON_GetObjectItemCaseSensitive(doc, "add_special_tokens");
    lm_status st = LM_OK;
    if (as && !cJSON_IsBool(as)) st = lm_fail(&err, LM_ERR_INVALID, "'add_special_tokens' must be a boolean");
    else if (as) add_special = cJSON_IsTrue(as);
    if (st == LM_OK && cJSON_IsString(prompt)) {
        text = prompt->valuestring;
        text_len = strlen(text);
    } else if (st == LM_OK && cJSON_GetObjectItemCaseSensitive(doc, "messages")) {
        lm_openai_request r;
        st = lm_openai_request_parse(LM_API_CHAT, body, len, &s->image_parts, &r, param, sizeof param, &err);
        if (st == LM_OK) st = lm_render_chat_prompt(s, &r, &text, &text_len, &err);
        lm_openai_request_free(&r);
        owned = st == LM_OK;
        if (!as) add_special = false; /* the template writes the special tokens */
    } else if (st == LM_OK) {
        st = lm_fail(&err, LM_ERR_INVALID, "'prompt' (a string) or 'messages' is required");
        snprintf(param, sizeof param, "prompt");
    }
    int32_t *ids = NULL;
    size_t n = 0;
    /* The answer lists every token: a text that cannot fit the context is
     * refused before it is tokenized (megabytes cost seconds and a list of
     * millions of ids), and so is a list longer than the context. */
    if (st == LM_OK && (st = lm_prompt_bytes_fit(s, text_len, &err)) != LM_OK) snprintf(param, sizeof param, "prompt");
    if (st == LM_OK) st = lm_tokenizer_encode(s->tokenizer, text, text_len, add_special, &ids, &n, &err);
    if (owned) free(text);
    cJSON_Delete(doc);
    if (st == LM_OK && n > (size_t)s->options.max_model_len) {
        free(ids);
        char message[200];
        snprintf(message, sizeof message, "the prompt has %zu tokens, more than this model's maximum context length of "
                 "%d", n, s->options.max_model_len);
        return lm_reply_error(c, 400, message, "prompt");
    }
    if (st != LM_OK) return lm_reply_error(c, st == LM_ERR_NOMEM ? 500 : 400, err.message, param);
    cJSON *root = cJSON_CreateObject();
    cJSON_AddNumberToObject(root, "count", (double)n);
    cJSON_AddNumberToObject(root, "max_model_len", s->options.max_model_len);
    cJSON *tokens = cJSON_AddArrayToObject(root, "tokens");
    for (size_t i = 0; i < n; i++) cJSON_AddItemToArray(tokens, cJSON_CreateNumber(ids[i]));
    free(ids);
    enum MHD_Result ret = lm_reply_json(c, 200, root);
    cJSON_Delete(root);
    return ret;
}

/* POST /detokenize: {"tokens": [ids]} -> {"prompt": text}. */
static enum MHD_Result handle_detokenize(lm_server *s, struct MHD_Connection *c, const char *body, size_t len) {
    if (!s->tokenizer) return lm_reply_error(c, 400, "this model has no tokenizer", NULL);
    cJSON *doc = parse_small_body(body, len);
    const cJSON *tokens = cJSON_GetObjectItemCaseSensitive(doc, "tokens");
    int count = cJSON_GetArraySize(tokens);
    if (!cJSON_IsObject(doc) || !cJSON_IsArray(tokens) || count > (1 << 20)) {
        cJSON_Delete(doc);
        return lm_reply_error(c, 400, "'tokens' must be a list of token ids", "tokens");
    }
    int32_t *ids = malloc(sizeof(int32_t) * (size_t)(count ? count : 1));
    int n = 0;
    const cJSON *t;
    bool ok = ids != NULL;
    cJSON_ArrayForEach(t, tokens) {
        if (!ok) break;
        ok = cJSON_IsNumber(t) && t->valuedouble >= 0 && t->valuedouble < 2147483647.0 &&
             t->valuedouble == (double)(int32_t)t->valuedouble;
        if (ok) ids[n++] = (int32_t)t->valuedouble;
    }
    cJSON_Delete(doc);
    if (!ok) {
        free(ids);
        return lm_reply_error(c, 400, "'tokens' must be a list of token ids", "tokens");
    }
    lm_error err = {0};
    char *text = NULL;
    size_t text_len = 0;
    lm_status st = lm_tokenizer_decode(s->tokenizer, ids, (size_t)n, false, &text, &text_len, &err);
    free(ids);
    if (st != LM_OK) return lm_reply_error(c, 400, err.message, "tokens");
    cJSON *root = cJSON_CreateObject();
    lm_sbuf marked = {0};
    lm_text_append_marked(&marked, text, text_len); /* a NUL the ids decode to reaches the client */
    free(text);
    cJSON_AddStringToObject(root, "prompt", lm_sbuf_str(&marked));
    lm_sbuf_free(&marked);
    enum MHD_Result ret = lm_reply_json(c, 200, root);
    cJSON_Delete(root);
    return ret;
}

static enum MHD_Result dispatch(lm_server *s, struct MHD_Connection *c, conn_ctx *ctx) {
    const char *body = lm_sbuf_str(&ctx->body);
    size_t len = ctx->body.len;
    switch (ctx->route) {
    case LM_ROUTE_CHAT: return lm_handle_generation(s, c, LM_API_CHAT, LM_WIRE_OPENAI, body, len, ctx->arrival, &ctx->generation);
    case LM_ROUTE_COMPLETIONS:
        return lm_handle_generation(s, c, LM_API_COMPLETION, LM_WIRE_OPENAI, body, len, ctx->arrival,
                                    &ctx->generation);
    case LM_ROUTE_MESSAGES: return lm_handle_generation(s, c, LM_API_CHAT, LM_WIRE_ANTHROPIC, body, len, ctx->arrival, &ctx->generation);
    case LM_ROUTE_COUNT_TOKENS: return lm_handle_count_tokens(s, c, body, len);
    case LM_ROUTE_RESPONSES: return lm_handle_generation(s, c, LM_API_CHAT, LM_WIRE_RESPONSES, body, len, ctx->arrival, &ctx->generation);
    case LM_ROUTE_STORED_RESPONSE: return lm_handle_stored_response(s, c, ctx->method, ctx->url);
    case LM_ROUTE_MODELS: return handle_models(s, c);
    case LM_ROUTE_MODEL: return handle_model(s, c, ctx->url);
    case LM_ROUTE_HEALTH:
        if (atomic_load(&s->http->stopping)) return lm_reply_error(c, 503, "the server is shutting down", NULL);
        if (!atomic_load(&s->ready)) {
            static const char loading[] = "{\"status\":\"loading\"}";
            return lm_reply_text(c, 503, "application/json", loading, sizeof loading - 1);
        }
        return lm_reply_text(c, 200, "text/plain", "", 0);
    case LM_ROUTE_METRICS: return handle_metrics(s, c);
    case LM_ROUTE_RESET_PREFIX_CACHE: return handle_reset_prefix_cache(s, c);
    case LM_ROUTE_VERSION: return handle_version(c);
    case LM_ROUTE_TOKENIZE: return handle_tokenize(s, c, body, len);
    case LM_ROUTE_DETOKENIZE: return handle_detokenize(s, c, body, len);
    default: return lm_reply_error(c, 404, "not found", NULL);
    }
}

/* ------------------------------------------------------------ connections */

static void set_phase(lm_server *s, conn_slot *slot, conn_phase phase, double deadline) {
    if (!slot) return;
    pthread_mutex_lock(&s->http->mutex);
    slot->phase = phase;
    slot->deadline = deadline;
    pthread_mutex_unlock(&s->http->mutex);
}

/* Sends a whole error response straight to a socket MHD is not writing to
 * (a new connection, or one only reading a body), then shuts it down; MHD
 * sees the end and closes it. */
static void answer_and_cut(MHD_socket fd, unsigned status, const char *reason, const char *message) {
    char *body = lm_error_json_body(status, message, NULL);
    char head[256];
    int n = snprintf(head, sizeof head,
                     "HTTP/1.1 %u %s\r\nContent-Type: application/json\r\n%sConnection: close\r\n"
                     "Content-Length: %zu\r\n\r\n", status, reason, status == 503 ? "Retry-After: 1\r\n" : "",
                     body ? strlen(body) : 0);
    if (n > 0 && send(fd, head, (size_t)n, MSG_DONTWAIT | MSG_NOSIGNAL) == n && body)
        (void)!send(fd, body, strlen(body), MSG_DONTWAIT | MSG_NOSIGNAL);
    cJSON_free(body);
    shutdown(fd, SHUT_RDWR);
}

/* Over --max-connections: MHD's own limit is set a little higher so that
 * the excess is accepted and told so, instead of waiting in the backlog. */
static void refuse_connection(MHD_socket fd) {
    answer_and_cut(fd, 503, "Service Unavailable", "too many connections; retry later");
}

static void on_connection(void *cls, struct MHD_Connection *c, void **socket_context,
                          enum MHD_ConnectionNotificationCode code) {
    lm_server *s = cls;
    struct lm_http *h = s->http;
    if (code == MHD_CONNECTION_NOTIFY_STARTED) {
        const union MHD_ConnectionInfo *info = MHD_get_connection_info(c, MHD_CONNECTION_INFO_CONNECTION_FD);
        pthread_mutex_lock(&h->mutex);
        conn_slot *slot = NULL;
        if (h->n_free > 0 && info) {
            slot = &h->slots[h->free_slots[--h->n_free]];
            memset(slot, 0, sizeof *slot);
            slot->server = s;
            slot->fd = info->connect_fd;
            slot->used = true;
            slot->phase = PHASE_HEADER;
            slot->deadline = lm_monotonic_seconds() + s->options.timeout_header_s;
        }
        pthread_mutex_unlock(&h->mutex);
        *socket_context = slot;
        if (!slot && info) refuse_connection(info->connect_fd);
        return;
    }
    conn_slot *slot = *socket_context;
    if (!slot) return;
    /* Closed: MHD closes the socket after this returns, so the sweeper
     * (which shuts sockets down under the same mutex) never sees a reused fd. */
    pthread_mutex_lock(&h->mutex);
    if (slot->pending) MHD_destroy_response(slot->pending);
    slot->pending = NULL;
    slot->used = false;
    h->free_slots[h->n_free++] = (int)(slot - h->slots);
    pthread_mutex_unlock(&h->mutex);
    *socket_context = NULL;
}

/* Cuts connections past their header or body deadline. */
static void sweep(lm_server *s) {
    struct lm_http *h = s->http;
    double now = lm_monotonic_seconds();
    pthread_mutex_lock(&h->mutex);
    for (int i = 0; i < h->n_slots; i++) {
        conn_slot *slot = &h->slots[i];
        if (!slot->used || slot->cut || slot->phase == PHASE_BUSY || now < slot->deadline) continue;
        slot->cut = true;
        /* MHD is only reading in the body phase: answer before closing. */
        if (slot->phase == PHASE_BODY)
            answer_and_cut(slot->fd, 408, "Request Timeout", "the request body did not arrive in time");
        else shutdown(slot->fd, SHUT_RDWR);
    }
    pthread_mutex_unlock(&h->mutex);
}

/* Whether a suspended watched request must look at once: its client went
 * away, or the server cancels everything.  A peek at a socket that closed
 * and was reused is harmless: the reader decides (lm_client_gone). */
static bool needs_look(const lm_server *s, const lm_wakeup *w) {
    if (atomic_load(&s->cancel_all) || atomic_load(&s->http->no_suspend)) return true;
    if (w->fd < 0) return false;
    char byte;
    ssize_t n = recv(w->fd, &byte, 1, MSG_PEEK | MSG_DONTWAIT);
    return n == 0 || (n < 0 && errno != EAGAIN && errno != EWOULDBLOCK && errno != EINTR);
}

/* Every SWEEP_MS: the header and body timeouts, and a look for the
 * suspended requests whose client is gone.  Tokens never wait for it: the
 * engine resumes a stream when it queues an event (wakeup.h). */
static void *sweeper_main(void *arg) {
    lm_server *s = arg;
    struct lm_http *h = s->http;
    for (;;) {
        pthread_mutex_lock(&h->watch_mutex);
        if (!h->sweeper_stop) {
            struct timespec t;
            clock_gettime(CLOCK_REALTIME, &t);
            t.tv_nsec += SWEEP_MS * 1000000L;
            if (t.tv_nsec >= 1000000000L) {
                t.tv_sec++;
                t.tv_nsec -= 1000000000L;
            }
            pthread_cond_timedwait(&h->wake, &h->watch_mutex, &t);
        }
        bool stop = h->sweeper_stop;
        for (int i = 0; i < h->n_watched; i++)
            if (needs_look(s, h->watched[i])) lm_wakeup_notify(h->watched[i]);
        pthread_mutex_unlock(&h->watch_mutex);
        if (stop) break;
        sweep(s);
    }
    return NULL;
}

lm_status lm_server_watch(lm_server *s, lm_wakeup *w, lm_error *err) {
    struct lm_http *h = s->http;
    pthread_mutex_lock(&h->watch_mutex);
    bool room = h->n_watched < h->n_slots;
    if (room) {
        w->watch_index = h->n_watched;
        h->watched[h->n_watched++] = w;
    }
    pthread_mutex_unlock(&h->watch_mutex);
    return room ? LM_OK : lm_fail(err, LM_ERR_NOMEM, "too many requests under way");
}

void lm_server_unwatch(lm_server *s, lm_wakeup *w) {
    struct lm_http *h = s->http;
    pthread_mutex_lock(&h->watch_mutex);
    int i = w->watch_index;
    if (i >= 0 && i < h->n_watched && h->watched[i] == w) {
        h->watched[i] = h->watched[--h->n_watched];
        h->watched[i]->watch_index = i;
    }
    w->watch_index = -1;
    pthread_mutex_unlock(&h->watch_mutex);
}

bool lm_server_may_suspend(const lm_server *s) { return !atomic_load(&s->http->no_suspend); }

lm_resumer *lm_server_resumer(lm_server *s) { return s->http->resumer; }

/* ------------------------------------------------------------ requests */

/* A preparation thread: runs the request (its reply is held in the slot)
 * while the connection is suspended, then resumes it. */
static void prepare_request(void *cls, void *item) {
    lm_server *s = cls;
    conn_ctx *ctx = item;
    struct MHD_Connection *c = ctx->connection;
    dispatch(s, c, ctx); /* a failure to queue shows on resume: no reply held, no generation */
    atomic_fetch_sub(&s->http->preparing, 1);
    MHD_resume_connection(c);
}

/* Hands the request to the preparation pool, its connection suspended
 * until a thread has run it; false when the queue is full (or the server
 * stops): the caller refuses it. */
static bool hand_to_pool(lm_server *s, struct MHD_Connection *c, conn_ctx *ctx, conn_slot *slot) {
    struct lm_http *h = s->http;
    if (!lm_prepare_pool_reserve(h->pool)) return false;
    ctx->connection = c;
    slot->deferred = true;
    slot->pending = NULL;
    MHD_suspend_connection(c);
    atomic_fetch_add(&h->preparing, 1);
    lm_prepare_pool_push(h->pool, ctx);
    return true;
}

static enum MHD_Result first_call(lm_server *s, struct MHD_Connection *c, conn_ctx *ctx, const char *url,
                                  const char *method, const char *version) {
    (void)version;
    bool bad = false;
    MHD_get_connection_values(c, MHD_HEADER_KIND, check_header, &bad);
    if (bad) return lm_reply_error(c, 400, "a request header has a control character or a bad name", NULL);
    if (strlen(url) > LM_MAX_URL_BYTES) return lm_reply_error(c, 414, "the request target is too long", NULL);
    const union MHD_ConnectionInfo *hs = MHD_get_connection_info(c, MHD_CONNECTION_INFO_REQUEST_HEADER_SIZE);
    if (hs && hs->header_size > LM_MAX_HEADER_BYTES)
        return lm_reply_error(c, 431, "the request headers are too large", NULL);
    const route_entry *r = route_of(url);
    ctx->route = r ? r->route : LM_ROUTE_NONE;
    ctx->method_ok = r && method_allowed(r, method);
    bool cors = s->options.allowed_origins && s->options.allowed_origins[0];
    if (r && cors && strcmp(method, "OPTIONS") == 0) {
        /* A CORS preflight: no credentials are sent with it. */
        struct MHD_Response *resp = MHD_create_response_from_buffer(0, (void *)"", MHD_RESPMEM_PERSISTENT);
        if (!resp) return MHD_NO;
        MHD_add_response_header(resp, "Allow", allow_of(s, r));
        if (cors_origin(s, c)) {
            MHD_add_response_header(resp, "Access-Control-Allow-Methods", allow_of(s, r));
            const char *req_headers = MHD_lookup_connection_value(c, MHD_HEADER_KIND, "Access-Control-Request-Headers");
            MHD_add_response_header(resp, "Access-Control-Allow-Headers",
                                    req_headers && req_headers[0] ? req_headers : "Authorization, Content-Type");
            MHD_add_response_header(resp, "Access-Control-Max-Age", "600");
        }
        return lm_queue_response(c, 204, resp);
    }
    const char *cl = MHD_lookup_connection_value(c, MHD_HEADER_KIND, "Content-Length");
    const char *te = MHD_lookup_connection_value(c, MHD_HEADER_KIND, "Transfer-Encoding");
    /* RFC 9112 6.1: only chunked is understood; with a Content-Length too the
     * framing is ambiguous (request smuggling). */
    if (te && (strcasecmp(te, "chunked") != 0 || cl))
        return lm_reply_error(c, 400, "unsupported Transfer-Encoding (only chunked, without Content-Length)", NULL);
    if (cl && strtoull(cl, NULL, 10) > s->options.max_body_bytes) ctx->too_large = true;
    /* Refuse early what will be refused anyway, without reading the body. */
    lm_wire wire = slot_of(c) ? slot_of(c)->wire : wire_of(ctx->route);
    if (ctx->too_large) return lm_reply_error_as(c, wire, 413, "the request body is larger than the server accepts", NULL);
    if (!r) {
        char message[300];
        snprintf(message, sizeof message, "no route %.8s %.200s", method, url);
        return lm_reply_error(c, 404, message, NULL);
    }
    if (!ctx->method_ok) {
        char message[100];
        snprintf(message, sizeof message, "method %.16s not allowed (allowed: %s)", method, allow_of(s, r));
        return reply_error_wire(c, wire, 405, message, NULL, allow_of(s, r));
    }
    ctx->authorized = authorized(s, c, ctx->route);
    if (!ctx->authorized)
        return lm_reply_error_as(c, wire, 401,
                                 wire == LM_WIRE_ANTHROPIC ? "missing or invalid API key (x-api-key: ... or Authorization: Bearer ...)"
                                                           : "missing or invalid API key (Authorization: Bearer ...)",
                                 NULL);
    if (is_worker_route(ctx->route) && atomic_load(&s->http->stopping))
        return lm_reply_error_as(c, wire, 503, "the server is shutting down", NULL);
    /* Until the weights are in, only the probes answer (/health says
     * "loading"); the rest is told to come back (503 with Retry-After). */
    if (!atomic_load(&s->ready) && ctx->route != LM_ROUTE_HEALTH && ctx->route != LM_ROUTE_VERSION)
        return lm_reply_error_as(c, wire, 503, "the model is still loading; retry when /health answers 200", NULL);
    return MHD_YES;
}

static enum MHD_Result on_request(void *cls, struct MHD_Connection *c, const char *url, const char *method,
                                  const char *version, const char *upload_data, size_t *upload_data_size,
                                  void **con_cls) {
    lm_server *s = cls;
    conn_ctx *ctx = *con_cls;
    conn_slot *slot = slot_of(c);
    if (!slot) return MHD_NO; /* refused at accept */
    if (!ctx) {
        ctx = calloc(1, sizeof *ctx);
        if (!ctx) return MHD_NO;
        *con_cls = ctx;
        ctx->arrival = lm_monotonic_seconds();
        ctx->url = url;
        const route_entry *r = route_of(url);
        slot->wire = client_wire(c, r ? r->route : LM_ROUTE_NONE);
        lm_request_id_make(slot->wire == LM_WIRE_ANTHROPIC,
                           MHD_lookup_connection_value(c, MHD_HEADER_KIND, "X-Request-Id"),
                           atomic_fetch_add(&s->next_id, 1), slot->request_id);
        ctx->method = method;
        set_phase(s, slot, PHASE_BODY, ctx->arrival + s->options.timeout_body_s);
        MHD_set_connection_option(c, MHD_CONNECTION_OPTION_TIMEOUT, (unsigned)s->options.timeout_body_s);
        return first_call(s, c, ctx, url, method, version);
    }
    if (ctx->dispatched) {
        /* Resumed after a preparation thread: queue the reply it left. */
        if (slot && slot->pending) {
            struct MHD_Response *r = slot->pending;
            slot->pending = NULL;
            slot->deferred = false;
            enum MHD_Result ret = MHD_queue_response(c, slot->pending_status, r);
            MHD_destroy_response(r);
            return ret;
        }
        slot->deferred = false;
        /* Resumed by the engine: a blocking request reads its events and
         * is answered once it finished, or suspends again. */
        if (ctx->generation) return lm_generation_resume(&ctx->generation, c);
        return MHD_NO;
    }
    if (*upload_data_size) {
        if (!ctx->too_large && ctx->body.len + *upload_data_size > s->options.max_body_bytes) {
            ctx->too_large = true;
            lm_sbuf_free(&ctx->body);
        }
        if (!ctx->too_large) lm_sbuf_append(&ctx->body, upload_data, *upload_data_size);
        *upload_data_size = 0;
        return MHD_YES;
    }
    if (ctx->too_large)
        return lm_reply_error_as(c, slot->wire, 413, "the request body is larger than the server accepts", NULL);
    if (ctx->body.failed)
        return lm_reply_error_as(c, slot->wire, 500, "out of memory reading the request body", NULL);
    set_phase(s, slot, PHASE_BUSY, 0);
    ctx->handled = true;
    if (slot && is_worker_route(ctx->route)) {
        ctx->dispatched = true;
        ctx->counted = true;
        atomic_fetch_add(&s->http->inflight, 1);
        if (hand_to_pool(s, c, ctx, slot)) return MHD_YES;
        /* The queue is full (or the pool stopped): told to come back, as
         * past --max-connections (a generation route logs it as refused
         * before generation). */
        ctx->dispatched = false;
        ctx->handled = false;
        return lm_reply_error_as(c, slot->wire, 503,
                                 atomic_load(&s->http->stopping) ? "the server is shutting down"
                                                                 : "too many requests waiting to be prepared; retry later",
                                 NULL);
    }
    return dispatch(s, c, ctx);
}

static void on_completed(void *cls, struct MHD_Connection *c, void **con_cls,
                         enum MHD_RequestTerminationCode toe) {
    lm_server *s = cls;
    conn_ctx *ctx = *con_cls;
    if (!ctx) return;
    if (ctx->counted) atomic_fetch_sub(&s->http->inflight, 1);
    lm_generation_abandon(ctx->generation); /* closed before its answer (the daemon stopping) */
    conn_slot *done = slot_of(c);
    /* Generation requests log their own line once handled (request_log.h);
     * refused before that (401, 413, ...) they get one here, the other
     * routes one at debug. */
    bool generation = ctx->route == LM_ROUTE_CHAT || ctx->route == LM_ROUTE_COMPLETIONS || ctx->route == LM_ROUTE_MESSAGES ||
                      ctx->route == LM_ROUTE_RESPONSES;
    if (done && generation && !ctx->handled && s->options.log_requests)
        lm_log_printf(s->log, LM_LOG_INFO, "request - %s %u: refused before generation", route_name(ctx->route),
                      done->status);
    else if (done && !generation)
        lm_log_printf(s->log, LM_LOG_DEBUG, "request %s %u%s", route_name(ctx->route), done->status,
                      toe == MHD_REQUEST_TERMINATED_COMPLETED_OK ? "" : " (connection closed early)");
    bool large = ctx->body.cap >= LM_LARGE_BODY_BYTES;
    lm_sbuf_free(&ctx->body);
    if (large) malloc_trim(0); /* give a large body's pages back to the system */
    free(ctx);
    *con_cls = NULL;
    conn_slot *slot = slot_of(c);
    if (toe == MHD_REQUEST_TERMINATED_COMPLETED_OK && slot) {
        /* Keep-alive: the next request has the idle and header timeouts. */
        set_phase(s, slot, PHASE_HEADER,
                  lm_monotonic_seconds() + s->options.timeout_keep_alive_s + s->options.timeout_header_s);
        MHD_set_connection_option(c, MHD_CONNECTION_OPTION_TIMEOUT, idle_timeout(&s->options));
    }
}

/* MHD's lines for a client that went away: no fault of loom's to warn of,
 * and a generation request says it itself ("cancelled by the client", at
 * INFO).  A stream's reader ends with an error only after loom has logged
 * why (the client went away, or out of memory: the request's line says
 * error); a send fails when the client closed first. */
static bool is_client_gone_message(const char *message) {
    static const char stream_ended[] = "Closing connection (application error generating response)";
    static const char incomplete[] = "Connection was closed by remote side with incomplete request";
    if (strncmp(message, stream_ended, strlen(stream_ended)) == 0) return true;
    if (strncmp(message, incomplete, strlen(incomplete)) == 0) return true;
    return strncmp(message, "Failed to send ", 15) == 0 &&
           (strstr(message, "no longer available for sending") || strstr(message, "forcibly closed by remote peer"));
}

/* MHD's messages, at most a few a second (a flood of refused connections
 * would otherwise flood the log). */
static void on_log(void *cls, const char *fmt, va_list ap) {
    lm_server *s = cls;
    struct lm_http *h = s->http;
    /* MHD takes the front door's socketpair ends for TCP (it is given the
     * client's address): its TCP_NODELAY / TCP_CORK calls fail there, and
     * harmlessly, since a local socket has no Nagle delay to undo. */
    static const char *const benign[] = {"Setting %s option to %s state failed", "Failed to push the data"};
    for (size_t i = 0; i < sizeof benign / sizeof benign[0]; i++)
        if (strncmp(fmt, benign[i], strlen(benign[i])) == 0) return;
    char message[512];
    vsnprintf(message, sizeof message, fmt, ap); /* MHD passes some as "%s\n" */
    if (is_client_gone_message(message)) {
        lm_log_printf(s->log, LM_LOG_DEBUG, "http: %s", message);
        return;
    }
    int_fast64_t now = (int_fast64_t)lm_monotonic_seconds();
    if (atomic_exchange(&h->log_second, now) != now) {
        int_fast64_t dropped = atomic_exchange(&h->log_count, 0) - 5;
        if (dropped > 0) lm_log_printf(s->log, LM_LOG_WARNING, "http: (%lld similar messages dropped)", (long long)dropped);
    }
    if (atomic_fetch_add(&h->log_count, 1) >= 5) return;
    lm_log_printf(s->log, LM_LOG_WARNING, "http: %s", message);
}

static void http_free(struct lm_http *h) {
    if (!h) return;
    lm_prepare_pool_free(h->pool); /* stopped already, unless the start failed */
    lm_resumer_free(h->resumer);   /* the same */
    pthread_mutex_destroy(&h->mutex);
    pthread_mutex_destroy(&h->watch_mutex);
    pthread_cond_destroy(&h->wake);
    free(h->slots);
    free(h->free_slots);
    free(h->watched);
    free(h);
}

static lm_status http_create(lm_server *s, lm_error *err) {
    struct lm_http *h = calloc(1, sizeof *h);
    if (!h) return lm_fail(err, LM_ERR_NOMEM, "out of memory");
    pthread_mutex_init(&h->mutex, NULL);
    pthread_mutex_init(&h->watch_mutex, NULL);
    pthread_cond_init(&h->wake, NULL);
    h->n_slots = s->options.max_connections;
    h->slots = calloc((size_t)h->n_slots, sizeof *h->slots);
    h->free_slots = malloc(sizeof *h->free_slots * (size_t)h->n_slots);
    h->watched = malloc(sizeof *h->watched * (size_t)h->n_slots);
    if (!h->slots || !h->free_slots || !h->watched) {
        http_free(h);
        return lm_fail(err, LM_ERR_NOMEM, "out of memory for %d connections", s->options.max_connections);
    }
    for (int i = 0; i < h->n_slots; i++) h->free_slots[i] = h->n_slots - 1 - i;
    h->n_free = h->n_slots;
    if (lm_prepare_pool_start(s->options.prepare_threads, s->options.prepare_queue, prepare_request, s, &h->pool,
                              err) != LM_OK) {
        http_free(h);
        return err->code;
    }
    if (lm_resumer_start(&h->resumer, err) != LM_OK) {
        http_free(h);
        return err->code;
    }
    atomic_init(&h->preparing, 0);
    atomic_init(&h->inflight, 0);
    atomic_init(&h->stopping, false);
    atomic_init(&h->no_suspend, false);
    atomic_init(&h->log_second, 0);
    atomic_init(&h->log_count, 0);
    s->http = h;
    return LM_OK;
}

/* Connections MHD takes beyond ours (the front door refuses the excess at
 * accept; this is a backstop). */
static int refuse_margin(const lm_server_options *o) {
    int m = o->max_connections / 8;
    return m < 64 ? 64 : m > 1024 ? 1024 : m;
}

static void fail_start(lm_server *s) {
    if (s->http && s->http->sweeper_started) {
        pthread_mutex_lock(&s->http->watch_mutex);
        s->http->sweeper_stop = true;
        pthread_cond_signal(&s->http->wake);
        pthread_mutex_unlock(&s->http->watch_mutex);
        pthread_join(s->http->sweeper, NULL);
    }
    lm_front_door_stop(s->door, 0);
    http_free(s->http);
    lm_metrics_destroy(&s->metrics);
    lm_grammar_cache_free(s->grammars);
    lm_responses_store_close(s->responses);
    free(s->media_dir);
    free(s);
}

/* Compiles at once: a quarter of the cores (1 on 2 to 7), so that a burst
 * of costly grammars leaves the engine thread its core. */
static int grammar_slots(void) {
    long n = sysconf(_SC_NPROCESSORS_ONLN) / 4;
    return n < 1 ? 1 : n > 8 ? 8 : (int)n;
}

static lm_front_door_options door_options(const lm_server_options *o) {
    return (lm_front_door_options){.host = o->host ? o->host : "127.0.0.1", .port = o->port,
                                   .max_connections = o->max_connections > 0 ? o->max_connections : 4096,
                                   .backlog = 1024, .timeout_keep_alive_s = o->timeout_keep_alive_s > 0 ? o->timeout_keep_alive_s : 5,
                                   .max_body_bytes = o->max_body_bytes ? o->max_body_bytes : LM_DEFAULT_MAX_BODY_BYTES,
                                   .allowed_origins = o->allowed_origins, .log = o->log};
}

lm_status lm_server_listen(const lm_server_options *options, lm_server_listener **out, lm_error *err) {
    lm_front_door_options fo = door_options(options);
    return lm_front_door_listen(&fo, out, err);
}

int lm_server_listener_port(const lm_server_listener *listener) { return lm_front_door_port(listener); }

void lm_server_listener_close(lm_server_listener *listener) { lm_front_door_stop(listener, 0); }

lm_status lm_server_start(const lm_server_options *options, lm_server_listener *listener, lm_server **out,
                          lm_error *err) {
    lm_server *s = calloc(1, sizeof *s);
    if (!s) {
        lm_server_listener_close(listener);
        return lm_fail(err, LM_ERR_NOMEM, "out of memory");
    }
    s->door = listener;
    s->fallback_log = (lm_log){.level = LM_LOG_INFO, .out = stderr, .source = "loom serve"};
    s->log = options->log ? options->log : &s->fallback_log;
    s->options = *options;
    lm_server_options *o = &s->options;
    if (!o->host) o->host = "127.0.0.1";
    if (!o->served_model_name) o->served_model_name = "loom";
    if (!o->max_body_bytes) o->max_body_bytes = LM_DEFAULT_MAX_BODY_BYTES;
    if (o->max_connections <= 0) o->max_connections = 4096;
    if (o->timeout_keep_alive_s <= 0) o->timeout_keep_alive_s = 5;
    if (o->timeout_header_s <= 0) o->timeout_header_s = 10;
    if (o->timeout_body_s <= 0) o->timeout_body_s = 60;
    if (o->http_threads <= 0) o->http_threads = 4;
    if (o->prepare_threads <= 0) o->prepare_threads = LM_PREPARE_DEFAULT_THREADS;
    if (o->prepare_queue <= 0) o->prepare_queue = LM_PREPARE_DEFAULT_QUEUE;
    if (o->max_connections > 1 << 20 || o->http_threads > 256 || o->timeout_keep_alive_s > 86400 ||
        o->timeout_header_s > 86400 || o->timeout_body_s > 86400 || o->prepare_threads > LM_PREPARE_MAX_THREADS ||
        o->prepare_queue > LM_PREPARE_MAX_QUEUE) {
        lm_server_listener_close(s->door);
        free(s);
        return lm_fail(err, LM_ERR_INVALID, "server limits out of range");
    }
    if (!o->keep_no_responses && lm_responses_store_open(&o->responses_store, &s->responses, err) != LM_OK) {
        lm_server_listener_close(s->door);
        free(s);
        return err->code;
    }
    lm_metrics_init(&s->metrics);
    if (lm_grammar_cache_create(grammar_slots(), &s->grammars, err) != LM_OK) {
        lm_server_listener_close(s->door);
        lm_metrics_destroy(&s->metrics);
        lm_responses_store_close(s->responses);
        free(s);
        return err->code;
    }
    s->image_parts.grammars = s->grammars;
    atomic_init(&s->ready, false);
    atomic_init(&s->next_id, (uint64_t)time(NULL) << 20);
    atomic_init(&s->active, 0);
    atomic_init(&s->cancel_all, false);

    if (http_create(s, err) != LM_OK) {
        lm_server_listener_close(s->door);
        lm_metrics_destroy(&s->metrics);
        lm_grammar_cache_free(s->grammars);
        lm_responses_store_close(s->responses);
        free(s->media_dir);
        free(s);
        return err->code;
    }
    /* loom listens and accepts; each connection reaches MHD through the
     * front door's relay, which answers bad framing itself. */
    if (!s->door && lm_server_listen(o, &s->door, err) != LM_OK) {
        fail_start(s);
        return err->code;
    }
    if (pthread_create(&s->http->sweeper, NULL, sweeper_main, s) != 0) {
        fail_start(s);
        return lm_fail(err, LM_ERR_INTERNAL, "cannot start the server's sweeper thread");
    }
    s->http->sweeper_started = true;
    /* epoll with a fixed pool of I/O threads: no FD_SETSIZE ceiling and no
     * thread per idle connection; requests are prepared on the pool. */
    s->daemon = MHD_start_daemon(MHD_USE_EPOLL | MHD_USE_INTERNAL_POLLING_THREAD | MHD_ALLOW_SUSPEND_RESUME |
                                     MHD_USE_ITC | MHD_USE_ERROR_LOG | MHD_USE_NO_LISTEN_SOCKET,
                                 0, NULL, NULL, on_request, s,
                                 MHD_OPTION_EXTERNAL_LOGGER, on_log, s, /* first, to catch all */
                                 MHD_OPTION_THREAD_POOL_SIZE, (unsigned)o->http_threads,
                                 MHD_OPTION_NOTIFY_COMPLETED, on_completed, s,
                                 MHD_OPTION_NOTIFY_CONNECTION, on_connection, s,
                                 MHD_OPTION_CONNECTION_LIMIT, (unsigned)(o->max_connections + refuse_margin(o)),
                                 MHD_OPTION_CONNECTION_TIMEOUT, idle_timeout(o),
                                 MHD_OPTION_CONNECTION_MEMORY_LIMIT, (size_t)LM_MHD_MEMORY_LIMIT, MHD_OPTION_END);
    if (!s->daemon) {
        int e = errno;
        fail_start(s);
        return lm_fail(err, LM_ERR_IO, "cannot start libmicrohttpd (%s)", strerror(e));
    }
    if (lm_front_door_start(s->door, s->daemon, err) != LM_OK) {
        lm_front_door_close_listener(s->door);
        MHD_stop_daemon(s->daemon);
        s->daemon = NULL;
        fail_start(s);
        return err->code;
    }
    s->port = lm_front_door_port(s->door);
    *out = s;
    return LM_OK;
}

lm_status lm_server_set_ready(lm_server *s, loom_engine *engine, const lm_tokenizer *tokenizer,
                              const lm_chat_template *chat_template, lm_error *err) {
    if (atomic_load(&s->ready)) return lm_fail(err, LM_ERR_INVALID, "the server has its model already");
    s->engine = engine;
    s->tokenizer = tokenizer;
    s->chat_template = chat_template;
    const char *source = tokenizer ? lm_tokenizer_chat_template(tokenizer) : NULL;
    s->template_has_think = source && strstr(source, "<think>");
    lm_status st = lm_server_images_init(s, err);
    if (st != LM_OK) return st;
    loom_engine_info info;
    loom_engine_describe(engine, &info);
    s->options.max_model_len = info.max_model_len; /* the engine's, possibly lowered from what was asked */
    const lm_server_options *o = &s->options;
    if (o->log && o->stats_interval_s > 0 &&
        (st = lm_throughput_log_start(o->log, engine, o->stats_interval_s, &s->throughput, err)) != LM_OK)
        return st;
    /* Everything above is written before a request can see ready (the
     * atomic's store orders it). */
    atomic_store(&s->ready, true);
    return LM_OK;
}

int lm_server_port(const lm_server *s) { return s->port; }

/* Waits up to ms for the counter to reach zero; true if it did. */
static bool wait_zero(atomic_int *counter, int ms) {
    for (int waited = 0; atomic_load(counter) > 0; waited += 10) {
        if (waited >= ms) return false;
        usleep(10000);
    }
    return true;
}

void lm_server_stop(lm_server *s, int grace_ms) {
    if (!s) return;
    struct lm_http *h = s->http;
    lm_throughput_log_stop(s->throughput);
    s->throughput = NULL;
    /* 1. No new connections: the listening socket stops at once (the open
     * connections carry on). */
    atomic_store(&h->stopping, true);
    lm_front_door_close_listener(s->door);
    /* 2. The grace period for what is running. */
    wait_zero(&h->inflight, grace_ms);
    /* 3. Cancel the rest: streams end with "abort" and [DONE], blocking
     * requests get a 503; then wait for those replies to go out. */
    atomic_store(&s->cancel_all, true);
    bool drained = wait_zero(&h->inflight, FINAL_WAIT_MS);
    /* 4. Stop the sweeper, which wakes every suspended request a last time;
     * readers still waiting from here on poll. */
    pthread_mutex_lock(&h->watch_mutex);
    atomic_store(&h->no_suspend, true);
    h->sweeper_stop = true;
    pthread_cond_signal(&h->wake);
    pthread_mutex_unlock(&h->watch_mutex);
    pthread_join(h->sweeper, NULL);
    bool prepared = wait_zero(&h->preparing, FINAL_WAIT_MS);
    if (!drained)
        lm_log_printf(s->log, LM_LOG_WARNING, "%d requests did not finish after the cancel", atomic_load(&h->inflight));
    if (!prepared) {
        /* A preparation thread still holds a suspended connection: stopping
         * the daemon now is undefined, so leave it to the process exit. */
        lm_log_printf(s->log, LM_LOG_WARNING, "%d requests still being prepared; not freeing the server",
                      atomic_load(&h->preparing));
        return;
    }
    /* 5. The preparation threads finish what a late request queued and
     * end; from here a worker route is refused on its I/O thread (the
     * pool, stopped, stays until http_free), so no thread but MHD's
     * touches a connection when the daemon stops. */
    lm_prepare_pool_stop(h->pool);
    lm_resumer_stop(h->resumer); /* what it holds resumed; later wake-ups resume inline */
    MHD_stop_daemon(s->daemon);
    /* MHD closed its ends: the relay writes what it still holds, then closes. */
    lm_front_door_stop(s->door, FLUSH_MS);
    http_free(h);
    lm_metrics_destroy(&s->metrics);
    lm_grammar_cache_free(s->grammars);
    lm_responses_store_close(s->responses);
    free(s->media_dir);
    free(s);
}
