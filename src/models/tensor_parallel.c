#include "models/tensor_parallel.h"

#include <pthread.h>
#include <stdlib.h>
#include <string.h>

#include "models/registry.h"

typedef struct tp_call tp_call;

/* Ranks 1.. each have a thread for the model's life, waiting for calls:
 * made at open, so a call never finds a rank that cannot run. */
typedef struct {
    pthread_mutex_t mutex;
    pthread_cond_t go, done;
    tp_call *call;
    uint64_t generation; /* of the current call */
    int pending;         /* workers still running it */
    bool quit;
    pthread_t threads[LM_COMM_MAX_RANKS];
    int n_threads; /* started: ranks 1 .. n_threads */
} tp_workers;

typedef struct {
    lm_model base;
    int n;
    lm_model *rank[LM_COMM_MAX_RANKS];
    lm_backend *owned[LM_COMM_MAX_RANKS]; /* ranks 1..'s backends */
    lm_comm_group *group;
    tp_workers workers;
    bool workers_made; /* its mutex and conditions exist */
    struct worker_arg {
        tp_workers *workers;
        int rank;
    } args[LM_COMM_MAX_RANKS];
} tp_model;

typedef struct {
    lm_model_context base;
    int n;
    lm_model_context *rank[LM_COMM_MAX_RANKS];
    /* ranks 1..'s outputs, which nobody reads */
    float *logits, *hidden;
    int32_t *argmax, *drafts;
    bool *no_rows; /* logits_wanted of ranks 1.. when argmax is asked: none (their rows are rank 0's) */
    size_t logit_floats, hidden_floats, draft_ids;
} tp_context;

/* ---- running one op on every rank at once ---- */

struct tp_call {
    lm_status (*run)(tp_call *call, int rank, lm_error *err);
    tp_context *ctx;
    tp_model *model;
    const void *args; /* the op's own */
    lm_status status[LM_COMM_MAX_RANKS];
    lm_error err[LM_COMM_MAX_RANKS];
};

static void *worker_main(void *arg) {
    struct worker_arg *a = arg;
    tp_workers *w = a->workers;
    uint64_t seen = 0;
    pthread_mutex_lock(&w->mutex);
    for (;;) {
        while (w->generation == seen && !w->quit) pthread_cond_wait(&w->go, &w->mutex);
        if (w->quit) break;
        seen = w->generation;
        tp_call *call = w->call;
        pthread_mutex_unlock(&w->mutex);
        memset(&call->err[a->rank], 0, sizeof call->err[a->rank]);
        call->status[a->rank] = call->run(call, a->rank, &call->err[a->rank]);
        pthread_mutex_lock(&w->mutex);
        if (--w->pending == 0) pthread_cond_signal(&w->done);
    }
    pthread_mutex_unlock(&w->mutex);
    return NULL;
}

/* Runs call->run for every rank at once (ranks 1.. on their threads, rank
 * 0 here); the first failing rank's error is the call's. */
static lm_status run_on_ranks(tp_model *m, tp_call *call, lm_error *err) {
    tp_workers *w = &m->workers;
    call->model = m;
    pthread_mutex_lock(&w->mutex);
    w->call = call;
    w->pending = m->n - 1;
    w->generation++;
    pthread_cond_broadcast(&w->go);
    pthread_mutex_unlock(&w->mutex);
    memset(&call->err[0], 0, sizeof call->err[0]);
    call->status[0] = call->run(call, 0, &call->err[0]);
    pthread_mutex_lock(&w->mutex);
    while (w->pending > 0) pthread_cond_wait(&w->done, &w->mutex);
    pthread_mutex_unlock(&w->mutex);
    for (int r = 0; r < m->n; r++)
        if (call->status[r] != LM_OK) {
            *err = call->err[r];
            return call->status[r];
        }
    return LM_OK;
}

static lm_status start_workers(tp_model *m, lm_error *err) {
    tp_workers *w = &m->workers;
    if (pthread_mutex_init(&w->mutex, NULL) != 0) return lm_fail(err, LM_ERR_INTERNAL, "cannot make a mutex");
    if (pthread_cond_init(&w->go, NULL) != 0) {
        pthread_mutex_destroy(&w->mutex);
        return lm_fail(err, LM_ERR_INTERNAL, "cannot make a condition variable");
    }
    if (pthread_cond_init(&w->done, NULL) != 0) {
        pthread_cond_destroy(&w->go);
        pthread_mutex_destroy(&w->mutex);
        return lm_fail(err, LM_ERR_INTERNAL, "cannot make a condition variable");
    }
    m->workers_made = true;
    for (int r = 1; r < m->n; r++) {
        m->args[r] = (struct worker_arg){w, r};
        if (pthread_create(&w->threads[r], NULL, worker_main, &m->args[r]) != 0)
            return lm_fail(err, LM_ERR_INTERNAL, "cannot start the thread of rank %d", r);
        w->n_threads = r;
    }
    return LM_OK;
}

static void stop_workers(tp_model *m) {
    tp_workers *w = &m->workers;
    if (!m->workers_made) return;
    pthread_mutex_lock(&w->mutex);
    w->quit = true;
    pthread_cond_broadcast(&w->go);
    pthread_mutex_unlock(&w->mutex);
    for (int r = 1; r <= w->n_threads; r++) pthread_join(w->threads[r], NULL);
    pthread_cond_destroy(&w->done);
    pthread_cond_destroy(&w->go);
    pthread_mutex_destroy(&w->mutex);
}

/* ---- the model ---- */

static const lm_model_ops tp_ops;

static void tp_destroy(lm_model *base) {
    tp_model *m = (tp_model *)base;
    stop_workers(m);
    for (int r = 0; r < m->n; r++) lm_model_free(m->rank[r]);
    lm_comm_group_destroy(m->group); /* before the backends it queues on */
    for (int r = 1; r < LM_COMM_MAX_RANKS; r++) lm_backend_destroy(m->owned[r]);
    free(m);
}

static void tp_context_destroy(lm_model_context *base) {
    tp_context *c = (tp_context *)base;
    for (int r = 0; r < c->n; r++) lm_model_context_destroy(c->rank[r]);
    free(c->logits);
    free(c->hidden);
    free(c->argmax);
    free(c->drafts);
    free(c->no_rows);
    free(c);
}

static lm_status tp_context_create(lm_model *base, const lm_context_options *o, lm_model_context **out,
                                   lm_error *err) {
    tp_model *m = (tp_model *)base;
    tp_context *c = calloc(1, sizeof *c);
    if (!c) return lm_fail(err, LM_ERR_NOMEM, "out of memory");
    c->base.model = base;
    int rows = o->max_logit_rows > 0 ? o->max_logit_rows : o->max_step_seqs;
    if (rows < o->max_step_seqs) rows = o->max_step_seqs;
    size_t V = (size_t)base->info.vocab_size, H = (size_t)base->info.hidden_size;
    c->logit_floats = (size_t)rows * V;
    c->hidden_floats = (size_t)(o->max_step_tokens > rows ? o->max_step_tokens : rows) * H;
    c->draft_ids = (size_t)o->max_step_seqs * (size_t)(o->speculative_tokens > 0 ? o->speculative_tokens : 1);
    if (m->n > 1) {
        c->logits = malloc(sizeof(float) * c->logit_floats);
        c->hidden = malloc(sizeof(float) * c->hidden_floats);
        c->argmax = malloc(sizeof(int32_t) * (size_t)rows);
        c->drafts = malloc(sizeof(int32_t) * c->draft_ids);
        c->no_rows = calloc((size_t)rows, sizeof(bool));
        if (!c->logits || !c->hidden || !c->argmax || !c->drafts || !c->no_rows) {
            tp_context_destroy(&c->base);
            return lm_fail(err, LM_ERR_NOMEM, "out of memory for the ranks' outputs");
        }
    }
    for (int r = 0; r < m->n; r++) {
        lm_status st = lm_model_context_create(m->rank[r], o, &c->rank[r], err);
        if (st != LM_OK) {
            tp_context_destroy(&c->base);
            return st;
        }
        c->n = r + 1;
    }
    *out = &c->base;
    return LM_OK;
}

typedef struct {
    const lm_step_batch *batch;
    const lm_forward_out *out;
} forward_args;

static lm_status forward_rank(tp_call *call, int r, lm_error *err) {
    const forward_args *a = call->args;
    tp_context *c = call->ctx;
    if (r == 0) return lm_model_forward(c->rank[0], a->batch, a->out, err);
    /* With argmax asked, ranks 1.. download their argmax only (it also
     * waits for the step): no copy of logits nobody reads. */
    lm_forward_out mine = {.logits = c->logits,
                           .argmax = a->out->argmax ? c->argmax : NULL,
                           .logits_wanted = a->out->argmax ? c->no_rows : a->out->logits_wanted,
                           .hidden = a->out->hidden ? c->hidden : NULL};
    return lm_model_forward(c->rank[r], a->batch, &mine, err);
}

static lm_status tp_forward(lm_model_context *base, const lm_step_batch *b, const lm_forward_out *out,
                            lm_error *err) {
    tp_context *c = (tp_context *)base;
    tp_call call = {.run = forward_rank, .ctx = c, .args = &(forward_args){b, out}};
    return run_on_ranks((tp_model *)base->model, &call, err);
}

static void tp_copy_block(lm_model_context *base, int src, int dst) {
    tp_context *c = (tp_context *)base;
    for (int r = 0; r < c->n; r++) lm_model_copy_block(c->rank[r], src, dst);
}
static void tp_copy_state(lm_model_context *base, int src, int dst) {
    tp_context *c = (tp_context *)base;
    for (int r = 0; r < c->n; r++) lm_model_copy_state(c->rank[r], src, dst);
}
static void tp_reset_state(lm_model_context *base, int slot) {
    tp_context *c = (tp_context *)base;
    for (int r = 0; r < c->n; r++) lm_model_reset_state(c->rank[r], slot);
}
static void tp_save_state(lm_model_context *base, int slot, int snapshot) {
    tp_context *c = (tp_context *)base;
    for (int r = 0; r < c->n; r++) lm_model_save_state(c->rank[r], slot, snapshot);
}
static void tp_restore_state(lm_model_context *base, int snapshot, int slot) {
    tp_context *c = (tp_context *)base;
    for (int r = 0; r < c->n; r++) lm_model_restore_state(c->rank[r], snapshot, slot);
}

typedef struct {
    lm_draft_seq *seqs;
    int n;
} draft_args;

#define MAX_DRAFT_SEQS 1024

static lm_status draft_rank(tp_call *call, int r, lm_error *err) {
    const draft_args *a = call->args;
    tp_context *c = call->ctx;
    if (r == 0) return lm_model_draft(c->rank[0], a->seqs, a->n, err);
    /* the same sequences, the drafts written to this rank's scratch */
    lm_draft_seq mine[MAX_DRAFT_SEQS];
    size_t at = 0;
    for (int s = 0; s < a->n; s++) {
        mine[s] = a->seqs[s];
        mine[s].drafts = c->drafts + at;
        at += (size_t)(a->seqs[s].n_drafts > 0 ? a->seqs[s].n_drafts : 0);
        if (at > c->draft_ids) return lm_fail(err, LM_ERR_INVALID, "more drafts than the context was made for");
    }
    return lm_model_draft(c->rank[r], mine, a->n, err);
}

static lm_status tp_draft(lm_model_context *base, lm_draft_seq *seqs, int n, lm_error *err) {
    tp_context *c = (tp_context *)base;
    if (n > MAX_DRAFT_SEQS) return lm_fail(err, LM_ERR_INVALID, "%d drafting sequences (at most %d)", n, MAX_DRAFT_SEQS);
    tp_call call = {.run = draft_rank, .ctx = c, .args = &(draft_args){seqs, n}};
    return run_on_ranks((tp_model *)base->model, &call, err);
}

typedef struct {
    const lm_rollback_seq *seqs;
    int n;
} rollback_args;

static lm_status rollback_rank(tp_call *call, int r, lm_error *err) {
    const rollback_args *a = call->args;
    return lm_model_rollback(call->ctx->rank[r], a->seqs, a->n, err);
}

static lm_status tp_rollback(lm_model_context *base, const lm_rollback_seq *seqs, int n, lm_error *err) {
    tp_context *c = (tp_context *)base;
    tp_call call = {.run = rollback_rank, .ctx = c, .args = &(rollback_args){seqs, n}};
    return run_on_ranks((tp_model *)base->model, &call, err);
}

typedef struct {
    const float *hidden;
    const int32_t *next_ids, *positions;
    int n;
    float *logits;
} mtp_args;

static lm_status mtp_rank(tp_call *call, int r, lm_error *err) {
    const mtp_args *a = call->args;
    float *logits = a->logits;
    if (r > 0) {
        logits = malloc(sizeof(float) * (size_t)a->n * (size_t)call->model->base.info.vocab_size);
        if (!logits) return lm_fail(err, LM_ERR_NOMEM, "out of memory");
    }
    lm_status st = lm_model_mtp_sequence_logits(call->model->rank[r], a->hidden, a->next_ids, a->positions, a->n,
                                                logits, err);
    if (r > 0) free(logits);
    return st;
}

static lm_status tp_mtp_sequence_logits(lm_model *base, const float *hidden, const int32_t *next_ids,
                                        const int32_t *positions, int n, float *logits, lm_error *err) {
    tp_model *m = (tp_model *)base;
    tp_call call = {.run = mtp_rank, .args = &(mtp_args){hidden, next_ids, positions, n, logits}};
    return run_on_ranks(m, &call, err);
}

/* The tower is whole on every rank and has no collectives: rank 0's rows
 * feed every rank's forward (the step batch carries them). */
static lm_status tp_encode_image(lm_model_context *base, const lm_image_patches *p, float *embeds, lm_error *err) {
    tp_context *c = (tp_context *)base;
    return lm_model_encode_image(c->rank[0], p, embeds, err);
}

static void tp_describe(const lm_model *base, FILE *f) {
    const tp_model *m = (const tp_model *)base;
    fprintf(f, "tensor parallel: %d ranks; what follows is rank 0's share (its tensors, sizes and parameters; "
               "tensors the other ranks hold, such as their experts, are listed as not used)\n", m->n);
    lm_model_print_description(m->rank[0], f);
}

static const lm_model_ops tp_ops = {
    .destroy = tp_destroy,
    .context_create = tp_context_create,
    .context_destroy = tp_context_destroy,
    .forward = tp_forward,
    .copy_block = tp_copy_block,
    .copy_state = tp_copy_state,
    .reset_state = tp_reset_state,
    .save_state = tp_save_state,
    .restore_state = tp_restore_state,
    .draft = tp_draft,
    .rollback = tp_rollback,
    .mtp_sequence_logits = tp_mtp_sequence_logits,
    .encode_image = tp_encode_image,
    .describe = tp_describe,
};

typedef struct {
    const char *dir, *random_config;
    const lm_model_load_options *options;
    lm_backend *const *backends;
} open_args;

static lm_status open_rank(tp_call *call, int r, lm_error *err) {
    const open_args *a = call->args;
    tp_model *m = call->model;
    lm_model_load_options o = a->options ? *a->options : (lm_model_load_options){0};
    o.tensor_parallel = lm_comm_group_rank(m->group, r);
    /* Mapped, so that a rank reads only the bytes of its slices (the
     * ranks share the page cache) instead of each reading every shard. */
    o.mode = LM_LOAD_MMAP;
    return o.random_weights ? lm_model_open_random_with(a->random_config, &o, a->backends[r], &m->rank[r], err)
                            : lm_model_open(a->dir, &o, a->backends[r], &m->rank[r], err);
}

lm_status lm_tensor_parallel_open(const char *dir, const char *random_config, const lm_model_load_options *options,
                                  lm_backend *backend, int n_ranks, lm_model **out, lm_error *err) {
    *out = NULL;
    const char *kind = backend->ops->name;
    bool random = options && options->random_weights;
    if (random ? !random_config : !dir)
        return lm_fail(err, LM_ERR_INVALID, random ? "random weights need a config path" : "no model folder given");
    if (n_ranks < 1 || n_ranks > LM_COMM_MAX_RANKS)
        return lm_fail(err, LM_ERR_INVALID, "tensor parallelism over %d ranks (1..%d)", n_ranks, LM_COMM_MAX_RANKS);
    /* A host backend's ranks share the host; a GPU's take one device each,
     * rank r device r (CUDA_VISIBLE_DEVICES picks which ones). */
    bool host = lm_backend_is_host(backend);
    int devices = lm_backend_device_count(kind);
    /* LOOM_TP_SHARE_GPU=1: every rank on GPU 0, summed through the host
     * (slow: the tests' way to run a GPU's ranks on a machine of one) */
    const char *share_env = getenv("LOOM_TP_SHARE_GPU");
    bool share = !host && share_env && strcmp(share_env, "1") == 0;
    if (!host && !share && devices < n_ranks)
        return lm_fail(err, LM_ERR_INVALID, "tensor parallelism over %d ranks needs %d GPUs: this machine shows %d",
                       n_ranks, n_ranks, devices);
    tp_model *m = calloc(1, sizeof *m);
    if (!m) return lm_fail(err, LM_ERR_NOMEM, "out of memory");
    lm_status st = LM_OK;
    int threads = lm_backend_threads(backend) / n_ranks;
    for (int r = 1; r < n_ranks && st == LM_OK; r++) {
        st = lm_backend_create_on(kind, host || share ? 0 : r, threads > 0 ? threads : 1, &m->owned[r], err);
        if (st == LM_OK) st = lm_backend_set_compute(m->owned[r], lm_backend_compute(backend), err);
    }
    lm_backend *backends[LM_COMM_MAX_RANKS] = {backend};
    for (int r = 1; r < n_ranks; r++) backends[r] = m->owned[r];
    if (st == LM_OK) st = lm_comm_group_create(backends, n_ranks, &m->group, err);
    /* The ranks load at once, each on its own thread: a large model's
     * start takes one rank's load, not N. */
    open_args args = {.dir = dir, .random_config = random_config, .options = options, .backends = backends};
    tp_call call = {.run = open_rank, .args = &args};
    m->n = n_ranks; /* the workers run ranks 1..n-1 */
    if (st == LM_OK) st = start_workers(m, err);
    if (st == LM_OK) st = run_on_ranks(m, &call, err);
    if (st != LM_OK) {
        tp_destroy(&m->base);
        return st;
    }
    m->base.ops = &tp_ops;
    m->base.info = m->rank[0]->info;
    if (m->base.info.weights_made[0]) { /* what rank 0 made: say so */
        size_t len = strlen(m->base.info.weights_made);
        snprintf(m->base.info.weights_made + len, sizeof m->base.info.weights_made - len, " on rank 0 of %d",
                 n_ranks);
    }
    m->base.backend = backend;
    *out = &m->base;
    return LM_OK;
}
