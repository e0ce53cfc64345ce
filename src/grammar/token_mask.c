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
    /* sized for the worst case (no shared prefixes): give the rest back */
    lm_trie_node *fitted = realloc(t->nodes, sizeof *t->nodes * t->n_nodes);
    if (fitted) t->nodes = fitted;
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
    uint32_t key[LM_MASK_MAX_FRAME_DEPTH]; /* the stack's top `depth` positions, bottom first */
    uint32_t depth;
    bool deep; /* too many tails: stacks deeper than `depth` use a frame of one more position */
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
    /* Completion points with more than LM_MASK_TAIL_COPY tokens below them
     * (whitespace before anything): their vocabulary-trie nodes, walked in
     * place rather than copied into `after`. */
    uint32_t *direct;
    uint32_t n_direct, cap_direct;
};

#define LM_MASK_TAIL_COPY 256

uint32_t lm_frame_depth(const lm_frame *f) { return f->depth; }

static void frame_free(lm_frame *f) {
    if (!f) return;
    free(f->bits);
    free(f->ids);
    lm_token_trie_free(f->after);
    free(f->direct);
    free(f);
}

/* ---------------------------------------------------------- state memo */

#define LM_MEMO_UNKNOWN (-1)
#define LM_MEMO_DEAD (-2)

static void memo_free(lm_state_memo *memo) {
    free(memo->words);
    free(memo->offset);
    free(memo->n_state_words);
    free(memo->n_stacks);
    free(memo->complete);
    free(memo->next);
    free(memo->trans);
    free(memo->slots);
    memset(memo, 0, sizeof *memo);
}

static bool memo_init(lm_state_memo *memo) {
    memset(memo, 0, sizeof *memo);
    memo->words = malloc(sizeof(uint32_t) * LM_MASK_MEMO_WORDS);
    memo->offset = malloc(sizeof(uint32_t) * LM_MASK_MEMO_STATES);
    memo->n_state_words = malloc(sizeof(uint32_t) * LM_MASK_MEMO_STATES);
    memo->n_stacks = malloc(sizeof(uint32_t) * LM_MASK_MEMO_STATES);
    memo->complete = malloc(LM_MASK_MEMO_STATES);
    memo->next = malloc(sizeof(lm_byte_class) * LM_MASK_MEMO_STATES);
    memo->trans = malloc(sizeof(int32_t) * 256 * LM_MASK_MEMO_STATES);
    memo->slots = calloc(2 * LM_MASK_MEMO_STATES, sizeof(uint32_t));
    memo->max_states = LM_MASK_MEMO_STATES;
    if (!memo->words || !memo->offset || !memo->n_state_words || !memo->n_stacks || !memo->complete || !memo->next ||
        !memo->trans || !memo->slots) {
        memo_free(memo);
        return false;
    }
    return true;
}

static void memo_clear(lm_state_memo *memo) {
    memset(memo->slots, 0, sizeof(uint32_t) * 2 * LM_MASK_MEMO_STATES);
    memo->n_states = 0;
    memo->n_words = 0;
}

static uint32_t hash_state(const lm_gstate *s) {
    uint32_t h = 2166136261u ^ s->n_stacks;
    for (uint32_t i = 0; i < s->n_words; i++) h = (h ^ s->words[i]) * 16777619u;
    return h;
}

/* The memo's state equal to s, added if new; LM_MASK_NO_STATE when full. */
static uint32_t memo_intern(lm_state_memo *memo, const lm_grammar *g, const lm_gstate *s) {
    uint32_t mask = 2 * LM_MASK_MEMO_STATES - 1, h = hash_state(s) & mask;
    for (;; h = (h + 1) & mask) {
        uint32_t slot = memo->slots[h];
        if (!slot) break;
        uint32_t id = slot - 1;
        if (memo->n_stacks[id] == s->n_stacks && memo->n_state_words[id] == s->n_words &&
            memcmp(memo->words + memo->offset[id], s->words, sizeof(uint32_t) * s->n_words) == 0)
            return id;
    }
    if (memo->n_states >= memo->max_states || memo->n_words + s->n_words > LM_MASK_MEMO_WORDS)
        return LM_MASK_NO_STATE;
    uint32_t id = memo->n_states++;
    memo->offset[id] = memo->n_words;
    memo->n_state_words[id] = s->n_words;
    memo->n_stacks[id] = s->n_stacks;
    if (s->n_words) memcpy(memo->words + memo->n_words, s->words, sizeof(uint32_t) * s->n_words);
    memo->n_words += s->n_words;
    memo->complete[id] = lm_gstate_complete(s);
    lm_gstate_next_bytes(g, s, &memo->next[id]);
    for (int b = 0; b < 256; b++) memo->trans[(size_t)id * 256 + (size_t)b] = LM_MEMO_UNKNOWN;
    memo->slots[h] = id + 1;
    return id;
}

static size_t mask_words(const lm_token_trie *t) { return ((size_t)t->vocab + 63) / 64; }

lm_status lm_mask_frames_create(const lm_token_trie *trie, lm_mask_frames **out, lm_error *err) {
    lm_mask_frames *f = calloc(1, sizeof *f);
    if (f) f->slots = calloc(2 * LM_MASK_MAX_FRAMES, sizeof *f->slots);
    if (!f || !f->slots || !memo_init(&f->memo)) {
        if (f) free(f->slots);
        free(f);
        *out = NULL;
        return lm_fail(err, LM_ERR_NOMEM, "out of memory");
    }
    f->refs = 1;
    f->trie = trie;
    f->deep_tails = LM_MASK_DEEP_TAILS;
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
    memo_free(&f->memo);
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
    if (frames && (frames->trie != trie || (frames->grammar_hash && frames->grammar_hash != g->hash))) {
        lm_masker_free(m);
        return lm_fail(err, LM_ERR_INTERNAL, "token mask: a frame table of another grammar or vocabulary");
    }
    if (frames) frames->grammar_hash = g->hash;
    if (frames) m->frames = lm_mask_frames_ref(frames);
    else if ((st = lm_mask_frames_create(trie, &m->frames, err)) != LM_OK) {
        lm_masker_free(m);
        return st;
    }
    m->path = calloc((size_t)trie->max_depth + 2, sizeof *m->path);
    m->path_id = calloc((size_t)trie->max_depth + 2, sizeof *m->path_id);
    if (!m->path || !m->path_id) {
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
    free(m->path_id);
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

/* The state at path depth d: memo state path_id[d], else path[d]. */
static bool path_complete(const lm_masker *m, uint32_t d) {
    uint32_t id = m->path_id[d];
    return id != LM_MASK_NO_STATE ? m->frames->memo.complete[id] : lm_gstate_complete(&m->path[d]);
}

static uint32_t path_stacks(const lm_masker *m, uint32_t d) {
    uint32_t id = m->path_id[d];
    return id != LM_MASK_NO_STATE ? m->frames->memo.n_stacks[id] : m->path[d].n_stacks;
}

/* Sets path depth d to the state in path[d] (interned when there is room;
 * a full memo is emptied first, so call it only where a walk begins). */
static void path_begin(lm_masker *m, uint32_t d) {
    lm_state_memo *memo = &m->frames->memo;
    if (memo->n_states >= memo->max_states || memo->n_words > LM_MASK_MEMO_WORDS / 2) memo_clear(memo);
    m->path_id[d] = memo_intern(memo, m->grammar, &m->path[d]);
}

/* Path depth d + 1 = depth d advanced by byte; false when no stack
 * survives (or on failure: m->matcher.failed). */
static bool path_step(lm_masker *m, uint32_t d, uint8_t byte) {
    lm_state_memo *memo = &m->frames->memo;
    uint32_t id = m->path_id[d];
    bool alive;
    if (id != LM_MASK_NO_STATE) {
        int32_t t = memo->trans[(size_t)id * 256 + byte];
        if (t == LM_MEMO_DEAD) return false;
        if (t >= 0) {
            m->path_id[d + 1] = (uint32_t)t;
            return true;
        }
        lm_gstate view = {.words = memo->words + memo->offset[id],
                          .n_words = memo->n_state_words[id],
                          .n_stacks = memo->n_stacks[id]};
        alive = lm_gmatcher_advance(&m->matcher, &view, byte, &m->path[d + 1]);
    } else {
        alive = lm_gmatcher_advance(&m->matcher, &m->path[d], byte, &m->path[d + 1]);
    }
    if (m->matcher.failed) return false;
    uint32_t next = alive ? memo_intern(memo, m->grammar, &m->path[d + 1]) : LM_MASK_NO_STATE;
    if (id != LM_MASK_NO_STATE && (!alive || next != LM_MASK_NO_STATE))
        memo->trans[(size_t)id * 256 + byte] = alive ? (int32_t)next : LM_MEMO_DEAD;
    m->path_id[d + 1] = next;
    return alive;
}

static void walk(walk_ctx *w, uint32_t node_index, uint32_t depth) {
    lm_masker *m = w->m;
    const lm_token_trie *t = w->trie;
    const lm_trie_node *node = &t->nodes[node_index];
    lm_byte_class next;
    if (m->path_id[depth] != LM_MASK_NO_STATE) next = m->frames->memo.next[m->path_id[depth]];
    else lm_gstate_next_bytes(m->grammar, &m->path[depth], &next);
    for (uint32_t c = 0; c < node->n_children && !w->failed; c++) {
        uint32_t ci = node->first_child + c;
        const lm_trie_node *child = &t->nodes[ci];
        if (!lm_byte_class_has(&next, child->byte)) continue;
        /* a trie node visited is a unit of work, like a matcher step */
        if (!lm_gmatcher_charge(&m->matcher, 1)) {
            w->failed = true;
            return;
        }
        bool alive = path_step(m, depth, child->byte);
        if (m->matcher.failed) {
            w->failed = true;
            return;
        }
        if (!alive) continue;
        bool complete = path_complete(m, depth + 1);
        mark_tokens(w, child->tok_lo, child->tok_lo + child->n_end);
        if (w->frame && complete && child->tok_hi > child->tok_lo + child->n_end) {
            bool ok = true;
            if (child->tok_hi - child->tok_lo - child->n_end > LM_MASK_TAIL_COPY)
                ok = push_u32(&w->frame->direct, &w->frame->n_direct, &w->frame->cap_direct, ci);
            else
                for (uint32_t i = child->tok_lo + child->n_end; ok && i < child->tok_hi; i++)
                    ok = tail_push(w->tails, t, i, depth + 1);
            if (!ok) {
                w->failed = true;
                return;
            }
        }
        if (path_stacks(m, depth + 1) > (complete ? 1u : 0u) && child->n_children > 0) walk(w, ci, depth + 1);
    }
}

/* A walk or expansion stopped by the matcher: over its budget, or out of memory. */
static lm_status matcher_failure(const lm_masker *m, lm_error *err) {
    if (m->matcher.over_budget)
        return lm_fail(err, LM_ERR_UNSUPPORTED,
                       "grammar: the token mask took more than its budget of matcher work (%llu units): the "
                       "grammar's automaton is too large (states of up to %u stacks)",
                       (unsigned long long)m->matcher.budget,
                       m->matcher.max_stacks);
    return lm_fail(err, LM_ERR_NOMEM, "token mask: out of memory");
}

static uint32_t frame_hash(const uint32_t *top, uint32_t depth) {
    uint32_t h = depth;
    for (uint32_t i = 0; i < depth; i++) h = (h ^ top[i]) * 2654435761u;
    return h;
}

/* The frame of the stack's top `depth` positions top[0 .. depth), built if new. */
static lm_frame *find_frame(lm_masker *m, const uint32_t *top, uint32_t depth, lm_error *err) {
    lm_mask_frames *table = m->frames;
    uint32_t cap = 2 * LM_MASK_MAX_FRAMES;
    uint32_t h = frame_hash(top, depth) & (cap - 1);
    for (uint32_t probe = 0; probe < cap; probe++, h = (h + 1) & (cap - 1)) {
        lm_frame *f = table->slots[h];
        if (!f) break;
        if (f->depth == depth && memcmp(f->key, top, sizeof(uint32_t) * depth) == 0) {
            table->reused++;
            return f;
        }
    }
    if (table->n_frames >= LM_MASK_MAX_FRAMES) {
        clear_frames(table);
        h = frame_hash(top, depth) & (cap - 1);
    }
    lm_frame *f = calloc(1, sizeof *f);
    if (!f) {
        lm_fail(err, LM_ERR_NOMEM, "out of memory");
        return NULL;
    }
    memcpy(f->key, top, sizeof(uint32_t) * depth);
    f->depth = depth;
    tail_list tails = {0};
    walk_ctx w = {.m = m, .trie = m->trie, .frame = f, .tails = &tails};
    if (!lm_gmatcher_expand_stack(&m->matcher, top, depth, &m->path[0]) && m->matcher.failed) w.failed = true;
    if (!w.failed) {
        path_begin(m, 0);
        walk(&w, 0, 0);
    }
    if (!w.failed && tails.n > table->deep_tails && depth < LM_MASK_MAX_FRAME_DEPTH) {
        /* what follows the frame is left to the deeper frames */
        f->deep = true;
        tails.n = 0;
        f->n_direct = 0;
    }
    if (!w.failed && tails.n > 0 && trie_from_refs(m->trie->vocab, tails.refs, tails.n, &f->after, err) != LM_OK)
        w.failed = true;
    free(tails.refs);
    if (w.failed) {
        frame_free(f);
        if (m->matcher.failed) matcher_failure(m, err);
        else lm_fail(err, LM_ERR_NOMEM, "token mask: out of memory");
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
        /* the frame of the top position, or of more for a deep one (a
         * stack of exactly its depth has nothing below: no tails needed) */
        uint32_t depth = 1;
        lm_frame *f;
        for (;;) {
            f = find_frame(m, stack + len - depth, depth, err);
            if (!f) return err ? err->code : LM_ERR_NOMEM;
            if (!f->deep || depth == len) break;
            depth++;
        }
        /* a unit per 64 words of the bitset ORed */
        if (!lm_gmatcher_charge(&m->matcher, 1 + (f->bits ? words / 64 : f->n_ids / 64)))
            return matcher_failure(m, err);
        if (f->bits)
            for (size_t k = 0; k < words; k++) bits[k] |= f->bits[k];
        else
            for (uint32_t k = 0; k < f->n_ids; k++) bits[f->ids[k] >> 6] |= 1ull << (f->ids[k] & 63);
        if (!f->after && f->n_direct == 0) continue;
        /* past a completion point the frame is done: the tails are
         * matched from the stack below it */
        if (!lm_gmatcher_expand_stack(&m->matcher, stack, len - depth, &m->one)) {
            if (m->matcher.failed) return matcher_failure(m, err);
            continue; /* nothing lies below the frame that could continue */
        }
        if (f->after) {
            if (!lm_gstate_copy(&m->path[0], &m->one)) return lm_fail(err, LM_ERR_NOMEM, "out of memory");
            path_begin(m, 0);
            walk_ctx w = {.m = m, .trie = f->after, .bits = bits};
            walk(&w, 0, 0);
            if (w.failed) return m->matcher.failed ? matcher_failure(m, err) : lm_fail(err, LM_ERR_NOMEM, "token mask: out of memory");
        }
        for (uint32_t k = 0; k < f->n_direct; k++) {
            uint32_t d = m->trie->nodes[f->direct[k]].depth;
            if (!lm_gstate_copy(&m->path[d], &m->one)) return lm_fail(err, LM_ERR_NOMEM, "out of memory");
            path_begin(m, d);
            walk_ctx w = {.m = m, .trie = m->trie, .bits = bits};
            walk(&w, f->direct[k], d);
            if (w.failed) return m->matcher.failed ? matcher_failure(m, err) : lm_fail(err, LM_ERR_NOMEM, "token mask: out of memory");
        }
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
