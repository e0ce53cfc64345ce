#include "models/expert_weights.h"

#include <stdio.h>
#include <stdlib.h>

#define TRY(call)                                     \
    do {                                              \
        lm_status try_status_ = (call);               \
        if (try_status_ != LM_OK) return try_status_; \
    } while (0)

lm_status lm_swiglu_load(lm_weights *w, const char *prefix, int64_t width, int64_t H,
                         lm_swiglu *out, lm_error *err) {
    char name[320];
    snprintf(name, sizeof name, "%sgate_proj.weight", prefix);
    TRY(lm_weights_linear(w, name, width, H, &out->gate_proj, err));
    snprintf(name, sizeof name, "%sup_proj.weight", prefix);
    TRY(lm_weights_linear(w, name, width, H, &out->up_proj, err));
    snprintf(name, sizeof name, "%sdown_proj.weight", prefix);
    return lm_weights_linear(w, name, H, width, &out->down_proj, err);
}

lm_status lm_swiglu_load_share(lm_weights *w, const char *prefix, int64_t width, int64_t H, int rank,
                               int n_ranks, lm_swiglu *out, lm_error *err) {
    if (n_ranks <= 1) return lm_swiglu_load(w, prefix, width, H, out, err);
    int64_t full = width * n_ranks;
    lm_weights_slice rows = {.n_runs = 1, .runs = {{rank * width, width}}};
    lm_weights_slice cols = {.col_first = rank * width, .col_count = width};
    char name[320];
    snprintf(name, sizeof name, "%sgate_proj.weight", prefix);
    TRY(lm_weights_linear_slice(w, name, full, H, &rows, &out->gate_proj, err));
    snprintf(name, sizeof name, "%sup_proj.weight", prefix);
    TRY(lm_weights_linear_slice(w, name, full, H, &rows, &out->up_proj, err));
    snprintf(name, sizeof name, "%sdown_proj.weight", prefix);
    return lm_weights_linear_slice(w, name, H, full, &cols, &out->down_proj, err);
}

lm_status lm_expert_weights_load(lm_weights *w, const char *mlp_prefix, int E, int I, int H,
                                 lm_expert_weights *out, lm_error *err) {
    return lm_expert_weights_load_share(w, mlp_prefix, E, I, H, NULL, out, err);
}

/* mlx-lm's layout (SwitchGLU, models/qwen3_5.py): `switch_mlp.gate_proj`,
 * `.up_proj` [E, I, H] and `.down_proj` [E, H, I], each a stack (MLX
 * quantized or float: models/weights.c reads either), cut into one view a
 * matrix.  first >= 0: experts [first, first + count) whole (expert
 * parallelism); else every expert, a rank's share of I under tensor
 * parallelism. */
static lm_status load_switch_mlp(lm_weights *w, const char *mlp_prefix, int E, int I, int H, int first, int count,
                                 int rank, int n_ranks, lm_matrix *gate, lm_matrix *up, lm_matrix *down,
                                 lm_error *err) {
    static const char *const names[3] = {"gate_proj", "up_proj", "down_proj"};
    lm_matrix stacks[3];
    for (int k = 0; k < 3; k++) {
        char name[320];
        snprintf(name, sizeof name, "%sswitch_mlp.%s.weight", mlp_prefix, names[k]);
        int64_t rows = k < 2 ? I : H, cols = k < 2 ? H : I;
        if (first >= 0) {
            TRY(lm_weights_linear_stacked_range(w, name, E, first, count, rows, cols, &stacks[k], err));
        } else if (n_ranks > 1) {
            int64_t full = (int64_t)I * n_ranks, col0 = (int64_t)rank * I;
            lm_weights_slice rows_share = {.n_runs = 1, .runs = {{col0, I}}};
            lm_weights_slice cols_share = {.col_first = col0, .col_count = I};
            TRY(k < 2 ? lm_weights_linear_stacked_slice(w, name, E, full, H, &rows_share, &stacks[k], err)
                      : lm_weights_linear_stacked_slice(w, name, E, H, full, &cols_share, &stacks[k], err));
        } else {
            TRY(lm_weights_linear_stacked(w, name, E, rows, cols, &stacks[k], err));
        }
    }
    for (int e = 0; e < count; e++) {
        gate[e] = lm_matrix_rows(&stacks[0], (int64_t)I * e, I);
        up[e] = lm_matrix_rows(&stacks[1], (int64_t)I * e, I);
        down[e] = lm_matrix_rows(&stacks[2], (int64_t)H * e, H);
    }
    return LM_OK;
}

lm_status lm_expert_weights_load_share(lm_weights *w, const char *mlp_prefix, int E, int I, int H,
                                       const lm_rank_share *share, lm_expert_weights *out, lm_error *err) {
    int n_ranks = share ? share->n_ranks : 1, rank = share ? share->rank : 0;
    bool whole_experts = share && share->expert_parallel && n_ranks > 1;
    /* the experts held: all, or this rank's range under expert parallelism */
    int first = whole_experts ? share->expert_first : 0, count = whole_experts ? share->expert_count : E;
    if (first < 0 || count <= 0 || first > E - count)
        return lm_fail(err, LM_ERR_INVALID, "%s: experts [%d, %d) of %d", mlp_prefix, first, first + count, E);
    out->matrices = calloc(3 * (size_t)count, sizeof *out->matrices);
    if (!out->matrices) return lm_fail(err, LM_ERR_NOMEM, "out of memory for %d experts", count);
    lm_matrix *gate = out->matrices, *up = gate + count, *down = up + count;
    out->view = (lm_moe_experts){.n_experts = count, .hidden = H, .inter = I,
                                 .gate = gate, .up = up, .down = down, .first_expert = first};
    out->layer_experts = E;
    char name[320];
    snprintf(name, sizeof name, "%sswitch_mlp.gate_proj.weight", mlp_prefix);
    if (lm_weights_has(w, name)) { /* mlx-lm's SwitchGLU: three stacks */
        out->fused = true;
        return load_switch_mlp(w, mlp_prefix, E, I, H, whole_experts ? first : -1, count, rank, n_ranks, gate, up,
                               down, err);
    }
    snprintf(name, sizeof name, "%sexperts.gate_up_proj", mlp_prefix);
    out->fused = lm_weights_has(w, name);
    if (out->fused) {
        lm_matrix gate_up, downs;
        if (whole_experts) { /* this rank's experts, only their bytes read */
            TRY(lm_weights_linear_stacked_range(w, name, E, first, count, 2 * (int64_t)I, H, &gate_up, err));
            snprintf(name, sizeof name, "%sexperts.down_proj", mlp_prefix);
            TRY(lm_weights_linear_stacked_range(w, name, E, first, count, H, I, &downs, err));
        } else if (n_ranks > 1) { /* each expert's share: its gate rows and up rows, a window of down's columns */
            int64_t full = (int64_t)I * n_ranks, col0 = (int64_t)rank * I;
            lm_weights_slice rows = {.n_runs = 2, .runs = {{col0, I}, {full + col0, I}}};
            lm_weights_slice cols = {.col_first = col0, .col_count = I};
            TRY(lm_weights_linear_stacked_slice(w, name, E, 2 * full, H, &rows, &gate_up, err));
            snprintf(name, sizeof name, "%sexperts.down_proj", mlp_prefix);
            TRY(lm_weights_linear_stacked_slice(w, name, E, H, full, &cols, &downs, err));
        } else {
            TRY(lm_weights_linear_stacked(w, name, E, 2 * (int64_t)I, H, &gate_up, err));
            snprintf(name, sizeof name, "%sexperts.down_proj", mlp_prefix);
            TRY(lm_weights_linear_stacked(w, name, E, H, I, &downs, err));
        }
        for (int e = 0; e < count; e++) {
            gate[e] = lm_matrix_rows(&gate_up, 2 * (int64_t)I * e, I);
            up[e] = lm_matrix_rows(&gate_up, 2 * (int64_t)I * e + I, I);
            down[e] = lm_matrix_rows(&downs, (int64_t)H * e, H);
        }
        return LM_OK;
    }
    /* Routed experts one matrix each (FP8 checkpoints store them so): made
     * as stacks are, never kept FP8 — the MoE kernels read int8 and bf16
     * experts (models/weights.h, lm_weights_set_experts). */
    lm_weights_set_experts(w, true);
    for (int e = 0; e < count; e++) {
        lm_swiglu expert;
        snprintf(name, sizeof name, "%sexperts.%d.", mlp_prefix, first + e);
        lm_status st = whole_experts ? lm_swiglu_load(w, name, I, H, &expert, err)
                                     : lm_swiglu_load_share(w, name, I, H, rank, n_ranks, &expert, err);
        if (st != LM_OK) {
            lm_weights_set_experts(w, false);
            return st;
        }
        gate[e] = expert.gate_proj;
        up[e] = expert.up_proj;
        down[e] = expert.down_proj;
    }
    lm_weights_set_experts(w, false);
    return LM_OK;
}

void lm_expert_weights_free(lm_expert_weights *e) {
    free(e->matrices);
    e->matrices = NULL;
}

double lm_matrix_bytes(const lm_matrix *m) {
    return (double)m->rows * (double)lm_dtype_row_bytes(m->dtype, m->cols);
}

double lm_swiglu_bytes(const lm_swiglu *s) {
    return lm_matrix_bytes(&s->gate_proj) + lm_matrix_bytes(&s->up_proj) +
           lm_matrix_bytes(&s->down_proj);
}

double lm_expert_bytes_per_token(const lm_expert_weights *e, int top_k) {
    if (e->view.n_experts <= 0 || e->layer_experts <= 0) return 0;
    double held = (double)e->view.n_experts / e->layer_experts; /* the share of a token's experts found here */
    return top_k * held *
           (lm_matrix_bytes(&e->view.gate[0]) + lm_matrix_bytes(&e->view.up[0]) + lm_matrix_bytes(&e->view.down[0]));
}
