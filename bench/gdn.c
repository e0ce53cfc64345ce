/* Times the Gated DeltaNet ops of the cpu backend at Qwen3.5-0.8B shapes
 * (Hk = Hv = 16, dk = dv = 128, conv_dim 6144, K = 4):
 *   - the delta rule at decode, one sequence; the recurrent and chunked
 *     forms over a range of T (the crossover behind LM_GDN_CHUNKED_MIN_T)
 *     up to a 512-token prefill, through the batched op with one sequence;
 *   - a decode step of B sequences (1 token each, states cold): one
 *     batched op call against B calls of one sequence each (what the model
 *     did before the ops were batched), for the delta rule and the conv.
 *   build/bench/gdn [threads (default 2)] [B (default 16)] */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "ops/cpu/cpu_backend.h"
#include "ops/cpu/gdn.h"
#include "ops/host/host_memory.h"
#include "ops/ops.h"
#include "ops/ref/reference.h"

enum { HK = 16, HV = 16, DK = 128, DV = 128, MAX_T = 512, COLD_STATES = 48, MAX_B = 64 };
enum { STATE = HV * DK * DV, CONV_C = 2 * HK * DK + HV * DV, CONV_K = 4 };

static double now_s(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

static int cmp_double(const void *a, const void *b) {
    double x = *(const double *)a, y = *(const double *)b;
    return x < y ? -1 : x > y;
}

static double median(double *t, int n) {
    qsort(t, (size_t)n, sizeof(double), cmp_double);
    return t[n / 2];
}

static void fill_random(float *x, size_t n, unsigned *seed, float lo, float hi) {
    for (size_t i = 0; i < n; i++) {
        *seed = *seed * 1664525u + 1013904223u;
        x[i] = lo + (hi - lo) * (float)(*seed >> 8) / 16777216.0f;
    }
}

static void l2_rows(float *x, size_t rows, int dim, float scale) {
    for (size_t r = 0; r < rows; r++) {
        float ss = 0, *row = x + r * (size_t)dim;
        for (int i = 0; i < dim; i++) ss += row[i] * row[i];
        float inv = scale / sqrtf(ss + 1e-6f);
        for (int i = 0; i < dim; i++) row[i] *= inv;
    }
}

/* Backend buffers of the bench, all float32 host memory of the cpu backend. */
typedef struct {
    lm_backend *be;
    lm_mem q, k, v, g, beta, out, states, conv_in, conv_out, conv_w, conv_states;
    /* seq batches: [0] one sequence of T tokens at slot 0 (T uploaded per use);
     * [1 + s] sequence s alone: row s, slot s; [MAX_B + 1] all B: rows 0..B-1 */
    lm_mem first, length, slot;
} bench;

static lm_status alloc_f32(bench *b, size_t n, lm_mem *out, lm_error *err) {
    lm_buffer *buf;
    lm_status st = lm_alloc(b->be, n * sizeof(float), "bench", &buf, err);
    if (st == LM_OK) *out = lm_mem_of(buf);
    return st;
}

/* A seq batch of n sequences whose arrays start at entry `at`. */
static lm_seq_batch batch_at(const bench *b, int at, int n, int max_length) {
    return (lm_seq_batch){.n_seqs = n,
                          .first = lm_mem_i32(b->first, (size_t)at),
                          .length = lm_mem_i32(b->length, (size_t)at),
                          .slot = lm_mem_i32(b->slot, (size_t)at),
                          .max_length = max_length};
}

static void set_seq(bench *b, int at, int first, int length, int slot) {
    lm_upload(b->be, lm_mem_i32(b->first, (size_t)at), &first, 4);
    lm_upload(b->be, lm_mem_i32(b->length, (size_t)at), &length, 4);
    lm_upload(b->be, lm_mem_i32(b->slot, (size_t)at), &slot, 4);
}

static void delta_rule(bench *b, const lm_seq_batch *seqs, int64_t state_offset) {
    lm_gated_delta_rule(b->be, b->out, b->q, b->k, b->v, b->g, b->beta,
                        lm_mem_f32(b->states, (size_t)state_offset), STATE, seqs, HK, HV, DK, DV);
}

typedef enum { FORM_OP, FORM_RECURRENT, FORM_CHUNKED, FORM_REFERENCE } form;

/* Median seconds per call of one sequence of T tokens; `cold` rotates over
 * COLD_STATES states so each call finds its state out of cache, as a
 * decode step over many layers does. */
static double time_one_sequence(bench *b, form f, int T, bool cold, int reps) {
    double *t = malloc(sizeof(double) * (size_t)reps);
    set_seq(b, 0, 0, T, 0);
    lm_seq_batch seqs = batch_at(b, 0, 1, T);
    lm_pool *pool = lm_cpu_pool(b->be);
    for (int r = -2; r < reps; r++) { /* two warm-up calls */
        int64_t state_offset = cold ? (int64_t)((r + 2) % COLD_STATES) * STATE : 0;
        lm_gdn_problem p = {.out = lm_host_f32(b->out),
                            .q = lm_host_f32(b->q),
                            .k = lm_host_f32(b->k),
                            .v = lm_host_f32(b->v),
                            .g = lm_host_f32(b->g),
                            .beta = lm_host_f32(b->beta),
                            .state = lm_host_f32(b->states) + state_offset,
                            .T = T,
                            .Hk = HK,
                            .Hv = HV,
                            .dk = DK,
                            .dv = DV};
        double t0 = now_s();
        switch (f) {
        case FORM_OP: delta_rule(b, &seqs, state_offset); break;
        case FORM_RECURRENT: lm_cpu_kernels_of(b->be)->gdn_recurrent(pool, &p, true); break;
        case FORM_CHUNKED: lm_cpu_kernels_of(b->be)->gdn_chunked(pool, &p, true); break;
        case FORM_REFERENCE:
            lm_ref_gated_delta_rule(p.out, p.q, p.k, p.v, p.g, p.beta, p.state, T, HK, HV, DK, DV);
            break;
        }
        if (r >= 0) t[r] = now_s() - t0;
    }
    double m = median(t, reps);
    free(t);
    return m;
}

/* A decode step of B sequences, 1 token each, every state its own (cold
 * across repeats: B·reps distinct states would not fit, so the states of
 * a step are at least out of L2).  Median seconds per step. */
static double time_decode_step(bench *b, int B, bool batched, bool conv, int reps) {
    double *t = malloc(sizeof(double) * (size_t)reps);
    lm_seq_batch all = batch_at(b, MAX_B + 1, B, 1);
    int64_t conv_stride = (int64_t)CONV_C * (CONV_K - 1);
    for (int r = -2; r < reps; r++) {
        /* each repeat uses the other half of the states, so a step does not
         * find the previous step's states in cache */
        int64_t half = (int64_t)((r + 2) % 2) * (COLD_STATES / 2) * STATE;
        double t0 = now_s();
        if (conv) {
            if (batched) {
                lm_causal_conv1d_silu(b->be, b->conv_out, b->conv_in, CONV_C, b->conv_w, CONV_K,
                                      b->conv_states, conv_stride, &all);
            } else {
                for (int s = 0; s < B; s++) {
                    lm_seq_batch one = batch_at(b, 1 + s, 1, 1);
                    lm_causal_conv1d_silu(b->be, b->conv_out, b->conv_in, CONV_C, b->conv_w,
                                          CONV_K, b->conv_states, conv_stride, &one);
                }
            }
        } else if (batched) {
            delta_rule(b, &all, half);
        } else {
            for (int s = 0; s < B; s++) {
                lm_seq_batch one = batch_at(b, 1 + s, 1, 1);
                delta_rule(b, &one, half);
            }
        }
        if (r >= 0) t[r] = now_s() - t0;
    }
    double m = median(t, reps);
    free(t);
    return m;
}

static double time_conv_one(bench *b, int T, int reps) {
    double *t = malloc(sizeof(double) * (size_t)reps);
    set_seq(b, 0, 0, T, 0);
    lm_seq_batch seqs = batch_at(b, 0, 1, T);
    for (int r = -2; r < reps; r++) {
        double t0 = now_s();
        lm_causal_conv1d_silu(b->be, b->conv_out, b->conv_in, CONV_C, b->conv_w, CONV_K,
                              b->conv_states, (int64_t)CONV_C * (CONV_K - 1), &seqs);
        if (r >= 0) t[r] = now_s() - t0;
    }
    double m = median(t, reps);
    free(t);
    return m;
}

int main(int argc, char **argv) {
    int threads = argc > 1 ? atoi(argv[1]) : 2;
    int B = argc > 2 ? atoi(argv[2]) : 16;
    if (B < 1 || B > MAX_B || B > COLD_STATES / 2) {
        fprintf(stderr, "usage: gdn [threads] [B 1..%d]\n", COLD_STATES / 2);
        return 2;
    }
    lm_error err = {0};
    bench b = {0};
    if (lm_backend_cpu_create(threads, &b.be, &err) != LM_OK) {
        fprintf(stderr, "gdn bench: %s\n", err.message);
        return 1;
    }
    size_t qk_n = (size_t)MAX_T * HK * DK, v_n = (size_t)MAX_T * HV * DV, gate_n = (size_t)MAX_T * HV;
    size_t conv_state_n = (size_t)MAX_B * CONV_C * (CONV_K - 1);
    if (alloc_f32(&b, qk_n, &b.q, &err) || alloc_f32(&b, qk_n, &b.k, &err) ||
        alloc_f32(&b, v_n, &b.v, &err) || alloc_f32(&b, v_n, &b.out, &err) ||
        alloc_f32(&b, gate_n, &b.g, &err) || alloc_f32(&b, gate_n, &b.beta, &err) ||
        alloc_f32(&b, (size_t)COLD_STATES * STATE, &b.states, &err) ||
        alloc_f32(&b, (size_t)MAX_T * CONV_C, &b.conv_in, &err) ||
        alloc_f32(&b, (size_t)MAX_T * CONV_C, &b.conv_out, &err) ||
        alloc_f32(&b, (size_t)CONV_C * CONV_K, &b.conv_w, &err) ||
        alloc_f32(&b, conv_state_n, &b.conv_states, &err) ||
        alloc_f32(&b, 2 * MAX_B + 2, &b.first, &err) ||
        alloc_f32(&b, 2 * MAX_B + 2, &b.length, &err) ||
        alloc_f32(&b, 2 * MAX_B + 2, &b.slot, &err)) {
        fprintf(stderr, "gdn bench: %s\n", err.message);
        return 1;
    }
    /* random data, written in place (host memory of the cpu backend) */
    unsigned seed = 1;
    fill_random(lm_host_f32(b.q), qk_n, &seed, -1, 1);
    fill_random(lm_host_f32(b.k), qk_n, &seed, -1, 1);
    l2_rows(lm_host_f32(b.q), (size_t)MAX_T * HK, DK, 1.0f / sqrtf(DK));
    l2_rows(lm_host_f32(b.k), (size_t)MAX_T * HK, DK, 1.0f);
    fill_random(lm_host_f32(b.v), v_n, &seed, -1, 1);
    fill_random(lm_host_f32(b.g), gate_n, &seed, -2, -0.01f);
    fill_random(lm_host_f32(b.beta), gate_n, &seed, 0.05f, 0.95f);
    fill_random(lm_host_f32(b.states), (size_t)COLD_STATES * STATE, &seed, -0.1f, 0.1f);
    fill_random(lm_host_f32(b.conv_in), (size_t)MAX_T * CONV_C, &seed, -1, 1);
    fill_random(lm_host_f32(b.conv_w), (size_t)CONV_C * CONV_K, &seed, -0.5f, 0.5f);
    fill_random(lm_host_f32(b.conv_states), conv_state_n, &seed, -1, 1);
    for (int s = 0; s < B; s++) {
        set_seq(&b, 1 + s, s, 1, s);         /* sequence s alone */
        set_seq(&b, MAX_B + 1 + s, s, 1, s); /* sequence s in the batch */
    }

    printf("gated delta rule, Hk=%d Hv=%d dk=%d dv=%d, %d threads (median of repeats)\n", HK, HV,
           DK, DV, lm_backend_threads(b.be));
    printf("decode T=1: op %.1f us/token (state in cache), %.1f us/token (state cold); "
           "recurrent kernel %.1f cold; reference %.1f us/token\n",
           1e6 * time_one_sequence(&b, FORM_OP, 1, false, 400),
           1e6 * time_one_sequence(&b, FORM_OP, 1, true, 400),
           1e6 * time_one_sequence(&b, FORM_RECURRENT, 1, true, 400),
           1e6 * time_one_sequence(&b, FORM_REFERENCE, 1, false, 20));
    double sep = time_decode_step(&b, B, false, false, 101);
    double bat = time_decode_step(&b, B, true, false, 101);
    printf("decode step of %d sequences x 1 token: %d calls %.1f us, one batched call %.1f us "
           "(%.2fx)\n",
           B, B, 1e6 * sep, 1e6 * bat, sep / bat);

    static const int Ts[] = {2, 3, 4, 5, 8, 16, 24, 32, 48, 64, 96, 128, 256, 512};
    printf("%5s %16s %16s %16s %10s\n", "T", "op us/tok", "recurrent us/tok", "chunked us/tok",
           "rec/chunk");
    for (size_t i = 0; i < sizeof Ts / sizeof Ts[0]; i++) {
        int T = Ts[i], reps = T >= 256 ? 7 : T >= 32 ? 21 : 101;
        double to = time_one_sequence(&b, FORM_OP, T, true, reps);
        double tr = time_one_sequence(&b, FORM_RECURRENT, T, true, reps);
        double tc = time_one_sequence(&b, FORM_CHUNKED, T, true, reps);
        printf("%5d %16.2f %16.2f %16.2f %10.2f\n", T, 1e6 * to / T, 1e6 * tr / T, 1e6 * tc / T,
               tr / tc);
    }

    /* causal conv1d + SiLU over conv_dim = 2·Hk·dk + Hv·dv channels, K = 4 */
    printf("conv1d+silu C=%d K=%d: T=1 %.2f us, T=512 %.2f us (one sequence, median of 21)\n",
           CONV_C, CONV_K, 1e6 * time_conv_one(&b, 1, 21), 1e6 * time_conv_one(&b, 512, 21));
    sep = time_decode_step(&b, B, false, true, 101);
    bat = time_decode_step(&b, B, true, true, 101);
    printf("conv1d+silu decode step of %d sequences: %d calls %.1f us, one batched call %.1f us "
           "(%.2fx)\n",
           B, B, 1e6 * sep, 1e6 * bat, sep / bat);
    lm_backend_destroy(b.be); /* the process ends: the buffers go with it */
    return 0;
}
