/* The token mask (grammar/token_mask.h). */
#include "grammar/token_mask.h"

#include <stdlib.h>
#include <string.h>

/* ------------------------------------------------------------------ trie */

typedef struct {
    const uint8_t *bytes;
    uint32_t len;
    int32_t id;
} token_ref;

static int compare_tokens(const void *a, const void *b) {
    const token_ref *x = a, *y = b;
    uint32_t n = x->len < y->len ? x->len : y->len;
    int c = memcmp(x->bytes, y->bytes, n);
    if (c) return c;
    if (x->len != y->len) return x->len < y->len ? -1 : 1;
    return x->id < y->id ? -1 : x->id > y->id;
}

/* Fills node `at` for the tokens [lo, hi) sharing their first `depth` bytes. */
static void build_node(lm_token_trie *t, uint32_t at, uint32_t lo, uint32_t hi, uint32_t depth) {
    lm_trie_node *node = &t->nodes[at];
    node->tok_lo = lo;
    node->tok_hi = hi;
    node->depth = (uint16_t)depth;
    if (depth > t->max_depth) t->max_depth = depth;
    uint32_t i = lo;
    while (i < hi && t->length[i] == depth) i++;
    node->n_end = i - lo;
    /* children: runs of equal byte at `depth` */
    uint32_t n_children = 0;
    for (uint32_t k = i; k < hi;) {
        uint8_t b = t->blob[t->offset[k] + depth];
        while (k < hi && t->blob[t->offset[k] + depth] == b) k++;
        n_children++;
    }
    node->n_children = (uint16_t)n_children;
    node->first_child = t->n_nodes;
    t->n_nodes += n_children;
    uint32_t child = node->first_child;
    for (uint32_t k = i; k < hi; child++) {
        uint8_t b = t->blob[t->offset[k] + depth];
        uint32_t start = k;
        while (k < hi && t->blob[t->offset[k] + depth] == b) k++;
        t->nodes[child].byte = b;
        build_node(t, child, start, k, depth + 1);
    }
}

/* A trie of refs[0..n) (sorted here; their bytes are copied). */
static lm_status trie_from_refs(int vocab, token_ref *refs, uint32_t n, lm_token_trie **out, lm_error *err) {
    *out = NULL;
    lm_token_trie *t = calloc(1, sizeof *t);
    if (!t) return lm_fail(err, LM_ERR_NOMEM, "out of memory");
    t->vocab = vocab;
    size_t total = 0;
    for (uint32_t i = 0; i < n; i++) total += refs[i].len;
    qsort(refs, n, sizeof *refs, compare_tokens);
    t->n_sorted = n;
    t->sorted = malloc(sizeof(int32_t) * (n ? n : 1));
    t->offset = malloc(sizeof(uint32_t) * (n ? n : 1));
    t->length = malloc(sizeof(uint32_t) * (n ? n : 1));
    t->blob = malloc(total ? total : 1);
    t->nodes = calloc(total + 1, sizeof *t->nodes);
    if (total > UINT32_MAX || !t->sorted || !t->offset || !t->length || !t->blob || !t->nodes) {
        lm_token_trie_free(t);
        return lm_fail(err, LM_ERR_NOMEM, "out of memory");
    }
    size_t at = 0;
    for (uint32_t i = 0; i < n; i++) {
        t->sorted[i] = refs[i].id;
        t->offset[i] = (uint32_t)at;
        t->length[i] = refs[i].len;
        memcpy(t->blob + at, refs[i].bytes, refs[i].len);
        at += refs[i].len;
    }
    t->n_nodes = 1;
    build_node(t, 0, 0, n, 0);
    *out = t;
    return LM_OK;
}

lm_status lm_token_trie_build(int vocab, const char *const *bytes, const size_t *lengths, lm_token_trie **out,
                              lm_error *err) {
    *out = NULL;
    if (vocab <= 0 || vocab > (1 << 28)) return lm_fail(err, LM_ERR_INVALID, "token trie: bad vocabulary size %d", vocab);
    token_ref *refs = malloc(sizeof *refs * (size_t)vocab);
    if (!refs) return lm_fail(err, LM_ERR_NOMEM, "out of memory");
    uint32_t n = 0;
    for (int id = 0; id < vocab; id++) {
        if (!bytes[id] || lengths[id] == 0 || lengths[id] > LM_TRIE_MAX_TOKEN_BYTES) continue;
        refs[n++] = (token_ref){(const uint8_t *)bytes[id], (uint32_t)lengths[id], id};
    }
    lm_status st = trie_from_refs(vocab, refs, n, out, err);
    free(refs);
    return st;
}

void lm_token_trie_free(lm_token_trie *t) {
    if (!t) return;
    free(t->sorted);
    free(t->offset);
    free(t->length);
    free(t->blob);
    free(t->nodes);
    free(t);
}

/* ---------------------------------------------------------------- frames */

struct lm_frame {
    uint32_t position;
    /* accepted tokens: a bitset over ids, or a list when that is smaller */
    uint64_t *bits;
    int32_t *ids;
    uint32_t n_ids, cap_ids;
    /* The tokens that complete the frame and go on, as a trie of the bytes
     * they go on with (one entry per completion point; NULL when none).
     * Many tokens share these tails (a string's `",` `"}` `":`), so at mask
     * time one walk of this small trie from the stack below the frame
     * replaces a walk per trie node where the frame completes. */
    lm_token_trie *after;
};

static void frame_free(lm_frame *f) {
    if (!f) return;
    free(f->bits);
    free(f->ids);
    lm_token_trie_free(f->after);
    free(f);
}

static size_t mask_words(const lm_token_trie *t) { return ((size_t)t->vocab + 63) / 64; }

lm_status lm_mask_frames_create(const lm_token_trie *trie, lm_mask_frames **out, lm_error *err) {
    lm_mask_frames *f = calloc(1, sizeof *f);
    if (f) f->slots = calloc(2 * LM_MASK_MAX_FRAMES, sizeof *f->slots);
    if (!f || !f->slots) {
        free(f);
        *out = NULL;
        return lm_fail(err, LM_ERR_NOMEM, "out of memory");
    }
    f->refs = 1;
    f->trie = trie;
    *out = f;
    return LM_OK;
}

lm_mask_frames *lm_mask_frames_ref(lm_mask_frames *f) {
    f->refs++;
    return f;
}

static void clear_frames(lm_mask_frames *f) {
    for (uint32_t i = 0; i < 2 * LM_MASK_MAX_FRAMES; i++) {
        frame_free(f->slots[i]);
        f->slots[i] = NULL;
    }
    f->n_frames = 0;
}

void lm_mask_frames_unref(lm_mask_frames *f) {
    if (!f || --f->refs > 0) return;
    clear_frames(f);
    free(f->slots);
    free(f);
}

lm_status lm_masker_init(lm_masker *m, const lm_grammar *g, const lm_token_trie *trie, lm_mask_frames *frames,
                         lm_error *err) {
    memset(m, 0, sizeof *m);
    m->grammar = g;
    m->trie = trie;
    lm_status st = lm_gmatcher_init(&m->matcher, g, err);
    if (st != LM_OK) return st;
    if (frames && frames->trie != trie) {
        lm_masker_free(m);
        return lm_fail(err, LM_ERR_INTERNAL, "token mask: a frame table of another vocabulary");
    }
    if (frames) m->frames = lm_mask_frames_ref(frames);
    else if ((st = lm_mask_frames_create(trie, &m->frames, err)) != LM_OK) {
        lm_masker_free(m);
        return st;
    }
    m->path = calloc((size_t)trie->max_depth + 2, sizeof *m->path);
    if (!m->path) {
        lm_masker_free(m);
        return lm_fail(err, LM_ERR_NOMEM, "out of memory");
    }
    return LM_OK;
}

void lm_masker_free(lm_masker *m) {
    lm_mask_frames_unref(m->frames);
    if (m->path)
        for (uint32_t d = 0; d < m->trie->max_depth + 2; d++) lm_gstate_free(&m->path[d]);
    free(m->path);
    lm_gstate_free(&m->one);
    lm_gmatcher_free(&m->matcher);
    memset(m, 0, sizeof *m);
}

static bool push_u32(uint32_t **p, uint32_t *n, uint32_t *cap, uint32_t v) {
    if (*n == *cap) {
        uint32_t c = *cap ? *cap * 2 : 16;
        uint32_t *q = realloc(*p, sizeof(uint32_t) * c);
        if (!q) return false;
        *p = q;
        *cap = c;
    }
    (*p)[(*n)++] = v;
    return true;
}

static bool frame_accept_range(lm_frame *f, const lm_token_trie *t, uint32_t lo, uint32_t hi) {
    for (uint32_t i = lo; i < hi; i++) {
        int32_t id = t->sorted[i];
        if (f->bits) {
            f->bits[id >> 6] |= 1ull << (id & 63);
            continue;
        }
        if (!push_u32((uint32_t **)&f->ids, &f->n_ids, &f->cap_ids, (uint32_t)id)) return false;
        /* past the size of a bitset, switch to one */
        if ((size_t)f->n_ids * 4 > mask_words(t) * 8) {
            f->bits = calloc(mask_words(t), sizeof(uint64_t));
            if (!f->bits) return false;
            for (uint32_t k = 0; k < f->n_ids; k++) f->bits[f->ids[k] >> 6] |= 1ull << (f->ids[k] & 63);
            free(f->ids);
            f->ids = NULL;
            f->n_ids = f->cap_ids = 0;
        }
    }
    return true;
}

/* The tails of the tokens past the frame's completion points, gathered while
 * the frame is built (refs into the vocabulary trie's bytes). */
typedef struct {
    token_ref *refs;
    uint32_t n, cap;
} tail_list;

static bool tail_push(tail_list *l, const lm_token_trie *t, uint32_t sorted_index, uint32_t depth) {
    if (l->n == l->cap) {
        uint32_t c = l->cap ? l->cap * 2 : 256;
        token_ref *q = realloc(l->refs, sizeof *q * c);
        if (!q) return false;
        l->refs = q;
        l->cap = c;
    }
    l->refs[l->n++] = (token_ref){t->blob + t->offset[sorted_index] + depth, t->length[sorted_index] - depth,
                                  t->sorted[sorted_index]};
    return true;
}

/* Walks `trie` below `node` from state path[depth], marking the tokens a
 * surviving state reaches.  In frame mode (frame != NULL) the tokens under a
 * child where the frame completes and tokens go on are added to `tails`. */
typedef struct {
    lm_masker *m;
    const lm_token_trie *trie;
    lm_frame *frame;   /* frame mode */
    tail_list *tails;  /* frame mode */
    uint64_t *bits;    /* mask mode */
    bool failed;
} walk_ctx;

static void mark_tokens(walk_ctx *w, uint32_t lo, uint32_t hi) {
    const lm_token_trie *t = w->trie;
    if (w->frame) {
        if (!frame_accept_range(w->frame, t, lo, hi)) w->failed = true;
        return;
    }
    for (uint32_t i = lo; i < hi; i++) {
        int32_t id = t->sorted[i];
        w->bits[id >> 6] |= 1ull << (id & 63);
    }
}

static void walk(walk_ctx *w, uint32_t node_index, uint32_t depth) {
    lm_masker *m = w->m;
    const lm_token_trie *t = w->trie;
    const lm_trie_node *node = &t->nodes[node_index];
    lm_byte_class next;
    lm_gstate_next_bytes(m->grammar, &m->path[depth], &next);
    for (uint32_t c = 0; c < node->n_children && !w->failed; c++) {
        uint32_t ci = node->first_child + c;
        const lm_trie_node *child = &t->nodes[ci];
        if (!lm_byte_class_has(&next, child->byte)) continue;
        lm_gstate *s = &m->path[depth + 1];
        bool alive = lm_gmatcher_advance(&m->matcher, &m->path[depth], child->byte, s);
        if (m->matcher.failed) {
            w->failed = true;
            return;
        }
        if (!alive) continue;
        bool complete = lm_gstate_complete(s);
        mark_tokens(w, child->tok_lo, child->tok_lo + child->n_end);
        if (w->frame && complete)
            for (uint32_t i = child->tok_lo + child->n_end; i < child->tok_hi; i++)
                if (!tail_push(w->tails, t, i, depth + 1)) {
                    w->failed = true;
                    return;
                }
        if (s->n_stacks > (complete ? 1u : 0u) && child->n_children > 0) walk(w, ci, depth + 1);
    }
}

static lm_frame *find_frame(lm_masker *m, uint32_t position, lm_error *err) {
    lm_mask_frames *table = m->frames;
    uint32_t cap = 2 * LM_MASK_MAX_FRAMES;
    uint32_t h = (position * 2654435761u) & (cap - 1);
    for (uint32_t probe = 0; probe < cap; probe++, h = (h + 1) & (cap - 1)) {
        if (!table->slots[h]) break;
        if (table->slots[h]->position == position) {
            table->reused++;
            return table->slots[h];
        }
    }
    if (table->n_frames >= LM_MASK_MAX_FRAMES) {
        clear_frames(table);
        h = (position * 2654435761u) & (cap - 1);
    }
    lm_frame *f = calloc(1, sizeof *f);
    if (!f) {
        lm_fail(err, LM_ERR_NOMEM, "out of memory");
        return NULL;
    }
    f->position = position;
    tail_list tails = {0};
    walk_ctx w = {.m = m, .trie = m->trie, .frame = f, .tails = &tails};
    if (!lm_gmatcher_start_at(&m->matcher, position, &m->path[0]) && m->matcher.failed) w.failed = true;
    if (!w.failed) walk(&w, 0, 0);
    if (!w.failed && tails.n > 0 && trie_from_refs(m->trie->vocab, tails.refs, tails.n, &f->after, err) != LM_OK)
        w.failed = true;
    free(tails.refs);
    if (w.failed) {
        frame_free(f);
        lm_fail(err, LM_ERR_NOMEM, "token mask: out of memory");
        return NULL;
    }
    while (table->slots[h]) h = (h + 1) & (cap - 1);
    table->slots[h] = f;
    table->n_frames++;
    table->built++;
    return f;
}

lm_status lm_masker_compute(lm_masker *m, const lm_gstate *state, uint64_t *bits, bool *complete, lm_error *err) {
    size_t words = mask_words(m->trie);
    memset(bits, 0, sizeof(uint64_t) * words);
    *complete = false;
    uint32_t i = 0, len;
    const uint32_t *stack;
    while (lm_gstate_next_stack(state, &i, &stack, &len)) {
        if (len == 0) {
            *complete = true;
            continue;
        }
        lm_frame *f = find_frame(m, stack[len - 1], err);
        if (!f) return err ? err->code : LM_ERR_NOMEM;
        if (f->bits)
            for (size_t k = 0; k < words; k++) bits[k] |= f->bits[k];
        else
            for (uint32_t k = 0; k < f->n_ids; k++) bits[f->ids[k] >> 6] |= 1ull << (f->ids[k] & 63);
        if (!f->after) continue;
        /* past a completion point the frame is done: the tails are
         * matched from the stack below it */
        if (!lm_gmatcher_expand_stack(&m->matcher, stack, len - 1, &m->path[0])) {
            if (m->matcher.failed) return lm_fail(err, LM_ERR_NOMEM, "token mask: out of memory");
            continue; /* nothing lies below the frame that could continue */
        }
        walk_ctx w = {.m = m, .trie = f->after, .bits = bits};
        walk(&w, 0, 0);
        if (w.failed) return lm_fail(err, LM_ERR_NOMEM, "token mask: out of memory");
    }
    return LM_OK;
}

bool lm_masker_accept_token(lm_masker *m, lm_gstate *state, lm_gstate *scratch, const char *bytes, size_t len) {
    if (len == 0) return false;
    lm_gstate *a = scratch, *b = &m->one;
    const lm_gstate *from = state;
    for (size_t k = 0; k < len; k++) {
        if (!lm_gmatcher_advance(&m->matcher, from, (uint8_t)bytes[k], a)) return false;
        from = a;
        lm_gstate *tmp = a;
        a = b;
        b = tmp;
    }
    return lm_gstate_copy(state, from);
}
