/* loom chat [--model DIR] [options]
 * An interactive chat in the terminal: the conversation is kept and sent
 * whole (through the chat template) every turn, the answer streams as it is
 * generated, /reset starts over, Ctrl-C stops the current answer (at the
 * prompt it only says how to leave), /exit or Ctrl-D quits, /image FILE
 * attaches an image to the next message (the conversation keeps it, and
 * sends it again with every turn while its message is in the history).
 *
 * SIGINT is blocked in every thread and read from a signalfd, so no signal
 * handler and no global flag are needed: the main thread polls the input and
 * the signalfd together, and checks the signalfd between streamed tokens. */
#include <cjson/cJSON.h>
#include <errno.h>
#include <getopt.h>
#include <poll.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/signalfd.h>
#include <time.h>
#include <unistd.h>

#include "cli/cli_common.h"
#include "cli/prefix_cache_flags.h"
#include "cli/commands.h"
#include "cli/default_model.h"
#include "cli/image_files.h"
#include "cli/prompt_encoder.h"
#include "engine/sampler.h"
#include "loom.h"

#define LINE_MAX_BYTES (64 * 1024)

static void usage(FILE *f) {
    fprintf(f,
            "usage: loom chat [--model DIR] [options]\n"
            "An interactive chat with the model in the terminal.  Type a message and press\n"
            "Enter; the answer streams back.  /image FILE attaches an image (PNG, JPEG,\n"
            "WebP) to the next message, /reset forgets the conversation, /exit (or\n"
            "Ctrl-D) quits, Ctrl-C stops the answer being written.\n\n"
            "  --model DIR             Hugging Face checkpoint folder (default: the bundled\n"
            "                          models/loom-tiny, or $LOOM_MODEL)\n"
            "  --system TEXT           a system message at the start of the conversation\n"
            "  --max-tokens N          longest answer in tokens (default 512)\n"
            "  --temperature T         0 = greedy (default 0.7)\n"
            "  --top-p P               nucleus sampling (default 0.9)\n"
            "  --top-k K               (default 40; 0 = off)\n"
            "  --repetition-penalty R  (default 1.1; 1 = off)\n"
            "  --seed S                reproducible sampling\n"
            "  --threads N             CPU threads (default: all cores)\n"
            "  --backend NAME          cpu (default), ref (plain reference kernels) or cuda\n"
            "  --device NAME           the same (vLLM's spelling)\n"
            "  --speculative-tokens K  draft K tokens per step with the MTP head (default 0)\n"
            "  --gpu-memory-utilization F  with --device cuda: the fraction of the card the\n"
            "                          engine may hold; the KV pool gets what the weights leave\n"
            "  --max-model-len N       context limit in tokens (default: the model's); the\n"
            "                          oldest exchanges are dropped to stay under it\n"
            "  --ignore-eos            keep writing past the end of the turn (for testing)\n"
            "  --stats                 print tokens, speed, cached prompt tokens and speculation\n"
            "                          after each answer\n"
            "  --show-prompt           print the rendered prompt before each answer (stderr)\n"
            LM_CLI_PREFIX_CACHE_USAGE);
}

/* ------------------------------------------------------------ input */

typedef struct {
    int fd, signal_fd;
    char buf[LINE_MAX_BYTES + 1];
    size_t len;
    bool eof;
} line_reader;

typedef enum { INPUT_LINE, INPUT_EOF, INPUT_INTERRUPT, INPUT_TOO_LONG, INPUT_ERROR } input_result;

/* True if a SIGINT is pending on the signalfd (and consumes it). */
static bool take_interrupt(int signal_fd) {
    struct pollfd p = {.fd = signal_fd, .events = POLLIN};
    if (poll(&p, 1, 0) != 1) return false;
    struct signalfd_siginfo info;
    return read(signal_fd, &info, sizeof info) == (ssize_t)sizeof info;
}

/* Reads one line (without its newline) into lr->buf's front, returned in
 * *line (valid until the next call).  Lines longer than LINE_MAX_BYTES are
 * skipped whole and reported as INPUT_TOO_LONG. */
static input_result read_line(line_reader *lr, char **line, size_t *consumed) {
    bool skipping = false;
    memmove(lr->buf, lr->buf + *consumed, lr->len - *consumed);
    lr->len -= *consumed;
    *consumed = 0;
    for (;;) {
        char *nl = memchr(lr->buf, '\n', lr->len);
        if (nl) {
            size_t n = (size_t)(nl - lr->buf);
            if (skipping) {
                memmove(lr->buf, nl + 1, lr->len - n - 1);
                lr->len -= n + 1;
                return INPUT_TOO_LONG;
            }
            *nl = '\0';
            if (n && lr->buf[n - 1] == '\r') lr->buf[n - 1] = '\0';
            *line = lr->buf;
            *consumed = n + 1;
            return INPUT_LINE;
        }
        if (lr->eof) {
            if (lr->len == 0 || skipping) return INPUT_EOF;
            lr->buf[lr->len] = '\0';
            *line = lr->buf;
            *consumed = lr->len;
            return INPUT_LINE;
        }
        if (lr->len == LINE_MAX_BYTES) { /* drop what we have, keep skipping to the newline */
            lr->len = 0;
            skipping = true;
        }
        struct pollfd p[2] = {{.fd = lr->fd, .events = POLLIN}, {.fd = lr->signal_fd, .events = POLLIN}};
        if (poll(p, 2, -1) < 0) {
            if (errno == EINTR) continue;
            return INPUT_ERROR;
        }
        if (p[1].revents & POLLIN) {
            take_interrupt(lr->signal_fd);
            lr->len = 0; /* the line being typed is abandoned, as in a shell */
            return INPUT_INTERRUPT;
        }
        if (p[0].revents & (POLLIN | POLLHUP | POLLERR)) {
            ssize_t got = read(lr->fd, lr->buf + lr->len, LINE_MAX_BYTES - lr->len);
            if (got < 0 && errno == EINTR) continue;
            if (got < 0) return INPUT_ERROR;
            if (got == 0) lr->eof = true;
            lr->len += (size_t)got;
        }
    }
}

/* ------------------------------------------------------------ conversation */

typedef struct {
    loom_engine *engine;
    lm_prompt_encoder encoder;
    cJSON *messages;
    loom_request_params params;
    int signal_fd;
    int context_len; /* prompt + answer limit in tokens */
    bool stats, show_prompt;
    /* The images of the history's user messages, in order (each message
     * records how many it has under IMAGE_COUNT_KEY), then those /image
     * attached for the next message. */
    lm_cli_images images;
    int pending_images;
} chat;

#define IMAGE_COUNT_KEY "loom_image_count"

static int message_images(const cJSON *m) {
    const cJSON *n = cJSON_GetObjectItemCaseSensitive(m, IMAGE_COUNT_KEY);
    return cJSON_IsNumber(n) ? n->valueint : 0;
}

/* Forgets the first n images of the history. */
static void drop_first_images(lm_cli_images *im, int n) {
    for (int i = 0; i < n && i < im->n; i++) free((void *)im->images[i].data);
    if (n > im->n) n = im->n;
    memmove(im->images, im->images + n, sizeof(loom_image) * (size_t)(im->n - n));
    im->n -= n;
}

/* Forgets the last n images. */
static void drop_last_images(lm_cli_images *im, int n) {
    while (n-- > 0 && im->n > 0) free((void *)im->images[--im->n].data);
}

static bool add_message(cJSON *messages, const char *role, const char *content) {
    cJSON *m = cJSON_CreateObject();
    if (!m) return false;
    if (!cJSON_AddStringToObject(m, "role", role) || !cJSON_AddStringToObject(m, "content", content) ||
        !cJSON_AddItemToArray(messages, m)) {
        cJSON_Delete(m);
        return false;
    }
    return true;
}

/* True if message i exists and has this role. */
static bool has_role(const cJSON *messages, int i, const char *role) {
    const cJSON *m = cJSON_GetArrayItem(messages, i);
    const cJSON *r = m ? cJSON_GetObjectItemCaseSensitive(m, "role") : NULL;
    return cJSON_IsString(r) && strcmp(r->valuestring, role) == 0;
}

/* Forgets everything but a leading system message (and every image). */
static void reset(chat *c) {
    int keep = has_role(c->messages, 0, "system");
    while (cJSON_GetArraySize(c->messages) > keep) cJSON_DeleteItemFromArray(c->messages, keep);
    lm_cli_images_clear(&c->images);
    c->pending_images = 0;
}

/* Drops the oldest user message and the answers after it (never the last
 * user message).  Returns false when there is nothing left to drop. */
static bool drop_oldest_exchange(chat *c) {
    cJSON *messages = c->messages;
    int n = cJSON_GetArraySize(messages), first = has_role(messages, 0, "system");
    if (n - first < 3) return false; /* only the current user message is left */
    do {
        drop_first_images(&c->images, message_images(cJSON_GetArrayItem(messages, first)));
        cJSON_DeleteItemFromArray(messages, first);
        n--;
        if (has_role(messages, first, "user")) break;
    } while (n - first > 1);
    return true;
}

static double now_s(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

/* Submits the conversation, dropping the oldest exchanges while it leaves no
 * room for an answer of --max-tokens (at most half the context: a huge
 * --max-tokens must not erase the history); the answer is then limited to
 * what is left.  Returns the request or NULL (error printed). */
static loom_request *submit_conversation(chat *c) {
    for (;;) {
        lm_error err = {0};
        int32_t *ids = NULL;
        int n = 0;
        char *text = NULL;
        if (lm_prompt_encoder_chat(&c->encoder, c->messages, &ids, &n, c->show_prompt ? &text : NULL, &err) !=
            LM_OK) {
            fprintf(stderr, "loom: %s\n", err.message);
            return NULL;
        }
        int room = c->params.max_tokens < c->context_len / 2 ? c->params.max_tokens : c->context_len / 2;
        if (n + room > c->context_len && drop_oldest_exchange(c)) {
            fprintf(stderr, "[the conversation is too long: the oldest exchange was dropped]\n");
            free(ids);
            free(text);
            continue;
        }
        if (text) fprintf(stderr, "--- prompt (%d tokens) ---\n%s\n--- end of prompt ---\n", n, text);
        free(text);
        loom_request_params p = c->params;
        if (n + p.max_tokens > c->context_len) p.max_tokens = c->context_len - n;
        if (p.max_tokens < 1) {
            fprintf(stderr, "loom: the message is too long: %d tokens, the context holds %d\n", n, c->context_len);
            free(ids);
            return NULL;
        }
        p.prompt = ids;
        p.n_prompt = n;
        p.images = c->images.images;
        p.n_images = c->images.n;
        loom_request *r = NULL;
        char error[512];
        int st = loom_submit(c->engine, &p, &r, error, sizeof error);
        free(ids); /* the engine copies the prompt */
        if (st == LOOM_OK) return r;
        if (st == LOOM_ERR_TOO_LONG && drop_oldest_exchange(c)) {
            fprintf(stderr, "[the conversation is too long: the oldest exchange was dropped]\n");
            continue;
        }
        fprintf(stderr, "loom: %s\n", error);
        return NULL;
    }
}

/* Streams one answer to stdout and appends it to the conversation (also when
 * stopped early: it is what the user saw).  Returns false on an engine error. */
static bool answer(chat *c) {
    loom_request *r = submit_conversation(c);
    if (!r) return false;
    size_t cap = 1024, len = 0;
    char *text = malloc(cap);
    bool ok = text != NULL, stopped = false;
    loom_event ev;
    loom_finish_reason reason = LOOM_FINISH_NONE;
    int completion = 0, drafted = 0, accepted = 0, prompt = 0, cached = 0;
    double t0 = now_s(), t_first = 0;
    int got;
    while ((got = loom_next_event(r, &ev, 50)) != -1) {
        if (!stopped && take_interrupt(c->signal_fd)) {
            loom_cancel(r);
            stopped = true;
        }
        if (got == 0) continue;
        if (ev.type == LOOM_EVENT_TOKEN && ev.text && ev.text_len) {
            if (!t_first) t_first = now_s();
            fwrite(ev.text, 1, ev.text_len, stdout);
            fflush(stdout);
            if (ok && len + ev.text_len + 1 > cap) {
                while (len + ev.text_len + 1 > cap) cap *= 2;
                char *bigger = realloc(text, cap);
                if (!bigger) ok = false;
                else text = bigger;
            }
            if (ok) {
                memcpy(text + len, ev.text, ev.text_len);
                len += ev.text_len;
            }
        } else if (ev.type == LOOM_EVENT_FINISH) {
            reason = ev.finish_reason;
            completion = ev.completion_tokens;
            prompt = ev.prompt_tokens;
            cached = ev.cached_tokens;
            drafted = ev.drafted_tokens;
            accepted = ev.accepted_tokens;
        } else if (ev.type == LOOM_EVENT_ERROR) {
            fprintf(stderr, "\nloom: %s\n", ev.error);
            ok = false;
        }
    }
    double t1 = now_s();
    loom_request_free(r);
    printf("\n");
    fflush(stdout);
    if (reason == LOOM_FINISH_CANCELLED || stopped) fprintf(stderr, "[stopped]\n");
    else if (reason == LOOM_FINISH_LENGTH) fprintf(stderr, "[the answer reached --max-tokens]\n");
    if (c->stats) {
        double gen_s = t_first ? t1 - t_first : 0;
        fprintf(stderr, "[%d tokens, first after %.2f s, %.1f tokens/s", completion,
                t_first ? t_first - t0 : t1 - t0, gen_s > 0 && completion > 1 ? (completion - 1) / gen_s : 0.0);
        fprintf(stderr, "; prompt %d tokens, %d of them cached", prompt, cached);
        if (drafted) fprintf(stderr, ", %d of %d drafts accepted", accepted, drafted);
        fprintf(stderr, "]\n");
    }
    if (text && ok) {
        text[len] = '\0';
        if (!add_message(c->messages, "assistant", text)) ok = false;
    }
    free(text);
    return ok;
}

/* ------------------------------------------------------------ main */


int cmd_chat_main(int argc, char **argv) {
    static const struct option options[] = {
        {"model", required_argument, 0, 'm'},          {"system", required_argument, 0, 'y'},
        {"max-tokens", required_argument, 0, 'n'},     {"temperature", required_argument, 0, 'T'},
        {"top-p", required_argument, 0, 'p'},          {"top-k", required_argument, 0, 'k'},
        {"repetition-penalty", required_argument, 0, 'r'}, {"seed", required_argument, 0, 's'},
        {"threads", required_argument, 0, 't'},
        {"backend", required_argument, 0, 'B'}, {"device", required_argument, 0, 'B'},        {"speculative-tokens", required_argument, 0, 'D'},
        {"stats", no_argument, 0, 'S'},                {"show-prompt", no_argument, 0, 'P'},
        {"max-model-len", required_argument, 0, 'L'}, {"gpu-memory-utilization", required_argument, 0, 0x100},  {"ignore-eos", no_argument, 0, 'e'},
        {"help", no_argument, 0, 'h'},                 LM_CLI_PREFIX_CACHE_OPTIONS, {0, 0, 0, 0},
    };
    const char *model_dir = NULL, *system = NULL;
    chat c = {.signal_fd = -1};
    loom_request_params_default(&c.params);
    c.params.max_tokens = 512;
    c.params.sampling.temperature = 0.7f;
    c.params.sampling.top_p = 0.9f;
    c.params.sampling.top_k = 40;
    c.params.sampling.repetition_penalty = 1.1f;
    loom_engine_options eo;
    loom_engine_options_default(&eo);
    long v, threads = 0;
    const char *backend = NULL;
    int opt;
    optind = 1;
    while ((opt = getopt_long(argc, argv, "", options, NULL)) != -1) {
        switch (opt) {
        case 'm': model_dir = optarg; break;
        case 'y': system = optarg; break;
        case 'n':
            if (!lm_cli_parse_int("--max-tokens", optarg, 1, 1 << 20, &v)) return 2;
            c.params.max_tokens = (int)v;
            break;
        case 'T': if (!lm_cli_parse_float("--temperature", optarg, 0, 100, &c.params.sampling.temperature)) return 2; break;
        case 'p': if (!lm_cli_parse_float("--top-p", optarg, 0, 1, &c.params.sampling.top_p)) return 2; break;
        case 'k':
            if (!lm_cli_parse_int("--top-k", optarg, 0, 1 << 20, &v)) return 2;
            c.params.sampling.top_k = (int)v;
            break;
        case 'r':
            if (!lm_cli_parse_float("--repetition-penalty", optarg, 0.01, 100, &c.params.sampling.repetition_penalty))
                return 2;
            break;
        case 's':
            if (!lm_cli_parse_int("--seed", optarg, 0, 1L << 62, &v)) return 2;
            c.params.sampling.has_seed = true;
            c.params.sampling.seed = (uint64_t)v;
            break;
        case 't': if (!lm_cli_parse_int("--threads", optarg, 1, 1024, &threads)) return 2; break;
        case 'B': if (!lm_cli_parse_backend(optarg, &backend)) return 2; break;
        case 'D':
            if (!lm_cli_parse_int("--speculative-tokens", optarg, 0, 8, &v)) return 2;
            eo.speculative_tokens = (int)v;
            break;
        case 0x100:
            if (!lm_cli_parse_float("--gpu-memory-utilization", optarg, 0.01, 1, &eo.gpu_memory_utilization)) return 2;
            break;
        case 'L':
            if (!lm_cli_parse_int("--max-model-len", optarg, 2, 1 << 24, &v)) return 2;
            eo.max_model_len = (int)v;
            break;
        case 'e': c.params.ignore_eos = true; break;
        case 'S': c.stats = true; break;
        case 'P': c.show_prompt = true; break;
        case 'h': usage(stdout); return 0;
        default:
            if (lm_cli_prefix_cache_option(opt, optarg, &eo) > 0) break;
            usage(stderr);
            return 2;
        }
    }
    if (optind != argc) {
        usage(stderr);
        return 2;
    }
    char error[512], model_buf[4096];
    if (!lm_sampling_validate(&c.params.sampling, 0, error, sizeof error)) {
        fprintf(stderr, "loom: %s\n", error);
        return 2;
    }
    lm_error err = {0};
    if (lm_cli_model_dir(model_dir, model_buf, sizeof model_buf, &model_dir, &err) != LM_OK) {
        fprintf(stderr, "loom: %s\n", err.message);
        return 1;
    }
    /* Block SIGINT before the engine starts its threads so they inherit the mask. */
    sigset_t mask;
    sigemptyset(&mask);
    sigaddset(&mask, SIGINT);
    if (pthread_sigmask(SIG_BLOCK, &mask, NULL) != 0 || (c.signal_fd = signalfd(-1, &mask, SFD_CLOEXEC)) < 0) {
        fprintf(stderr, "loom: cannot set up Ctrl-C handling: %s\n", strerror(errno));
        return 1;
    }
    int rc = 1;
    line_reader *lr = NULL;
    if (lm_prompt_encoder_open(model_dir, true, &c.encoder, &err) != LM_OK) {
        fprintf(stderr, "loom: %s\n", err.message);
        goto done;
    }
    eo.model_dir = model_dir;
    eo.threads = (int)threads;
    eo.backend = backend;
    char config_path[4200];
    snprintf(config_path, sizeof config_path, "%s/config.json", model_dir);
    c.context_len = eo.max_model_len > 0 ? eo.max_model_len : lm_cli_model_len(config_path);
    if (loom_engine_create(&eo, &c.engine, error, sizeof error) != LOOM_OK) {
        fprintf(stderr, "loom: %s\n", error);
        goto done;
    }
    c.messages = cJSON_CreateArray();
    lr = calloc(1, sizeof *lr);
    if (!c.messages || !lr || (system && !add_message(c.messages, "system", system))) {
        fprintf(stderr, "loom: out of memory\n");
        goto done;
    }
    lr->fd = STDIN_FILENO;
    lr->signal_fd = c.signal_fd;
    bool interactive = isatty(STDIN_FILENO);
    if (interactive)
        fprintf(stderr, "loom chat: %s. /reset forgets the conversation, /exit quits, Ctrl-C stops an answer.\n",
                model_dir);
    size_t consumed = 0;
    rc = 0;
    for (;;) {
        if (interactive) {
            fputs("> ", stdout);
            fflush(stdout);
        }
        char *line = NULL;
        input_result in = read_line(lr, &line, &consumed);
        if (in == INPUT_EOF) {
            if (interactive) printf("\n");
            break;
        }
        if (in == INPUT_ERROR) {
            fprintf(stderr, "loom: reading input: %s\n", strerror(errno));
            rc = 1;
            break;
        }
        if (in == INPUT_INTERRUPT) {
            fprintf(stderr, "\n[type /exit or press Ctrl-D to quit]\n");
            continue;
        }
        if (in == INPUT_TOO_LONG) {
            fprintf(stderr, "loom: that line is longer than %d bytes; it was ignored\n", LINE_MAX_BYTES);
            continue;
        }
        line += strspn(line, " \t");
        if (!*line) continue;
        if (strcmp(line, "/exit") == 0 || strcmp(line, "/quit") == 0) break;
        if (strcmp(line, "/reset") == 0) {
            reset(&c);
            fprintf(stderr, "[conversation cleared]\n");
            continue;
        }
        if (strcmp(line, "/help") == 0) {
            fprintf(stderr, "/image FILE attaches an image to the next message, /reset forgets the "
                            "conversation, /exit quits, Ctrl-C stops an answer.\n");
            continue;
        }
        if (strncmp(line, "/image", 6) == 0 && (line[6] == ' ' || line[6] == '\0')) {
            const char *path = line + 6 + strspn(line + 6, " \t");
            if (!*path) fprintf(stderr, "usage: /image FILE\n");
            else if (!loom_engine_image_marker(c.engine)) fprintf(stderr, "loom: this model takes no images\n");
            else if (lm_cli_images_add(&c.images, path, &err) != LM_OK) fprintf(stderr, "loom: %s\n", err.message);
            else {
                c.pending_images++;
                fprintf(stderr, "[image attached to the next message: %s]\n", path);
            }
            continue;
        }
        char *content = c.pending_images ? lm_cli_text_with_images(line, loom_engine_image_marker(c.engine),
                                                                   c.pending_images)
                                         : NULL;
        cJSON *m = NULL;
        if ((c.pending_images && !content) || !add_message(c.messages, "user", content ? content : line) ||
            !(m = cJSON_GetArrayItem(c.messages, cJSON_GetArraySize(c.messages) - 1)) ||
            (c.pending_images && !cJSON_AddNumberToObject(m, IMAGE_COUNT_KEY, c.pending_images))) {
            free(content);
            fprintf(stderr, "loom: out of memory\n");
            rc = 1;
            break;
        }
        free(content);
        int attached = c.pending_images;
        c.pending_images = 0;
        if (!answer(&c)) {
            /* Nothing was answered: forget the question (and its images) so
             * the next turn is clean. */
            int last = cJSON_GetArraySize(c.messages) - 1;
            if (has_role(c.messages, last, "user")) {
                cJSON_DeleteItemFromArray(c.messages, last);
                drop_last_images(&c.images, attached);
            }
            rc = 1;
        }
    }
done:
    free(lr);
    lm_cli_images_clear(&c.images);
    cJSON_Delete(c.messages);
    loom_engine_destroy(c.engine);
    lm_prompt_encoder_close(&c.encoder);
    if (c.signal_fd >= 0) close(c.signal_fd);
    return rc;
}
