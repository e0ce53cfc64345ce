/* loom health [--host ADDR] [--port N] [--timeout S]: asks a running loom
 * serve for GET /health and exits 0 when it answers 200, 1 otherwise with
 * one line on stderr.  A probe for container HEALTHCHECKs and supervisors
 * that needs nothing besides the loom binary (the images have no curl). */
#include <errno.h>
#include <netdb.h>
#include <stddef.h>
#include <stdio.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/time.h>
#include <unistd.h>

#include "base/error.h"
#include "cli/commands.h"
#include "cli/options.h"

static const char synopsis[] =
    "usage: loom health [--host ADDR] [--port N] [--timeout S]\n"
    "Asks the loom server at ADDR:N for GET /health and exits 0 when it answers\n"
    "200, 1 otherwise (refused, timed out, starting, shutting down), saying why on\n"
    "stderr.  For container HEALTHCHECKs and service supervisors.\n";

typedef struct {
    const char *host;
    int port;
    float timeout;
} options;

#define OPT(field) offsetof(options, field)
static const lm_opt opts[] = {
    {"--host", LM_OPT_STRING, "ADDR", OPT(host), 0, 0, "the server's address (default 127.0.0.1)", NULL, NULL, NULL},
    {"--port", LM_OPT_INT, "N", OPT(port), 1, 65535, "its port (default 8080)", NULL, NULL, NULL},
    {"--timeout", LM_OPT_FLOAT, "S", OPT(timeout), 0.1, 3600,
     "seconds for the connection and the answer together (default 5)", NULL, NULL, NULL},
};

/* A connected socket to host:port whose sends and receives give up after
 * `timeout` seconds (the connect too), or -1 with err set. */
static int connect_with_timeout(const char *host, int port, float timeout, lm_error *err) {
    char service[8];
    snprintf(service, sizeof service, "%d", port);
    struct addrinfo hints = {.ai_family = AF_UNSPEC, .ai_socktype = SOCK_STREAM}, *found;
    int gai = getaddrinfo(host, service, &hints, &found);
    if (gai != 0) {
        lm_fail(err, LM_ERR_IO, "%s: %s", host, gai_strerror(gai));
        return -1;
    }
    struct timeval tv = {.tv_sec = (time_t)timeout, .tv_usec = (suseconds_t)((timeout - (float)(time_t)timeout) * 1e6f)};
    int fd = -1, e = 0;
    for (struct addrinfo *a = found; a && fd < 0; a = a->ai_next) {
        fd = socket(a->ai_family, a->ai_socktype | SOCK_CLOEXEC, a->ai_protocol);
        if (fd < 0) {
            e = errno;
            continue;
        }
        setsockopt(fd, SOL_SOCKET, SO_SNDTIMEO, &tv, sizeof tv); /* on Linux this bounds connect too */
        setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof tv);
        if (connect(fd, a->ai_addr, a->ai_addrlen) != 0) {
            e = errno;
            close(fd);
            fd = -1;
        }
    }
    freeaddrinfo(found);
    if (fd < 0) lm_fail(err, LM_ERR_IO, "cannot connect to %s port %d: %s", host, port, strerror(e));
    return fd;
}

/* The status code of the answer to GET /health, or -1 with err set. */
static int health_status(const options *o, lm_error *err) {
    int fd = connect_with_timeout(o->host, o->port, o->timeout, err);
    if (fd < 0) return -1;
    char request[300];
    int len = snprintf(request, sizeof request, "GET /health HTTP/1.1\r\nHost: %.200s\r\nConnection: close\r\n\r\n",
                       o->host);
    char head[64] = {0};
    size_t got = 0;
    bool sent = send(fd, request, (size_t)len, MSG_NOSIGNAL) == len;
    while (sent && got < sizeof head - 1 && !memchr(head, '\n', got)) {
        ssize_t n = recv(fd, head + got, sizeof head - 1 - got, 0);
        if (n <= 0) break;
        got += (size_t)n;
    }
    int e = errno;
    close(fd);
    int status = 0;
    if (!sent || sscanf(head, "HTTP/1.%*1[01] %3d", &status) != 1) {
        lm_fail(err, LM_ERR_IO, "%s port %d: %s", o->host, o->port,
                got ? "the answer is not HTTP" : (e == EAGAIN || e == EWOULDBLOCK) ? "no answer in time" : "no answer");
        return -1;
    }
    return status;
}

int cmd_health_main(int argc, char **argv) {
    options o = {.host = "127.0.0.1", .port = 8080, .timeout = 5};
    lm_cli_spec spec = {.command = "health", .synopsis = synopsis};
    LM_CLI_SPEC_ADD(&spec, "Options", opts, &o);
    int parsed = lm_cli_parse(&spec, argc, argv);
    if (parsed >= 0) return parsed;
    lm_error err = {0};
    int status = health_status(&o, &err);
    if (status == 200) return 0;
    if (status > 0) fprintf(stderr, "loom health: %s port %d answers %d\n", o.host, o.port, status);
    else fprintf(stderr, "loom health: %s\n", err.message);
    return 1;
}
