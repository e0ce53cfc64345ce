/* loom serve [--model DIR] [--host 127.0.0.1] [--port 8080] [--api-key KEY]
 *            [--served-model-name NAME]
 * The OpenAI-compatible HTTP server.  SIGINT / SIGTERM stop it gracefully:
 * the listening socket closes at once, in-flight requests get a grace
 * period, the rest are cancelled with a final event, exit 0. */
#include <ctype.h>
#include <errno.h>
#include <getopt.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>

#include "cli/cli_common.h"
#include "cli/prefix_cache_flags.h"
#include "cli/commands.h"
#include "cli/default_model.h"
#include "loom.h"
#include "server/server.h"

static void usage(FILE *f) {
    fprintf(f,
            "usage: loom serve [--model DIR] [options]\n"
            "       loom serve --config FILE --random-weights [options]\n"
            "Serves the OpenAI API (/v1/chat/completions, /v1/completions, /v1/models) and\n"
            "/health, /metrics, /tokenize, /detokenize.\n\n"
            "  --model DIR              Hugging Face checkpoint folder (default: the bundled\n"
            "                           models/loom-tiny, or $LOOM_MODEL)\n"
            "  --config FILE            a config.json shape (with --random-weights)\n"
            "  --random-weights         random weights, no tokenizer (token-id prompts only)\n"
            "  --host ADDR              IPv4 address to listen on (default 127.0.0.1)\n"
            "  --port N                 TCP port (default 8080; 0 picks a free one)\n"
            "  --api-key KEY            require Authorization: Bearer KEY on /v1 and tokenize routes\n"
            "  --api-key-file FILE      the same, the key read from FILE (first line); without\n"
            "                           either, the LOOM_API_KEY environment variable if set\n"
            "  --served-model-name NAME the model id clients use (default: the --model value,\n"
            "                           loom-tiny for the bundled model)\n"
            "  --max-model-len N        prompt + output tokens per sequence\n"
            "  --max-num-seqs N         sequences decoding at once (default 64)\n"
            "  --max-waiting N          queued requests before 503 (default 1024)\n"
            "  --kv-cache-tokens N      KV-cache pool size in tokens\n"
            "  --gpu-memory-utilization F  with --device cuda: the fraction of the card the\n"
            "                           engine may hold, weights included; the KV pool gets the rest\n"
            "  --max-body-bytes N       largest request body (default 32 MiB, room for base64\n"
            "                           images)\n"
            "  --shutdown-grace-ms N    time in-flight requests get at shutdown (default 5000);\n"
            "                           then streams end with finish_reason \"abort\", others get 503\n"
            "  --max-connections N      open connections at once; more are closed (default 4096)\n"
            "  --timeout-keep-alive S   close a connection idle for S seconds (default 5)\n"
            "  --timeout-header S       a request's headers must arrive within S seconds (default 10)\n"
            "  --timeout-body S         a request's body must arrive within S seconds (default 60)\n"
            "  --allowed-origins LIST   CORS: \"*\" or comma-separated origins allowed to call the\n"
            "                           API from a browser (default: none; OPTIONS gets 405)\n"
            "  --threads N              CPU threads (default: all cores)\n"
            "  --backend NAME           cpu (default), ref (plain reference kernels) or cuda\n"
            "  --device NAME            the same (vLLM's spelling)\n"
            "  --speculative-tokens K   draft K tokens per step with the model's MTP head (0-8,\n"
            "                           default 0); requests may opt out with \"speculative\": false\n"
            "  --mtp-norms MODE         MTP head norm weights: auto (detect), zero-centred, shifted\n"
            "Images (models with a vision tower; chat image_url parts, data: URIs):\n"
            "  --allowed-local-media-path DIR\n"
            "                           image parts may also name files inside DIR (file:///PATH,\n"
            "                           a path, or a path relative to DIR); symlinks and .. that\n"
            "                           lead outside are refused.  Remote URLs are never fetched\n"
            "  --max-image-pixels N     most pixels an image keeps after resizing (default\n"
            "                           1048576; 1024 .. 268435456); -1 turns images off\n"
            "  --image-cache-mib N      vision-tower outputs kept for reuse (default 256; 0: off)\n"
            "Prefix caching:\n"
            LM_CLI_PREFIX_CACHE_USAGE);
}

/* The key: the file's first line without surrounding whitespace. */
static bool read_key_file(const char *path, char *buf, size_t size) {
    FILE *f = fopen(path, "r");
    if (!f) {
        fprintf(stderr, "loom: --api-key-file %s: %s\n", path, strerror(errno));
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
        fprintf(stderr, "loom: --api-key-file %s: no key on its first line\n", path);
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
static bool raise_fd_limit(lm_server_options *so) {
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
            fprintf(stderr,
                    "loom: the descriptor limit (%ld, hard limit %ld) is too low to serve: each connection "
                    "needs %d; raise it with ulimit -n\n",
                    (long)rl.rlim_cur, (long)rl.rlim_max, FDS_PER_CONNECTION);
            return false;
        }
        fprintf(stderr, "loom: descriptor limit %ld (%d per connection): serving at most %ld connections\n",
                (long)rl.rlim_cur, FDS_PER_CONNECTION, fit);
        so->max_connections = (int)fit;
    }
    return true;
}

int cmd_serve_main(int argc, char **argv) {
    static const struct option options[] = {
        {"model", required_argument, 0, 'm'},          {"config", required_argument, 0, 'c'},
        {"random-weights", no_argument, 0, 'r'},       {"host", required_argument, 0, 'H'},
        {"port", required_argument, 0, 'p'},           {"api-key", required_argument, 0, 'k'},
        {"served-model-name", required_argument, 0, 'n'}, {"max-model-len", required_argument, 0, 'L'},
        {"max-num-seqs", required_argument, 0, 'S'},   {"max-waiting", required_argument, 0, 'W'},
        {"kv-cache-tokens", required_argument, 0, 'K'}, {"gpu-memory-utilization", required_argument, 0, 0x100}, {"max-body-bytes", required_argument, 0, 'B'},
        {"shutdown-grace-ms", required_argument, 0, 'g'}, {"threads", required_argument, 0, 't'},
        {"backend", required_argument, 0, 'E'}, {"device", required_argument, 0, 'E'},
        {"api-key-file", required_argument, 0, 'F'},   {"max-connections", required_argument, 0, 'C'},
        {"timeout-keep-alive", required_argument, 0, 'A'}, {"timeout-header", required_argument, 0, 'T'},
        {"timeout-body", required_argument, 0, 'Y'},   {"allowed-origins", required_argument, 0, 'O'},
        {"speculative-tokens", required_argument, 0, 'D'}, {"mtp-norms", required_argument, 0, 'N'},
        {"allowed-local-media-path", required_argument, 0, 'M'}, {"max-image-pixels", required_argument, 0, 'P'},
        {"image-cache-mib", required_argument, 0, 'I'},
        {"help", no_argument, 0, 'h'},                 LM_CLI_PREFIX_CACHE_OPTIONS, {0, 0, 0, 0},
    };
    lm_server_options so = {.host = "127.0.0.1", .port = 8080, .max_body_bytes = LM_DEFAULT_MAX_BODY_BYTES};
    loom_engine_options eo;
    loom_engine_options_default(&eo);
    long v, grace_ms = 5000;
    const char *api_key_file = NULL;
    int opt;
    optind = 1;
    while ((opt = getopt_long(argc, argv, "", options, NULL)) != -1) {
        switch (opt) {
        case 'm': eo.model_dir = optarg; break;
        case 'c': eo.config_path = optarg; break;
        case 'r': eo.random_weights = true; break;
        case 'H': so.host = optarg; break;
        case 'p': if (!lm_cli_parse_int("--port", optarg, 0, 65535, &v)) return 2; so.port = (int)v; break;
        case 'k': so.api_key = optarg; break;
        case 'n': so.served_model_name = optarg; break;
        case 'L': if (!lm_cli_parse_int("--max-model-len", optarg, 2, 1 << 24, &v)) return 2; eo.max_model_len = (int)v; break;
        case 'S': if (!lm_cli_parse_int("--max-num-seqs", optarg, 1, 4096, &v)) return 2; eo.max_running = (int)v; break;
        case 'W': if (!lm_cli_parse_int("--max-waiting", optarg, 1, 1 << 20, &v)) return 2; eo.max_waiting = (int)v; break;
        case 0x100:
            if (!lm_cli_parse_float("--gpu-memory-utilization", optarg, 0.01, 1, &eo.gpu_memory_utilization)) return 2;
            break;
        case 'K': if (!lm_cli_parse_int("--kv-cache-tokens", optarg, 1, 1L << 30, &v)) return 2; eo.kv_cache_tokens = v; break;
        case 'B': if (!lm_cli_parse_int("--max-body-bytes", optarg, 1024, 1L << 30, &v)) return 2; so.max_body_bytes = (size_t)v; break;
        case 'g': if (!lm_cli_parse_int("--shutdown-grace-ms", optarg, 0, 3600000, &v)) return 2; grace_ms = v; break;
        case 't': if (!lm_cli_parse_int("--threads", optarg, 1, 1024, &v)) return 2; eo.threads = (int)v; break;
        case 'E': if (!lm_cli_parse_backend(optarg, &eo.backend)) return 2; break;
        case 'F': api_key_file = optarg; break;
        case 'C': if (!lm_cli_parse_int("--max-connections", optarg, 4, 1 << 20, &v)) return 2; so.max_connections = (int)v; break;
        case 'A': if (!lm_cli_parse_int("--timeout-keep-alive", optarg, 1, 86400, &v)) return 2; so.timeout_keep_alive_s = (int)v; break;
        case 'T': if (!lm_cli_parse_int("--timeout-header", optarg, 1, 86400, &v)) return 2; so.timeout_header_s = (int)v; break;
        case 'Y': if (!lm_cli_parse_int("--timeout-body", optarg, 1, 86400, &v)) return 2; so.timeout_body_s = (int)v; break;
        case 'O': so.allowed_origins = optarg; break;
        case 'D': if (!lm_cli_parse_int("--speculative-tokens", optarg, 0, 8, &v)) return 2; eo.speculative_tokens = (int)v; break;
        case 'M': so.allowed_local_media_path = optarg; break;
        case 'P':
            if (!lm_cli_parse_int("--max-image-pixels", optarg, -1, 1L << 28, &v)) return 2;
            if (v != -1 && v < 1024) {
                fprintf(stderr, "loom: --max-image-pixels must be -1 (images off) or 1024 .. 268435456\n");
                return 2;
            }
            eo.max_image_pixels = v;
            so.images_off = v == -1;
            break;
        case 'I':
            if (!lm_cli_parse_int("--image-cache-mib", optarg, 0, 1L << 20, &v)) return 2;
            eo.image_cache_bytes = v == 0 ? -1 : (int64_t)v << 20; /* the engine's -1: no cache */
            break;
        case 'N': {
            lm_mtp_norms norms;
            if (!lm_cli_parse_mtp_norms(optarg, &norms)) return 2;
            eo.mtp_norms = (loom_mtp_norms)norms;
            break;
        }
        case 'h': usage(stdout); return 0;
        default:
            if (lm_cli_prefix_cache_option(opt, optarg, &eo) > 0) break;
            usage(stderr);
            return 2;
        }
    }
    if (optind != argc || (eo.random_weights != !!eo.config_path) || (eo.model_dir && eo.config_path)) {
        usage(stderr);
        return 2;
    }
    char key_buf[4096];
    if (so.api_key && api_key_file) {
        fprintf(stderr, "loom: give --api-key or --api-key-file, not both\n");
        return 2;
    }
    if (api_key_file) {
        if (!read_key_file(api_key_file, key_buf, sizeof key_buf)) return 2;
        so.api_key = key_buf;
    } else if (!so.api_key) {
        const char *env = getenv("LOOM_API_KEY");
        if (env && env[0]) so.api_key = env;
    }
    if (!raise_fd_limit(&so)) return 1;
    char model_buf[4096];
    bool default_model = !eo.model_dir && !eo.random_weights;
    if (default_model) {
        lm_error derr = {0};
        if (lm_cli_model_dir(NULL, model_buf, sizeof model_buf, &eo.model_dir, &derr) != LM_OK) {
            fprintf(stderr, "loom: %s\n", derr.message);
            return 1;
        }
    }
    char config_path[4096];
    if (eo.random_weights) snprintf(config_path, sizeof config_path, "%s", eo.config_path);
    else snprintf(config_path, sizeof config_path, "%s/config.json", eo.model_dir);
    if (eo.max_model_len <= 0) eo.max_model_len = lm_cli_model_len(config_path);
    so.max_model_len = eo.max_model_len;
    if (!so.served_model_name)
        so.served_model_name = eo.random_weights ? "loom-random" : default_model ? LM_DEFAULT_MODEL_NAME : eo.model_dir;

    /* Signals are taken by sigwait below; every thread started from here on
     * inherits the block. */
    sigset_t stop_signals;
    sigemptyset(&stop_signals);
    sigaddset(&stop_signals, SIGINT);
    sigaddset(&stop_signals, SIGTERM);
    pthread_sigmask(SIG_BLOCK, &stop_signals, NULL);
    signal(SIGPIPE, SIG_IGN);

    char message[512];
    loom_engine *engine = NULL;
    if (loom_engine_create(&eo, &engine, message, sizeof message) != LOOM_OK) {
        fprintf(stderr, "loom: %s\n", message);
        return 1;
    }
    lm_error err = {0};
    lm_tokenizer *tokenizer = NULL;
    lm_chat_template *chat_template = NULL;
    if (!eo.random_weights) {
        if (lm_tokenizer_load(eo.model_dir, &tokenizer, &err) != LM_OK) {
            fprintf(stderr, "loom: %s (serving without a tokenizer: token-id prompts only)\n", err.message);
            tokenizer = NULL;
        } else if (lm_chat_template_load_dir(eo.model_dir, &chat_template, NULL, NULL, &err) != LM_OK) {
            fprintf(stderr, "loom: %s (chat completions are not available)\n", err.message);
            chat_template = NULL;
        }
    }
    lm_server *server = NULL;
    if (lm_server_start(&so, engine, tokenizer, chat_template, &server, &err) != LM_OK) {
        fprintf(stderr, "loom: %s\n", err.message);
        lm_chat_template_free(chat_template);
        if (tokenizer) lm_tokenizer_free(tokenizer);
        loom_engine_destroy(engine);
        return 1;
    }
    fprintf(stderr, "loom: serving %s on http://%s:%d\n", so.served_model_name, so.host, lm_server_port(server));
    fflush(stderr);
    int sig = 0;
    sigwait(&stop_signals, &sig);
    fprintf(stderr, "loom: %s: shutting down\n", sig == SIGINT ? "SIGINT" : "SIGTERM");
    lm_server_stop(server, (int)grace_ms);
    loom_engine_destroy(engine);
    lm_chat_template_free(chat_template);
    if (tokenizer) lm_tokenizer_free(tokenizer);
    fprintf(stderr, "loom: stopped\n");
    return 0;
}
