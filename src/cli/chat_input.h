/* What `loom chat` reads: one message at a time.  On a terminal through
 * libedit (line editing, history with the up arrow); from a pipe, plain
 * lines.  A message is one line, or several: a line ending in a backslash
 * continues on the next, and a line holding only """ opens a block that
 * the next such line closes.  Ctrl-C (SIGINT, read from a signalfd the
 * caller made) abandons the message being typed. */
#ifndef LOOM_CLI_CHAT_INPUT_H
#define LOOM_CLI_CHAT_INPUT_H

#include <stdbool.h>

#include "base/error.h"

#define LM_CHAT_MESSAGE_MAX (64 * 1024) /* bytes of one message */

typedef enum {
    LM_CHAT_INPUT_MESSAGE,
    LM_CHAT_INPUT_EOF,
    LM_CHAT_INPUT_INTERRUPT,
    LM_CHAT_INPUT_TOO_LONG,
    LM_CHAT_INPUT_ERROR,
} lm_chat_input_result;

typedef struct lm_chat_input lm_chat_input;

/* terminal: edit lines with libedit on fd (stdin) and stdout. */
lm_status lm_chat_input_open(int fd, int signal_fd, bool terminal, lm_chat_input **out, lm_error *err);
/* *message is valid until the next call. */
lm_chat_input_result lm_chat_input_read(lm_chat_input *in, char **message);
void lm_chat_input_close(lm_chat_input *in);

/* True if a SIGINT is pending on the signalfd (and consumes it). */
bool lm_chat_take_interrupt(int signal_fd);

#endif
