/* The cuda backend's fuser (fusion_plan.h): plain C, compiled in every
 * build so that tests/test_fusion_plan.c runs it on any machine. */
#include "ops/cuda/fusion_plan.h"

#include <string.h>

const char *lm_fuse_pattern_name(lm_fuse_pattern p) {
    static const char *const names[LM_FUSE_N_PATTERNS] = {
        [LM_FUSE_PLAIN] = "plain",
        [LM_FUSE_GDN_PREPARE] = "gdn_prepare",
        [LM_FUSE_ATTENTION_PREPARE] = "attention_prepare",
        [LM_FUSE_MATMUL_GATED_ADD] = "matmul_gated_add",
        [LM_FUSE_NORMED_MATMUL_SWIGLU] = "normed_matmul_swiglu",
        [LM_FUSE_NORMED_MATMUL_GROUP] = "normed_matmul_group",
        [LM_FUSE_MATMUL_SWIGLU] = "matmul_swiglu",
        [LM_FUSE_MATMUL_ADD] = "matmul_add",
        [LM_FUSE_MATMUL_GROUP] = "matmul_group",
        [LM_FUSE_ADD_RMSNORM] = "add_rmsnorm",
        [LM_FUSE_GATED_ATTENTION] = "gated_attention",
        [LM_FUSE_GATED_DELTA_RULE_NORM] = "gated_delta_rule_norm",
    };
    return (unsigned)p < LM_FUSE_N_PATTERNS ? names[p] : "?";
}

/* A byte range of backend memory. */
typedef struct {
    lm_mem at;
    size_t bytes;
} span;

static span floats(lm_mem at, int64_t count) { return (span){at, (size_t)count * sizeof(float)}; }
static bool same(lm_mem a, lm_mem b) { return a.buffer == b.buffer && a.offset == b.offset; }
static bool overlap(span a, span b) {
    return a.at.buffer == b.at.buffer && a.at.offset < b.at.offset + b.bytes && b.at.offset < a.at.offset + a.bytes;
}
static span mm_out(const lm_fuse_op *o) { return floats(o->out, (int64_t)o->rows * o->w.rows); }
static span mm_in(const lm_fuse_op *o) { return floats(o->a, (int64_t)o->rows * o->w.cols); }
static span rows_of(lm_mem at, const lm_fuse_op *o) { return floats(at, (int64_t)o->rows * o->dim); }

/* Whether one of the discards starting at ops[j] covers s. */
static bool dead_after(const lm_fuse_op *ops, int n, int j, span s) {
    for (; j < n && ops[j].kind == LM_FUSE_OP_DISCARD; j++) {
        const lm_fuse_op *d = &ops[j];
        if (d->out.buffer == s.at.buffer && d->out.offset <= s.at.offset &&
            s.at.offset + s.bytes <= d->out.offset + (size_t)d->count)
            return true;
    }
    return false;
}
/* The index past the discards starting at ops[j]. */
static int past_discards(const lm_fuse_op *ops, int n, int j) {
    while (j < n && ops[j].kind == LM_FUSE_OP_DISCARD) j++;
    return j;
}
static bool is(const lm_fuse_op *ops, int n, int i, lm_fuse_op_kind kind) { return i < n && ops[i].kind == kind; }

/* Each matcher: how many ops from i the pattern takes (0: no match);
 * *candidate set when its first two ops are wired as the pattern's. */

/* matmul(Y, X, gate) matmul(U, X, up) silu_mul(Y, Y, U), U discarded. */
static int match_swiglu(const lm_fuse_op *ops, int n, int i, bool *candidate) {
    if (!is(ops, n, i, LM_FUSE_OP_MATMUL) || !is(ops, n, i + 1, LM_FUSE_OP_MATMUL) ||
        !is(ops, n, i + 2, LM_FUSE_OP_SILU_MUL))
        return 0;
    const lm_fuse_op *g = &ops[i], *u = &ops[i + 1], *s = &ops[i + 2];
    if (!same(g->a, u->a) || !same(s->a, g->out) || !same(s->out, g->out) || !same(s->b, u->out)) return 0;
    *candidate = true;
    if (u->rows != g->rows || u->w.rows != g->w.rows || u->w.cols != g->w.cols || u->w.dtype != g->w.dtype ||
        s->count != (int64_t)g->rows * g->w.rows)
        return 0;
    if (overlap(mm_out(g), mm_in(g)) || overlap(mm_out(u), mm_in(g)) || overlap(mm_out(g), mm_out(u))) return 0;
    if (!dead_after(ops, n, i + 3, mm_out(u))) return 0;
    return past_discards(ops, n, i + 3) - i;
}

/* rmsnorm(X, H) whose output is the next products' input. */
static bool norm_feeds(const lm_fuse_op *norm, const lm_fuse_op *mm) {
    return mm->kind == LM_FUSE_OP_MATMUL && same(mm->a, norm->out);
}
static bool norm_fits(const lm_fuse_op *norm, const lm_fuse_op *mm) {
    return mm->rows == norm->rows && mm->w.cols == norm->dim && !overlap(rows_of(norm->out, norm), rows_of(norm->a, norm)) &&
           !overlap(mm_out(mm), rows_of(norm->a, norm));
}

static int match_normed_swiglu(const lm_fuse_op *ops, int n, int i, bool *candidate) {
    if (!is(ops, n, i, LM_FUSE_OP_RMSNORM) || i + 1 >= n || !norm_feeds(&ops[i], &ops[i + 1])) return 0;
    *candidate = true;
    bool inner = false;
    int taken = match_swiglu(ops, n, i + 1, &inner);
    if (!taken || !norm_fits(&ops[i], &ops[i + 1]) || !norm_fits(&ops[i], &ops[i + 2])) return 0;
    return 1 + taken;
}

/* The run of up to max matmuls from i of one input (same x, n, cols),
 * their outputs apart from it, from each other and from `also`. */
static int matmul_run(const lm_fuse_op *ops, int n, int i, int max, span also) {
    int k = 0;
    while (k < max && is(ops, n, i + k, LM_FUSE_OP_MATMUL)) {
        const lm_fuse_op *m = &ops[i + k], *first = &ops[i];
        if (!same(m->a, first->a) || m->rows != first->rows || m->w.cols != first->w.cols) break;
        span y = mm_out(m);
        bool apart = !overlap(y, mm_in(first)) && !overlap(y, also);
        for (int j = 0; j < k && apart; j++) apart = !overlap(y, mm_out(&ops[i + j]));
        if (!apart) break;
        k++;
    }
    return k;
}

static int match_normed_group(const lm_fuse_op *ops, int n, int i, bool *candidate) {
    if (!is(ops, n, i, LM_FUSE_OP_RMSNORM) || i + 1 >= n || !norm_feeds(&ops[i], &ops[i + 1])) return 0;
    *candidate = true;
    const lm_fuse_op *norm = &ops[i];
    if (!norm_fits(norm, &ops[i + 1])) return 0;
    int k = matmul_run(ops, n, i + 1, LM_MATMUL_GROUP_MAX, rows_of(norm->a, norm));
    return k ? 1 + k : 0;
}

static int match_group(const lm_fuse_op *ops, int n, int i, bool *candidate) {
    if (!is(ops, n, i, LM_FUSE_OP_MATMUL) || !is(ops, n, i + 1, LM_FUSE_OP_MATMUL) || !same(ops[i].a, ops[i + 1].a))
        return 0;
    *candidate = true;
    int k = matmul_run(ops, n, i, LM_MATMUL_GROUP_MAX, (span){{NULL, 0}, 0});
    return k >= 2 ? k : 0;
}

/* matmul(S, X, w) add(Y, S), S discarded. */
static int match_matmul_add(const lm_fuse_op *ops, int n, int i, bool *candidate) {
    if (!is(ops, n, i, LM_FUSE_OP_MATMUL) || !is(ops, n, i + 1, LM_FUSE_OP_ADD) || !same(ops[i + 1].a, ops[i].out))
        return 0;
    *candidate = true;
    const lm_fuse_op *m = &ops[i], *add = &ops[i + 1];
    span s = mm_out(m), y = floats(add->out, add->count);
    if (add->count != (int64_t)m->rows * m->w.rows || overlap(s, mm_in(m)) || overlap(y, s) || overlap(y, mm_in(m)))
        return 0;
    if (!dead_after(ops, n, i + 2, s)) return 0;
    return past_discards(ops, n, i + 2) - i;
}

/* [silu_mul(X, X, XU)] matmul(S, X, w) sigmoid_scale_rows(S, G)
 * add(O, S) add(Y, O); S, O (and X after a silu_mul) discarded. */
static int match_gated_add(const lm_fuse_op *ops, int n, int i, bool *candidate) {
    int j = i;
    const lm_fuse_op *silu = NULL;
    if (is(ops, n, i, LM_FUSE_OP_SILU_MUL)) silu = &ops[j++];
    if (!is(ops, n, j, LM_FUSE_OP_MATMUL) || !is(ops, n, j + 1, LM_FUSE_OP_SIGMOID_SCALE_ROWS)) return 0;
    const lm_fuse_op *m = &ops[j], *scale = &ops[j + 1];
    if (!same(scale->out, m->out) || (silu && !same(m->a, silu->out))) return 0;
    bool counted = !silu && i > 0 && ops[i - 1].kind == LM_FUSE_OP_SILU_MUL && same(ops[i - 1].out, m->a);
    *candidate = !counted; /* else the candidate was its silu_mul's */
    if (!is(ops, n, j + 2, LM_FUSE_OP_ADD) || !is(ops, n, j + 3, LM_FUSE_OP_ADD)) return 0;
    const lm_fuse_op *to_other = &ops[j + 2], *to_y = &ops[j + 3];
    int64_t count = (int64_t)m->rows * m->w.rows;
    if (!same(to_other->a, m->out) || !same(to_y->a, to_other->out) || to_other->count != count || to_y->count != count ||
        scale->rows != m->rows || scale->dim != m->w.rows)
        return 0;
    span x = mm_in(m), s = mm_out(m), o = floats(to_other->out, count), y = floats(to_y->out, count);
    span gate = floats(scale->a, m->rows), up = silu ? floats(silu->b, silu->count) : (span){{NULL, 0}, 0};
    if (silu && (!same(silu->a, silu->out) || silu->count != (int64_t)m->rows * m->w.cols)) return 0;
    span all[] = {x, s, o, y, gate, up};
    for (int a = 0; a < 6; a++)
        for (int b = a + 1; b < 6; b++)
            if (overlap(all[a], all[b])) return 0;
    int d = j + 4;
    if (!dead_after(ops, n, d, s) || !dead_after(ops, n, d, o) || (silu && !dead_after(ops, n, d, x))) return 0;
    return past_discards(ops, n, d) - i;
}

/* add(H, D) [discards] rmsnorm(OUT, H): a residual add, D's death (a
 * row-parallel product's, summed over the ranks), the next block's norm. */
static int match_add_rmsnorm(const lm_fuse_op *ops, int n, int i, bool *candidate) {
    int j = past_discards(ops, n, i + 1);
    if (!is(ops, n, i, LM_FUSE_OP_ADD) || !is(ops, n, j, LM_FUSE_OP_RMSNORM) || !same(ops[j].a, ops[i].out))
        return 0;
    *candidate = true;
    const lm_fuse_op *add = &ops[i], *norm = &ops[j];
    span h = floats(add->out, add->count), d = floats(add->a, add->count), out = rows_of(norm->out, norm);
    if ((int64_t)norm->rows * norm->dim != add->count || overlap(h, d) || overlap(out, h)) return 0;
    if (!same(out.at, d.at) && overlap(out, d)) return 0; /* out may be delta itself, not part of it */
    for (int k = i + 1; k < j; k++)
        if (overlap((span){ops[k].out, (size_t)ops[k].count}, h)) return 0; /* h must live */
    return j + 1 - i;
}

/* attention(O, q) sigmoid_mul(O, G): no intermediate. */
static int match_gated_attention(const lm_fuse_op *ops, int n, int i, bool *candidate) {
    if (!is(ops, n, i, LM_FUSE_OP_ATTENTION) || !is(ops, n, i + 1, LM_FUSE_OP_SIGMOID_MUL) ||
        !same(ops[i + 1].out, ops[i].out))
        return 0;
    *candidate = true;
    const lm_attention_batch *b = &ops[i].u.attn.batch;
    int64_t count = (int64_t)b->n_tokens * b->n_heads * b->head_dim;
    span out = floats(ops[i].out, count), gates = floats(ops[i + 1].a, count), q = floats(ops[i].a, count);
    if (ops[i + 1].count != count || overlap(out, gates) || overlap(out, q)) return 0;
    return 2;
}

/* delta_rule(O, ...) gated_rmsnorm(O, O, z, norm) over its rows. */
static int match_delta_rule_norm(const lm_fuse_op *ops, int n, int i, bool *candidate) {
    if (!is(ops, n, i, LM_FUSE_OP_DELTA_RULE) || !is(ops, n, i + 1, LM_FUSE_OP_GATED_RMSNORM) ||
        !same(ops[i + 1].a, ops[i].out))
        return 0;
    *candidate = true;
    const lm_fuse_delta_rule *r = &ops[i].u.rule;
    const lm_fuse_op *norm = &ops[i + 1];
    if (!same(norm->out, ops[i].out) || norm->dim != r->dv || r->Hv <= 0 || norm->rows % r->Hv != 0) return 0;
    if (overlap(rows_of(norm->b, norm), rows_of(norm->out, norm))) return 0;
    return 2;
}

/* m moved on by `floats` floats. */
static lm_mem shifted(lm_mem m, int64_t floats) { return (lm_mem){m.buffer, m.offset + (size_t)floats * sizeof(float)}; }

/* Whether spans[0, count) are pairwise apart. */
static bool all_apart(const span *spans, int count) {
    for (int a = 0; a < count; a++)
        for (int b = a + 1; b < count; b++)
            if (overlap(spans[a], spans[b])) return false;
    return true;
}

/* copy_rows(Q, C[0:kd]) copy_rows(K, C[kd:2kd]) copy_rows(V, C[2kd:]) of
 * the conv's output C (rows n, stride cd), after gdn_gates(beta, g) and
 * the conv itself; then l2norm_scale of q (q_scale) and k (1), one eps,
 * over heads of dk; C discarded. */
static int match_gdn_prepare(const lm_fuse_op *ops, int n, int i, bool *candidate) {
    if (!is(ops, n, i, LM_FUSE_OP_GDN_GATES) || !is(ops, n, i + 1, LM_FUSE_OP_CONV)) return 0;
    *candidate = true;
    for (int j = 2; j < 5; j++)
        if (!is(ops, n, i + j, LM_FUSE_OP_COPY_ROWS)) return 0;
    if (!is(ops, n, i + 5, LM_FUSE_OP_L2NORM_SCALE) || !is(ops, n, i + 6, LM_FUSE_OP_L2NORM_SCALE)) return 0;
    const lm_fuse_op *gates = &ops[i], *conv = &ops[i + 1], *cq = &ops[i + 2], *ck = &ops[i + 3], *cv = &ops[i + 4];
    const lm_fuse_op *nq = &ops[i + 5], *nk = &ops[i + 6];
    int rows = gates->rows, Hv = gates->dim, kd = cq->dim, vd = cv->dim, cd = conv->u.conv.channels;
    if (rows <= 0 || Hv <= 0 || nq->dim <= 0 || kd != ck->dim || cd != 2 * kd + vd || vd % Hv != 0) return 0;
    for (int j = 2; j < 5; j++)
        if (ops[i + j].rows != rows || ops[i + j].u.stride.src != cd || ops[i + j].u.stride.dst != ops[i + j].dim)
            return 0;
    if (!same(cq->a, conv->out) || !same(ck->a, shifted(conv->out, kd)) || !same(cv->a, shifted(conv->out, 2 * kd)))
        return 0;
    if (!same(nq->out, cq->out) || !same(nk->out, ck->out) || nq->dim != nk->dim || nq->rows != nk->rows ||
        (int64_t)nq->rows * nq->dim != (int64_t)rows * kd || nq->eps != nk->eps || nk->u.scale != 1.0f)
        return 0;
    span conv_out = floats(conv->out, (int64_t)rows * cd);
    span all[] = {floats(cq->out, (int64_t)rows * kd), floats(ck->out, (int64_t)rows * kd),
                  floats(cv->out, (int64_t)rows * vd), floats(gates->out, (int64_t)rows * Hv),
                  floats(gates->a, (int64_t)rows * Hv), floats(conv->a, (int64_t)rows * cd), conv_out};
    if (!all_apart(all, 7) || !dead_after(ops, n, i + 7, conv_out)) return 0;
    return past_discards(ops, n, i + 7) - i;
}

/* copy_rows(Q, QG[:D]) copy_rows(G, QG[D:]) of the q projection QG (rows
 * of each head's query then gate, stride 2D), rmsnorm of q and k in
 * place per head (one eps), rope of both (one position array and
 * rotary), kv_write of k and v. */
static int match_attention_prepare(const lm_fuse_op *ops, int n, int i, bool *candidate) {
    if (!is(ops, n, i, LM_FUSE_OP_COPY_ROWS) || !is(ops, n, i + 1, LM_FUSE_OP_COPY_ROWS) ||
        !is(ops, n, i + 2, LM_FUSE_OP_RMSNORM))
        return 0;
    *candidate = true;
    if (!is(ops, n, i + 3, LM_FUSE_OP_RMSNORM) || !is(ops, n, i + 4, LM_FUSE_OP_ROPE) ||
        !is(ops, n, i + 5, LM_FUSE_OP_ROPE) || !is(ops, n, i + 6, LM_FUSE_OP_KV_WRITE))
        return 0;
    const lm_fuse_op *cq = &ops[i], *cg = &ops[i + 1], *nq = &ops[i + 2], *nk = &ops[i + 3];
    const lm_fuse_op *rq = &ops[i + 4], *rk = &ops[i + 5], *kv = &ops[i + 6];
    int D = cq->dim, rows = rq->rows, nH = rq->u.rope.n_heads, nKV = rk->u.rope.n_heads;
    if (D <= 0 || rows <= 0 || nH <= 0 || nKV <= 0 || cg->dim != D || cq->rows != rows * nH || cg->rows != cq->rows ||
        cq->u.stride.dst != D || cg->u.stride.dst != D || cq->u.stride.src != 2 * D || cg->u.stride.src != 2 * D ||
        !same(cg->a, shifted(cq->a, D)))
        return 0;
    if (!same(nq->out, cq->out) || !same(nq->a, cq->out) || nq->rows != rows * nH || nq->dim != D ||
        !same(nk->a, nk->out) || nk->rows != rows * nKV || nk->dim != D || nk->eps != nq->eps)
        return 0;
    const lm_rope_params *pq = &rq->u.rope.params, *pk = &rk->u.rope.params;
    if (!same(rq->out, cq->out) || !same(rk->out, nk->out) || !same(rq->a, rk->a) || rk->rows != rows ||
        rq->dim != D || rk->dim != D || pq->rot_dim != pk->rot_dim || pq->theta != pk->theta ||
        memcmp(pq->sections, pk->sections, sizeof pq->sections) != 0 ||
        pq->interleaved_sections != pk->interleaved_sections || pq->pair_interleaved != pk->pair_interleaved ||
        pq->two_d != pk->two_d)
        return 0;
    if (!same(kv->a, nk->out) || kv->rows != rows || kv->u.kv.n_kv_heads != nKV || kv->u.kv.head_dim != D) return 0;
    int64_t q_count = (int64_t)rows * nH * D, kv_count = (int64_t)rows * nKV * D;
    span all[] = {floats(cq->out, q_count), floats(cg->out, q_count), floats(nk->out, kv_count),
                  floats(kv->b, kv_count), floats(cq->a, 2 * q_count)};
    if (!all_apart(all, 5)) return 0;
    return 7;
}

typedef int (*matcher)(const lm_fuse_op *ops, int n, int i, bool *candidate);

#define KIND(k) (1u << (k))

int lm_fuse_plan(const lm_fuse_op *ops, int n, lm_fuse_step *steps, lm_fuse_stats *stats) {
    /* In the order tried; `first`: the kinds a pattern can start with, so
     * an op is offered only to the patterns that could start at it (the
     * plan runs on the host for every op of every step). */
    static const struct {
        lm_fuse_pattern pattern;
        matcher match;
        unsigned first;
    } order[] = {
        {LM_FUSE_GDN_PREPARE, match_gdn_prepare, KIND(LM_FUSE_OP_GDN_GATES)},
        {LM_FUSE_ATTENTION_PREPARE, match_attention_prepare, KIND(LM_FUSE_OP_COPY_ROWS)},
        {LM_FUSE_MATMUL_GATED_ADD, match_gated_add, KIND(LM_FUSE_OP_SILU_MUL) | KIND(LM_FUSE_OP_MATMUL)},
        {LM_FUSE_NORMED_MATMUL_SWIGLU, match_normed_swiglu, KIND(LM_FUSE_OP_RMSNORM)},
        {LM_FUSE_NORMED_MATMUL_GROUP, match_normed_group, KIND(LM_FUSE_OP_RMSNORM)},
        {LM_FUSE_MATMUL_SWIGLU, match_swiglu, KIND(LM_FUSE_OP_MATMUL)},
        {LM_FUSE_MATMUL_ADD, match_matmul_add, KIND(LM_FUSE_OP_MATMUL)},
        {LM_FUSE_MATMUL_GROUP, match_group, KIND(LM_FUSE_OP_MATMUL)},
        {LM_FUSE_ADD_RMSNORM, match_add_rmsnorm, KIND(LM_FUSE_OP_ADD)},
        {LM_FUSE_GATED_ATTENTION, match_gated_attention, KIND(LM_FUSE_OP_ATTENTION)},
        {LM_FUSE_GATED_DELTA_RULE_NORM, match_delta_rule_norm, KIND(LM_FUSE_OP_DELTA_RULE)},
    };
    enum { N_ORDER = sizeof order / sizeof order[0] };
    int n_steps = 0;
    for (int i = 0; i < n;) {
        lm_fuse_step step = {LM_FUSE_PLAIN, i, 1};
        bool candidate[N_ORDER] = {false};
        unsigned kind = KIND(ops[i].kind);
        for (int p = 0; p < N_ORDER; p++) {
            if (!(order[p].first & kind)) continue;
            int taken = order[p].match(ops, n, i, &candidate[p]);
            if (taken > 0) {
                step = (lm_fuse_step){order[p].pattern, i, taken};
                break;
            }
        }
        if (stats) {
            if (step.pattern != LM_FUSE_PLAIN) stats->fused[step.pattern]++;
            else
                for (int p = 0; p < N_ORDER; p++)
                    if (candidate[p]) stats->refused[order[p].pattern]++;
        }
        steps[n_steps++] = step;
        i += step.count;
    }
    return n_steps;
}
