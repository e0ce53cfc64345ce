/* The front door of `loom serve`: loom's own listening socket, accept
 * loop and relay.  Each client connection is paired with one end of a
 * socketpair handed to libmicrohttpd (MHD_add_connection, with the client's
 * address); the relay pumps bytes between the client and the other end,
 * checking the framing of each request (request_framing.h) before MHD sees
 * it and answering bad framing itself with an OpenAI-shaped JSON error.
 * Responses pass through untouched.
 *
 * Threads: LM_FRONT_DOOR_THREADS relay threads, each with its own epoll
 * (edge-triggered) holding the listening socket (EPOLLEXCLUSIVE: each
 * accepts for itself) and the connections it accepted. */
#ifndef LOOM_SERVER_FRONT_DOOR_H
#define LOOM_SERVER_FRONT_DOOR_H

#include <microhttpd.h>
#include <stdint.h>

#include "base/error.h"
#include "base/log.h"

#define LM_FRONT_DOOR_THREADS 2

typedef struct {
    const char *host;            /* IPv4 / IPv6 address (brackets allowed) or a host name */
    int port;                    /* 0: any free port */
    int max_connections;         /* more are answered 503 at accept and closed */
    int backlog;                 /* listen(2) backlog */
    int timeout_keep_alive_s;    /* silence allowed while no request is under way */
    uint64_t max_body_bytes;     /* chunked bodies larger than this get 413 */
    const char *allowed_origins; /* CORS on the front door's own errors (NULL: none) */
    const lm_log *log;           /* where accept failures are said (NULL: stderr) */
} lm_front_door_options;

typedef struct lm_front_door lm_front_door;

/* Binds and listens (nothing is accepted before lm_front_door_start). */
lm_status lm_front_door_listen(const lm_front_door_options *options, lm_front_door **out, lm_error *err);
int lm_front_door_port(const lm_front_door *door);
/* Starts accepting and relaying to the daemon (started with
 * MHD_USE_NO_LISTEN_SOCKET | MHD_USE_ITC). */
lm_status lm_front_door_start(lm_front_door *door, struct MHD_Daemon *daemon, lm_error *err);
/* Shutdown's first step: new connections are refused from now on; the
 * open ones carry on. */
void lm_front_door_close_listener(lm_front_door *door);
/* After the daemon stopped (its ends are closed): lets the relay write
 * what it still holds for up to flush_ms, then closes everything, joins
 * the threads and frees the door.  Also frees a door never started. */
void lm_front_door_stop(lm_front_door *door, int flush_ms);

#endif
