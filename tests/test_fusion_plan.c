/* The cuda backend's fuser (src/ops/cuda/fusion_plan.h) on the op
 * sequences the forward emits: a decode layer of qwen35 dense, MoE and
 * GLM fuses as the models chose by name before, and a broken pattern (an
 * intermediate not declared dead or read on, aliasing, other shapes or
 * dtypes) runs as its parts.  Plain C: no GPU needed. */
#include <string.h>

#include "harness.h"
#include "ops/cuda/fusion_plan.h"

/* Distinct fake buffers: the plan compares addresses only. */
static char buffers[16];
static lm_mem buf(int i) { return (lm_mem){(lm_buffer *)&buffers[i], 0}; }
enum { H_, X_, PROJ, PROJ2, CORE, Q, K, V, ROUTED, SHARED, GATE, LOGITS };

enum { N = 2, HID = 64, INTER = 128 };
static lm_matrix mat(int rows, int cols) {
    return (lm_matrix){.data = buf(15), .dtype = LM_DTYPE_BF16, .rows = rows, .cols = cols};
}

typedef struct {
    lm_fuse_op ops[64];
    int n;
} seq;

static void mm(seq *s, lm_mem y, lm_mem x, lm_matrix w) {
    s->ops[s->n++] = (lm_fuse_op){.kind = LM_FUSE_OP_MATMUL, .out = y, .a = x, .w = w, .rows = N};
}
static void norm(seq *s, lm_mem out, lm_mem x, int dim) {
    s->ops[s->n++] = (lm_fuse_op){.kind = LM_FUSE_OP_RMSNORM, .out = out, .a = x, .b = buf(14), .rows = N, .dim = dim,
                                  .eps = 1e-6f};
}
static void add(seq *s, lm_mem x, lm_mem y, int64_t count) {
    s->ops[s->n++] = (lm_fuse_op){.kind = LM_FUSE_OP_ADD, .out = x, .a = y, .count = count};
}
static void silu(seq *s, lm_mem out, lm_mem gate, lm_mem up, int64_t count) {
    s->ops[s->n++] = (lm_fuse_op){.kind = LM_FUSE_OP_SILU_MUL, .out = out, .a = gate, .b = up, .count = count};
}
static void scale_rows(seq *s, lm_mem x, lm_mem gate, int width) {
    s->ops[s->n++] = (lm_fuse_op){.kind = LM_FUSE_OP_SIGMOID_SCALE_ROWS, .out = x, .a = gate, .rows = N, .dim = width};
}
static void discard(seq *s, lm_mem at, int64_t floats) {
    s->ops[s->n++] = (lm_fuse_op){.kind = LM_FUSE_OP_DISCARD, .out = at, .count = floats * 4};
}

/* The residual product: h += x·wᵀ through the scratch x, which dies. */
static void residual(seq *s, lm_mem in, lm_matrix w) {
    mm(s, buf(X_), in, w);
    add(s, buf(H_), buf(X_), (int64_t)N * w.rows);
    discard(s, buf(X_), (int64_t)N * w.rows);
}
/* The SwiGLU's first half of x into proj (proj2 the up half, dead). */
static void swiglu(seq *s, lm_mem x) {
    mm(s, buf(PROJ), x, mat(INTER, HID));
    mm(s, buf(PROJ2), x, mat(INTER, HID));
    silu(s, buf(PROJ), buf(PROJ), buf(PROJ2), (int64_t)N * INTER);
    discard(s, buf(PROJ2), (int64_t)N * INTER);
}

/* Checks the plan of s is the `expect` patterns with those op counts. */
#define CHECK_PLAN(s, ...)                                                                         \
    do {                                                                                           \
        const int expect[][2] = {__VA_ARGS__};                                                     \
        lm_fuse_step plan_[64];                                                                    \
        int got = lm_fuse_plan((s)->ops, (s)->n, plan_, NULL);                                     \
        int want = (int)(sizeof expect / sizeof expect[0]);                                        \
        CHECK_MSG(got == want, "%d steps, want %d", got, want);                                    \
        for (int i = 0; i < want; i++)                                                             \
            CHECK_MSG((int)plan_[i].pattern == expect[i][0] && plan_[i].count == expect[i][1],     \
                      "step %d: %s of %d ops, want %s of %d", i, lm_fuse_pattern_name(plan_[i].pattern), \
                      plan_[i].count, lm_fuse_pattern_name((lm_fuse_pattern)expect[i][0]), expect[i][1]); \
    } while (0)

/* Between the delta rule and the next layer's gdn_prepare: the out
 * projection into h, the MLP, the next layer's input products. */
static void qwen35_dense_decode_layer(void) {
    seq s = {0};
    residual(&s, buf(CORE), mat(HID, 96));
    norm(&s, buf(X_), buf(H_), HID);
    swiglu(&s, buf(X_));
    residual(&s, buf(PROJ), mat(HID, INTER));
    norm(&s, buf(X_), buf(H_), HID);
    mm(&s, buf(PROJ), buf(X_), mat(160, HID));
    mm(&s, buf(GATE), buf(X_), mat(96, HID));
    mm(&s, buf(Q), buf(X_), mat(4, HID));
    mm(&s, buf(K), buf(X_), mat(4, HID));
    CHECK_PLAN(&s, {LM_FUSE_MATMUL_ADD, 3}, {LM_FUSE_NORMED_MATMUL_SWIGLU, 5}, {LM_FUSE_MATMUL_ADD, 3},
               {LM_FUSE_NORMED_MATMUL_GROUP, 5});
}

/* An MoE layer: the router and the shared expert's products of the
 * normed input (then the route and the experts: the window is lowered),
 * and the shared expert's gated SwiGLU into h. */
static void qwen35_moe_decode_layer(void) {
    seq s = {0};
    norm(&s, buf(X_), buf(H_), HID);
    mm(&s, buf(LOGITS), buf(X_), mat(8, HID));
    mm(&s, buf(PROJ), buf(X_), mat(32, HID));
    mm(&s, buf(PROJ2), buf(X_), mat(32, HID));
    mm(&s, buf(GATE), buf(X_), mat(1, HID));
    CHECK_PLAN(&s, {LM_FUSE_NORMED_MATMUL_GROUP, 5});
    seq t = {0};
    silu(&t, buf(PROJ), buf(PROJ), buf(PROJ2), (int64_t)N * 32);
    mm(&t, buf(SHARED), buf(PROJ), mat(HID, 32));
    scale_rows(&t, buf(SHARED), buf(GATE), HID);
    add(&t, buf(ROUTED), buf(SHARED), (int64_t)N * HID);
    add(&t, buf(H_), buf(ROUTED), (int64_t)N * HID);
    discard(&t, buf(SHARED), (int64_t)N * HID);
    discard(&t, buf(ROUTED), (int64_t)N * HID);
    discard(&t, buf(PROJ), (int64_t)N * 32);
    CHECK_PLAN(&t, {LM_FUSE_MATMUL_GATED_ADD, 8});
    /* Under tensor parallelism the sum goes to the ranks first: no add
     * into h, so the parts run (and the candidate is counted refused). */
    seq tp = t;
    tp.n = 4;
    lm_fuse_stats stats;
    memset(&stats, 0, sizeof stats);
    lm_fuse_step steps[64];
    CHECK(lm_fuse_plan(tp.ops, tp.n, steps, &stats) == 4);
    CHECK(stats.refused[LM_FUSE_MATMUL_GATED_ADD] == 1 && stats.fused[LM_FUSE_MATMUL_GATED_ADD] == 0);
    /* After the ranks' sum (the window lowered at the collective): h +=
     * it, the block's intermediates die, the next layer's norm and its
     * products: add_rmsnorm over the discards, then the group. */
    seq next = {0};
    add(&next, buf(H_), buf(ROUTED), (int64_t)N * HID);
    discard(&next, buf(SHARED), (int64_t)N * HID);
    discard(&next, buf(ROUTED), (int64_t)N * HID);
    discard(&next, buf(PROJ), (int64_t)N * 32);
    norm(&next, buf(X_), buf(H_), HID);
    mm(&next, buf(Q), buf(X_), mat(64, HID));
    mm(&next, buf(K), buf(X_), mat(16, HID));
    mm(&next, buf(V), buf(X_), mat(16, HID));
    CHECK_PLAN(&next, {LM_FUSE_ADD_RMSNORM, 5}, {LM_FUSE_MATMUL_GROUP, 3});
    /* The same without discards between. */
    seq adjacent = {0};
    add(&adjacent, buf(H_), buf(ROUTED), (int64_t)N * HID);
    norm(&adjacent, buf(X_), buf(H_), HID);
    CHECK_PLAN(&adjacent, {LM_FUSE_ADD_RMSNORM, 2});
    /* A discard of h itself between: the norm would read dead rows, so
     * the parts run as written. */
    seq dead_h = {0};
    add(&dead_h, buf(H_), buf(ROUTED), (int64_t)N * HID);
    discard(&dead_h, buf(H_), (int64_t)N * HID);
    norm(&dead_h, buf(X_), buf(H_), HID);
    CHECK_PLAN(&dead_h, {LM_FUSE_PLAIN, 1}, {LM_FUSE_PLAIN, 1}, {LM_FUSE_PLAIN, 1});
}

/* A row-parallel residual product under tensor parallelism: the product,
 * (the collective: the window lowered), then h += it, it dies, and the
 * next block's norm reads h: add_rmsnorm takes the add, the discard and
 * the norm. */
static void tensor_parallel_residual(void) {
    seq before = {0};
    mm(&before, buf(X_), buf(CORE), mat(HID, 96));
    CHECK_PLAN(&before, {LM_FUSE_PLAIN, 1});
    seq after = {0};
    add(&after, buf(H_), buf(X_), (int64_t)N * HID);
    discard(&after, buf(X_), (int64_t)N * HID);
    norm(&after, buf(X_), buf(H_), HID);
    swiglu(&after, buf(X_));
    CHECK_PLAN(&after, {LM_FUSE_ADD_RMSNORM, 3}, {LM_FUSE_MATMUL_SWIGLU, 4});
}

/* GLM: q, k, v of the normed input (then their biases: the window is
 * lowered), o_proj into h, the MoE's shared SwiGLU of the post norm and
 * the router's product of x. */
static void glm4v_decode_layer(void) {
    seq s = {0};
    norm(&s, buf(X_), buf(H_), HID);
    mm(&s, buf(Q), buf(X_), mat(64, HID));
    mm(&s, buf(K), buf(X_), mat(16, HID));
    mm(&s, buf(V), buf(X_), mat(16, HID));
    CHECK_PLAN(&s, {LM_FUSE_NORMED_MATMUL_GROUP, 4});
    seq t = {0};
    residual(&t, buf(CORE), mat(HID, 64));
    norm(&t, buf(X_), buf(H_), HID);
    swiglu(&t, buf(X_));
    mm(&t, buf(LOGITS), buf(X_), mat(8, HID));
    CHECK_PLAN(&t, {LM_FUSE_MATMUL_ADD, 3}, {LM_FUSE_NORMED_MATMUL_SWIGLU, 5}, {LM_FUSE_PLAIN, 1});
    /* The shared expert's down product into the routed sum. */
    seq u = {0};
    mm(&u, buf(SHARED), buf(PROJ), mat(HID, INTER));
    add(&u, buf(ROUTED), buf(SHARED), (int64_t)N * HID);
    discard(&u, buf(SHARED), (int64_t)N * HID);
    CHECK_PLAN(&u, {LM_FUSE_MATMUL_ADD, 3});
}

/* An intermediate not declared dead, or read before it is: the parts. */
static void live_intermediates_are_not_fused(void) {
    seq s = {0};
    mm(&s, buf(X_), buf(CORE), mat(HID, 64));
    add(&s, buf(H_), buf(X_), (int64_t)N * HID); /* x read on: no discard */
    norm(&s, buf(Q), buf(X_), HID);
    CHECK_PLAN(&s, {LM_FUSE_PLAIN, 1}, {LM_FUSE_PLAIN, 1}, {LM_FUSE_PLAIN, 1});
    seq t = {0};
    mm(&t, buf(PROJ), buf(X_), mat(INTER, HID));
    mm(&t, buf(PROJ2), buf(X_), mat(INTER, HID));
    silu(&t, buf(PROJ), buf(PROJ), buf(PROJ2), (int64_t)N * INTER);
    discard(&t, buf(PROJ2), (int64_t)N * INTER / 2); /* half of it only */
    CHECK_PLAN(&t, {LM_FUSE_MATMUL_GROUP, 2}, {LM_FUSE_PLAIN, 1}, {LM_FUSE_PLAIN, 1});
    /* The lost candidates are counted. */
    lm_fuse_stats stats;
    memset(&stats, 0, sizeof stats);
    lm_fuse_step steps[64];
    lm_fuse_plan(s.ops, s.n, steps, &stats);
    CHECK(stats.refused[LM_FUSE_MATMUL_ADD] == 1);
}

/* Aliasing: an in-place norm, a product over its own input, the sum
 * normed over itself. */
static void aliasing_is_not_fused(void) {
    seq s = {0};
    norm(&s, buf(X_), buf(X_), HID); /* x = rmsnorm(x): the normed kernel reads h while it writes x */
    mm(&s, buf(Q), buf(X_), mat(64, HID));
    mm(&s, buf(K), buf(X_), mat(16, HID));
    CHECK_PLAN(&s, {LM_FUSE_PLAIN, 1}, {LM_FUSE_MATMUL_GROUP, 2});
    seq t = {0};
    mm(&t, buf(Q), buf(X_), mat(64, HID));
    mm(&t, lm_mem_f32(buf(X_), 8), buf(X_), mat(16, HID)); /* writes its own input */
    CHECK_PLAN(&t, {LM_FUSE_PLAIN, 1}, {LM_FUSE_PLAIN, 1});
    seq u = {0};
    mm(&u, buf(X_), buf(CORE), mat(HID, 64));
    add(&u, buf(X_), buf(X_), (int64_t)N * HID); /* y is the product itself */
    discard(&u, buf(X_), (int64_t)N * HID);
    CHECK_PLAN(&u, {LM_FUSE_PLAIN, 1}, {LM_FUSE_PLAIN, 1}, {LM_FUSE_PLAIN, 1});
    seq v = {0};
    add(&v, buf(H_), buf(ROUTED), (int64_t)N * HID);
    norm(&v, lm_mem_f32(buf(H_), 4), buf(H_), HID); /* out over the sum */
    CHECK_PLAN(&v, {LM_FUSE_PLAIN, 1}, {LM_FUSE_PLAIN, 1});
}

/* Other shapes or dtypes: gate and up unlike, products of other inputs,
 * other rows, a norm of other width. */
static void mismatched_shapes_are_not_fused(void) {
    seq s = {0};
    mm(&s, buf(PROJ), buf(X_), mat(INTER, HID));
    mm(&s, buf(PROJ2), buf(X_), mat(INTER / 2, HID));
    silu(&s, buf(PROJ), buf(PROJ), buf(PROJ2), (int64_t)N * INTER);
    discard(&s, buf(PROJ2), (int64_t)N * INTER);
    CHECK_PLAN(&s, {LM_FUSE_MATMUL_GROUP, 2}, {LM_FUSE_PLAIN, 1}, {LM_FUSE_PLAIN, 1});
    seq t = s;
    t.ops[1].w = mat(INTER, HID);
    t.ops[1].w.dtype = LM_DTYPE_F32;
    CHECK_PLAN(&t, {LM_FUSE_MATMUL_GROUP, 2}, {LM_FUSE_PLAIN, 1}, {LM_FUSE_PLAIN, 1});
    t.ops[1].w.dtype = LM_DTYPE_BF16;
    CHECK_PLAN(&t, {LM_FUSE_MATMUL_SWIGLU, 4});
    seq u = {0};
    mm(&u, buf(Q), buf(X_), mat(64, HID));
    mm(&u, buf(K), buf(CORE), mat(16, HID)); /* another input */
    mm(&u, buf(V), buf(CORE), mat(16, HID));
    u.ops[2].rows = 1; /* other rows */
    CHECK_PLAN(&u, {LM_FUSE_PLAIN, 1}, {LM_FUSE_PLAIN, 1}, {LM_FUSE_PLAIN, 1});
    seq v = {0};
    norm(&v, buf(X_), buf(H_), HID / 2);
    mm(&v, buf(Q), buf(X_), mat(64, HID));
    CHECK_PLAN(&v, {LM_FUSE_PLAIN, 1}, {LM_FUSE_PLAIN, 1});
    /* More than LM_MATMUL_GROUP_MAX products: the rest make a group of their own. */
    seq w = {0};
    for (int i = 0; i < 6; i++) mm(&w, lm_mem_f32(buf(PROJ), (size_t)i * 1024), buf(X_), mat(8, HID));
    CHECK_PLAN(&w, {LM_FUSE_MATMUL_GROUP, 4}, {LM_FUSE_MATMUL_GROUP, 2});
}

static void attention_then_gate(seq *s, int64_t gate_count) {
    lm_fuse_op att = {.kind = LM_FUSE_OP_ATTENTION, .out = buf(CORE), .a = buf(Q)};
    att.u.attn.batch = (lm_attention_batch){.n_tokens = N, .n_heads = 4, .n_kv_heads = 2, .head_dim = 16};
    s->ops[s->n++] = att;
    s->ops[s->n++] = (lm_fuse_op){.kind = LM_FUSE_OP_SIGMOID_MUL, .out = buf(CORE), .a = buf(GATE), .count = gate_count};
}
static void delta_rule_then_norm(seq *s, lm_mem norm_out, int dim) {
    lm_fuse_op rule = {.kind = LM_FUSE_OP_DELTA_RULE, .out = buf(CORE), .a = buf(Q)};
    rule.u.rule = (lm_fuse_delta_rule){.k = buf(K), .v = buf(V), .Hk = 2, .Hv = 4, .dk = 16, .dv = 16};
    s->ops[s->n++] = rule;
    s->ops[s->n++] = (lm_fuse_op){.kind = LM_FUSE_OP_GATED_RMSNORM, .out = norm_out, .a = buf(CORE), .b = buf(GATE),
                                  .c = buf(14), .rows = N * 4, .dim = dim, .eps = 1e-6f};
}

/* Gated attention's and the delta rule's output steps; not when the
 * gate's count or the norm's rows are another shape, or it writes elsewhere. */
static void attention_and_delta_rule_outputs(void) {
    seq s = {0};
    attention_then_gate(&s, (int64_t)N * 4 * 16);
    residual(&s, buf(CORE), mat(HID, 64));
    CHECK_PLAN(&s, {LM_FUSE_GATED_ATTENTION, 2}, {LM_FUSE_MATMUL_ADD, 3});
    seq t = {0};
    attention_then_gate(&t, (int64_t)N * 4 * 8);
    CHECK_PLAN(&t, {LM_FUSE_PLAIN, 1}, {LM_FUSE_PLAIN, 1});
    seq u = {0};
    delta_rule_then_norm(&u, buf(CORE), 16);
    residual(&u, buf(CORE), mat(HID, 64));
    CHECK_PLAN(&u, {LM_FUSE_GATED_DELTA_RULE_NORM, 2}, {LM_FUSE_MATMUL_ADD, 3});
    seq v = {0};
    delta_rule_then_norm(&v, buf(PROJ), 16); /* normed elsewhere: not the fused op's in-place shape */
    CHECK_PLAN(&v, {LM_FUSE_PLAIN, 1}, {LM_FUSE_PLAIN, 1});
    seq w = {0};
    delta_rule_then_norm(&w, buf(CORE), 8); /* rows of another width */
    CHECK_PLAN(&w, {LM_FUSE_PLAIN, 1}, {LM_FUSE_PLAIN, 1});
}

/* Gated DeltaNet's inputs as qwen35 writes them: Hk = 2 key heads and
 * Hv = 4 value heads of 16, the conv's output through PROJ2 (dead after). */
enum { GHK = 2, GHV = 4, GD = 16, GKD = GHK * GD, GVD = GHV * GD, GCD = 2 * GKD + GVD };
static void gdn_prepare_parts(seq *s, bool discard_conv) {
    s->ops[s->n++] = (lm_fuse_op){.kind = LM_FUSE_OP_GDN_GATES, .out = buf(ROUTED), .a = buf(SHARED), .b = buf(12),
                                  .c = buf(13), .rows = N, .dim = GHV};
    lm_fuse_op conv = {.kind = LM_FUSE_OP_CONV, .out = buf(PROJ2), .a = buf(PROJ), .b = buf(14)};
    conv.u.conv = (lm_fuse_conv){.states = buf(15), .channels = GCD, .taps = 4};
    s->ops[s->n++] = conv;
    const struct {
        int to, from, width;
    } split[] = {{Q, 0, GKD}, {K, GKD, GKD}, {V, 2 * GKD, GVD}};
    for (int i = 0; i < 3; i++)
        s->ops[s->n++] = (lm_fuse_op){.kind = LM_FUSE_OP_COPY_ROWS, .out = buf(split[i].to),
                                      .a = lm_mem_f32(buf(PROJ2), (size_t)split[i].from), .rows = N,
                                      .dim = split[i].width, .u.stride = {.dst = split[i].width, .src = GCD}};
    s->ops[s->n++] = (lm_fuse_op){.kind = LM_FUSE_OP_L2NORM_SCALE, .out = buf(Q), .rows = N * GHK, .dim = GD,
                                  .eps = 1e-6f, .u.scale = 0.25f};
    s->ops[s->n++] = (lm_fuse_op){.kind = LM_FUSE_OP_L2NORM_SCALE, .out = buf(K), .rows = N * GHK, .dim = GD,
                                  .eps = 1e-6f, .u.scale = 1.0f};
    if (discard_conv) discard(s, buf(PROJ2), (int64_t)N * GCD);
}

/* Gated full attention's inputs as qwen35 writes them: 4 query heads, 2
 * kv heads of 16, q | gate in PROJ. */
enum { AH = 4, AKV = 2, AD = 16 };
static void attention_prepare_parts(seq *s) {
    for (int i = 0; i < 2; i++)
        s->ops[s->n++] = (lm_fuse_op){.kind = LM_FUSE_OP_COPY_ROWS, .out = buf(i == 0 ? Q : GATE),
                                      .a = lm_mem_f32(buf(PROJ), (size_t)(i * AD)), .rows = N * AH, .dim = AD,
                                      .u.stride = {.dst = AD, .src = 2 * AD}};
    s->ops[s->n++] = (lm_fuse_op){.kind = LM_FUSE_OP_RMSNORM, .out = buf(Q), .a = buf(Q), .b = buf(12),
                                  .rows = N * AH, .dim = AD, .eps = 1e-6f};
    s->ops[s->n++] = (lm_fuse_op){.kind = LM_FUSE_OP_RMSNORM, .out = buf(K), .a = buf(K), .b = buf(13),
                                  .rows = N * AKV, .dim = AD, .eps = 1e-6f};
    const lm_rope_params rope = {.rot_dim = 8, .theta = 1e7f, .sections = {2, 1, 1}, .interleaved_sections = true};
    for (int i = 0; i < 2; i++)
        s->ops[s->n++] = (lm_fuse_op){.kind = LM_FUSE_OP_ROPE, .out = buf(i == 0 ? Q : K), .a = buf(LOGITS),
                                      .rows = N, .dim = AD, .u.rope = {.params = rope, .n_heads = i == 0 ? AH : AKV}};
    lm_fuse_op write = {.kind = LM_FUSE_OP_KV_WRITE, .a = buf(K), .b = buf(V), .c = buf(14), .rows = N};
    write.u.kv = (lm_kv_layer){.k = buf(15), .n_kv_heads = AKV, .head_dim = AD, .dtype = LM_DTYPE_F32};
    s->ops[s->n++] = write;
}

/* The layers' input steps, once the fused prepare ops left ops.h: the
 * parts in one window make the one launch; not when the conv's output is
 * left alive, a split reads the wrong columns, k's norm has another eps,
 * or k is rotated with other positions. */
static void prepare_steps(void) {
    seq s = {0};
    gdn_prepare_parts(&s, true);
    delta_rule_then_norm(&s, buf(CORE), 16);
    CHECK_PLAN(&s, {LM_FUSE_GDN_PREPARE, 8}, {LM_FUSE_GATED_DELTA_RULE_NORM, 2});
    seq alive = {0};
    gdn_prepare_parts(&alive, false);
    CHECK_PLAN(&alive, {LM_FUSE_PLAIN, 1}, {LM_FUSE_PLAIN, 1}, {LM_FUSE_PLAIN, 1}, {LM_FUSE_PLAIN, 1},
               {LM_FUSE_PLAIN, 1}, {LM_FUSE_PLAIN, 1}, {LM_FUSE_PLAIN, 1});
    seq shifted = {0};
    gdn_prepare_parts(&shifted, true);
    shifted.ops[3].a = lm_mem_f32(buf(PROJ2), 1); /* k read one column off */
    CHECK(lm_fuse_plan(shifted.ops, shifted.n, (lm_fuse_step[64]){{0}}, NULL) == 8);
    seq eps = {0};
    gdn_prepare_parts(&eps, true);
    eps.ops[6].eps = 1e-5f;
    CHECK(lm_fuse_plan(eps.ops, eps.n, (lm_fuse_step[64]){{0}}, NULL) == 8);

    seq a = {0};
    attention_prepare_parts(&a);
    attention_then_gate(&a, (int64_t)N * 4 * 16);
    CHECK_PLAN(&a, {LM_FUSE_ATTENTION_PREPARE, 7}, {LM_FUSE_GATED_ATTENTION, 2});
    seq other_positions = {0};
    attention_prepare_parts(&other_positions);
    other_positions.ops[5].a = buf(CORE);
    CHECK(lm_fuse_plan(other_positions.ops, other_positions.n, (lm_fuse_step[64]){{0}}, NULL) == 7);
    seq other_eps = {0};
    attention_prepare_parts(&other_eps);
    other_eps.ops[3].eps = 1e-5f;
    CHECK(lm_fuse_plan(other_eps.ops, other_eps.n, (lm_fuse_step[64]){{0}}, NULL) == 7);
    seq other_gate = {0};
    attention_prepare_parts(&other_gate);
    other_gate.ops[1].a = buf(PROJ); /* the gate half read as the query half */
    CHECK(lm_fuse_plan(other_gate.ops, other_gate.n, (lm_fuse_step[64]){{0}}, NULL) == 7);
}

int main(void) {
    RUN_TEST(qwen35_dense_decode_layer);
    RUN_TEST(qwen35_moe_decode_layer);
    RUN_TEST(glm4v_decode_layer);
    RUN_TEST(tensor_parallel_residual);
    RUN_TEST(live_intermediates_are_not_fused);
    RUN_TEST(aliasing_is_not_fused);
    RUN_TEST(mismatched_shapes_are_not_fused);
    RUN_TEST(attention_and_delta_rule_outputs);
    RUN_TEST(prepare_steps);
    return test_summary("test_fusion_plan");
}
