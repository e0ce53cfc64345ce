/* loom's listening socket, accept loop and relay (see front_door.h).
 *
 * Per connection: the client socket and loom's end of a socketpair whose
 * other end libmicrohttpd serves.  Two bounded buffers: up (client to MHD)
 * and down (MHD to client).  Nothing is read from a side while the buffer
 * it fills is full (back-pressure); both sockets are edge-triggered and the
 * readiness seen is kept until a call would block.
 *
 * The up buffer is [start, release) validated bytes to send to MHD,
 * [release, parsed) a request head being held until it is complete and
 * checked, [parsed, len) bytes not parsed yet (at most
 * LM_RESPONSES_MAX_PENDING requests may wait for their response).
 *
 * A framing error stops the client side: what was validated still goes to
 * MHD, the relay waits until MHD has answered every earlier request, then
 * writes its own JSON error, closes MHD's end and closes the client once
 * the error is written (shutdown, then reading until the client closes, so
 * that unread request bytes cannot turn the close into a reset). */
#include "server/front_door.h"

#include <arpa/inet.h>
#include <errno.h>
#include <netdb.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/epoll.h>
#include <sys/eventfd.h>
#include <sys/socket.h>
#include <unistd.h>

#include "server/error_body.h"
#include "server/request_framing.h"
#include "server/response_counter.h"
#include "server/server_internal.h"

#define RELAY_BUF_BYTES (64u << 10) /* per direction and connection, allocated while in use */
#define RELAY_ERROR_SLACK 2048u     /* room after the down buffer for the relay's own error */
#define RELAY_TICK_S 0.1            /* timeouts are checked this often */
#define RELAY_LINGER_S 2.0          /* after our last byte, how long the client may keep sending */
#define RELAY_FLUSH_S 10.0          /* how long a closing connection may make no progress */
#define MAX_EVENTS 256
#define ACCEPT_BATCH 64

enum { CLIENT = 0, SERVER = 1 };

typedef enum {
    RELAY_OPEN,        /* relaying */
    RELAY_ERROR_WAIT,  /* a framing error: waiting for MHD to answer the requests before it */
    RELAY_FLUSH_CLOSE, /* MHD's end is closed: writing what is left to the client */
    RELAY_LINGER,      /* all written, write side shut: draining the client until it closes */
} relay_state;

typedef struct {
    char *data; /* NULL while empty */
    uint32_t start, len;
} relay_buf;

typedef struct relay_conn relay_conn;
typedef struct relay_thread relay_thread;

typedef struct {
    relay_conn *conn;
    int side;
} relay_end;

struct relay_conn {
    relay_conn *prev, *next;
    relay_thread *thread;
    int fd[2];
    bool readable[2], writable[2], eof[2];
    relay_end ends[2];
    relay_buf up, down;
    uint32_t up_parsed, up_release;
    bool server_write_shut;
    bool server_write_failed; /* MHD closed its end: the rest of the client's bytes are dropped */
    bool dead;
    relay_state state;
    double last_activity, linger_deadline;
    lm_request_framing framing;
    lm_response_counter responses;
};

struct relay_thread {
    lm_front_door *door;
    pthread_t thread;
    bool started;
    int epfd, wake_fd;
    bool listening;
    double listen_retry; /* after running out of descriptors: when to accept again */
    relay_conn *conns, *dead;
    int n_conns;
};

struct lm_front_door {
    lm_front_door_options options;
    char *allowed_origins;
    int listen_fd, port;
    struct MHD_Daemon *daemon;
    lm_framing_limits limits;
    atomic_int open;
    atomic_bool draining;
    _Atomic double drain_deadline;
    atomic_int_fast64_t log_second;
    relay_thread threads[LM_FRONT_DOOR_THREADS];
};

/* ------------------------------------------------------------ replies */

/* A complete error response with the OpenAI JSON body; its length, or 0. */
static size_t format_error(const lm_front_door *door, unsigned status, const char *message, const char *origin,
                           char *out, size_t size) {
    char *body = lm_error_json_body(status, message, NULL);
    static const char fallback[] = "{\"error\":{\"message\":\"bad request\",\"type\":\"invalid_request_error\","
                                   "\"param\":null,\"code\":400}}";
    const char *b = body ? body : fallback;
    if (!body) status = 400;
    const char *allow = lm_cors_allow_origin(door->allowed_origins, origin);
    bool vary = allow && strcmp(allow, "*") != 0;
    int n = snprintf(out, size,
                     "HTTP/1.1 %u %s\r\nContent-Type: application/json\r\nContent-Length: %zu\r\n"
                     "Connection: close\r\n%s%s%s%s%s\r\n%s",
                     status, http_status_str((enum http_status)status), strlen(b),
                     status == 503 ? "Retry-After: 1\r\n" : "", allow ? "Access-Control-Allow-Origin: " : "",
                     allow ? allow : "", allow ? "\r\n" : "", vary ? "Vary: Origin\r\n" : "", b);
    cJSON_free(body);
    return n > 0 && (size_t)n < size ? (size_t)n : 0;
}

/* Refused at accept: told why, then closed. */
static void refuse(const lm_front_door *door, int fd, const char *message) {
    char text[1024];
    size_t n = format_error(door, 503, message, "", text, sizeof text);
    if (n) (void)!send(fd, text, n, MSG_NOSIGNAL | MSG_DONTWAIT);
    close(fd);
}

/* ------------------------------------------------------------ buffers */

static bool buf_ensure(relay_buf *b, size_t slack) {
    if (!b->data) b->data = malloc(RELAY_BUF_BYTES + slack);
    return b->data != NULL;
}

static void buf_free(relay_buf *b) {
    free(b->data);
    *b = (relay_buf){0};
}

/* ------------------------------------------------------------ connections */

static void close_conn(relay_conn *c) {
    if (c->dead) return;
    c->dead = true;
    for (int s = 0; s < 2; s++)
        if (c->fd[s] >= 0) close(c->fd[s]);
    c->fd[CLIENT] = c->fd[SERVER] = -1;
    buf_free(&c->up);
    buf_free(&c->down);
    relay_thread *t = c->thread;
    if (c->prev) c->prev->next = c->next;
    else t->conns = c->next;
    if (c->next) c->next->prev = c->prev;
    c->next = t->dead;
    c->prev = NULL;
    t->dead = c;
    t->n_conns--;
    atomic_fetch_sub(&t->door->open, 1);
}

static void close_server_end(relay_conn *c) {
    if (c->fd[SERVER] < 0) return;
    close(c->fd[SERVER]);
    c->fd[SERVER] = -1;
    c->eof[SERVER] = true;
}

static void up_reset_if_sent(relay_conn *c) {
    if (c->up.data && c->up.start == c->up.len) {
        buf_free(&c->up);
        c->up_parsed = c->up_release = 0;
    }
}

static bool read_client(relay_conn *c) {
    if (!c->readable[CLIENT] || c->eof[CLIENT]) return false;
    if (c->state == RELAY_LINGER) {
        char scratch[16384];
        ssize_t n = recv(c->fd[CLIENT], scratch, sizeof scratch, 0);
        if (n > 0) return true;
        if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) c->readable[CLIENT] = false;
        else if (n < 0 && errno == EINTR) return true;
        else close_conn(c);
        return false;
    }
    if (c->state != RELAY_OPEN || c->server_write_failed) return false;
    if (!buf_ensure(&c->up, 0)) {
        close_conn(c);
        return false;
    }
    relay_buf *b = &c->up;
    if (b->len == RELAY_BUF_BYTES && b->start > 0) {
        memmove(b->data, b->data + b->start, b->len - b->start);
        c->up_parsed -= b->start;
        c->up_release -= b->start;
        b->len -= b->start;
        b->start = 0;
    }
    if (b->len == RELAY_BUF_BYTES) return false;
    ssize_t n = recv(c->fd[CLIENT], b->data + b->len, RELAY_BUF_BYTES - b->len, 0);
    if (n > 0) {
        b->len += (uint32_t)n;
        c->last_activity = lm_monotonic_seconds();
        return true;
    }
    if (n == 0) {
        c->eof[CLIENT] = true;
        return true;
    }
    if (errno == EINTR) return true;
    if (errno == EAGAIN || errno == EWOULDBLOCK) {
        c->readable[CLIENT] = false;
        up_reset_if_sent(c);
        return false;
    }
    close_conn(c);
    return false;
}

static void begin_error(relay_conn *c) {
    c->state = RELAY_ERROR_WAIT;
    c->up.len = c->up_parsed = c->up_release; /* what was not validated is dropped */
}

/* Runs the client's new bytes through the framing checks. */
static void parse_up(relay_conn *c) {
    while (c->state == RELAY_OPEN && c->up.data && c->up_parsed < c->up.len &&
           !lm_response_counter_full(&c->responses)) {
        lm_request_framing *f = &c->framing;
        size_t n = lm_framing_feed(f, c->up.data + c->up_parsed, c->up.len - c->up_parsed);
        if (f->error_status) {
            begin_error(c);
            return;
        }
        if (f->head_done) lm_response_counter_expect(&c->responses, f->head_is_HEAD);
        c->up_parsed += (uint32_t)n;
        c->up_release = c->up_parsed - (f->in_head ? f->head_bytes : 0);
        if (n == 0) return;
    }
}

static bool write_server(relay_conn *c) {
    if (c->fd[SERVER] < 0 || c->server_write_failed || !c->writable[SERVER] || !c->up.data ||
        c->up.start >= c->up_release)
        return false;
    ssize_t n = send(c->fd[SERVER], c->up.data + c->up.start, c->up_release - c->up.start,
                     MSG_NOSIGNAL | MSG_DONTWAIT);
    if (n > 0) {
        c->up.start += (uint32_t)n;
        up_reset_if_sent(c);
        return true;
    }
    if (n < 0 && errno == EINTR) return true;
    if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) {
        c->writable[SERVER] = false;
        return false;
    }
    /* MHD closed its end (it may have answered first, e.g. a 413 before
     * the body): what it wrote is still to be read. */
    c->server_write_failed = true;
    c->readable[SERVER] = true;
    c->up.start = c->up.len = c->up_parsed = c->up_release = 0;
    buf_free(&c->up);
    return true;
}

static bool read_server(relay_conn *c) {
    if (c->fd[SERVER] < 0 || !c->readable[SERVER] || c->eof[SERVER]) return false;
    if (!buf_ensure(&c->down, RELAY_ERROR_SLACK)) {
        close_conn(c);
        return false;
    }
    relay_buf *b = &c->down;
    if (b->start == b->len) b->start = b->len = 0;
    if (b->len >= RELAY_BUF_BYTES && b->start > 0) {
        memmove(b->data, b->data + b->start, b->len - b->start);
        b->len -= b->start;
        b->start = 0;
    }
    if (b->len >= RELAY_BUF_BYTES) return false;
    ssize_t n = recv(c->fd[SERVER], b->data + b->len, RELAY_BUF_BYTES - b->len, 0);
    if (n > 0) {
        lm_response_counter_feed(&c->responses, b->data + b->len, (size_t)n);
        b->len += (uint32_t)n;
        c->last_activity = lm_monotonic_seconds();
        return true;
    }
    if (n < 0 && errno == EINTR) return true;
    if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) {
        c->readable[SERVER] = false;
        if (b->start == b->len) buf_free(b);
        return false;
    }
    c->eof[SERVER] = true;
    return true;
}

static bool write_client(relay_conn *c) {
    relay_buf *b = &c->down;
    if (!c->writable[CLIENT] || !b->data || b->start >= b->len) return false;
    ssize_t n = send(c->fd[CLIENT], b->data + b->start, b->len - b->start, MSG_NOSIGNAL | MSG_DONTWAIT);
    if (n > 0) {
        b->start += (uint32_t)n;
        if (b->start == b->len) buf_free(b);
        c->last_activity = lm_monotonic_seconds();
        return true;
    }
    if (n < 0 && errno == EINTR) return true;
    if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) {
        c->writable[CLIENT] = false;
        return false;
    }
    close_conn(c); /* the client is gone */
    return false;
}

static bool down_empty(const relay_conn *c) { return !c->down.data || c->down.start == c->down.len; }

/* Queues the relay's error response after what MHD wrote. */
static void append_error(relay_conn *c) {
    if (!buf_ensure(&c->down, RELAY_ERROR_SLACK)) return;
    relay_buf *b = &c->down;
    if (b->start > 0) {
        memmove(b->data, b->data + b->start, b->len - b->start);
        b->len -= b->start;
        b->start = 0;
    }
    size_t room = RELAY_BUF_BYTES + RELAY_ERROR_SLACK - b->len;
    lm_request_framing *f = &c->framing;
    size_t n = format_error(c->thread->door, f->error_status, f->error_message, lm_framing_origin(f),
                            b->data + b->len, room);
    b->len += (uint32_t)n;
}

/* The state changes; true when one happened. */
static bool settle(relay_conn *c) {
    if (c->dead) return false;
    switch (c->state) {
    case RELAY_OPEN:
        if (c->eof[SERVER]) {
            close_server_end(c);
            c->state = RELAY_FLUSH_CLOSE;
            return true;
        }
        if (c->eof[CLIENT]) {
            /* A request cut short is dropped; what was complete still goes. */
            if (c->up.data) c->up.len = c->up_parsed = c->up_release;
            if (!c->server_write_shut && (!c->up.data || c->up.start >= c->up_release)) {
                shutdown(c->fd[SERVER], SHUT_WR); /* MHD sees the client leave */
                c->server_write_shut = true;
                return true;
            }
            if (c->server_write_shut && lm_response_counter_outstanding(&c->responses) == 0 && down_empty(c)) {
                close_conn(c);
                return true;
            }
        }
        return false;
    case RELAY_ERROR_WAIT: {
        uint64_t need = c->framing.error_in_body ? 1 : 0; /* the bad request itself, if MHD has its head */
        uint64_t outstanding = lm_response_counter_outstanding(&c->responses);
        if (!c->eof[SERVER] && !c->responses.broken && outstanding > need) return false;
        /* Answer unless MHD already did (it may refuse a request before its
         * body) or an earlier response was cut. */
        if (!c->responses.broken && outstanding == need) append_error(c);
        close_server_end(c);
        c->state = RELAY_FLUSH_CLOSE;
        return true;
    }
    case RELAY_FLUSH_CLOSE:
        if (!down_empty(c)) return false;
        if (c->eof[CLIENT] || atomic_load(&c->thread->door->draining)) {
            shutdown(c->fd[CLIENT], SHUT_WR);
            close_conn(c);
        } else {
            shutdown(c->fd[CLIENT], SHUT_WR);
            c->state = RELAY_LINGER;
            c->linger_deadline = lm_monotonic_seconds() + RELAY_LINGER_S;
        }
        return true;
    case RELAY_LINGER:
        if (c->eof[CLIENT]) {
            close_conn(c);
            return true;
        }
        return false;
    }
    return false;
}

static void pump(relay_conn *c) {
    while (!c->dead) {
        bool progress = read_client(c);
        if (c->dead) return;
        parse_up(c);
        progress |= write_server(c);
        progress |= read_server(c);
        if (c->dead) return;
        progress |= write_client(c);
        if (c->dead) return;
        progress |= settle(c);
        if (!progress) return;
    }
}

/* ------------------------------------------------------------ accepting */

static void log_limited(lm_front_door *door, const char *what, int e) {
    int_fast64_t now = (int_fast64_t)lm_monotonic_seconds();
    if (atomic_exchange(&door->log_second, now) == now) return;
    if (door->options.log) lm_log_printf(door->options.log, LM_LOG_WARNING, "front door: %s: %s", what, strerror(e));
    else fprintf(stderr, "loom: front door: %s: %s\n", what, strerror(e));
}

static void admit(relay_thread *t, int fd, const struct sockaddr_in *addr, socklen_t addr_len) {
    lm_front_door *door = t->door;
    int one = 1;
    setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one); /* SSE events go out as written */
    if (atomic_fetch_add(&door->open, 1) >= door->options.max_connections) {
        atomic_fetch_sub(&door->open, 1);
        refuse(door, fd, "too many connections; retry later");
        return;
    }
    int pair[2];
    relay_conn *c = NULL;
    if (socketpair(AF_UNIX, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0, pair) != 0) {
        log_limited(door, "socketpair", errno);
        atomic_fetch_sub(&door->open, 1);
        refuse(door, fd, "the server is out of descriptors; retry later");
        return;
    }
    c = calloc(1, sizeof *c);
    /* MHD owns (and on failure closes) pair[1]; it sees the client's address. */
    if (!c || MHD_add_connection(door->daemon, pair[1], (const struct sockaddr *)addr, addr_len) != MHD_YES) {
        if (!c) close(pair[1]);
        close(pair[0]);
        free(c);
        atomic_fetch_sub(&door->open, 1);
        refuse(door, fd, "the server cannot take the connection; retry later");
        return;
    }
    c->thread = t;
    c->fd[CLIENT] = fd;
    c->fd[SERVER] = pair[0];
    c->state = RELAY_OPEN;
    c->last_activity = lm_monotonic_seconds();
    lm_framing_init(&c->framing, &door->limits);
    lm_response_counter_init(&c->responses);
    c->next = t->conns;
    if (t->conns) t->conns->prev = c;
    t->conns = c;
    t->n_conns++;
    for (int s = 0; s < 2; s++) {
        c->ends[s] = (relay_end){c, s};
        struct epoll_event ev = {.events = EPOLLIN | EPOLLOUT | EPOLLRDHUP | EPOLLET, .data.ptr = &c->ends[s]};
        if (epoll_ctl(t->epfd, EPOLL_CTL_ADD, c->fd[s], &ev) != 0) {
            close_conn(c);
            return;
        }
    }
}

static void listen_in(relay_thread *t, bool on) {
    if (t->listening == on) return;
    struct epoll_event ev = {.events = EPOLLIN | EPOLLEXCLUSIVE, .data.ptr = NULL};
    epoll_ctl(t->epfd, on ? EPOLL_CTL_ADD : EPOLL_CTL_DEL, t->door->listen_fd, &ev);
    t->listening = on;
}

static void accept_some(relay_thread *t) {
    lm_front_door *door = t->door;
    for (int i = 0; i < ACCEPT_BATCH; i++) {
        struct sockaddr_in addr;
        socklen_t len = sizeof addr;
        int fd = accept4(door->listen_fd, (struct sockaddr *)&addr, &len, SOCK_NONBLOCK | SOCK_CLOEXEC);
        if (fd >= 0) {
            admit(t, fd, &addr, len);
            continue;
        }
        if (errno == EINTR || errno == ECONNABORTED) continue;
        if (errno == EMFILE || errno == ENFILE || errno == ENOBUFS || errno == ENOMEM) {
            /* Out of descriptors: stop accepting for a tick rather than spin. */
            log_limited(door, "accept", errno);
            listen_in(t, false);
            t->listen_retry = lm_monotonic_seconds() + RELAY_TICK_S;
        } else if (errno != EAGAIN && errno != EWOULDBLOCK) {
            listen_in(t, false); /* the listener was shut down */
            t->listen_retry = 0;
        }
        return;
    }
}

/* ------------------------------------------------------------ the threads */

static void tick(relay_thread *t, double now) {
    const lm_front_door *door = t->door;
    double keep_alive = door->options.timeout_keep_alive_s;
    for (relay_conn *c = t->conns, *next; c; c = next) {
        next = c->next;
        bool idle = c->state == RELAY_OPEN && lm_response_counter_outstanding(&c->responses) == 0 &&
                    down_empty(c) && now - c->last_activity > keep_alive;
        /* (RELAY_ERROR_WAIT waits on MHD, whose own timeouts bound it.) */
        bool stuck = c->state == RELAY_FLUSH_CLOSE && now - c->last_activity > RELAY_FLUSH_S + keep_alive;
        if (idle || stuck || (c->state == RELAY_LINGER && now > c->linger_deadline)) close_conn(c);
    }
    if (!t->listening && t->listen_retry > 0 && now >= t->listen_retry && !atomic_load(&t->door->draining)) {
        t->listen_retry = 0;
        listen_in(t, true);
    }
}

static void free_dead(relay_thread *t) {
    while (t->dead) {
        relay_conn *c = t->dead;
        t->dead = c->next;
        free(c);
    }
}

static void *relay_main(void *arg) {
    relay_thread *t = arg;
    struct epoll_event events[MAX_EVENTS];
    double last_tick = lm_monotonic_seconds();
    for (;;) {
        int n = epoll_wait(t->epfd, events, MAX_EVENTS, (int)(RELAY_TICK_S * 1000));
        for (int i = 0; i < n; i++) {
            void *p = events[i].data.ptr;
            uint32_t ev = events[i].events;
            if (!p) {
                accept_some(t);
                continue;
            }
            if (p == &t->wake_fd) {
                uint64_t v;
                (void)!read(t->wake_fd, &v, sizeof v);
                continue;
            }
            relay_end *e = p;
            relay_conn *c = e->conn;
            if (c->dead) continue;
            if (ev & (EPOLLIN | EPOLLRDHUP | EPOLLHUP | EPOLLERR)) c->readable[e->side] = true;
            if (ev & (EPOLLOUT | EPOLLERR)) c->writable[e->side] = true;
            pump(c);
        }
        free_dead(t);
        double now = lm_monotonic_seconds();
        if (now - last_tick >= RELAY_TICK_S) {
            tick(t, now);
            free_dead(t);
            last_tick = now;
        }
        if (atomic_load(&t->door->draining) && (t->n_conns == 0 || now >= atomic_load(&t->door->drain_deadline)))
            break;
    }
    while (t->conns) close_conn(t->conns);
    free_dead(t);
    return NULL;
}

/* ------------------------------------------------------------ the door */

/* A socket listening on one of host's addresses (an IPv4 or IPv6 address,
 * in brackets or not, or a name), or -1 with the reason. */
static int listen_socket(const lm_front_door_options *o, int *port, lm_error *err) {
    char host[256];
    size_t n = strlen(o->host);
    if (n >= 2 && o->host[0] == '[' && o->host[n - 1] == ']') snprintf(host, sizeof host, "%.*s", (int)n - 2, o->host + 1);
    else snprintf(host, sizeof host, "%s", o->host);
    char service[16];
    snprintf(service, sizeof service, "%d", o->port);
    struct addrinfo hints = {.ai_family = AF_UNSPEC, .ai_socktype = SOCK_STREAM, .ai_flags = AI_PASSIVE}, *found;
    int gai = getaddrinfo(host, service, &hints, &found);
    if (gai != 0) {
        lm_fail(err, LM_ERR_INVALID, "--host %s: %s (give an IPv4 or IPv6 address, or a name this machine resolves)",
                o->host, gai_strerror(gai));
        return -1;
    }
    int fd = -1, e = 0;
    for (struct addrinfo *a = found; a && fd < 0; a = a->ai_next) {
        fd = socket(a->ai_family, a->ai_socktype | SOCK_NONBLOCK | SOCK_CLOEXEC, a->ai_protocol);
        int one = 1;
        if (fd >= 0 && (setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof one) != 0 ||
                        bind(fd, a->ai_addr, a->ai_addrlen) != 0 || listen(fd, o->backlog > 0 ? o->backlog : 1024) != 0)) {
            e = errno;
            close(fd);
            fd = -1;
        } else if (fd < 0) {
            e = errno;
        }
    }
    freeaddrinfo(found);
    if (fd < 0) {
        if (e == EADDRINUSE)
            lm_fail(err, LM_ERR_IO, "port %d on %s is already in use (another server?): pick another with --port",
                    o->port, o->host);
        else if (e == EACCES)
            lm_fail(err, LM_ERR_IO, "cannot listen on %s port %d: %s (ports below 1024 need privileges: use --port)",
                    o->host, o->port, strerror(e));
        else
            lm_fail(err, LM_ERR_IO, "cannot listen on %s port %d: %s (check --host and --port)", o->host, o->port,
                    strerror(e));
        return -1;
    }
    struct sockaddr_storage bound;
    socklen_t len = sizeof bound;
    getsockname(fd, (struct sockaddr *)&bound, &len);
    *port = bound.ss_family == AF_INET6 ? ntohs(((struct sockaddr_in6 *)&bound)->sin6_port)
                                        : ntohs(((struct sockaddr_in *)&bound)->sin_port);
    return fd;
}

lm_status lm_front_door_listen(const lm_front_door_options *o, lm_front_door **out, lm_error *err) {
    lm_front_door *door = calloc(1, sizeof *door);
    if (!door) return lm_fail(err, LM_ERR_NOMEM, "out of memory");
    door->options = *o;
    door->allowed_origins = o->allowed_origins ? strdup(o->allowed_origins) : NULL;
    door->options.allowed_origins = NULL;
    door->limits.max_body_bytes = o->max_body_bytes;
    atomic_init(&door->open, 0);
    atomic_init(&door->draining, false);
    atomic_init(&door->drain_deadline, 0.0);
    atomic_init(&door->log_second, 0);
    for (int i = 0; i < LM_FRONT_DOOR_THREADS; i++) door->threads[i].epfd = door->threads[i].wake_fd = -1;
    if (o->allowed_origins && !door->allowed_origins) {
        free(door);
        return lm_fail(err, LM_ERR_NOMEM, "out of memory");
    }
    door->listen_fd = listen_socket(o, &door->port, err);
    if (door->listen_fd < 0) {
        free(door->allowed_origins);
        free(door);
        return err->code;
    }
    *out = door;
    return LM_OK;
}

int lm_front_door_port(const lm_front_door *door) { return door->port; }

lm_status lm_front_door_start(lm_front_door *door, struct MHD_Daemon *daemon, lm_error *err) {
    door->daemon = daemon;
    for (int i = 0; i < LM_FRONT_DOOR_THREADS; i++) {
        relay_thread *t = &door->threads[i];
        t->door = door;
        t->epfd = epoll_create1(EPOLL_CLOEXEC);
        t->wake_fd = eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC);
        struct epoll_event wake = {.events = EPOLLIN, .data.ptr = &t->wake_fd};
        if (t->epfd < 0 || t->wake_fd < 0 || epoll_ctl(t->epfd, EPOLL_CTL_ADD, t->wake_fd, &wake) != 0)
            return lm_fail(err, LM_ERR_IO, "cannot start the front door (%s)", strerror(errno));
        listen_in(t, true);
        if (pthread_create(&t->thread, NULL, relay_main, t) != 0)
            return lm_fail(err, LM_ERR_INTERNAL, "cannot start the front door's threads");
        t->started = true;
    }
    return LM_OK;
}

void lm_front_door_close_listener(lm_front_door *door) {
    /* The socket stops listening at once (connection attempts are refused);
     * the threads see it and stop accepting.  Closed in lm_front_door_stop. */
    if (door && door->listen_fd >= 0) shutdown(door->listen_fd, SHUT_RDWR);
}

void lm_front_door_stop(lm_front_door *door, int flush_ms) {
    if (!door) return;
    lm_front_door_close_listener(door);
    atomic_store(&door->drain_deadline, lm_monotonic_seconds() + flush_ms / 1000.0);
    atomic_store(&door->draining, true);
    for (int i = 0; i < LM_FRONT_DOOR_THREADS; i++) {
        relay_thread *t = &door->threads[i];
        if (t->wake_fd >= 0) {
            uint64_t one = 1;
            (void)!write(t->wake_fd, &one, sizeof one);
        }
    }
    for (int i = 0; i < LM_FRONT_DOOR_THREADS; i++) {
        relay_thread *t = &door->threads[i];
        if (t->started) pthread_join(t->thread, NULL);
        if (t->epfd >= 0) close(t->epfd);
        if (t->wake_fd >= 0) close(t->wake_fd);
    }
    if (door->listen_fd >= 0) close(door->listen_fd);
    free(door->allowed_origins);
    free(door);
}
