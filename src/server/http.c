/* The HTTP side: libmicrohttpd setup, routing, authentication, body limits
 * and the small routes (models, health, metrics, tokenize, detokenize). */
#include <arpa/inet.h>
#include <errno.h>
#include <netinet/in.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

#include "server/server_internal.h"

typedef struct {
    lm_route route;
    bool method_ok, authorized;
    bool too_large;
    lm_sbuf body;
    double arrival;
} conn_ctx;

double lm_now_seconds(void) {
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (double)t.tv_sec + (double)t.tv_nsec * 1e-9;
}

bool lm_client_gone(struct MHD_Connection *c) {
    const union MHD_ConnectionInfo *info = MHD_get_connection_info(c, MHD_CONNECTION_INFO_CONNECTION_FD);
    if (!info) return false;
    char byte;
    ssize_t n = recv(info->connect_fd, &byte, 1, MSG_PEEK | MSG_DONTWAIT);
    return n == 0 || (n < 0 && errno != EAGAIN && errno != EWOULDBLOCK && errno != EINTR);
}

enum MHD_Result lm_reply_text(struct MHD_Connection *c, unsigned status, const char *content_type,
                              const char *body, size_t len) {
    struct MHD_Response *r = MHD_create_response_from_buffer(len, (void *)body, MHD_RESPMEM_MUST_COPY);
    if (!r) return MHD_NO;
    MHD_add_response_header(r, "Content-Type", content_type);
    if (status == 503) MHD_add_response_header(r, "Retry-After", "1");
    if (status == 401) MHD_add_response_header(r, "WWW-Authenticate", "Bearer");
    enum MHD_Result ret = MHD_queue_response(c, status, r);
    MHD_destroy_response(r);
    return ret;
}

enum MHD_Result lm_reply_json(struct MHD_Connection *c, unsigned status, const cJSON *json) {
    char *text = json ? cJSON_PrintUnformatted(json) : NULL;
    if (!text) {
        static const char oom[] = "{\"error\":{\"message\":\"out of memory\",\"type\":"
                                  "\"InternalServerError\",\"param\":null,\"code\":500}}";
        return lm_reply_text(c, 500, "application/json", oom, sizeof oom - 1);
    }
    enum MHD_Result ret = lm_reply_text(c, status, "application/json", text, strlen(text));
    cJSON_free(text);
    return ret;
}

static const char *error_type(unsigned status) {
    switch (status) {
    case 400: return "BadRequestError";
    case 401: return "AuthenticationError";
    case 404: return "NotFoundError";
    case 405: return "MethodNotAllowed";
    case 413: return "RequestTooLarge";
    case 503: return "ServiceUnavailableError";
    default: return "InternalServerError";
    }
}

enum MHD_Result lm_reply_error(struct MHD_Connection *c, unsigned status, const char *message,
                               const char *param) {
    cJSON *root = cJSON_CreateObject();
    cJSON *e = cJSON_AddObjectToObject(root, "error");
    cJSON_AddStringToObject(e, "message", message);
    cJSON_AddStringToObject(e, "type", error_type(status));
    if (param && param[0]) cJSON_AddStringToObject(e, "param", param);
    else cJSON_AddNullToObject(e, "param");
    cJSON_AddNumberToObject(e, "code", status);
    enum MHD_Result ret = lm_reply_json(c, status, root);
    cJSON_Delete(root);
    return ret;
}

static lm_route route_of(const char *url, const char *method, bool *method_ok) {
    static const struct {
        const char *url, *method;
        lm_route route;
    } table[] = {
        {"/v1/chat/completions", "POST", LM_ROUTE_CHAT}, {"/v1/completions", "POST", LM_ROUTE_COMPLETIONS},
        {"/v1/models", "GET", LM_ROUTE_MODELS},          {"/health", "GET", LM_ROUTE_HEALTH},
        {"/metrics", "GET", LM_ROUTE_METRICS},           {"/tokenize", "POST", LM_ROUTE_TOKENIZE},
        {"/detokenize", "POST", LM_ROUTE_DETOKENIZE},
    };
    for (size_t i = 0; i < sizeof table / sizeof table[0]; i++)
        if (strcmp(url, table[i].url) == 0) {
            *method_ok = strcmp(method, table[i].method) == 0;
            return table[i].route;
        }
    *method_ok = false;
    return LM_ROUTE_NONE;
}

static bool authorized(const lm_server *s, struct MHD_Connection *c, lm_route route) {
    if (!s->options.api_key) return true;
    if (route == LM_ROUTE_HEALTH || route == LM_ROUTE_METRICS) return true;
    const char *h = MHD_lookup_connection_value(c, MHD_HEADER_KIND, "Authorization");
    if (!h || strncmp(h, "Bearer ", 7) != 0) return false;
    /* Compare in time independent of where the strings differ. */
    const char *got = h + 7, *want = s->options.api_key;
    size_t gl = strlen(got), wl = strlen(want);
    unsigned diff = (unsigned)(gl != wl);
    for (size_t i = 0; i < wl; i++) diff |= (unsigned)(want[i] ^ (i < gl ? got[i] : 0));
    return diff == 0;
}

static enum MHD_Result handle_models(lm_server *s, struct MHD_Connection *c) {
    cJSON *root = cJSON_CreateObject();
    cJSON_AddStringToObject(root, "object", "list");
    cJSON *data = cJSON_AddArrayToObject(root, "data");
    cJSON *m = cJSON_CreateObject();
    cJSON_AddStringToObject(m, "id", s->options.served_model_name);
    cJSON_AddStringToObject(m, "object", "model");
    cJSON_AddNumberToObject(m, "created", (double)time(NULL));
    cJSON_AddStringToObject(m, "owned_by", "loom");
    cJSON_AddStringToObject(m, "root", s->options.served_model_name);
    cJSON_AddNullToObject(m, "parent");
    cJSON_AddNumberToObject(m, "max_model_len", s->options.max_model_len);
    cJSON_AddItemToArray(data, m);
    enum MHD_Result ret = lm_reply_json(c, 200, root);
    cJSON_Delete(root);
    return ret;
}

static enum MHD_Result handle_metrics(lm_server *s, struct MHD_Connection *c) {
    loom_stats stats;
    loom_engine_stats(s->engine, &stats);
    lm_sbuf out = {0};
    lm_metrics_render(&s->metrics, &stats, s->options.served_model_name, &out);
    enum MHD_Result ret = out.failed ? lm_reply_error(c, 500, "out of memory", NULL)
                                     : lm_reply_text(c, 200, "text/plain; version=0.0.4", lm_sbuf_str(&out), out.len);
    lm_sbuf_free(&out);
    return ret;
}

static bool model_ok(const lm_server *s, const char *model) {
    return !model || strcmp(model, s->options.served_model_name) == 0;
}

static enum MHD_Result model_not_found(struct MHD_Connection *c, const char *model) {
    char message[400];
    snprintf(message, sizeof message, "The model `%.300s` does not exist.", model);
    return lm_reply_error(c, 404, message, "model");
}

/* POST /tokenize: {"prompt": text, "add_special_tokens": true} or a chat
 * {"messages": [...]} -> {"count", "max_model_len", "tokens"}. */
static enum MHD_Result handle_tokenize(lm_server *s, struct MHD_Connection *c, const char *body, size_t len) {
    if (!s->tokenizer) return lm_reply_error(c, 400, "this model has no tokenizer", NULL);
    cJSON *doc = lm_json_nesting_depth(body, len) <= LM_REQUEST_MAX_DEPTH ? cJSON_ParseWithLength(body, len) : NULL;
    if (!cJSON_IsObject(doc)) {
        cJSON_Delete(doc);
        return lm_reply_error(c, 400, "the request body must be a JSON object", NULL);
    }
    const cJSON *model = cJSON_GetObjectItemCaseSensitive(doc, "model");
    if (cJSON_IsString(model) && !model_ok(s, model->valuestring)) {
        enum MHD_Result r = model_not_found(c, model->valuestring);
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
        st = lm_openai_request_parse(LM_API_CHAT, body, len, &r, param, sizeof param, &err);
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
    if (st == LM_OK) st = lm_tokenizer_encode(s->tokenizer, text, text_len, add_special, &ids, &n, &err);
    if (owned) free(text);
    cJSON_Delete(doc);
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
    cJSON *doc = lm_json_nesting_depth(body, len) <= LM_REQUEST_MAX_DEPTH ? cJSON_ParseWithLength(body, len) : NULL;
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
    cJSON_AddStringToObject(root, "prompt", text);
    free(text);
    enum MHD_Result ret = lm_reply_json(c, 200, root);
    cJSON_Delete(root);
    return ret;
}

static enum MHD_Result dispatch(lm_server *s, struct MHD_Connection *c, conn_ctx *ctx) {
    const char *body = lm_sbuf_str(&ctx->body);
    size_t len = ctx->body.len;
    switch (ctx->route) {
    case LM_ROUTE_CHAT: return lm_handle_generation(s, c, LM_API_CHAT, body, len, ctx->arrival);
    case LM_ROUTE_COMPLETIONS: return lm_handle_generation(s, c, LM_API_COMPLETION, body, len, ctx->arrival);
    case LM_ROUTE_MODELS: return handle_models(s, c);
    case LM_ROUTE_HEALTH: return lm_reply_text(c, 200, "text/plain", "", 0);
    case LM_ROUTE_METRICS: return handle_metrics(s, c);
    case LM_ROUTE_TOKENIZE: return handle_tokenize(s, c, body, len);
    case LM_ROUTE_DETOKENIZE: return handle_detokenize(s, c, body, len);
    default: return lm_reply_error(c, 404, "not found", NULL);
    }
}

static enum MHD_Result on_request(void *cls, struct MHD_Connection *c, const char *url, const char *method,
                                  const char *version, const char *upload_data, size_t *upload_data_size,
                                  void **con_cls) {
    lm_server *s = cls;
    conn_ctx *ctx = *con_cls;
    if (!ctx) {
        ctx = calloc(1, sizeof *ctx);
        if (!ctx) return MHD_NO;
        *con_cls = ctx;
        ctx->arrival = lm_now_seconds();
        ctx->route = route_of(url, method, &ctx->method_ok);
        ctx->authorized = authorized(s, c, ctx->route);
        const char *cl = MHD_lookup_connection_value(c, MHD_HEADER_KIND, "Content-Length");
        if (cl && strtoull(cl, NULL, 10) > s->options.max_body_bytes) ctx->too_large = true;
        /* Refuse early what will be refused anyway, without reading the body. */
        if (ctx->too_large)
            return lm_reply_error(c, 413, "the request body is larger than the server accepts", NULL);
        if (!ctx->authorized)
            return lm_reply_error(c, 401, "missing or invalid API key (Authorization: Bearer ...)", NULL);
        return MHD_YES;
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
    if (ctx->too_large) return lm_reply_error(c, 413, "the request body is larger than the server accepts", NULL);
    if (ctx->body.failed) return lm_reply_error(c, 500, "out of memory reading the request body", NULL);
    if (ctx->route == LM_ROUTE_NONE) {
        char message[300];
        snprintf(message, sizeof message, "no route %.8s %.200s", method, url);
        return lm_reply_error(c, 404, message, NULL);
    }
    if (!ctx->method_ok) return lm_reply_error(c, 405, "method not allowed", NULL);
    return dispatch(s, c, ctx);
}

static void on_completed(void *cls, struct MHD_Connection *c, void **con_cls,
                         enum MHD_RequestTerminationCode toe) {
    conn_ctx *ctx = *con_cls;
    if (!ctx) return;
    lm_sbuf_free(&ctx->body);
    free(ctx);
    *con_cls = NULL;
}

lm_status lm_server_start(const lm_server_options *options, loom_engine *engine,
                          const lm_tokenizer *tokenizer, const lm_chat_template *chat_template,
                          lm_server **out, lm_error *err) {
    lm_server *s = calloc(1, sizeof *s);
    if (!s) return lm_fail(err, LM_ERR_NOMEM, "out of memory");
    s->options = *options;
    if (!s->options.host) s->options.host = "127.0.0.1";
    if (!s->options.served_model_name) s->options.served_model_name = "loom";
    if (!s->options.max_body_bytes) s->options.max_body_bytes = 16u << 20;
    if (s->options.max_connections <= 0) s->options.max_connections = 1024;
    s->engine = engine;
    s->tokenizer = tokenizer;
    s->chat_template = chat_template;
    const char *source = tokenizer ? lm_tokenizer_chat_template(tokenizer) : NULL;
    s->template_has_think = source && strstr(source, "<think>");
    lm_metrics_init(&s->metrics);
    atomic_init(&s->next_id, (uint64_t)time(NULL) << 20);
    atomic_init(&s->active, 0);
    atomic_init(&s->cancel_all, false);

    struct sockaddr_in addr;
    memset(&addr, 0, sizeof addr);
    addr.sin_family = AF_INET;
    addr.sin_port = htons((uint16_t)s->options.port);
    if (inet_pton(AF_INET, s->options.host, &addr.sin_addr) != 1) {
        lm_metrics_destroy(&s->metrics);
        free(s);
        return lm_fail(err, LM_ERR_INVALID, "--host %s is not an IPv4 address", options->host);
    }
    s->daemon = MHD_start_daemon(MHD_USE_THREAD_PER_CONNECTION | MHD_USE_INTERNAL_POLLING_THREAD |
                                     MHD_USE_ITC | MHD_USE_ERROR_LOG,
                                 (uint16_t)s->options.port, NULL, NULL, on_request, s,
                                 MHD_OPTION_SOCK_ADDR, (struct sockaddr *)&addr,
                                 MHD_OPTION_NOTIFY_COMPLETED, on_completed, s,
                                 MHD_OPTION_CONNECTION_LIMIT, (unsigned)s->options.max_connections,
                                 MHD_OPTION_CONNECTION_TIMEOUT, (unsigned)600,
                                 MHD_OPTION_LISTEN_BACKLOG_SIZE, (unsigned)1024, MHD_OPTION_END);
    if (!s->daemon) {
        lm_metrics_destroy(&s->metrics);
        free(s);
        return lm_fail(err, LM_ERR_IO, "cannot listen on %s:%d (%s)", options->host ? options->host : "127.0.0.1",
                       options->port, strerror(errno));
    }
    const union MHD_DaemonInfo *info = MHD_get_daemon_info(s->daemon, MHD_DAEMON_INFO_BIND_PORT);
    s->port = info ? info->port : s->options.port;
    *out = s;
    return LM_OK;
}

int lm_server_port(const lm_server *s) { return s->port; }

void lm_server_stop(lm_server *s, int grace_ms) {
    if (!s) return;
    MHD_socket listen = MHD_quiesce_daemon(s->daemon);
    for (int waited = 0; atomic_load(&s->active) > 0 && waited < grace_ms; waited += 20) usleep(20000);
    atomic_store(&s->cancel_all, true);
    MHD_stop_daemon(s->daemon);
    if (listen != MHD_INVALID_SOCKET) close(listen);
    lm_metrics_destroy(&s->metrics);
    free(s);
}
