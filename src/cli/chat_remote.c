#include "cli/chat_remote.h"

#include <errno.h>
#include <netdb.h>
#include <poll.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/socket.h>
#include <unistd.h>

#include "cli/chat_input.h"
#include "cli/sampling_options.h"

#define MAX_RESPONSE_BYTES ((size_t)64 << 20)
#define CONNECT_TIMEOUT_MS 10000


/* ------------------------------------------------------------ connection */

typedef struct {
    int fd;
    char buf[16384];
    size_t len, pos;
    bool eof;
} conn;

static lm_status connect_to(const lm_chat_remote *r, conn *c, lm_error *err) {
    memset(c, 0, sizeof *c);
    c->fd = -1;
    struct addrinfo hints = {.ai_family = AF_UNSPEC, .ai_socktype = SOCK_STREAM}, *found;
    int gai = getaddrinfo(r->host, r->port, &hints, &found);
    if (gai != 0) return lm_fail(err, LM_ERR_IO, "--url: %s: %s", r->host, gai_strerror(gai));
    int e = 0;
    for (struct addrinfo *a = found; a && c->fd < 0; a = a->ai_next) {
        c->fd = socket(a->ai_family, a->ai_socktype | SOCK_CLOEXEC, a->ai_protocol);
        if (c->fd >= 0 && connect(c->fd, a->ai_addr, a->ai_addrlen) != 0) {
            e = errno;
            close(c->fd);
            c->fd = -1;
        }
    }
    freeaddrinfo(found);
    if (c->fd < 0)
        return lm_fail(err, LM_ERR_IO, "--url: cannot connect to %s port %s: %s (is loom serve running there?)",
                       r->host, r->port, strerror(e));
    return LM_OK;
}

static lm_status send_all(conn *c, const char *data, size_t n, lm_error *err) {
    while (n > 0) {
        ssize_t w = send(c->fd, data, n, MSG_NOSIGNAL);
        if (w < 0 && errno == EINTR) continue;
        if (w <= 0) return lm_fail(err, LM_ERR_IO, "--url: sending the request: %s", strerror(errno));
        data += w;
        n -= (size_t)w;
    }
    return LM_OK;
}

/* Fills the buffer; 1 data, 0 end of stream, -1 error, -2 interrupted. */
static int fill(conn *c, int signal_fd) {
    if (c->pos < c->len) return 1;
    if (c->eof) return 0;
    for (;;) {
        struct pollfd p[2] = {{.fd = c->fd, .events = POLLIN}, {.fd = signal_fd, .events = POLLIN}};
        int n = poll(p, signal_fd >= 0 ? 2 : 1, CONNECT_TIMEOUT_MS * 30);
        if (n < 0 && errno == EINTR) continue;
        if (n <= 0) return -1;
        if (signal_fd >= 0 && (p[1].revents & POLLIN) && lm_chat_take_interrupt(signal_fd)) return -2;
        if (!(p[0].revents & (POLLIN | POLLHUP | POLLERR))) continue;
        ssize_t got = recv(c->fd, c->buf, sizeof c->buf, 0);
        if (got < 0 && errno == EINTR) continue;
        if (got < 0) return -1;
        c->pos = 0;
        c->len = (size_t)got;
        if (got == 0) c->eof = true;
        return got > 0;
    }
}

/* One line ending in \n (CR dropped), at most size - 1 bytes. */
static int read_line(conn *c, int signal_fd, char *line, size_t size) {
    size_t n = 0;
    for (;;) {
        int f = fill(c, signal_fd);
        if (f <= 0) return f == 0 && n ? 1 : f;
        char ch = c->buf[c->pos++];
        if (ch == '\n') break;
        if (n + 1 < size) line[n++] = ch;
    }
    if (n && line[n - 1] == '\r') n--;
    line[n] = '\0';
    return 1;
}

/* ------------------------------------------------------------ HTTP */

typedef struct {
    int status;
    bool chunked;
    long long content_length; /* -1: until close */
    long long chunk_left;     /* chunked: bytes left in the current chunk */
    bool done;
} response;

static lm_status request(const lm_chat_remote *r, conn *c, const char *method, const char *path, const char *body,
                         response *resp, lm_error *err) {
    lm_status st = connect_to(r, c, err);
    if (st != LM_OK) return st;
    char head[1024];
    char auth[600] = "";
    if (r->api_key) snprintf(auth, sizeof auth, "Authorization: Bearer %.500s\r\n", r->api_key);
    int n = snprintf(head, sizeof head,
                     "%s %s%s HTTP/1.1\r\nHost: %s:%s\r\nConnection: close\r\nAccept: */*\r\n%s"
                     "Content-Type: application/json\r\nContent-Length: %zu\r\n\r\n",
                     method, r->path_prefix, path, r->host, r->port, auth, body ? strlen(body) : 0);
    st = send_all(c, head, (size_t)n, err);
    if (st == LM_OK && body) st = send_all(c, body, strlen(body), err);
    if (st != LM_OK) return st;
    memset(resp, 0, sizeof *resp);
    resp->content_length = -1;
    char line[2048];
    if (read_line(c, -1, line, sizeof line) != 1 || sscanf(line, "HTTP/%*s %d", &resp->status) != 1)
        return lm_fail(err, LM_ERR_IO, "--url: no HTTP response from %s port %s", r->host, r->port);
    while (read_line(c, -1, line, sizeof line) == 1 && line[0]) {
        if (strncasecmp(line, "Transfer-Encoding:", 18) == 0 && strstr(line + 18, "chunked")) resp->chunked = true;
        if (strncasecmp(line, "Content-Length:", 15) == 0) resp->content_length = atoll(line + 15);
    }
    return LM_OK;
}

/* The next body bytes (at most size): > 0 bytes, 0 end, -1 error, -2 interrupted. */
static long body_read(conn *c, response *resp, int signal_fd, char *out, size_t size) {
    if (resp->done) return 0;
    if (resp->chunked && resp->chunk_left == 0) {
        char line[64];
        int got = read_line(c, signal_fd, line, sizeof line);
        if (got == 1 && !line[0]) got = read_line(c, signal_fd, line, sizeof line); /* the CRLF after a chunk */
        if (got != 1) return got == 0 ? -1 : got;
        resp->chunk_left = strtoll(line, NULL, 16);
        if (resp->chunk_left <= 0) {
            resp->done = true;
            return 0;
        }
    }
    int f = fill(c, signal_fd);
    if (f <= 0) {
        resp->done = f == 0;
        return f == 0 ? 0 : f;
    }
    size_t n = c->len - c->pos;
    if (n > size) n = size;
    if (resp->chunked && (long long)n > resp->chunk_left) n = (size_t)resp->chunk_left;
    if (resp->content_length >= 0 && (long long)n > resp->content_length) n = (size_t)resp->content_length;
    memcpy(out, c->buf + c->pos, n);
    c->pos += n;
    if (resp->chunked) resp->chunk_left -= (long long)n;
    if (resp->content_length >= 0 && (resp->content_length -= (long long)n) == 0) resp->done = true;
    return (long)n;
}

/* The whole body (malloc'd, NUL-terminated). */
static char *body_all(conn *c, response *resp, lm_error *err) {
    size_t cap = 4096, len = 0;
    char *out = malloc(cap);
    for (;;) {
        if (!out) {
            lm_fail(err, LM_ERR_NOMEM, "out of memory");
            return NULL;
        }
        if (len + 4097 > cap) {
            if (cap > MAX_RESPONSE_BYTES) break;
            char *bigger = realloc(out, cap * 2);
            if (!bigger) {
                free(out);
                lm_fail(err, LM_ERR_NOMEM, "out of memory");
                return NULL;
            }
            out = bigger;
            cap *= 2;
        }
        long got = body_read(c, resp, -1, out + len, 4096);
        if (got <= 0) break;
        len += (size_t)got;
    }
    out[len] = '\0';
    return out;
}

/* The message of an error body ({"error": {"message": ...}}), or the body. */
static lm_status http_error(int status, const char *body, lm_error *err) {
    cJSON *doc = cJSON_Parse(body);
    const cJSON *e = cJSON_GetObjectItemCaseSensitive(doc, "error");
    const cJSON *m = cJSON_GetObjectItemCaseSensitive(e, "message");
    lm_status st = lm_fail(err, LM_ERR_IO, "the server answered %d: %.300s", status,
                           cJSON_IsString(m) ? m->valuestring : body);
    cJSON_Delete(doc);
    return st;
}

/* ------------------------------------------------------------ API */

lm_status lm_chat_remote_open(const char *url, const char *api_key, lm_chat_remote *r, lm_error *err) {
    memset(r, 0, sizeof *r);
    r->api_key = api_key;
    if (strncmp(url, "http://", 7) != 0)
        return lm_fail(err, LM_ERR_INVALID, "--url %s: give http://HOST:PORT (https is not supported)", url);
    const char *host = url + 7, *end = host + strcspn(host, "/");
    const char *colon = NULL;
    if (*host == '[') {
        const char *close_bracket = memchr(host, ']', (size_t)(end - host));
        if (!close_bracket) return lm_fail(err, LM_ERR_INVALID, "--url %s: unclosed [", url);
        snprintf(r->host, sizeof r->host, "%.*s", (int)(close_bracket - host - 1), host + 1);
        colon = close_bracket[1] == ':' ? close_bracket + 1 : NULL;
    } else {
        colon = memchr(host, ':', (size_t)(end - host));
        snprintf(r->host, sizeof r->host, "%.*s", (int)((colon ? colon : end) - host), host);
    }
    snprintf(r->port, sizeof r->port, "%.*s", colon ? (int)(end - colon - 1) : 2, colon ? colon + 1 : "80");
    snprintf(r->path_prefix, sizeof r->path_prefix, "%s", end);
    size_t n = strlen(r->path_prefix);
    while (n && r->path_prefix[n - 1] == '/') r->path_prefix[--n] = '\0';
    if (n >= 3 && strcmp(r->path_prefix + n - 3, "/v1") == 0) r->path_prefix[n - 3] = '\0';
    if (!r->host[0]) return lm_fail(err, LM_ERR_INVALID, "--url %s: no host", url);
    conn c;
    response resp;
    lm_status st = request(r, &c, "GET", "/v1/models", NULL, &resp, err);
    char *body = st == LM_OK ? body_all(&c, &resp, err) : NULL;
    if (c.fd >= 0) close(c.fd);
    if (st != LM_OK || !body) return st != LM_OK ? st : err->code;
    if (resp.status != 200) {
        st = http_error(resp.status, body, err);
        free(body);
        return st;
    }
    cJSON *doc = cJSON_Parse(body);
    free(body);
    const cJSON *first = cJSON_GetArrayItem(cJSON_GetObjectItemCaseSensitive(doc, "data"), 0);
    const cJSON *id = cJSON_GetObjectItemCaseSensitive(first, "id");
    if (cJSON_IsString(id)) snprintf(r->model, sizeof r->model, "%s", id->valuestring);
    cJSON_Delete(doc);
    if (!r->model[0]) return lm_fail(err, LM_ERR_FORMAT, "--url: /v1/models lists no model");
    return LM_OK;
}

static char *request_body(const lm_chat_remote *r, const cJSON *messages, const cJSON *kwargs,
                          const loom_request_params *p) {
    cJSON *b = cJSON_CreateObject();
    const loom_sampling *s = &p->sampling;
    cJSON_AddStringToObject(b, "model", r->model);
    cJSON_AddItemToObject(b, "messages", cJSON_Duplicate(messages, 1));
    cJSON_AddTrueToObject(b, "stream");
    cJSON_AddNumberToObject(b, "max_tokens", p->max_tokens);
    /* Fields no flag set are left out: the server's defaults (its model's
     * generation_config.json) apply to them, as to any client's request. */
    if (lm_cli_sampling_is_set(s->temperature)) cJSON_AddNumberToObject(b, "temperature", s->temperature);
    if (lm_cli_sampling_is_set(s->top_p)) cJSON_AddNumberToObject(b, "top_p", s->top_p);
    if (s->top_k != LM_CLI_UNSET_TOP_K) cJSON_AddNumberToObject(b, "top_k", s->top_k);
    if (lm_cli_sampling_is_set(s->min_p)) cJSON_AddNumberToObject(b, "min_p", s->min_p);
    if (lm_cli_sampling_is_set(s->repetition_penalty))
        cJSON_AddNumberToObject(b, "repetition_penalty", s->repetition_penalty);
    if (s->has_seed) cJSON_AddNumberToObject(b, "seed", (double)s->seed);
    if (p->ignore_eos) cJSON_AddTrueToObject(b, "ignore_eos");
    if (kwargs && kwargs->child) cJSON_AddItemToObject(b, "chat_template_kwargs", cJSON_Duplicate(kwargs, 1));
    char *text = cJSON_PrintUnformatted(b);
    cJSON_Delete(b);
    return text;
}

/* One SSE data line: the deltas to on_text, the finish reason. */
static void take_event(const char *data, bool *in_reasoning, void (*on_text)(void *, const char *, size_t),
                       void *ctx, lm_chat_remote_result *out) {
    cJSON *doc = cJSON_Parse(data);
    const cJSON *choice = cJSON_GetArrayItem(cJSON_GetObjectItemCaseSensitive(doc, "choices"), 0);
    const cJSON *delta = cJSON_GetObjectItemCaseSensitive(choice, "delta");
    const cJSON *reasoning = cJSON_GetObjectItemCaseSensitive(delta, "reasoning_content");
    const cJSON *content = cJSON_GetObjectItemCaseSensitive(delta, "content");
    if (cJSON_IsString(reasoning) && reasoning->valuestring[0]) {
        if (!*in_reasoning) on_text(ctx, "<think>", 7);
        *in_reasoning = true;
        on_text(ctx, reasoning->valuestring, strlen(reasoning->valuestring));
    }
    if (cJSON_IsString(content) && content->valuestring[0]) {
        if (*in_reasoning) on_text(ctx, "</think>", 8);
        *in_reasoning = false;
        on_text(ctx, content->valuestring, strlen(content->valuestring));
        out->completion_tokens++;
    }
    const cJSON *finish = cJSON_GetObjectItemCaseSensitive(choice, "finish_reason");
    if (cJSON_IsString(finish)) snprintf(out->finish_reason, sizeof out->finish_reason, "%s", finish->valuestring);
    cJSON_Delete(doc);
}

lm_status lm_chat_remote_answer(const lm_chat_remote *r, const cJSON *messages, const cJSON *template_kwargs,
                                const loom_request_params *params, int signal_fd,
                                void (*on_text)(void *ctx, const char *text, size_t len), void *ctx,
                                lm_chat_remote_result *out, lm_error *err) {
    memset(out, 0, sizeof *out);
    char *body = request_body(r, messages, template_kwargs, params);
    if (!body) return lm_fail(err, LM_ERR_NOMEM, "out of memory");
    conn c;
    response resp;
    lm_status st = request(r, &c, "POST", "/v1/chat/completions", body, &resp, err);
    free(body);
    if (st == LM_OK && resp.status != 200) {
        char *text = body_all(&c, &resp, err);
        st = text ? http_error(resp.status, text, err) : err->code;
        free(text);
    }
    /* Server-Sent Events: "data: {...}" lines, then "data: [DONE]". */
    char line[LM_CHAT_MESSAGE_MAX];
    size_t n = 0;
    bool in_reasoning = false, done = false;
    while (st == LM_OK && !done) {
        char piece[4096];
        long got = body_read(&c, &resp, signal_fd, piece, sizeof piece);
        if (got == -2) {
            out->stopped = true; /* closing the connection cancels the request */
            break;
        }
        if (got < 0) st = lm_fail(err, LM_ERR_IO, "--url: the connection broke during the answer");
        if (got <= 0) break;
        for (long i = 0; i < got && !done; i++) {
            if (piece[i] != '\n') {
                if (n + 1 < sizeof line) line[n++] = piece[i];
                continue;
            }
            line[n] = '\0';
            if (n && line[n - 1] == '\r') line[n - 1] = '\0';
            if (strncmp(line, "data: ", 6) == 0) {
                if (strcmp(line + 6, "[DONE]") == 0) done = true;
                else take_event(line + 6, &in_reasoning, on_text, ctx, out);
            }
            n = 0;
        }
    }
    if (in_reasoning) on_text(ctx, "</think>", 8);
    if (c.fd >= 0) close(c.fd);
    return st;
}
