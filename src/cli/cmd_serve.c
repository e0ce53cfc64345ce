/* loom serve [MODEL_DIR] [options]: the OpenAI-compatible HTTP server.
 * The port is bound before the weights load (a taken port fails at once);
 * once loaded, a summary of what runs is logged, then one line per request
 * and a throughput line while busy (stderr, timestamped).  SIGINT / SIGTERM
 * stop it gracefully: the listening socket closes at once, in-flight
 * requests get a grace period, the rest are cancelled with a final event,
 * exit 0. */
#include <ctype.h>
#include <errno.h>
#include <malloc.h>
#include <signal.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/resource.h>
#include <time.h>

#include "base/clock.h"
#include "base/log.h"
#include "cli/api_key.h"
#include "cli/checkpoint_dtypes.h"
#include "cli/commands.h"
#include "cli/default_model.h"
#include "cli/engine_options.h"
#include "cli/load_progress.h"
#include "cli/sampling_options.h"
#include "cli/startup_summary.h"
#include "loom.h"
#include "server/prepare_pool.h" /* the pool's limits, for the flags' ranges */
#include "server/server.h"

static const char synopsis[] =
    "usage: loom serve [MODEL_DIR] [options]\n"
    "       loom serve --config FILE --random-weights [options]\n"
    "Serves the OpenAI API (/v1/chat/completions, /v1/completions, /v1/models) and\n"
    "/health, /metrics, /version, /tokenize, /detokenize.  The model defaults to\n"
    "the bundled models/loom-tiny (or $LOOM_MODEL).\n";

/* The --served-model-name names, in order, copied (split at commas). */
#define MAX_MODEL_NAMES 16
typedef struct {
    char text[2048];
    size_t used;
    const char *names[MAX_MODEL_NAMES + 2]; /* + the folder as given and its basename */
    int n, n_listed; /* the first n_listed are --served-model-name's (or the default name) */
} model_names;

typedef struct {
    lm_server_options so;
    model_names names;
    const char *config_path, *api_key_file, *log_level;
    lm_cli_sampling_source sampling_source;
    bool random_weights, disable_log_requests, disable_log_stats;
    int max_waiting, shutdown_grace_ms;
    int responses_store_max; /* -1: not given */
    int64_t seed, max_body_bytes;
    float stats_interval_s;
} serve_args;

static bool parse_log_level(const char *value, void *field, char *message, size_t size) {
    lm_log_level level;
    if (!lm_log_level_parse(value, &level)) {
        snprintf(message, size, "expects debug, info, warning or error, got '%.40s'", value);
        return false;
    }
    *(const char **)field = value;
    return true;
}

/* Adds a name unless it is there already; false when full. */
static bool add_model_name(model_names *m, const char *name, size_t len) {
    for (int i = 0; i < m->n; i++)
        if (strlen(m->names[i]) == len && memcmp(m->names[i], name, len) == 0) return true;
    if (m->n >= (int)(sizeof m->names / sizeof m->names[0]) || m->used + len + 1 > sizeof m->text) return false;
    char *copy = m->text + m->used;
    memcpy(copy, name, len);
    copy[len] = '\0';
    m->used += len + 1;
    m->names[m->n++] = copy;
    return true;
}

static bool parse_model_names(const char *value, void *field, char *message, size_t size) {
    model_names *m = field;
    for (const char *p = value;;) {
        size_t len = strcspn(p, ",");
        if (len == 0 || len > 256) {
            snprintf(message, size, "expects names of 1 to 256 characters, comma-separated, got '%.60s'", value);
            return false;
        }
        if (m->n >= MAX_MODEL_NAMES || !add_model_name(m, p, len)) {
            snprintf(message, size, "at most %d names", MAX_MODEL_NAMES);
            return false;
        }
        if (!p[len]) return true;
        p += len + 1;
    }
}

/* The names requests may give: the --served-model-name ones (the first
 * answers carry), else the folder as given (loom-tiny for the bundled
 * model); then the folder as given and its basename, as vLLM and
 * llama-server users type them. */
static bool settle_model_names(model_names *m, const char *model_arg, const char *fallback) {
    if (m->n == 0 && !add_model_name(m, fallback, strlen(fallback))) return false;
    m->n_listed = m->n;
    if (!model_arg) return true;
    size_t len = strlen(model_arg);
    while (len > 1 && model_arg[len - 1] == '/') len--; /* "models/loom-tiny/" */
    if (!add_model_name(m, model_arg, len)) return false;
    const char *base = model_arg + len;
    while (base > model_arg && base[-1] != '/') base--;
    return add_model_name(m, base, (size_t)(model_arg + len - base));
}

#define ARG(field) offsetof(serve_args, field)
static const lm_opt serve_opts[] = {
    {"--host", LM_OPT_STRING, "ADDR", ARG(so.host), 0, 0,
     "address to listen on: IPv4, IPv6 (::1, [::]) or a host name (default\n127.0.0.1; 0.0.0.0 or :: for every "
     "interface)",
     NULL, NULL, NULL},
    {"--port", LM_OPT_INT, "N", ARG(so.port), 0, 65535, "TCP port (default 8080; 0 picks a free one)", NULL, NULL,
     NULL},
    {"--api-key", LM_OPT_STRING, "KEY", ARG(so.api_key), 0, 0,
     "require Authorization: Bearer KEY on /v1 and the tokenize routes", NULL, NULL, NULL},
    {"--api-key-file", LM_OPT_STRING, "FILE", ARG(api_key_file), 0, 0,
     "the same, the key read from FILE (first line); without either,\n$LOOM_API_KEY, else $VLLM_API_KEY, if set",
     NULL, NULL, NULL},
    {"--served-model-name|--alias|-a", LM_OPT_CUSTOM, "NAME[,NAME]", ARG(names), 0, 0,
     "the model id answers carry (default: the model folder as given); more\nnames, repeated or comma-separated, are "
     "aliases.  Requests may name\nany of them, the folder as given or its basename",
     parse_model_names, NULL, NULL},
    {"--config", LM_OPT_STRING, "FILE", ARG(config_path), 0, 0, "a config.json shape (with --random-weights)", NULL,
     NULL, NULL},
    {"--random-weights", LM_OPT_FLAG, NULL, ARG(random_weights), 0, 0,
     "random weights, no tokenizer (token-id prompts only)", NULL, NULL, NULL},
    {"--seed", LM_OPT_INT64, "N", ARG(seed), 0, 1LL << 62,
     "seed the samples of requests without their own seed (reproducible runs)", NULL, NULL, NULL},
    {"--max-waiting", LM_OPT_INT, "N", ARG(max_waiting), 1, 1 << 20, "queued requests before 503 (default 1024)", NULL,
     NULL, NULL},
    {"--max-body-bytes", LM_OPT_INT64, "N", ARG(max_body_bytes), 1024, 1LL << 30,
     "largest request body (default 32 MiB, room for base64 images)", NULL, NULL, NULL},
    {"--shutdown-grace-ms", LM_OPT_INT, "N", ARG(shutdown_grace_ms), 0, 3600000,
     "time in-flight requests get at shutdown (default 5000); then streams end\nwith finish_reason \"abort\", others "
     "get 503",
     NULL, NULL, NULL},
    {"--max-connections", LM_OPT_INT, "N", ARG(so.max_connections), 4, 1 << 20,
     "open connections at once; more are closed (default 4096)", NULL, NULL, NULL},
    {"--prepare-threads", LM_OPT_INT, "N", ARG(so.prepare_threads), 1, LM_PREPARE_MAX_THREADS,
     "threads that prepare requests (parse, render the template, tokenize,\ncompile grammars, submit) off the HTTP "
     "threads (default 4)", NULL, NULL, NULL},
    {"--prepare-queue", LM_OPT_INT, "N", ARG(so.prepare_queue), 1, LM_PREPARE_MAX_QUEUE,
     "requests that may wait for a preparation thread; more get 503 with\nRetry-After (default 1024)", NULL, NULL,
     NULL},
    {"--timeout-keep-alive", LM_OPT_INT, "S", ARG(so.timeout_keep_alive_s), 1, 86400,
     "close a connection idle for S seconds (default 5)", NULL, NULL, NULL},
    {"--timeout-header", LM_OPT_INT, "S", ARG(so.timeout_header_s), 1, 86400,
     "a request's headers must arrive within S seconds (default 10)", NULL, NULL, NULL},
    {"--timeout-body", LM_OPT_INT, "S", ARG(so.timeout_body_s), 1, 86400,
     "a request's body must arrive within S seconds (default 60)", NULL, NULL, NULL},
    {"--allowed-origins", LM_OPT_STRING, "LIST", ARG(so.allowed_origins), 0, 0,
     "CORS: \"*\" or comma-separated origins allowed to call the API from a\nbrowser (default: none; OPTIONS gets "
     "405)",
     NULL, NULL, NULL},
    {"--allowed-local-media-path", LM_OPT_STRING, "DIR", ARG(so.allowed_local_media_path), 0, 0,
     "image parts may also name files inside DIR (file:///PATH, a path, or a\npath relative to DIR); symlinks and .. "
     "that lead outside are refused.\nRemote URLs are never fetched",
     NULL, NULL, NULL},
    {"--responses-store", LM_OPT_STRING, "PATH", ARG(so.responses_store.path), 0, 0,
     "keep stored Responses (store: true, the default) in the SQLite file PATH,\ncreated if missing, so they "
     "survive restarts (default: in memory)",
     NULL, NULL, NULL},
    {"--responses-store-max", LM_OPT_INT, "N", ARG(responses_store_max), 0, 10000000,
     "stored responses kept; past it the oldest go (default 10000; 0 keeps\nnone: store is ignored)", NULL, NULL,
     NULL},
    {"--responses-store-max-bytes", LM_OPT_INT64, "N", ARG(so.responses_store.max_bytes), 4096, 1LL << 40,
     "bytes of stored responses and their inputs kept; past it the oldest go\n(default 256 MiB)", NULL, NULL, NULL},
    {"--responses-store-ttl", LM_OPT_INT64, "S", ARG(so.responses_store.ttl_s), 1, 100LL * 365 * 86400,
     "seconds a stored response is kept (default 2592000: 30 days, as OpenAI)", NULL, NULL, NULL},
};

static const lm_opt log_opts[] = {
    {"--log-level", LM_OPT_CUSTOM, "LEVEL", ARG(log_level), 0, 0,
     "debug, info (default), warning or error; lines go to stderr, timestamped", parse_log_level,
     "debug|info|warning|error", NULL},
    {"--disable-log-requests", LM_OPT_FLAG, NULL, ARG(disable_log_requests), 0, 0,
     "no line per request (id, route, status, tokens, time to first token,\nspeed, finish reason)", NULL, NULL, NULL},
    {"--disable-log-stats", LM_OPT_FLAG, NULL, ARG(disable_log_stats), 0, 0,
     "no throughput line while busy (tokens/s, running, waiting, KV use)", NULL, NULL, NULL},
    {"--log-stats-interval", LM_OPT_FLOAT, "S", ARG(stats_interval_s), 0.1, 86400,
     "seconds between throughput lines (default 10)", NULL, NULL, NULL},
};

/* The key: the file's first line without surrounding whitespace. */
static bool read_key_file(const char *path, char *buf, size_t size) {
    FILE *f = fopen(path, "r");
    if (!f) {
        fprintf(stderr, "loom serve: --api-key-file %s: %s\n", path, strerror(errno));
        return false;
    }
    bool ok = fgets(buf, (int)size, f) != NULL;
    fclose(f);
    size_t n = ok ? strlen(buf) : 0;
    while (n > 0 && isspace((unsigned char)buf[n - 1])) buf[--n] = 0;
    size_t skip = 0;
    while (skip < n && isspace((unsigned char)buf[skip])) skip++;
    memmove(buf, buf + skip, n - skip + 1);
    if (!buf[0] || !ok) {
        fprintf(stderr, "loom serve: --api-key-file %s: no key on its first line\n", path);
        return false;
    }
    return true;
}

/* Each connection costs three descriptors (the client's socket and the two
 * ends of the socketpair between loom's front door and libmicrohttpd):
 * raise the soft limit toward the hard one so that --max-connections fits,
 * or lower the connection limit to what does. */
#define FDS_PER_CONNECTION 3
#define FDS_RESERVED 320 /* the server's own files, epoll sets, the model's shards */
static bool raise_fd_limit(const lm_log *log, lm_server_options *so) {
    long conns = so->max_connections > 0 ? so->max_connections : 4096;
    long want = conns * FDS_PER_CONNECTION + FDS_RESERVED;
    struct rlimit rl;
    if (getrlimit(RLIMIT_NOFILE, &rl) != 0) return true;
    if ((long)rl.rlim_cur < want && rl.rlim_cur != RLIM_INFINITY) {
        rlim_t target = rl.rlim_max == RLIM_INFINITY || (long)rl.rlim_max > want ? (rlim_t)want : rl.rlim_max;
        struct rlimit raised = {target, rl.rlim_max};
        if (setrlimit(RLIMIT_NOFILE, &raised) == 0) rl.rlim_cur = target;
    }
    if (rl.rlim_cur != RLIM_INFINITY && (long)rl.rlim_cur < want) {
        long fit = ((long)rl.rlim_cur - FDS_RESERVED) / FDS_PER_CONNECTION;
        if (fit < 4) {
            lm_log_printf(log, LM_LOG_ERROR,
                    "the descriptor limit (%ld, hard limit %ld) is too low to serve: each connection "
                    "needs %d; raise it with ulimit -n",
                    (long)rl.rlim_cur, (long)rl.rlim_max, FDS_PER_CONNECTION);
            return false;
        }
        lm_log_printf(log, LM_LOG_WARNING, "descriptor limit %ld (%d per connection): serving at most %ld connections",
                (long)rl.rlim_cur, FDS_PER_CONNECTION, fit);
        so->max_connections = (int)fit;
    }
    return true;
}

/* The defaults of the sampling fields a request leaves out, and the
 * summary's phrase for them: the values (those of loom run and chat too),
 * then where they come from. */
static lm_status load_generation_defaults(const serve_args *a, const char *model_dir, lm_generation_defaults *out,
                                          char *summary, size_t summary_size, lm_error *err) {
    char why[300];
    lm_status st = lm_cli_load_sampling_defaults(&a->sampling_source, model_dir, out, why, sizeof why, err);
    if (st != LM_OK) return st;
    loom_sampling effective;
    lm_cli_default_sampling(out, &effective);
    char values[200];
    lm_cli_describe_sampling_values(&effective, values, sizeof values);
    snprintf(summary, summary_size, "%.200s (%.300s; a request's own fields win)", values, why);
    return LM_OK;
}

/* "http://[::1]:8080" */
static void url_of(const char *host, int port, char *out, size_t size) {
    bool v6 = strchr(host, ':') && host[0] != '[';
    snprintf(out, size, "http://%s%s%s:%d", v6 ? "[" : "", host, v6 ? "]" : "", port);
}

int cmd_serve_main(int argc, char **argv) {
    serve_args a = {.so = {.host = "127.0.0.1", .port = 8080},
                    .max_body_bytes = (int64_t)LM_DEFAULT_MAX_BODY_BYTES,
                    .shutdown_grace_ms = 5000,
                    .responses_store_max = -1,
                    .stats_interval_s = 10};
    lm_cli_engine_settings settings;
    lm_cli_spec cli;
    lm_cli_spec_init(&cli, "serve", synopsis, &settings, true);
    LM_CLI_SPEC_ADD(&cli, "Server", serve_opts, &a);
    LM_CLI_SPEC_ADD(&cli, "Logging", log_opts, &a);
    lm_cli_spec_add_sampling_source(&cli, &a.sampling_source);
    int parsed = lm_cli_parse(&cli, argc, argv);
    if (parsed >= 0) return parsed;
    lm_server_options so = a.so;
    so.max_body_bytes = (size_t)a.max_body_bytes;
    so.keep_no_responses = a.responses_store_max == 0;
    if (a.responses_store_max > 0) so.responses_store.max_responses = a.responses_store_max;
    loom_engine_options *eo = &settings.engine;
    if (a.random_weights != !!a.config_path)
        return lm_cli_usage_error("serve", "--random-weights and --config FILE go together");
    if (eo->model_dir && a.config_path)
        return lm_cli_usage_error("serve", "give a model folder or --config FILE --random-weights, not both");
    if (so.api_key && a.api_key_file) return lm_cli_usage_error("serve", "give --api-key or --api-key-file, not both");
    eo->random_weights = a.random_weights;
    eo->config_path = a.config_path;
    eo->seed = (uint64_t)a.seed;
    if (a.max_waiting) eo->max_waiting = a.max_waiting;
    so.images_off = eo->max_image_pixels == -1;
    lm_log_level level = LM_LOG_INFO;
    if (a.log_level) lm_log_level_parse(a.log_level, &level);
    lm_log log = {.level = level, .out = stderr, .source = "loom serve"};
    so.log = &log;
    so.log_requests = !a.disable_log_requests;
    so.stats_interval_s = a.disable_log_stats ? 0 : a.stats_interval_s;

    char key_buf[4096], key_file_flag[4200];
    const char *flag_key = so.api_key, *flag_name = "--api-key";
    if (a.api_key_file) {
        if (!read_key_file(a.api_key_file, key_buf, sizeof key_buf)) return 2;
        flag_key = key_buf;
        snprintf(key_file_flag, sizeof key_file_flag, "--api-key-file %s", a.api_key_file);
        flag_name = key_file_flag;
    }
    lm_cli_api_key api_key;
    if (lm_cli_resolve_api_key("serve", flag_key, flag_name, &api_key) != 0) return 2;
    so.api_key = api_key.key;
    char model_buf[4096], config_path[4200], why[200], message[512];
    bool default_model = !eo->model_dir && !eo->random_weights;
    const char *given_model = eo->model_dir; /* as typed: a name requests may use */
    lm_error err = {0};
    if (!eo->random_weights && lm_cli_model_dir(eo->model_dir, NULL, model_buf, sizeof model_buf, &eo->model_dir, &err) != LM_OK) {
        fprintf(stderr, "loom serve: %s\n", err.message);
        return 1;
    }
    if (eo->random_weights) snprintf(config_path, sizeof config_path, "%s", eo->config_path);
    else snprintf(config_path, sizeof config_path, "%s/config.json", eo->model_dir);
    if (lm_cli_resolve_model_len("serve", &settings, config_path, why, sizeof why) != 0) return 2;
    if (!raise_fd_limit(&log, &so)) return 1;
    if (lm_cli_threads_exceed_cores(&settings, message, sizeof message)) lm_log_printf(&log, LM_LOG_WARNING, "%s", message);
    so.max_model_len = eo->max_model_len;
    if (!settle_model_names(&a.names, eo->random_weights ? NULL : given_model,
                            eo->random_weights ? "loom-random" : default_model ? LM_DEFAULT_MODEL_NAME : given_model)) {
        lm_log_printf(&log, LM_LOG_ERROR, "--served-model-name: too many names");
        return 2;
    }
    so.served_model_name = a.names.names[0];
    so.model_aliases = a.names.names + 1;
    so.n_model_aliases = a.names.n - 1;
    so.n_listed_aliases = a.names.n_listed - 1;

    /* Request bodies and their parses are megabytes, freed when a request
     * ends: a fixed mmap threshold gives every block of 256 KiB or more back
     * to the system at free.  glibc's default threshold rises to the size
     * of the last freed mapping (up to 32 MiB), after which such blocks stay
     * in the heap: a burst of 12 x 30 MiB bodies left 80-130 MiB resident. */
    mallopt(M_MMAP_THRESHOLD, 256 << 10);

    /* Signals are taken by sigwait below; every thread started from here on
     * inherits the block. */
    sigset_t stop_signals;
    sigemptyset(&stop_signals);
    sigaddset(&stop_signals, SIGINT);
    sigaddset(&stop_signals, SIGTERM);
    pthread_sigmask(SIG_BLOCK, &stop_signals, NULL);
    signal(SIGPIPE, SIG_IGN);

    /* The port first: a taken one fails now, before any weights are read. */
    lm_server_listener *listener = NULL;
    if (lm_server_listen(&so, &listener, &err) != LM_OK) {
        lm_log_printf(&log, LM_LOG_ERROR, "%s", err.message);
        return 1;
    }
    lm_generation_defaults generation_defaults;
    char sampling_why[1024];
    if (load_generation_defaults(&a, eo->random_weights ? NULL : eo->model_dir, &generation_defaults, sampling_why,
                                 sizeof sampling_why, &err) != LM_OK) {
        lm_log_printf(&log, LM_LOG_ERROR, "%s", err.message);
        lm_server_listener_close(listener);
        return 1;
    }
    so.generation_defaults = &generation_defaults;
    /* Served while the weights load: /health says "loading" (503) until the
     * model is handed over, as orchestrators expect. */
    double started = lm_monotonic_seconds();
    lm_server *server = NULL;
    if (lm_server_start(&so, listener, &server, &err) != LM_OK) {
        lm_log_printf(&log, LM_LOG_ERROR, "%s", err.message);
        return 1;
    }
    const lm_responses_store_options *rs = &so.responses_store;
    if (so.keep_no_responses)
        lm_log_printf(&log, LM_LOG_INFO, "stored Responses: none kept (--responses-store-max 0)");
    else
        lm_log_printf(&log, LM_LOG_INFO, "stored Responses: %s%s, at most %d, %lld MiB, %lld s each",
                      rs->path ? "in " : "in memory", rs->path ? rs->path : "",
                      rs->max_responses > 0 ? rs->max_responses : LM_RESPONSES_STORE_DEFAULT_MAX,
                      (long long)((rs->max_bytes > 0 ? rs->max_bytes : LM_RESPONSES_STORE_DEFAULT_MAX_BYTES) >> 20),
                      (long long)(rs->ttl_s > 0 ? rs->ttl_s : LM_RESPONSES_STORE_DEFAULT_TTL_S));
    char url[300];
    url_of(so.host, lm_server_port(server), url, sizeof url);
    lm_log_printf(&log, LM_LOG_INFO, "loading %s; port %d is open meanwhile (/health answers 503 until it is ready)",
                  eo->random_weights ? config_path : eo->model_dir, lm_server_port(server));
    loom_engine *engine = NULL;
    lm_cli_load_result loaded;
    if (lm_cli_engine_load(eo, stderr, &engine, message, sizeof message, &loaded) != LOOM_OK) {
        lm_log_printf(&log, LM_LOG_ERROR, "%s", message);
        lm_server_stop(server, 0);
        return 1;
    }
    lm_tokenizer *tokenizer = NULL;
    lm_chat_template *chat_template = NULL;
    if (!eo->random_weights) {
        if (lm_tokenizer_load(eo->model_dir, &tokenizer, &err) != LM_OK) {
            lm_log_printf(&log, LM_LOG_WARNING, "%s (serving without a tokenizer: token-id prompts only)", err.message);
            tokenizer = NULL;
        } else if (lm_chat_template_load_dir(eo->model_dir, &chat_template, NULL, NULL, &err) != LM_OK) {
            lm_log_printf(&log, LM_LOG_WARNING, "%s (chat completions are not available)", err.message);
            chat_template = NULL;
        }
    }
    loom_engine_info info;
    loom_engine_describe(engine, &info);
    lm_checkpoint_summary ck = {0};
    if (!eo->random_weights) lm_cli_checkpoint_summary(eo->model_dir, &ck, &err);
    char dtypes[384];
    snprintf(dtypes, sizeof dtypes, "%s%s%s", eo->random_weights ? "random bf16" : ck.dtypes,
             info.weights_made[0] ? "; " : "", info.weights_made);
    lm_startup_facts facts = {.model = eo->random_weights ? config_path : eo->model_dir,
                              .weight_dtypes = dtypes,
                              .load_seconds = loaded.seconds,
                              .load_detail = loaded.summary,
                              .engine = &info,
                              .model_len_why = why,
                              .speculative_asked = eo->speculative_tokens,
                              .sampling_defaults = sampling_why};
    lm_cli_log_startup(&log, &facts);
    if (lm_server_set_ready(server, engine, tokenizer, chat_template, &err) != LM_OK) {
        lm_log_printf(&log, LM_LOG_ERROR, "%s", err.message);
        lm_server_stop(server, 0);
        lm_chat_template_free(chat_template);
        if (tokenizer) lm_tokenizer_free(tokenizer);
        loom_engine_destroy(engine);
        return 1;
    }
    if (api_key.key)
        lm_log_printf(&log, LM_LOG_INFO, "API key required on every route but /health, /metrics and /version (from %s)",
                      api_key.source);
    else
        lm_log_printf(&log, LM_LOG_INFO, "no API key: every client is served (--api-key, $%s or $%s sets one)",
                      LM_CLI_API_KEY_ENV, LM_CLI_API_KEY_VLLM_ENV);
    char aliases[600] = "";
    for (int i = 0, n = 0; i < so.n_model_aliases && n >= 0 && (size_t)n < sizeof aliases; i++)
        n += snprintf(aliases + n, sizeof aliases - (size_t)n, "%s%s", i ? ", " : "; requests may also name ",
                      so.model_aliases[i]);
    lm_log_printf(&log, LM_LOG_INFO, "ready: serving %s on %s (%.1f s after start)%s", so.served_model_name, url,
                  lm_monotonic_seconds() - started, aliases);
    int sig = 0;
    sigwait(&stop_signals, &sig);
    lm_log_printf(&log, LM_LOG_INFO, "%s: shutting down", sig == SIGINT ? "SIGINT" : "SIGTERM");
    lm_server_stop(server, a.shutdown_grace_ms);
    loom_engine_destroy(engine);
    lm_chat_template_free(chat_template);
    if (tokenizer) lm_tokenizer_free(tokenizer);
    lm_log_printf(&log, LM_LOG_INFO, "stopped");
    return 0;
}
