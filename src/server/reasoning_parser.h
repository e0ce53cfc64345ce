/* Splits model output into reasoning (between <think> and </think>) and
 * content, incrementally: text can be fed in pieces cut anywhere, even inside
 * a marker, and the result is the same as feeding it whole.  Qwen3 / Qwen3.5
 * and GLM-4.6V use the same markers; their templates may open <think> in the
 * prompt, in which case the output starts inside the reasoning. */
#ifndef LOOM_SERVER_REASONING_PARSER_H
#define LOOM_SERVER_REASONING_PARSER_H

#include <stdbool.h>
#include <stddef.h>

#include "server/sbuf.h"

typedef enum {
    LM_REASONING_BEFORE, /* content so far; a <think> would open reasoning */
    LM_REASONING_INSIDE, /* inside <think> ... */
    LM_REASONING_AFTER,  /* after </think>: everything is content */
} lm_reasoning_state;

typedef struct {
    lm_reasoning_state state;
    bool skip_newlines; /* drop newlines right after <think> or </think> */
    bool at_start;      /* nothing classified yet: newlines before an opening <think> are layout
                         * (GLM-4.6's generation prompt ends at <|assistant|>, the model writes
                         * "\n<think>") and are dropped */
    lm_sbuf pending;    /* text not yet classified (a possible partial marker) */
    bool drop_stray;    /* a <think> inside the reasoning or after it, or a </think> outside it, is
                         * dropped (set after init: the markers are special tokens the client
                         * asked to skip) */
} lm_reasoning_parser;

void lm_reasoning_parser_init(lm_reasoning_parser *p, bool starts_in_reasoning);
/* Appends what can be classified so far to reasoning / content.  False when
 * out of memory. */
bool lm_reasoning_parser_feed(lm_reasoning_parser *p, const char *text, size_t len,
                              lm_sbuf *reasoning, lm_sbuf *content);
/* Flushes what is held back at the end of the output. */
bool lm_reasoning_parser_finish(lm_reasoning_parser *p, lm_sbuf *reasoning, lm_sbuf *content);
void lm_reasoning_parser_free(lm_reasoning_parser *p);

/* True when the rendered prompt leaves a <think> open (its last <think> has
 * no </think> after it), so generation starts inside the reasoning. */
bool lm_prompt_opens_reasoning(const char *prompt, size_t len);

#endif
