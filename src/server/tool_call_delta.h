/* What a streamed choice's tool calls gained since they were last sent:
 * the calls the parser finished and the one it has open (announced with
 * lm_tool_parser's stream_calls), as per-call deltas in order.  The
 * fragments of one call concatenate to its finished arguments. */
#ifndef LOOM_SERVER_TOOL_CALL_DELTA_H
#define LOOM_SERVER_TOOL_CALL_DELTA_H

#include <stdbool.h>
#include <stddef.h>

#include "server/tool_parser.h"

/* Where the sending stands: the call being sent, whether its id and name
 * went out, and how many bytes of its arguments. */
typedef struct {
    int index;
    bool started;
    size_t sent;
} lm_tool_delta_cursor;

typedef struct {
    int index;
    const char *id, *name;
    bool first;            /* the call's first delta: its id and name are new */
    const char *fragment;  /* arguments' bytes not sent before (may be empty) */
    size_t fragment_len;
    size_t sent_before;    /* bytes of the arguments sent before this fragment */
    bool last;             /* the call is finished: arguments is its whole text */
    const char *arguments;
} lm_tool_delta;

/* The next delta (false: nothing new). */
bool lm_tool_delta_next(lm_tool_delta_cursor *cursor, const lm_tool_call_list *calls, const lm_tool_parser *parser,
                        lm_tool_delta *out);

#endif
