/* loom chat [MODEL_DIR] [options]
 * An interactive chat in the terminal: the conversation is kept and sent
 * whole (through the chat template) every turn, the answer streams as it is
 * generated, /clear (or /reset) starts over, Ctrl-C stops the current
 * answer (at the prompt it only says how to leave), /exit or Ctrl-D quits,
 * /image FILE attaches an image to the next message (the conversation keeps
 * it, and sends it again with every turn while its message is in the
 * history), /think on|off switches a reasoning template's thinking, /help
 * lists them (chat_commands below).  Any other line starting with / is
 * named as an unknown command, never sent: "//text" sends "/text".  On a terminal
 * lines are edited with libedit (history on the up arrow); a message may
 * span lines (chat_input.h).  With --url the conversation goes to a running
 * `loom serve` instead of a model loaded here (chat_remote.h).
 *
 * SIGINT is blocked in every thread and read from a signalfd, so no signal
 * handler and no global flag are needed: the main thread polls the input and
 * the signalfd together, and checks the signalfd between streamed tokens. */
#include <cjson/cJSON.h>
#include <errno.h>
#include <locale.h>
#include <math.h>
#include <signal.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/signalfd.h>
#include <time.h>
#include <unistd.h>

#include "cli/api_key.h"
#include "cli/chat_input.h"
#include "cli/chat_remote.h"
#include "cli/commands.h"
#include "cli/default_model.h"
#include "cli/engine_options.h"
#include "cli/image_files.h"
#include "cli/load_progress.h"
#include "cli/prompt_encoder.h"
#include "cli/sampling_options.h"
#include "engine/sampler.h"
#include "loom.h"
#include "server/generation_defaults.h"
#include "text/byte_level.h"

static const char synopsis[] =
    "usage: loom chat [MODEL_DIR] [options]\n"
    "       loom chat --url http://HOST:PORT [options]\n"
    "An interactive chat with the model in the terminal.  Type a message and press\n"
    "Enter; the answer streams back.  A line ending in \\ continues the message on\n"
    "the next line, and a line of three double quotes (\"\"\") opens a block up to\n"
    "the next such line.  The up arrow recalls earlier lines.  /help lists the\n"
    "commands: /clear forgets the conversation, /settings shows the sampling\n"
    "settings, /think on|off switches a reasoning model's thinking, /image FILE\n"
    "attaches an image (PNG, JPEG, WebP) to the next message, /exit (or Ctrl-D)\n"
    "quits; Ctrl-C stops the answer.  Another /word is an unknown command, not a\n"
    "message: //text sends /text.\n"
    "Sampling defaults: --temperature etc., else the model's generation_config.json,\n"
    "else temperature 1, top-p 1, top-k off, min-p 0, repetition penalty 1 (as in\n"
    "loom serve and run).\n";

typedef struct {
    const char *system, *url, *api_key;
    bool stats, show_prompt;
} chat_args;

#define ARG(field) offsetof(chat_args, field)
static const lm_opt chat_opts[] = {
    {"--system", LM_OPT_STRING, "TEXT", ARG(system), 0, 0, "a system message at the start of the conversation", NULL,
     NULL, NULL},
    {"--url", LM_OPT_STRING, "URL", ARG(url), 0, 0,
     "chat with a running loom serve (http://HOST:PORT) instead of loading\nthe model here", NULL, NULL, NULL},
    {"--api-key", LM_OPT_STRING, "KEY", ARG(api_key), 0, 0, "with --url: the server's key (default: $LOOM_API_KEY, else\n$VLLM_API_KEY)",
     NULL, NULL, NULL},
    {"--stats", LM_OPT_FLAG, NULL, ARG(stats), 0, 0, "print tokens, speed and speculation after each answer", NULL,
     NULL, NULL},
    {"--show-prompt", LM_OPT_FLAG, NULL, ARG(show_prompt), 0, 0, "print the rendered prompt before each answer (stderr)",
     NULL, NULL, NULL},
};

/* ------------------------------------------------------------ conversation */

typedef struct {
    loom_engine *engine;        /* NULL with --url */
    lm_chat_remote *remote;     /* NULL without --url */
    lm_prompt_encoder encoder;
    cJSON *messages;
    cJSON *template_vars;       /* {"enable_thinking": ...} after /think */
    loom_request_params params;
    int signal_fd;
    int context_len; /* prompt + answer limit in tokens */
    bool stats, show_prompt;
    bool has_thinking_switch;   /* the template reads enable_thinking */
    char sampling_why[300];     /* where the sampling defaults came from (lm_cli_load_sampling_defaults) */
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
        if (lm_prompt_encoder_chat(&c->encoder, c->messages, c->template_vars, &ids, &n, c->show_prompt ? &text : NULL, &err) !=
            LM_OK) {
            fprintf(stderr, "loom chat: %s\n", err.message);
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
            fprintf(stderr, "loom chat: the message is too long: %d tokens, the context holds %d\n", n, c->context_len);
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
        fprintf(stderr, "loom chat: %s\n", error);
        return NULL;
    }
}

/* What the answer streamed so far: printed as it comes, kept for the history. */
typedef struct {
    lm_text_buf text;
    bool failed;
    double first_token_time;
} answer_text;

static void take_text(void *ctx, const char *text, size_t len) {
    answer_text *a = ctx;
    if (!len) return;
    if (!a->first_token_time) a->first_token_time = now_s();
    fwrite(text, 1, len, stdout);
    fflush(stdout);
    if (!a->failed && !lm_text_buf_append(&a->text, text, len)) a->failed = true;
}

typedef struct {
    loom_finish_reason reason;
    int completion, drafted, accepted;
    int prompt, cached; /* prompt tokens, and of them those the prefix cache held (-1: not known) */
    bool stopped, ok;
} answer_end;

/* The engine's answer, streamed into a. */
static answer_end answer_here(chat *c, answer_text *a) {
    answer_end end = {.ok = true};
    loom_request *r = submit_conversation(c);
    if (!r) return (answer_end){.ok = false};
    loom_event ev;
    int got;
    while ((got = loom_next_event(r, &ev, 50)) != -1) {
        if (!end.stopped && lm_chat_take_interrupt(c->signal_fd)) {
            loom_cancel(r);
            end.stopped = true;
        }
        if (got == 0) continue;
        if (ev.type == LOOM_EVENT_TOKEN && ev.text) {
            take_text(a, ev.text, ev.text_len);
        } else if (ev.type == LOOM_EVENT_FINISH) {
            end.reason = ev.finish_reason;
            end.completion = ev.completion_tokens;
            end.prompt = ev.prompt_tokens;
            end.cached = ev.cached_tokens;
            end.drafted = ev.drafted_tokens;
            end.accepted = ev.accepted_tokens;
        } else if (ev.type == LOOM_EVENT_ERROR) {
            fprintf(stderr, "\nloom chat: %s\n", ev.error);
            end.ok = false;
        }
    }
    loom_request_free(r);
    return end;
}

/* The server's answer (--url), streamed into a. */
static answer_end answer_remote(chat *c, answer_text *a) {
    answer_end end = {.ok = true};
    lm_chat_remote_result res;
    lm_error err = {0};
    if (lm_chat_remote_answer(c->remote, c->messages, c->template_vars, &c->params, c->signal_fd, take_text, a, &res,
                              &err) != LM_OK) {
        fprintf(stderr, "\nloom chat: %s\n", err.message);
        end.ok = false;
    }
    end.stopped = res.stopped;
    end.completion = res.completion_tokens;
    end.cached = -1;
    end.reason = strcmp(res.finish_reason, "length") == 0 ? LOOM_FINISH_LENGTH : LOOM_FINISH_STOP;
    return end;
}

/* Streams one answer to stdout and appends it to the conversation (also when
 * stopped early: it is what the user saw).  Returns false on an error. */
static bool answer(chat *c) {
    answer_text a = {0};
    double t0 = now_s();
    answer_end end = c->remote ? answer_remote(c, &a) : answer_here(c, &a);
    double t1 = now_s();
    printf("\n");
    fflush(stdout);
    if (end.reason == LOOM_FINISH_CANCELLED || end.stopped) fprintf(stderr, "[stopped]\n");
    else if (end.reason == LOOM_FINISH_LENGTH) fprintf(stderr, "[the answer reached --max-tokens]\n");
    if (c->stats) {
        double gen_s = a.first_token_time ? t1 - a.first_token_time : 0;
        fprintf(stderr, "[%d tokens, first after %.2f s, %.1f tokens/s", end.completion,
                a.first_token_time ? a.first_token_time - t0 : t1 - t0,
                gen_s > 0 && end.completion > 1 ? (end.completion - 1) / gen_s : 0.0);
        if (end.cached >= 0) fprintf(stderr, "; prompt %d tokens, %d of them cached", end.prompt, end.cached);
        if (end.drafted) fprintf(stderr, ", %d of %d drafts accepted", end.accepted, end.drafted);
        fprintf(stderr, "]\n");
    }
    /* the text as a C string (its NUL appended), "" when nothing came */
    bool ok = end.ok && !a.failed && (!a.text.p || lm_text_buf_append(&a.text, "", 1));
    if (ok && !add_message(c->messages, "assistant", a.text.p ? a.text.p : "")) ok = false;
    lm_text_buf_free(&a.text);
    return ok;
}

/* ------------------------------------------------------------ commands */

/* /think on|off: the template's enable_thinking. */
static void set_thinking(chat *c, const char *arg) {
    bool on = strcmp(arg, "on") == 0;
    if (!on && strcmp(arg, "off") != 0) {
        fprintf(stderr, "usage: /think on|off\n");
        return;
    }
    if (!c->has_thinking_switch) {
        fprintf(stderr, "[this model's chat template has no thinking switch (enable_thinking)]\n");
        return;
    }
    cJSON_DeleteItemFromObject(c->template_vars, "enable_thinking");
    if (!cJSON_AddBoolToObject(c->template_vars, "enable_thinking", on)) fprintf(stderr, "loom chat: out of memory\n");
    else fprintf(stderr, "[thinking %s]\n", on ? "on" : "off");
}

static void show_settings(const chat *c) {
    char text[300];
    lm_cli_describe_sampling(&c->params, text, sizeof text);
    fprintf(stderr, "[sampling: %s (defaults: %s)]\n", text, c->sampling_why);
}

/* /image FILE: attaches an image to the next message. */
static void attach_image(chat *c, const char *path) {
    lm_error err = {0};
    if (!*path) fprintf(stderr, "usage: /image FILE\n");
    else if (c->remote) fprintf(stderr, "loom chat: /image is not available with --url\n");
    else if (!loom_engine_image_marker(c->engine)) fprintf(stderr, "loom chat: this model takes no images\n");
    else if (lm_cli_images_add(&c->images, path, &err) != LM_OK) fprintf(stderr, "loom chat: %s\n", err.message);
    else {
        c->pending_images++;
        fprintf(stderr, "[image attached to the next message: %s]\n", path);
    }
}

typedef enum { CHAT_HELP, CHAT_CLEAR, CHAT_SETTINGS, CHAT_THINK, CHAT_IMAGE, CHAT_EXIT } chat_command_id;

/* The /commands, in the order /help lists them. */
typedef struct {
    const char *names; /* "/clear|/reset": the spellings, the first one listed first */
    const char *args;  /* what follows ("on|off"); NULL: nothing */
    const char *help;
    chat_command_id id;
} chat_command;

static const chat_command chat_commands[] = {
    {"/help", NULL, "this list", CHAT_HELP},
    {"/clear|/reset", NULL, "forget the conversation (a --system message stays)", CHAT_CLEAR},
    {"/settings", NULL, "the sampling settings and where their defaults came from", CHAT_SETTINGS},
    {"/think", "on|off", "switch a reasoning template's thinking", CHAT_THINK},
    {"/image", "FILE", "attach an image (PNG, JPEG, WebP) to the next message", CHAT_IMAGE},
    {"/exit|/quit", NULL, "leave (Ctrl-D too)", CHAT_EXIT},
};

static void print_help(void) {
    for (size_t i = 0; i < sizeof chat_commands / sizeof chat_commands[0]; i++) {
        const chat_command *k = &chat_commands[i];
        char label[64] = "";
        size_t used = 0;
        for (const char *p = k->names; *p && used < sizeof label;) {
            size_t n = strcspn(p, "|");
            int w = snprintf(label + used, sizeof label - used, "%s%.*s", used ? ", " : "", (int)n, p);
            if (w > 0) used += (size_t)w;
            p += n + (p[n] == '|');
        }
        if (k->args && used < sizeof label) snprintf(label + used, sizeof label - used, " %s", k->args);
        fprintf(stderr, "  %-16s %s\n", label, k->help);
    }
    fprintf(stderr, "  %-16s %s\n", "//TEXT", "send a message that starts with / (as /TEXT)");
    fprintf(stderr, "A line ending in \\ continues the message on the next line; a line of \"\"\" opens a block up "
                    "to the next such line.  Ctrl-C stops an answer.\n");
}

/* The command a line's first word names; NULL if none. */
static const chat_command *find_command(const char *word, size_t len) {
    for (size_t i = 0; i < sizeof chat_commands / sizeof chat_commands[0]; i++)
        for (const char *p = chat_commands[i].names; *p;) {
            size_t n = strcspn(p, "|");
            if (n == len && strncmp(p, word, len) == 0) return &chat_commands[i];
            p += n + (p[n] == '|');
        }
    return NULL;
}

/* Handles a line starting with "/" (but not "//", a message): a known
 * command runs, an unknown one is named and nothing is sent. */
static void command(chat *c, const char *line, bool *quit) {
    size_t len = strcspn(line, " \t");
    const char *arg = line + len + strspn(line + len, " \t");
    const chat_command *k = find_command(line, len);
    if (!k) {
        fprintf(stderr, "unknown command %.*s; /help lists them (//%s sends the line as a message)\n", (int)len, line,
                line + 1);
        return;
    }
    if (!k->args && *arg) {
        fprintf(stderr, "usage: %.*s (it takes nothing after it)\n", (int)len, line);
        return;
    }
    switch (k->id) {
    case CHAT_HELP: print_help(); break;
    case CHAT_CLEAR:
        reset(c);
        fprintf(stderr, "[conversation cleared]\n");
        break;
    case CHAT_SETTINGS: show_settings(c); break;
    case CHAT_THINK: set_thinking(c, arg); break;
    case CHAT_IMAGE: attach_image(c, arg); break;
    case CHAT_EXIT: *quit = true; break;
    }
}

/* Adds the user's message (with the images attached to it) and answers it;
 * false on an error (the message is then forgotten). */
static bool user_turn(chat *c, const char *line) {
    char *content = c->pending_images ? lm_cli_text_with_images(line, loom_engine_image_marker(c->engine),
                                                               c->pending_images)
                                     : NULL;
    cJSON *m = NULL;
    if ((c->pending_images && !content) || !add_message(c->messages, "user", content ? content : line) ||
        !(m = cJSON_GetArrayItem(c->messages, cJSON_GetArraySize(c->messages) - 1)) ||
        (c->pending_images && !cJSON_AddNumberToObject(m, IMAGE_COUNT_KEY, c->pending_images))) {
        free(content);
        fprintf(stderr, "loom chat: out of memory\n");
        return false;
    }
    free(content);
    int attached = c->pending_images;
    c->pending_images = 0;
    if (answer(c)) return true;
    /* Nothing was answered: forget the question (and its images) so the
     * next turn is clean. */
    int last = cJSON_GetArraySize(c->messages) - 1;
    if (has_role(c->messages, last, "user")) {
        cJSON_DeleteItemFromArray(c->messages, last);
        drop_last_images(&c->images, attached);
    }
    return false;
}

/* ------------------------------------------------------------ main */

/* The model and its encoder, or the server (--url). */
static int open_backend(chat *c, const chat_args *args, const lm_cli_sampling_source *sampling_source,
                        lm_cli_engine_settings *settings, lm_chat_remote *remote) {
    lm_error err = {0};
    char error[512], why[200];
    if (args->url) {
        lm_cli_api_key key;
        if (lm_cli_resolve_api_key("chat", args->api_key, "--api-key", &key) != 0) return 2;
        if (lm_chat_remote_open(args->url, key.key, remote, &err) != LM_OK) {
            fprintf(stderr, "loom chat: %s\n", err.message);
            return 1;
        }
        c->remote = remote;
        c->has_thinking_switch = true; /* the server's template decides */
        c->context_len = 1 << 30;
        /* Sampling fields no flag set stay unset: the request leaves them
         * out and the server's defaults apply. */
        snprintf(c->sampling_why, sizeof c->sampling_why, "the server's, for what no flag sets");
        return 0;
    }
    char model_buf[4096];
    const char *model_dir = NULL;
    if (lm_cli_model_dir(settings->engine.model_dir, NULL, model_buf, sizeof model_buf, &model_dir, &err) != LM_OK) {
        fprintf(stderr, "loom chat: %s\n", err.message);
        return 1;
    }
    char config_path[4200];
    snprintf(config_path, sizeof config_path, "%s/config.json", model_dir);
    if (lm_cli_resolve_model_len("chat", settings, config_path, why, sizeof why) != 0) return 2;
    if (lm_cli_threads_exceed_cores(settings, error, sizeof error)) fprintf(stderr, "loom chat: %s\n", error);
    lm_generation_defaults g;
    if (lm_cli_load_sampling_defaults(sampling_source, model_dir, &g, c->sampling_why, sizeof c->sampling_why, &err) !=
        LM_OK) {
        fprintf(stderr, "loom chat: %s\n", err.message);
        return 1;
    }
    lm_cli_settle_sampling(&c->params.sampling, &g);
    if (!lm_sampling_validate(&c->params.sampling, 0, error, sizeof error)) return lm_cli_usage_error("chat", "%s", error);
    if (lm_prompt_encoder_open(model_dir, true, &c->encoder, &err) != LM_OK) {
        fprintf(stderr, "loom chat: %s\n", err.message);
        return 1;
    }
    const char *source = lm_tokenizer_chat_template(c->encoder.tokenizer);
    c->has_thinking_switch = source && strstr(source, "enable_thinking");
    loom_engine_options eo = settings->engine;
    eo.model_dir = model_dir;
    lm_cli_load_result loaded;
    if (lm_cli_engine_load(&eo, stderr, &c->engine, error, sizeof error, &loaded) != LOOM_OK) {
        fprintf(stderr, "loom chat: %s\n", error);
        return 1;
    }
    if (loaded.seconds >= 1.0)
        fprintf(stderr, "loom chat: loaded %s in %.1f s%s%s%s\n", model_dir, loaded.seconds, loaded.summary[0] ? " (" : "",
                loaded.summary, loaded.summary[0] ? ")" : "");
    loom_engine_info info;
    loom_engine_describe(c->engine, &info);
    c->context_len = info.max_model_len;
    if (info.max_model_len_note[0]) fprintf(stderr, "loom chat: %s\n", info.max_model_len_note);
    if (info.speculative_status[0]) fprintf(stderr, "loom chat: speculative decoding is off: %s\n", info.speculative_status);
    return 0;
}

int cmd_chat_main(int argc, char **argv) {
    chat_args args = {0};
    chat c = {.signal_fd = -1};
    loom_request_params_default(&c.params);
    c.params.max_tokens = 512;
    lm_cli_sampling_source sampling_source = {0};
    lm_cli_engine_settings settings;
    lm_cli_spec spec;
    lm_cli_spec_init(&spec, "chat", synopsis, &settings, true);
    LM_CLI_SPEC_ADD(&spec, "Chat", chat_opts, &args);
    lm_cli_spec_add_sampling(&spec, &c.params); /* settled after parsing (lm_cli_settle_sampling) */
    lm_cli_spec_add_sampling_source(&spec, &sampling_source);
    int parsed = lm_cli_parse(&spec, argc, argv);
    if (parsed >= 0) return parsed;
    if (args.url && settings.engine.model_dir)
        return lm_cli_usage_error("chat", "give a model folder or --url, not both");
    if (args.url && sampling_source.generation_config)
        return lm_cli_usage_error("chat", "with --url the server's --generation-config decides the defaults");
    c.stats = args.stats;
    c.show_prompt = args.show_prompt && !args.url;
    setlocale(LC_CTYPE, "");
    /* Block SIGINT before the engine starts its threads so they inherit the mask. */
    sigset_t mask;
    sigemptyset(&mask);
    sigaddset(&mask, SIGINT);
    if (pthread_sigmask(SIG_BLOCK, &mask, NULL) != 0 || (c.signal_fd = signalfd(-1, &mask, SFD_CLOEXEC)) < 0) {
        fprintf(stderr, "loom chat: cannot set up Ctrl-C handling: %s\n", strerror(errno));
        return 1;
    }
    lm_chat_remote remote;
    lm_chat_input *input = NULL;
    lm_error err = {0};
    int rc = open_backend(&c, &args, &sampling_source, &settings, &remote);
    if (rc != 0) goto done;
    rc = 1;
    c.messages = cJSON_CreateArray();
    c.template_vars = cJSON_CreateObject();
    if (!c.messages || !c.template_vars || (args.system && !add_message(c.messages, "system", args.system))) {
        fprintf(stderr, "loom chat: out of memory\n");
        goto done;
    }
    bool interactive = isatty(STDIN_FILENO);
    if (lm_chat_input_open(STDIN_FILENO, c.signal_fd, interactive, &input, &err) != LM_OK) {
        fprintf(stderr, "loom chat: %s\n", err.message);
        goto done;
    }
    if (interactive) {
        fprintf(stderr, "loom chat: %s. /help lists the commands; /exit quits, Ctrl-C stops an answer.\n",
                args.url ? remote.model : settings.engine.model_dir ? settings.engine.model_dir : "the bundled model");
        show_settings(&c);
    }
    rc = 0;
    for (bool quit = false; !quit;) {
        char *line = NULL;
        lm_chat_input_result in = lm_chat_input_read(input, &line);
        if (in == LM_CHAT_INPUT_EOF) {
            if (interactive) printf("\n");
            break;
        }
        if (in == LM_CHAT_INPUT_ERROR) {
            fprintf(stderr, "loom chat: reading input: %s\n", strerror(errno));
            rc = 1;
            break;
        }
        if (in == LM_CHAT_INPUT_INTERRUPT) {
            fprintf(stderr, "\n[type /exit or press Ctrl-D to quit]\n");
            continue;
        }
        if (in == LM_CHAT_INPUT_TOO_LONG) {
            fprintf(stderr, "loom chat: that message is longer than %d bytes; it was ignored\n", LM_CHAT_MESSAGE_MAX);
            continue;
        }
        line += strspn(line, " \t");
        if (!*line) continue;
        if (line[0] == '/' && line[1] != '/') {
            command(&c, line, &quit);
            continue;
        }
        if (line[0] == '/') line++; /* "//text" sends "/text" */
        if (!user_turn(&c, line)) rc = 1;
    }
done:
    lm_chat_input_close(input);
    lm_cli_images_clear(&c.images);
    cJSON_Delete(c.messages);
    cJSON_Delete(c.template_vars);
    loom_engine_destroy(c.engine);
    lm_prompt_encoder_close(&c.encoder);
    if (c.signal_fd >= 0) close(c.signal_fd);
    return rc;
}
