/* Compiled grammars by their spec's text (grammar/grammar_cache.h). */
#include "grammar/grammar_cache.h"

#include <pthread.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "grammar/compiled.h"

typedef struct {
    bool used;
    bool done;    /* compiled (else being compiled: wait) */
    int users;    /* threads compiling it or waiting for it: not evicted */
    uint8_t *key; /* the spec, serialised */
    size_t key_len;
    uint64_t hash;
    int status;             /* loom_grammar_compile's */
    loom_grammar *grammar;  /* the cache's reference, when compiled */
    char message[LM_ERROR_MESSAGE_MAX];
    size_t bytes;           /* key and grammar */
    uint64_t last_used;
} entry;

struct lm_grammar_cache {
    pthread_mutex_t mutex;
    pthread_cond_t changed; /* an entry done, or a slot free */
    entry entries[LM_GRAMMAR_CACHE_ENTRIES];
    int slots, active;
    uint64_t clock;
    lm_grammar_cache_stats stats;
};

lm_status lm_grammar_cache_create(int slots, lm_grammar_cache **out, lm_error *err) {
    *out = NULL;
    if (slots < 1 || slots > LM_GRAMMAR_CACHE_MAX_SLOTS)
        return lm_fail(err, LM_ERR_INVALID, "grammar cache: %d compile slots (1 to %d)", slots,
                       LM_GRAMMAR_CACHE_MAX_SLOTS);
    lm_grammar_cache *c = calloc(1, sizeof *c);
    if (!c) return lm_fail(err, LM_ERR_NOMEM, "out of memory");
    if (pthread_mutex_init(&c->mutex, NULL) != 0) {
        free(c);
        return lm_fail(err, LM_ERR_NOMEM, "grammar cache: no mutex");
    }
    if (pthread_cond_init(&c->changed, NULL) != 0) {
        pthread_mutex_destroy(&c->mutex);
        free(c);
        return lm_fail(err, LM_ERR_NOMEM, "grammar cache: no condition variable");
    }
    c->slots = slots;
    *out = c;
    return LM_OK;
}

static void drop(lm_grammar_cache *c, entry *e) {
    c->stats.bytes -= e->bytes;
    c->stats.entries--;
    if (e->grammar) loom_grammar_free(e->grammar);
    free(e->key);
    memset(e, 0, sizeof *e);
}

void lm_grammar_cache_free(lm_grammar_cache *c) {
    if (!c) return;
    for (int i = 0; i < LM_GRAMMAR_CACHE_ENTRIES; i++)
        if (c->entries[i].used) drop(c, &c->entries[i]);
    pthread_cond_destroy(&c->changed);
    pthread_mutex_destroy(&c->mutex);
    free(c);
}

/* --- the key: the spec's fields, each with its length ----------------- */

typedef struct {
    uint8_t *p;
    size_t n;
} writer;

static void put(writer *w, const void *data, size_t len) {
    if (w->p) memcpy(w->p + w->n, data, len);
    w->n += len;
}

static void put_text(writer *w, const char *text, size_t len) {
    uint8_t has = text != NULL;
    uint64_t n = text ? len : 0;
    put(w, &has, 1);
    put(w, &n, sizeof n);
    if (text) put(w, text, len);
}

/* Writes the key into w (w->p NULL: only measures it). */
static void spec_key(writer *w, const loom_grammar_spec *spec) {
    uint32_t kind = (uint32_t)spec->kind;
    put(w, &kind, sizeof kind);
    put_text(w, spec->text, spec->text ? spec->text_len : 0);
    put_text(w, spec->suffix, spec->suffix ? strlen(spec->suffix) : 0);
    int32_t n = spec->choices ? spec->n_choices : -1;
    put(w, &n, sizeof n);
    for (int i = 0; i < n; i++) put_text(w, spec->choices[i], spec->choices[i] ? strlen(spec->choices[i]) : 0);
    uint32_t ws = (uint32_t)spec->whitespace;
    put(w, &ws, sizeof ws);
    put_text(w, spec->whitespace_pattern, spec->whitespace_pattern ? strlen(spec->whitespace_pattern) : 0);
}

static uint64_t hash_key(const uint8_t *p, size_t n) {
    uint64_t h = 0xcbf29ce484222325ull;
    for (size_t i = 0; i < n; i++) h = (h ^ p[i]) * 0x100000001b3ull;
    return h;
}

static size_t grammar_bytes(const loom_grammar *g) {
    if (!g) return 0;
    const lm_grammar *x = &g->grammar;
    return sizeof *g + sizeof *x->elems * x->n_elems + sizeof *x->classes * x->n_classes +
           sizeof *x->alt_start * x->rule_first[x->n_rules] + sizeof *x->rule_first * (x->n_rules + 1);
}

/* Frees entries, least recently used first, until `need` more bytes and
 * one more entry fit (entries in use stay); the free entry, or NULL. */
static entry *make_room(lm_grammar_cache *c, size_t need) {
    for (;;) {
        entry *free_one = NULL, *oldest = NULL;
        for (int i = 0; i < LM_GRAMMAR_CACHE_ENTRIES; i++) {
            entry *e = &c->entries[i];
            if (!e->used) {
                if (!free_one) free_one = e;
                continue;
            }
            if (e->done && e->users == 0 && (!oldest || e->last_used < oldest->last_used)) oldest = e;
        }
        if (free_one && c->stats.bytes + need <= LM_GRAMMAR_CACHE_BYTES) return free_one;
        if (!oldest) return NULL;
        drop(c, oldest);
    }
}

static int answer(const entry *e, loom_grammar **out, char *error, size_t error_size) {
    if (e->status == LOOM_OK) *out = (loom_grammar *)lm_grammar_ref(e->grammar);
    else if (error && error_size) snprintf(error, error_size, "%s", e->message);
    return e->status;
}

int lm_grammar_cache_compile(lm_grammar_cache *c, const loom_grammar_spec *spec, loom_grammar **out, char *error,
                             size_t error_size) {
    *out = NULL;
    if (!spec) return loom_grammar_compile(spec, out, error, error_size);
    writer w = {0};
    spec_key(&w, spec);
    uint8_t *key = w.n <= LM_GRAMMAR_CACHE_MAX_KEY ? malloc(w.n) : NULL; /* NULL: not kept */
    uint64_t hash = 0;
    if (key) {
        w = (writer){key, 0};
        spec_key(&w, spec);
        hash = hash_key(key, w.n);
    }
    pthread_mutex_lock(&c->mutex);
    entry *e = NULL;
    for (int i = 0; key && i < LM_GRAMMAR_CACHE_ENTRIES; i++) {
        entry *x = &c->entries[i];
        if (x->used && x->hash == hash && x->key_len == w.n && memcmp(x->key, key, w.n) == 0) {
            e = x;
            break;
        }
    }
    if (e) { /* kept, or being compiled by another thread */
        free(key);
        e->users++;
        while (!e->done) pthread_cond_wait(&c->changed, &c->mutex);
        e->users--;
        e->last_used = ++c->clock;
        c->stats.hits++;
        int rc = answer(e, out, error, error_size);
        pthread_mutex_unlock(&c->mutex);
        return rc;
    }
    if (key && (e = make_room(c, w.n)) != NULL) {
        *e = (entry){.used = true, .users = 1, .key = key, .key_len = w.n, .hash = hash, .bytes = w.n,
                     .last_used = ++c->clock};
        c->stats.entries++;
        c->stats.bytes += w.n;
    } else {
        free(key); /* every entry in use, or too large to keep: compiled all the same */
    }
    while (c->active >= c->slots) pthread_cond_wait(&c->changed, &c->mutex);
    if (++c->active > c->stats.max_active) c->stats.max_active = c->active;
    pthread_mutex_unlock(&c->mutex);

    loom_grammar *g = NULL;
    char message[LM_ERROR_MESSAGE_MAX] = "";
    int rc = loom_grammar_compile(spec, &g, message, sizeof message);

    pthread_mutex_lock(&c->mutex);
    c->active--;
    c->stats.compiles++;
    if (e) {
        e->done = true;
        e->status = rc;
        e->grammar = g;
        snprintf(e->message, sizeof e->message, "%s", message);
        size_t extra = grammar_bytes(g);
        e->bytes += extra;
        c->stats.bytes += extra;
        e->users--;
        rc = answer(e, out, error, error_size);
        /* over the bytes budget: the oldest go, this one last */
        while (c->stats.bytes > LM_GRAMMAR_CACHE_BYTES) {
            entry *oldest = NULL;
            for (int i = 0; i < LM_GRAMMAR_CACHE_ENTRIES; i++) {
                entry *x = &c->entries[i];
                if (x->used && x != e && x->done && x->users == 0 && (!oldest || x->last_used < oldest->last_used))
                    oldest = x;
            }
            if (!oldest) oldest = e->users == 0 ? e : NULL;
            if (!oldest) break;
            drop(c, oldest);
            if (oldest == e) break;
        }
    } else {
        *out = g;
        if (rc != LOOM_OK && error && error_size) snprintf(error, error_size, "%s", message);
    }
    pthread_cond_broadcast(&c->changed);
    pthread_mutex_unlock(&c->mutex);
    return rc;
}

void lm_grammar_cache_get_stats(lm_grammar_cache *c, lm_grammar_cache_stats *stats) {
    pthread_mutex_lock(&c->mutex);
    *stats = c->stats;
    pthread_mutex_unlock(&c->mutex);
}
