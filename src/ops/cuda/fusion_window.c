/* The step's window of fusible ops and its lowering (fusion_plan.h says
 * what fuses and why it is exact).  C: it calls the kernels' entry points
 * (cuda_backend.h) only.  Built with the cuda backend. */
#ifdef LOOM_HAVE_CUDA
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "ops/cuda/cuda_backend.h"
#include "ops/cuda/fusion_plan.h"

/* A decode layer puts about 16 ops between two it does not know; a full
 * window is lowered at once (its last pattern may then be cut: slower,
 * never different). */
#define WINDOW_OPS 64

struct lm_cuda_fusion_window {
    lm_fuse_op ops[WINDOW_OPS];
    int n;
    bool lowering; /* the lowering's own launches must not flush it again */
    bool stats_on; /* LOOM_CUDA_FUSION_STATS=1 */
    lm_fuse_stats stats;
    long declined[LM_FUSE_N_PATTERNS]; /* matched, but the fused kernel said no: the parts ran */
};

lm_status lm_cuda_fusion_init(lm_cuda_fusion_window **out, lm_error *err) {
    *out = calloc(1, sizeof **out);
    if (!*out) return lm_fail(err, LM_ERR_NOMEM, "cuda: no memory for the fusion window");
    const char *stats = getenv("LOOM_CUDA_FUSION_STATS"); /* 1: counts per pattern at destroy */
    (*out)->stats_on = stats && stats[0] == '1';
    return LM_OK;
}

void lm_cuda_fusion_free(lm_cuda_fusion_window *w) {
    if (!w) return;
    if (w->stats_on) {
        fprintf(stderr, "loom: cuda fusion (per pattern: fused / refused candidates / declined by the kernel)\n");
        for (int p = 1; p < LM_FUSE_N_PATTERNS; p++)
            fprintf(stderr, "  %-22s %8ld %8ld %8ld\n", lm_fuse_pattern_name((lm_fuse_pattern)p),
                    w->stats.fused[p] - w->declined[p], w->stats.refused[p], w->declined[p]);
    }
    free(w);
}

/* One op as its own kernel. */
static void run_plain(lm_backend *be, const lm_fuse_op *o) {
    switch (o->kind) {
    case LM_FUSE_OP_MATMUL: lm_cuda_matmul(be, o->out, o->a, o->rows, &o->w); break;
    case LM_FUSE_OP_RMSNORM: lm_cuda_rmsnorm(be, o->out, o->a, o->b, o->rows, o->dim, o->eps); break;
    case LM_FUSE_OP_ADD: lm_cuda_add(be, o->out, o->a, o->count); break;
    case LM_FUSE_OP_SILU_MUL: lm_cuda_silu_mul(be, o->out, o->a, o->b, o->count); break;
    case LM_FUSE_OP_SIGMOID_SCALE_ROWS: lm_cuda_sigmoid_scale_rows(be, o->out, o->a, o->rows, o->dim); break;
    case LM_FUSE_OP_DISCARD: break;
    case LM_FUSE_OP_ATTENTION: lm_cuda_attention(be, o->out, o->a, &o->u.attn.kv, &o->u.attn.batch); break;
    case LM_FUSE_OP_SIGMOID_MUL: lm_cuda_sigmoid_mul(be, o->out, o->a, o->count); break;
    case LM_FUSE_OP_DELTA_RULE: {
        const lm_fuse_delta_rule *r = &o->u.rule;
        lm_cuda_gated_delta_rule(be, o->out, o->a, r->k, r->v, r->g, r->beta, r->states, r->slot_stride, &r->seqs,
                                 r->Hk, r->Hv, r->dk, r->dv);
        break;
    }
    case LM_FUSE_OP_GATED_RMSNORM: lm_cuda_gated_rmsnorm(be, o->out, o->a, o->b, o->c, o->rows, o->dim, o->eps); break;
    case LM_FUSE_OP_GDN_GATES: lm_cuda_gdn_gates(be, o->out, o->a, o->b, o->c, o->rows, o->dim); break;
    case LM_FUSE_OP_CONV: {
        const lm_fuse_conv *c = &o->u.conv;
        lm_cuda_causal_conv1d_silu(be, o->out, o->a, c->channels, o->b, c->taps, c->states, c->slot_stride, &c->seqs);
        break;
    }
    case LM_FUSE_OP_COPY_ROWS:
        lm_cuda_copy_rows(be, o->out, o->u.stride.dst, o->a, o->u.stride.src, o->rows, o->dim);
        break;
    case LM_FUSE_OP_L2NORM_SCALE: lm_cuda_l2norm_scale(be, o->out, o->rows, o->dim, o->eps, o->u.scale); break;
    case LM_FUSE_OP_ROPE: lm_cuda_rope(be, o->out, o->rows, o->u.rope.n_heads, o->dim, o->a, &o->u.rope.params); break;
    case LM_FUSE_OP_KV_WRITE: lm_cuda_kv_write(be, &o->u.kv, o->a, o->b, o->rows, o->c); break;
    }
}

/* The products of matmuls m[0, count) of one input, as ops.h's
 * lm_matmul_group did: one launch for several. */
static void run_group(lm_backend *be, const lm_fuse_op *m, int count) {
    if (count == 1) {
        run_plain(be, m);
        return;
    }
    lm_matmul_out outs[LM_MATMUL_GROUP_MAX];
    for (int i = 0; i < count; i++) outs[i] = (lm_matmul_out){m[i].out, &m[i].w};
    lm_cuda_matmul_group(be, m[0].a, m[0].rows, outs, count);
}

/* gate, up, silu_mul (and discards): as lm_matmul_swiglu did. */
static bool run_swiglu(lm_backend *be, const lm_fuse_op *g) {
    const lm_fuse_op *u = g + 1, *silu = g + 2;
    if (lm_cuda_matmul_swiglu(be, g->out, g->a, g->rows, &g->w, &u->w)) return true;
    run_group(be, g, 2);
    run_plain(be, silu);
    return false;
}

/* Each returns whether the fused kernel took it (false: the parts ran). */
static bool lower(lm_backend *be, const lm_fuse_op *o, const lm_fuse_step *step) {
    switch (step->pattern) {
    case LM_FUSE_PLAIN: run_plain(be, o); return true;
    case LM_FUSE_GDN_PREPARE: {
        const lm_fuse_op *gates = o, *conv = o + 1, *q = o + 5, *k = o + 6;
        int n = gates->rows, Hk = q->rows / n, vd = o[4].dim;
        lm_gdn_prepare_args a = {
            .q = q->out, .k = k->out, .v = o[4].out, .beta = gates->out, .g = gates->a, .mixed = conv->a,
            .conv_weight = conv->b, .conv_states = conv->u.conv.states, .conv_slot_stride = conv->u.conv.slot_stride,
            .neg_exp_A = gates->b, .dt_bias = gates->c, .seqs = &conv->u.conv.seqs, .n = n,
            .conv_kernel = conv->u.conv.taps, .Hk = Hk, .Hv = gates->dim, .dk = q->dim, .dv = vd / gates->dim,
            .q_scale = q->u.scale, .eps = q->eps};
        if (lm_cuda_gdn_prepare(be, &a)) return true;
        for (int i = 0; i < 7; i++) run_plain(be, o + i);
        return false;
    }
    case LM_FUSE_ATTENTION_PREPARE: {
        const lm_fuse_op *q_rope = o + 4, *k_rope = o + 5, *write = o + 6;
        lm_attention_prepare_args a = {
            .q = o->out, .gates = o[1].out, .k = o[3].out, .v = write->b, .q_and_gate = o->a, .q_norm = o[2].b,
            .k_norm = o[3].b, .positions = q_rope->a, .kv_slots = write->c, .rope = &q_rope->u.rope.params,
            .kv = &write->u.kv, .n = q_rope->rows, .n_heads = q_rope->u.rope.n_heads,
            .n_kv_heads = k_rope->u.rope.n_heads, .head_dim = o->dim, .eps = o[2].eps};
        if (lm_cuda_attention_prepare(be, &a)) return true;
        for (int i = 0; i < 7; i++) run_plain(be, o + i);
        return false;
    }
    case LM_FUSE_MATMUL_GROUP: run_group(be, o, step->count); return true;
    case LM_FUSE_MATMUL_SWIGLU: return run_swiglu(be, o);
    case LM_FUSE_NORMED_MATMUL_GROUP: {
        int count = step->count - 1;
        lm_matmul_out outs[LM_MATMUL_GROUP_MAX];
        for (int i = 0; i < count; i++) outs[i] = (lm_matmul_out){o[1 + i].out, &o[1 + i].w};
        lm_normed_input in = {.h = o->a, .weight = o->b, .x = o->out, .eps = o->eps};
        if (lm_cuda_normed_matmul_group(be, &in, o->rows, outs, count)) return true;
        run_plain(be, o);
        run_group(be, o + 1, count);
        return false;
    }
    case LM_FUSE_NORMED_MATMUL_SWIGLU: {
        lm_normed_input in = {.h = o->a, .weight = o->b, .x = o->out, .eps = o->eps};
        if (lm_cuda_normed_matmul_swiglu(be, o[1].out, &in, o->rows, &o[1].w, &o[2].w)) return true;
        run_plain(be, o);
        run_swiglu(be, o + 1);
        return false;
    }
    case LM_FUSE_MATMUL_ADD:
        if (lm_cuda_matmul_add(be, o[1].out, o->a, o->rows, &o->w)) return true;
        run_plain(be, o);
        run_plain(be, o + 1);
        return false;
    case LM_FUSE_MATMUL_GATED_ADD: {
        const lm_fuse_op *silu = o->kind == LM_FUSE_OP_SILU_MUL ? o : NULL, *m = silu ? o + 1 : o;
        lm_mem x_up = silu ? silu->b : (lm_mem){NULL, 0};
        if (lm_cuda_matmul_gated_add(be, m[3].out, m->a, x_up, m->rows, &m->w, m[1].a, m[2].out)) return true;
        for (const lm_fuse_op *p = o; p <= m + 3; p++) run_plain(be, p);
        return false;
    }
    case LM_FUSE_GATED_ATTENTION:
        if (lm_cuda_gated_attention(be, o->out, o->a, o[1].a, &o->u.attn.kv, &o->u.attn.batch)) return true;
        run_plain(be, o);
        run_plain(be, o + 1);
        return false;
    case LM_FUSE_GATED_DELTA_RULE_NORM: {
        const lm_fuse_delta_rule *r = &o->u.rule;
        lm_delta_rule_norm_args a = {.out = o->out, .q = o->a, .k = r->k, .v = r->v, .g = r->g, .beta = r->beta,
                                     .states = r->states, .slot_stride = r->slot_stride, .seqs = &r->seqs,
                                     .z = o[1].b, .norm = o[1].c, .n = o[1].rows / r->Hv, .Hk = r->Hk, .Hv = r->Hv,
                                     .dk = r->dk, .dv = r->dv, .eps = o[1].eps};
        if (lm_cuda_gated_delta_rule_norm(be, &a)) return true;
        run_plain(be, o);
        run_plain(be, o + 1);
        return false;
    }
    case LM_FUSE_ADD_RMSNORM: { /* the norm is the step's last op, past the discards */
        const lm_fuse_op *norm = &o[step->count - 1];
        lm_cuda_add_rmsnorm(be, norm->out, o->out, o->a, norm->b, norm->rows, norm->dim, norm->eps);
        return true;
    }
    case LM_FUSE_N_PATTERNS: break;
    }
    return true;
}

void lm_cuda_fusion_flush(lm_backend *be) {
    lm_cuda_fusion_window *w = lm_cuda_fusion_of(be);
    if (!w || w->lowering || w->n == 0) return;
    w->lowering = true;
    lm_fuse_step steps[WINDOW_OPS];
    int n_steps = lm_fuse_plan(w->ops, w->n, steps, &w->stats);
    for (int i = 0; i < n_steps; i++)
        if (!lower(be, &w->ops[steps[i].first], &steps[i])) w->declined[steps[i].pattern]++;
    w->n = 0;
    w->lowering = false;
}

/* More ops than any pattern takes from its first op, its discards
 * included (gdn_prepare: 7 and one; matmul_gated_add: 5 and three). */
#define PATTERN_REACH 16

/* A full window: the steps that begin more than PATTERN_REACH ops before
 * its end are lowered, and the ops from the first later step move to the
 * front, to be planned again with what follows — so a pattern the edge
 * would cut (a residual product whose add and discard are not yet
 * recorded, a prepare step's first ops) is still found whole.  Counted
 * here: the lowered steps' fusions (their refusals are not, the plan being
 * made without stats so that the kept ops are not counted twice). */
static void lower_all_but_tail(lm_backend *be, lm_cuda_fusion_window *w) {
    w->lowering = true;
    lm_fuse_step steps[WINDOW_OPS];
    int n_steps = lm_fuse_plan(w->ops, w->n, steps, NULL);
    int keep = w->n;
    for (int i = 0; i < n_steps; i++)
        if (steps[i].first >= w->n - PATTERN_REACH) {
            keep = steps[i].first;
            break;
        }
    if (keep == 0) keep = w->n; /* not reached (a step takes at most a dozen ops): lower it all */
    for (int i = 0; i < n_steps && steps[i].first < keep; i++) {
        if (w->stats_on && steps[i].pattern != LM_FUSE_PLAIN) w->stats.fused[steps[i].pattern]++;
        if (!lower(be, &w->ops[steps[i].first], &steps[i])) w->declined[steps[i].pattern]++;
    }
    memmove(w->ops, w->ops + keep, sizeof w->ops[0] * (size_t)(w->n - keep));
    w->n -= keep;
    w->lowering = false;
}

/* op: the caller's compound literal, copied once (an op is ~300 bytes,
 * and a decode step records over a thousand). */
static void append(lm_backend *be, const lm_fuse_op *op) {
    lm_cuda_fusion_window *w = lm_cuda_fusion_of(be);
    if (w->lowering) { /* not reached: the lowering calls the kernels, not the table */
        run_plain(be, op);
        return;
    }
    if (w->n == WINDOW_OPS) lower_all_but_tail(be, w);
    w->ops[w->n++] = *op;
}

void lm_cuda_fuse_matmul(lm_backend *be, lm_mem y, lm_mem x, int n, const lm_matrix *w) {
    append(be, &(lm_fuse_op){.kind = LM_FUSE_OP_MATMUL, .out = y, .a = x, .w = *w, .rows = n});
}
void lm_cuda_fuse_rmsnorm(lm_backend *be, lm_mem out, lm_mem x, lm_mem weight, int rows, int dim, float eps) {
    append(be, &(lm_fuse_op){.kind = LM_FUSE_OP_RMSNORM, .out = out, .a = x, .b = weight, .rows = rows, .dim = dim,
                            .eps = eps});
}
void lm_cuda_fuse_add(lm_backend *be, lm_mem x, lm_mem y, int64_t n) {
    append(be, &(lm_fuse_op){.kind = LM_FUSE_OP_ADD, .out = x, .a = y, .count = n});
}
void lm_cuda_fuse_silu_mul(lm_backend *be, lm_mem out, lm_mem gate, lm_mem up, int64_t n) {
    append(be, &(lm_fuse_op){.kind = LM_FUSE_OP_SILU_MUL, .out = out, .a = gate, .b = up, .count = n});
}
void lm_cuda_fuse_sigmoid_scale_rows(lm_backend *be, lm_mem x, lm_mem gate, int rows, int width) {
    append(be, &(lm_fuse_op){.kind = LM_FUSE_OP_SIGMOID_SCALE_ROWS, .out = x, .a = gate, .rows = rows, .dim = width});
}
void lm_cuda_fuse_discard(lm_backend *be, lm_mem at, size_t bytes) {
    append(be, &(lm_fuse_op){.kind = LM_FUSE_OP_DISCARD, .out = at, .count = (int64_t)bytes});
}
void lm_cuda_fuse_attention(lm_backend *be, lm_mem out, lm_mem q, const lm_kv_layer *kv,
                            const lm_attention_batch *batch) {
    append(be, &(lm_fuse_op){.kind = LM_FUSE_OP_ATTENTION, .out = out, .a = q,
                            .u.attn = {.kv = *kv, .batch = *batch}});
}
void lm_cuda_fuse_sigmoid_mul(lm_backend *be, lm_mem x, lm_mem gate, int64_t n) {
    append(be, &(lm_fuse_op){.kind = LM_FUSE_OP_SIGMOID_MUL, .out = x, .a = gate, .count = n});
}
void lm_cuda_fuse_gated_delta_rule(lm_backend *be, lm_mem out, lm_mem q, lm_mem k, lm_mem v, lm_mem g, lm_mem beta,
                                   lm_mem states, int64_t slot_stride, const lm_seq_batch *seqs, int Hk, int Hv,
                                   int dk, int dv) {
    append(be, &(lm_fuse_op){.kind = LM_FUSE_OP_DELTA_RULE, .out = out, .a = q,
                            .u.rule = {.k = k, .v = v, .g = g, .beta = beta, .states = states,
                                       .slot_stride = slot_stride, .seqs = *seqs, .Hk = Hk, .Hv = Hv, .dk = dk,
                                       .dv = dv}});
}
void lm_cuda_fuse_gated_rmsnorm(lm_backend *be, lm_mem out, lm_mem x, lm_mem z, lm_mem weight, int rows, int dim,
                                float eps) {
    append(be, &(lm_fuse_op){.kind = LM_FUSE_OP_GATED_RMSNORM, .out = out, .a = x, .b = z, .c = weight, .rows = rows,
                            .dim = dim, .eps = eps});
}
void lm_cuda_fuse_gdn_gates(lm_backend *be, lm_mem beta, lm_mem g, lm_mem neg_exp_A, lm_mem dt_bias, int n, int H) {
    append(be, &(lm_fuse_op){.kind = LM_FUSE_OP_GDN_GATES, .out = beta, .a = g, .b = neg_exp_A, .c = dt_bias, .rows = n,
                            .dim = H});
}
void lm_cuda_fuse_causal_conv1d_silu(lm_backend *be, lm_mem out, lm_mem in, int C, lm_mem weight, int K,
                                     lm_mem states, int64_t slot_stride, const lm_seq_batch *seqs) {
    append(be, &(lm_fuse_op){.kind = LM_FUSE_OP_CONV, .out = out, .a = in, .b = weight,
                            .u.conv = {.states = states, .slot_stride = slot_stride, .seqs = *seqs, .channels = C,
                                       .taps = K}});
}
void lm_cuda_fuse_copy_rows(lm_backend *be, lm_mem dst, int64_t dst_stride, lm_mem src, int64_t src_stride, int rows,
                            int width) {
    append(be, &(lm_fuse_op){.kind = LM_FUSE_OP_COPY_ROWS, .out = dst, .a = src, .rows = rows, .dim = width,
                            .u.stride = {.dst = dst_stride, .src = src_stride}});
}
void lm_cuda_fuse_l2norm_scale(lm_backend *be, lm_mem x, int rows, int dim, float eps, float scale) {
    append(be, &(lm_fuse_op){.kind = LM_FUSE_OP_L2NORM_SCALE, .out = x, .rows = rows, .dim = dim, .eps = eps,
                            .u.scale = scale});
}
void lm_cuda_fuse_rope(lm_backend *be, lm_mem x, int n, int n_heads, int head_dim, lm_mem positions,
                       const lm_rope_params *rope) {
    append(be, &(lm_fuse_op){.kind = LM_FUSE_OP_ROPE, .out = x, .a = positions, .rows = n, .dim = head_dim,
                            .u.rope = {.params = *rope, .n_heads = n_heads}});
}
void lm_cuda_fuse_kv_write(lm_backend *be, const lm_kv_layer *kv, lm_mem k, lm_mem v, int n, lm_mem slots) {
    append(be, &(lm_fuse_op){.kind = LM_FUSE_OP_KV_WRITE, .a = k, .b = v, .c = slots, .rows = n, .u.kv = *kv});
}
#else
typedef int lm_cuda_fusion_window_unused; /* ISO C wants a declaration */
#endif
