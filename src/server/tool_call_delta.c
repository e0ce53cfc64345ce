#include "server/tool_call_delta.h"

#include <string.h>

bool lm_tool_delta_next(lm_tool_delta_cursor *c, const lm_tool_call_list *calls, const lm_tool_parser *parser,
                        lm_tool_delta *out) {
    if (c->index < calls->n) {
        const lm_tool_call *call = &calls->items[c->index];
        size_t len = strlen(call->arguments);
        size_t sent = c->sent <= len ? c->sent : len;
        *out = (lm_tool_delta){.index = c->index, .id = call->id, .name = call->name, .first = !c->started,
                               .fragment = call->arguments + sent, .fragment_len = len - sent, .sent_before = sent,
                               .last = true, .arguments = call->arguments};
        c->index++;
        c->started = false;
        c->sent = 0;
        return true;
    }
    lm_tool_call_view open;
    if (!parser || c->index != calls->n || !lm_tool_parser_open_call(parser, &open)) return false;
    if (c->started && open.arguments_len <= c->sent) return false;
    size_t sent = c->started && c->sent <= open.arguments_len ? c->sent : 0;
    *out = (lm_tool_delta){.index = c->index, .id = open.id, .name = open.name, .first = !c->started,
                           .fragment = open.arguments + sent, .fragment_len = open.arguments_len - sent,
                           .sent_before = sent, .last = false, .arguments = NULL};
    c->started = true;
    c->sent = open.arguments_len;
    return true;
}
