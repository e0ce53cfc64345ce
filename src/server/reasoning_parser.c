#include "server/reasoning_parser.h"

#include <string.h>

#include "server/marker.h"

#define THINK_OPEN "<think>"
#define THINK_CLOSE "</think>"

void lm_reasoning_parser_init(lm_reasoning_parser *p, bool starts_in_reasoning) {
    memset(p, 0, sizeof *p);
    p->state = starts_in_reasoning ? LM_REASONING_INSIDE : LM_REASONING_BEFORE;
    p->skip_newlines = starts_in_reasoning;
    p->at_start = !starts_in_reasoning;
}

/* At the start of the output: drops newlines that come before an opening
 * <think>.  False while it cannot tell yet (hold everything). */
static bool settle_start(lm_reasoning_parser *p, bool final) {
    const char *s = lm_sbuf_str(&p->pending);
    size_t len = p->pending.len, k = 0;
    while (k < len && (s[k] == '\n' || s[k] == '\r')) k++;
    size_t lo = strlen(THINK_OPEN), rest = len - k;
    bool may_open = rest < lo ? memcmp(s + k, THINK_OPEN, rest) == 0 : memcmp(s + k, THINK_OPEN, lo) == 0;
    if (!final && may_open && rest < lo) return false; /* newlines, maybe a partial <think>: wait */
    if (may_open && rest >= lo) lm_sbuf_consume(&p->pending, k);
    p->at_start = false;
    return true;
}

void lm_reasoning_parser_free(lm_reasoning_parser *p) { lm_sbuf_free(&p->pending); }

/* Emits pending[0..n) to out (dropping leading newlines while asked to). */
static bool emit(lm_reasoning_parser *p, size_t n, lm_sbuf *out) {
    const char *s = lm_sbuf_str(&p->pending);
    size_t start = 0;
    if (p->skip_newlines) {
        while (start < n && (s[start] == '\n' || s[start] == '\r')) start++;
        if (start < n) p->skip_newlines = false;
    }
    bool ok = lm_sbuf_append(out, s + start, n - start);
    lm_sbuf_consume(&p->pending, n);
    return ok;
}

/* The earliest stray marker in s[0..len) (see drop_stray): its offset, or
 * len; *stray_len its length, *hold the bytes that may start one. */
static size_t find_stray(const lm_reasoning_parser *p, const char *s, size_t len, size_t *stray_len,
                         size_t *hold) {
    *hold = 0;
    *stray_len = 0;
    if (!p->drop_stray) return len;
    const char *strays[2] = {p->state == LM_REASONING_BEFORE ? THINK_CLOSE : THINK_OPEN,
                             p->state == LM_REASONING_AFTER ? THINK_CLOSE : NULL};
    size_t best = len;
    for (int i = 0; i < 2 && strays[i]; i++) {
        size_t at = lm_marker_find(s, len, strays[i]);
        if (at < best) best = at, *stray_len = strlen(strays[i]);
        size_t h = lm_marker_partial(s, len, strays[i]);
        if (h > *hold) *hold = h;
    }
    return best;
}

static bool step(lm_reasoning_parser *p, lm_sbuf *reasoning, lm_sbuf *content, bool final) {
    for (;;) {
        const char *s = lm_sbuf_str(&p->pending);
        size_t len = p->pending.len;
        if (len == 0) return true;
        if (p->at_start && p->state == LM_REASONING_BEFORE) {
            if (!settle_start(p, final)) return true;
            continue;
        }
        size_t stray_len, stray_hold;
        size_t stray_at = find_stray(p, s, len, &stray_len, &stray_hold);
        if (p->state == LM_REASONING_AFTER) {
            if (stray_at < len) {
                if (!emit(p, stray_at, content)) return false;
                lm_sbuf_consume(&p->pending, stray_len);
                continue;
            }
            return emit(p, final ? len : len - stray_hold, content);
        }
        const char *marker = p->state == LM_REASONING_BEFORE ? THINK_OPEN : THINK_CLOSE;
        lm_sbuf *out = p->state == LM_REASONING_BEFORE ? content : reasoning;
        size_t at = lm_marker_find(s, len, marker);
        if (stray_at < at) { /* dropped: what comes before it stays where it is */
            if (!emit(p, stray_at, out)) return false;
            lm_sbuf_consume(&p->pending, stray_len);
            continue;
        }
        if (at < len) {
            size_t keep = at;
            /* Newlines before </think> are layout, not reasoning. */
            if (p->state == LM_REASONING_INSIDE)
                while (keep > 0 && (s[keep - 1] == '\n' || s[keep - 1] == '\r')) keep--;
            if (!emit(p, keep, out)) return false;
            lm_sbuf_consume(&p->pending, at - keep + strlen(marker));
            p->state = p->state == LM_REASONING_BEFORE ? LM_REASONING_INSIDE : LM_REASONING_AFTER;
            p->skip_newlines = true;
            continue;
        }
        if (final) return emit(p, len, out);
        size_t hold = lm_marker_partial(s, len, marker);
        if (stray_hold > hold) hold = stray_hold;
        size_t n = len - hold;
        if (p->state == LM_REASONING_INSIDE)
            while (n > 0 && (s[n - 1] == '\n' || s[n - 1] == '\r')) n--;
        return emit(p, n, out);
    }
}

bool lm_reasoning_parser_feed(lm_reasoning_parser *p, const char *text, size_t len,
                              lm_sbuf *reasoning, lm_sbuf *content) {
    if (!lm_sbuf_append(&p->pending, text, len)) return false;
    return step(p, reasoning, content, false);
}

bool lm_reasoning_parser_finish(lm_reasoning_parser *p, lm_sbuf *reasoning, lm_sbuf *content) {
    return step(p, reasoning, content, true);
}

bool lm_prompt_opens_reasoning(const char *prompt, size_t len) {
    size_t open_at = len, close_at = len;
    size_t lo = strlen(THINK_OPEN), lc = strlen(THINK_CLOSE);
    for (size_t i = len; i-- > 0;) {
        if (open_at == len && i + lo <= len && memcmp(prompt + i, THINK_OPEN, lo) == 0) open_at = i;
        if (close_at == len && i + lc <= len && memcmp(prompt + i, THINK_CLOSE, lc) == 0) close_at = i;
        if (open_at != len) break;
    }
    return open_at != len && (close_at == len || close_at < open_at);
}
