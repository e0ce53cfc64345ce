/* loom chat's input (see chat_input.h): a line source (libedit on a
 * terminal, a buffered reader on a pipe) and the message assembly on top. */
#include "cli/chat_input.h"

#include <errno.h>
#include <histedit.h>
#include <poll.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/signalfd.h>
#include <unistd.h>
#include <wchar.h>

#define HISTORY_LINES 1000

typedef enum { LINE_OK, LINE_EOF, LINE_INTERRUPT, LINE_TOO_LONG, LINE_ERROR } line_result;

struct lm_chat_input {
    int fd, signal_fd;
    /* pipe: bytes read ahead */
    char buf[LM_CHAT_MESSAGE_MAX + 1];
    size_t len, consumed;
    bool eof;
    /* terminal */
    EditLine *el;
    History *history;
    const char *prompt;
    bool interrupted;
    mbstate_t mb;
    /* the message being assembled */
    char message[LM_CHAT_MESSAGE_MAX + 1];
    size_t message_len;
};

bool lm_chat_take_interrupt(int signal_fd) {
    struct pollfd p = {.fd = signal_fd, .events = POLLIN};
    if (poll(&p, 1, 0) != 1) return false;
    struct signalfd_siginfo info;
    return read(signal_fd, &info, sizeof info) == (ssize_t)sizeof info;
}

/* Waits for input or a SIGINT: 1 input, 0 interrupt, -1 error. */
static int wait_input(lm_chat_input *in) {
    for (;;) {
        struct pollfd p[2] = {{.fd = in->fd, .events = POLLIN}, {.fd = in->signal_fd, .events = POLLIN}};
        if (poll(p, 2, -1) < 0) {
            if (errno == EINTR) continue;
            return -1;
        }
        if (p[1].revents & POLLIN) {
            lm_chat_take_interrupt(in->signal_fd);
            return 0;
        }
        if (p[0].revents & (POLLIN | POLLHUP | POLLERR)) return 1;
    }
}

/* ------------------------------------------------------------ pipe */

/* One line (without its newline) from the read-ahead buffer; lines longer
 * than the buffer are skipped whole and reported as LINE_TOO_LONG. */
static line_result pipe_line(lm_chat_input *in, char **line) {
    bool skipping = false;
    memmove(in->buf, in->buf + in->consumed, in->len - in->consumed);
    in->len -= in->consumed;
    in->consumed = 0;
    for (;;) {
        char *nl = memchr(in->buf, '\n', in->len);
        if (nl) {
            size_t n = (size_t)(nl - in->buf);
            if (skipping) {
                memmove(in->buf, nl + 1, in->len - n - 1);
                in->len -= n + 1;
                return LINE_TOO_LONG;
            }
            *nl = '\0';
            if (n && in->buf[n - 1] == '\r') in->buf[n - 1] = '\0';
            *line = in->buf;
            in->consumed = n + 1;
            return LINE_OK;
        }
        if (in->eof) {
            if (in->len == 0 || skipping) return LINE_EOF;
            in->buf[in->len] = '\0';
            *line = in->buf;
            in->consumed = in->len;
            return LINE_OK;
        }
        if (in->len == LM_CHAT_MESSAGE_MAX) { /* drop what we have, keep skipping to the newline */
            in->len = 0;
            skipping = true;
        }
        int w = wait_input(in);
        if (w < 0) return LINE_ERROR;
        if (w == 0) {
            in->len = 0; /* the line being typed is abandoned, as in a shell */
            return LINE_INTERRUPT;
        }
        ssize_t got = read(in->fd, in->buf + in->len, LM_CHAT_MESSAGE_MAX - in->len);
        if (got < 0 && errno == EINTR) continue;
        if (got < 0) return LINE_ERROR;
        if (got == 0) in->eof = true;
        in->len += (size_t)got;
    }
}

/* ------------------------------------------------------------ terminal */

static lm_chat_input *input_of(EditLine *el) {
    void *data = NULL;
    el_get(el, EL_CLIENTDATA, &data);
    return data;
}

static char *prompt_of(EditLine *el) { return (char *)input_of(el)->prompt; }

/* libedit's character source: the terminal's bytes as wide characters,
 * while watching the signalfd (a SIGINT ends el_gets with an error). */
static int read_char(EditLine *el, wchar_t *out) {
    lm_chat_input *in = input_of(el);
    for (;;) {
        int w = wait_input(in);
        if (w <= 0) {
            in->interrupted = w == 0;
            errno = EINTR;
            return -1;
        }
        unsigned char byte;
        ssize_t got = read(in->fd, &byte, 1);
        if (got < 0 && errno == EINTR) continue;
        if (got <= 0) return got == 0 ? 0 : -1;
        wchar_t wc;
        char c = (char)byte;
        size_t r = mbrtowc(&wc, &c, 1, &in->mb);
        if (r == (size_t)-2) continue; /* more bytes of this character */
        if (r == (size_t)-1) {
            memset(&in->mb, 0, sizeof in->mb);
            wc = (wchar_t)byte;
        }
        *out = wc;
        return 1;
    }
}

static lm_status terminal_open(lm_chat_input *in, lm_error *err) {
    in->el = el_init("loom", stdin, stdout, stderr);
    in->history = history_init();
    if (!in->el || !in->history) return lm_fail(err, LM_ERR_INTERNAL, "cannot start line editing (libedit)");
    HistEvent ev;
    history(in->history, &ev, H_SETSIZE, HISTORY_LINES);
    history(in->history, &ev, H_SETUNIQUE, 1);
    el_set(in->el, EL_CLIENTDATA, in);
    el_set(in->el, EL_EDITOR, "emacs");
    el_set(in->el, EL_SIGNAL, 0);
    el_set(in->el, EL_PROMPT, prompt_of);
    el_set(in->el, EL_HIST, history, in->history);
    el_set(in->el, EL_GETCFN, read_char);
    el_source(in->el, NULL); /* ~/.editrc, as other libedit programs */
    return LM_OK;
}

static line_result terminal_line(lm_chat_input *in, const char *prompt, char **line) {
    in->prompt = prompt;
    in->interrupted = false;
    int count = 0;
    const char *got = el_gets(in->el, &count);
    if (!got || count <= 0) {
        if (in->interrupted) {
            fputc('\n', stdout);
            fflush(stdout);
            return LINE_INTERRUPT;
        }
        return count < 0 ? LINE_ERROR : LINE_EOF;
    }
    size_t n = strlen(got);
    while (n && (got[n - 1] == '\n' || got[n - 1] == '\r')) n--;
    if (n >= sizeof in->buf) return LINE_TOO_LONG;
    memcpy(in->buf, got, n);
    in->buf[n] = '\0';
    if (n) {
        HistEvent ev;
        history(in->history, &ev, H_ENTER, in->buf);
    }
    *line = in->buf;
    return LINE_OK;
}

/* ------------------------------------------------------------ messages */

lm_status lm_chat_input_open(int fd, int signal_fd, bool terminal, lm_chat_input **out, lm_error *err) {
    lm_chat_input *in = calloc(1, sizeof *in);
    if (!in) return lm_fail(err, LM_ERR_NOMEM, "out of memory");
    in->fd = fd;
    in->signal_fd = signal_fd;
    if (terminal && terminal_open(in, err) != LM_OK) {
        lm_chat_input_close(in);
        return err->code;
    }
    *out = in;
    return LM_OK;
}

void lm_chat_input_close(lm_chat_input *in) {
    if (!in) return;
    if (in->el) el_end(in->el);
    if (in->history) history_end(in->history);
    free(in);
}

static bool append(lm_chat_input *in, const char *text, size_t n, bool newline) {
    if (in->message_len + n + (newline ? 1 : 0) > LM_CHAT_MESSAGE_MAX) return false;
    if (newline) in->message[in->message_len++] = '\n';
    memcpy(in->message + in->message_len, text, n);
    in->message_len += n;
    in->message[in->message_len] = '\0';
    return true;
}

lm_chat_input_result lm_chat_input_read(lm_chat_input *in, char **message) {
    in->message_len = 0;
    in->message[0] = '\0';
    bool block = false, continued = false, too_long = false;
    int lines = 0;
    for (;;) {
        const char *prompt = block || continued ? "... " : "> ";
        char *line = NULL;
        line_result r = in->el ? terminal_line(in, prompt, &line) : pipe_line(in, &line);
        if (r == LINE_INTERRUPT) return LM_CHAT_INPUT_INTERRUPT;
        if (r == LINE_ERROR) return LM_CHAT_INPUT_ERROR;
        if (r == LINE_TOO_LONG) {
            if (!block && !continued) return LM_CHAT_INPUT_TOO_LONG;
            too_long = true;
            continue;
        }
        if (r == LINE_EOF) {
            if (block || continued) break; /* what was typed so far is the message */
            return LM_CHAT_INPUT_EOF;
        }
        size_t n = strlen(line);
        if (strcmp(line, "\"\"\"") == 0) {
            if (block) break;
            if (!continued) {
                block = true;
                continue;
            }
        }
        if (!block && n && line[n - 1] == '\\') {
            too_long |= !append(in, line, n - 1, lines++ > 0);
            continued = true;
            continue;
        }
        too_long |= !append(in, line, n, lines++ > 0);
        if (!block) break;
        continued = false;
    }
    if (too_long) return LM_CHAT_INPUT_TOO_LONG;
    *message = in->message;
    return LM_CHAT_INPUT_MESSAGE;
}
