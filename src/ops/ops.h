/* The backend seam: the memory and every numeric kernel the models use.
 *
 * A backend (ops/cpu: tuned kernels and a thread pool; ops/ref: the plain
 * reference kernels, one thread; ops/cuda later) fills an lm_backend_ops
 * table; the inline wrappers below dispatch through it.
 *
 * Memory belongs to the backend.  Code outside a backend holds lm_buffer
 * handles (an incomplete type: it cannot be dereferenced) and lm_mem views
 * (buffer + byte offset); it moves bytes in and out only through upload,
 * download and copy.  So the compiler, not review, keeps models and the
 * engine off device memory.
 *
 * Ops are queued in order on the backend's one stream: a backend may run
 * them asynchronously (cuda) or at once (cpu, ref).  The host waits only in
 * download and synchronize.  Kernels do not fail: callers validate shapes
 * when the model is loaded and when a step is built, so a kernel only ever
 * sees consistent sizes; a device error is reported by the next
 * synchronize/download.  All activations are float32, row-major.  Index
 * arrays (token ids, positions, slots, block tables, row lists) are int32
 * in backend memory.  Unless stated otherwise an output may not alias an
 * input. */
#ifndef LOOM_OPS_OPS_H
#define LOOM_OPS_OPS_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "base/dtype.h"
#include "base/error.h"

typedef struct lm_backend lm_backend;
typedef struct lm_buffer lm_buffer; /* defined by each backend, privately */

/* A place in backend memory: `offset` bytes into `buffer`. */
typedef struct {
    lm_buffer *buffer;
    size_t offset;
} lm_mem;

static inline lm_mem lm_mem_bytes(lm_mem m, size_t bytes) {
    m.offset += bytes;
    return m;
}
/* Element `index` of a float32 / int32 array at m. */
static inline lm_mem lm_mem_f32(lm_mem m, size_t index) { return lm_mem_bytes(m, index * 4); }
static inline lm_mem lm_mem_i32(lm_mem m, size_t index) { return lm_mem_bytes(m, index * 4); }
static inline lm_mem lm_mem_of(lm_buffer *buffer) { return (lm_mem){buffer, 0}; }

/* A weight matrix [rows, cols] row-major, as checkpoints store Linear weights
 * ([out, in]).  dtype is LM_DTYPE_BF16, LM_DTYPE_F16 or LM_DTYPE_F32, or, on
 * backends whose weight_dtype_supported says so, LM_DTYPE_Q8_0 (loom's int8
 * blocks) or one of ggml's block formats (LM_DTYPE_GGML_*, GGUF's; cpu and
 * ref take all eight), base/dtype.h: rows of lm_dtype_row_bytes bytes. */
typedef struct {
    lm_mem data;
    lm_dtype dtype;
    int64_t rows, cols;
} lm_matrix;

/* Rotary embedding on the first rot_dim dims of each head, rot_dim/2
 * frequencies inv_freq[i] = 1 / theta^(2i/rot_dim), computed in float32 as
 * transformers does (1.0f / powf(theta, (float)(2 * i) / (float)rot_dim)).
 * Frequency i takes its position from component section_of(i) of the
 * token's (t, h, w) position:
 *   interleaved sections (Qwen3.5): H if i%3==1 && i<3*sections[1],
 *                                   W if i%3==2 && i<3*sections[2], else T;
 *   contiguous sections (GLM): i < s0 -> T, i < s0+s1 -> H, else W.
 * Pairing: rotate-half (x_j, x_{j+rot_dim/2}) or interleaved pairs (x_2i, x_2i+1). */
typedef struct {
    int rot_dim;
    float theta;
    int sections[3];
    bool interleaved_sections;
    bool pair_interleaved; /* false = rotate-half (NeoX) */
    /* The vision towers' 2-D rotary (model-spec §D.3.2, §E.3): rot_dim/4
     * frequencies inv[i] = 1 / theta^(4i/rot_dim); rotate-half pair j <
     * rot_dim/4 turns by h·inv[j], pair j >= rot_dim/4 by w·inv[j - rot_dim/4]
     * (h, w = components 1 and 2 of the position: the patch's row and
     * column).  In float32 as transformers' VisionRotaryEmbedding(rot_dim
     * / 2) computes it: 1.0f / powf(theta, (float)(2i) / (float)(rot_dim /
     * 2)).  sections and interleaved_sections are then unused. */
    bool two_d;
} lm_rope_params;

/* The GELU variants (model-spec §0.2). */
typedef enum { LM_GELU_ERF, LM_GELU_TANH } lm_gelu_kind;

/* One full-attention layer's paged KV cache: k and v pools of
 * [n_blocks, block_size, n_kv_heads, head_dim] elements of `dtype`:
 * LM_DTYPE_F32 (the zero value), or LM_DTYPE_BF16 on a backend whose
 * kv_dtype op asks for it (kv_write rounds to nearest even; attention reads
 * the rounded values).  Token slot s lives at block s / block_size, offset
 * s % block_size. */
typedef struct {
    lm_mem k, v;
    int n_blocks, block_size, n_kv_heads, head_dim;
    lm_dtype dtype;
} lm_kv_layer;

/* The tokens of one attention call.  Token i belongs to sequence
 * token_seq[i] and attends to the first ctx_len[i] cached entries of that
 * sequence (its own entry included: causal).  ctx_len[i] may also reach
 * past the token's own entry: the vision towers attend bidirectionally,
 * every patch to its whole frame.  Row s of block_tables
 * (table_stride entries) maps sequence s's logical blocks to pool blocks.
 * max_ctx_len bounds every ctx_len[i] (a backend may size its launch by
 * it); max_seq_tokens, when not 0, bounds how many of the tokens belong to
 * one sequence (a backend may size its query tiles by it). */
typedef struct {
    int n_tokens;
    lm_mem token_seq;    /* int32 [n_tokens] */
    lm_mem ctx_len;      /* int32 [n_tokens] */
    lm_mem block_tables; /* int32 [n_seqs][table_stride] */
    int table_stride;
    int max_ctx_len;
    int max_seq_tokens;  /* 0: unknown */
    int n_heads, n_kv_heads, head_dim;
    float scale;
} lm_attention_batch;

/* The sequences of one call of an op that carries per-sequence state
 * (conv1d, gated delta rule).  Sequence s has rows [first[s], first[s] +
 * length[s]) of the op's row arrays and its state at `slot[s]` of the state
 * array (slot * slot_stride floats in).  Rows of different sequences do not
 * overlap; they need not be contiguous or in order.  max_length bounds
 * every length[s]. */
typedef struct {
    int n_seqs;
    lm_mem first;  /* int32 [n_seqs] */
    lm_mem length; /* int32 [n_seqs] */
    lm_mem slot;   /* int32 [n_seqs] */
    int max_length;
} lm_seq_batch;

/* Mixture-of-experts routing (model-spec §B.2 Qwen3.5, §E.2.4 GLM-4.6V):
 * from a token's router logits [n_experts], its top_k experts and weights.
 *   scores  s = softmax(logits) (SOFTMAX) or sigmoid(logits) (SIGMOID);
 *   choice  c = s + correction_bias (bias: selection only; none if its
 *           buffer is NULL); with n_group > 1, groups of n_experts/n_group
 *           consecutive experts are scored by the sum of their 2 largest c,
 *           only the topk_group best groups stay (the rest -inf);
 *   ids     = the top_k largest c, largest first, the lower index on ties;
 *   weights = s[ids], / (Σ + 1e-20) if renormalize, then · scale. */
typedef enum { LM_MOE_SOFTMAX, LM_MOE_SIGMOID } lm_moe_scoring;

typedef struct {
    int n_experts, top_k;
    lm_moe_scoring scoring;
    lm_mem correction_bias; /* float32 [n_experts], or buffer NULL */
    int n_group, topk_group; /* 1, 1: no group limit */
    bool renormalize;
    float scale;             /* routed_scaling_factor; 1 for Qwen3.5 */
} lm_moe_routing;

/* The routed experts of one MoE layer: expert e is the SwiGLU
 * (silu(x·gate[e]ᵀ) ⊙ x·up[e]ᵀ)·down[e]ᵀ with gate/up [inter, hidden] and
 * down [hidden, inter].  The arrays are host descriptors of backend memory:
 * slices of one fused tensor or separate tensors, alike.
 *
 * Expert parallelism: the arrays may hold a contiguous range of the
 * layer's experts, ids [first_expert, first_expert + n_experts) (gate[0] is
 * expert first_expert's).  A (token, slot) pair routed to an expert outside
 * the range contributes nothing, so a token with none of its experts here
 * gets a row of zeros, and the ranks' outputs sum to the whole layer's.
 * first_expert 0 with every expert: the whole layer. */
typedef struct {
    int n_experts, hidden, inter;
    const lm_matrix *gate, *up, *down; /* [n_experts] each */
    int first_expert;                  /* the global id of gate[0]'s expert */
} lm_moe_experts;

/* Scratch bytes moe_experts needs for n tokens of top_k experts each: room
 * for the inputs and the two SwiGLU halves of a wave of
 * lm_moe_wave_rows(n, top_k) (token, expert) pairs, or the SwiGLU rows of
 * every pair at once (a GPU runs all experts in one wave), whichever is
 * larger (lm_moe_wave_floats); every pair's output; the pairs' order and
 * the experts' starts; and a work list of up to 2 (pairs + experts + 1)
 * ints (a GPU's tiles of pairs).  `experts` counts the ones given, so a
 * rank's range of a layer's experts needs no more than the whole layer. */
#define LM_MOE_WAVE_PAIRS 256
static inline size_t lm_moe_wave_rows(int n, int top_k) {
    size_t pairs = (size_t)n * (size_t)top_k, wave = pairs < LM_MOE_WAVE_PAIRS ? pairs : LM_MOE_WAVE_PAIRS;
    return wave > (size_t)n ? wave : (size_t)n; /* one expert may take every token */
}
static inline size_t lm_moe_wave_floats(int n, int top_k, const lm_moe_experts *e) {
    size_t pairs = (size_t)n * (size_t)top_k, wave = lm_moe_wave_rows(n, top_k);
    size_t floats = wave * (2 * (size_t)e->inter + (size_t)e->hidden);
    return pairs * (size_t)e->inter > floats ? pairs * (size_t)e->inter : floats;
}
static inline size_t lm_moe_scratch_bytes(int n, int top_k, const lm_moe_experts *e) {
    size_t pairs = (size_t)n * (size_t)top_k;
    return sizeof(float) * (lm_moe_wave_floats(n, top_k, e) + pairs * (size_t)e->hidden) +
           sizeof(int32_t) * 3 * (pairs + (size_t)e->n_experts + 1) + 64;
}





/* One logit row's draw for sample_rows, as engine/sampler.h defines the
 * steps (plain bytes, the same layout on host and device).  The row's
 * edits, each a range of the call's lm_sample_entry array: logit_bias
 * (id, value; applied one after the other, in order), stop ids masked to
 * -inf (id), and the penalised history (id, output count, in prompt;
 * distinct ids). */
enum { LM_SAMPLE_ROW_SKIP = 0, LM_SAMPLE_ROW_DRAW = 1 };
#define LM_SAMPLE_GREEDY_TEMPERATURE 1e-5f /* below this, temperature means greedy */
#define LM_SAMPLE_TOP_P_TOLERANCE 1e-7     /* a kept mass this close below top_p reaches it */
typedef struct {
    int32_t mode;        /* LM_SAMPLE_ROW_SKIP: the row is left alone */
    int32_t top_k;       /* <= 0: off */
    float temperature;   /* below 1e-5 (or NaN): greedy */
    float top_p;         /* >= 1: off */
    float min_p;         /* <= 0: off */
    float repetition_penalty, presence_penalty, frequency_penalty;
    double uniform;      /* the draw's number in [0, 1) */
    int32_t first_bias, n_bias;
    int32_t first_stop, n_stop;
    int32_t first_penalty, n_penalty;
} lm_sample_row;

#ifdef __cplusplus
static_assert(sizeof(lm_sample_row) == 64, "lm_sample_row: one layout on host and device");
#else
_Static_assert(sizeof(lm_sample_row) == 64, "lm_sample_row: one layout on host and device");
#endif

typedef struct {
    int32_t id;
    int32_t a; /* bias: the value's float bits; penalty: the output count */
    int32_t b; /* penalty: 1 if the id is in the prompt */
} lm_sample_entry;


typedef struct {
    const char *name;

    /* ---- memory ---- */
    /* A buffer of `bytes` (what: for the error message).  Contents undefined. */
    lm_status (*alloc)(lm_backend *be, size_t bytes, const char *what, lm_buffer **out,
                       lm_error *err);
    /* A buffer holding a copy of host bytes, made once (weights at load).
     * A backend whose memory is the host's may use `data` in place instead:
     * the caller keeps it alive and unchanged for the buffer's lifetime. */
    lm_status (*import_host)(lm_backend *be, const void *data, size_t bytes, const char *what,
                             lm_buffer **out, lm_error *err);
    void (*free)(lm_backend *be, lm_buffer *buffer); /* NULL is fine */
    size_t (*buffer_size)(const lm_buffer *buffer);
    /* Host to backend; the host bytes may be reused as soon as it returns. */
    void (*upload)(lm_backend *be, lm_mem dst, const void *src, size_t bytes);
    /* Backend to host: waits for the queued ops, then copies. */
    lm_status (*download)(lm_backend *be, void *dst, lm_mem src, size_t bytes, lm_error *err);
    void (*copy)(lm_backend *be, lm_mem dst, lm_mem src, size_t bytes); /* no overlap */
    void (*fill)(lm_backend *be, lm_mem dst, uint8_t byte, size_t bytes);
    /* Optional (NULL: nothing to do): the `bytes` at `at` are dead, no
     * later op reads them before one writes them, so their contents are
     * undefined from here.  The rule of fusion: a backend may run a run
     * of ops as one fused kernel (the cuda backend's window,
     * src/ops/cuda/fusion_plan.h) only with exactly the bits the ops would
     * write, into all the memory they would write, except bytes declared
     * dead this way right after the run: an intermediate (a product only
     * added on, the up half of a SwiGLU) a fused kernel need not write.
     * So the forward writes the plain math and says which intermediates
     * die; nothing it can read differs. */
    void (*discard)(lm_backend *be, lm_mem at, size_t bytes);
    /* Waits for every queued op; reports a device error since the last call. */
    lm_status (*synchronize)(lm_backend *be, lm_error *err);
    /* Optional (device backends; NULL on the host ones): the device memory
     * free and in all, for sizing pools by a fraction of the card. */
    lm_status (*memory_info)(lm_backend *be, size_t *free_bytes, size_t *total_bytes, lm_error *err);
    /* Optional (NULL: float32 only): the precision of the dense products'
     * activations.  LM_DTYPE_F32 (the default) computes every product in
     * float32 with a fixed order of sums, so a row's result does not depend
     * on its batch; LM_DTYPE_BF16 lets products round the activations to
     * bf16: faster, about 1e-2 of the logits' std off a float32 result (more
     * on random-weight models).  cuda does it for products of many rows
     * (tensor cores, no longer batch-invariant); cpu, where the CPU has
     * AVX-512 BF16, for every product of bf16 weights with a fixed order of
     * sums (still batch-invariant).  Set it before the first op. */
    lm_status (*set_compute_dtype)(lm_backend *be, lm_dtype dtype, lm_error *err);
    lm_dtype (*compute_dtype)(const lm_backend *be);
    /* Optional (NULL: LM_DTYPE_BF16, F16 and F32 only): whether matmul,
     * embed, moe_experts and add_weighted_rows take weight
     * matrices of `dtype` (LM_DTYPE_Q8_0, LM_DTYPE_GGML_*).  Loaders ask before they make
     * such weights, so a backend without them refuses at load. */
    bool (*weight_dtype_supported)(const lm_backend *be, lm_dtype dtype);

    /* ---- dense ---- */
    /* y[n, w.rows] = x[n, w.cols] · wᵀ */
    void (*matmul)(lm_backend *be, lm_mem y, lm_mem x, int n, const lm_matrix *w);
    /* out[i] = table row ids[i] as float32 (table [vocab, dim]; ids int32 [n]) */
    void (*embed)(lm_backend *be, lm_mem out, lm_mem ids, int n, const lm_matrix *table);

    /* ---- norms and elementwise ---- */
    /* out = x / sqrt(mean(x²) + eps) * weight, per row of dim; out may alias x.
     * Zero-centred (1 + w) norms pass weights with the 1 already added. */
    void (*rmsnorm)(lm_backend *be, lm_mem out, lm_mem x, lm_mem weight, int rows, int dim,
                    float eps);
    /* out = rmsnorm(x) * weight * silu(z), per row of dim (Qwen3.5 GDN output
     * norm); out may alias x. */
    void (*gated_rmsnorm)(lm_backend *be, lm_mem out, lm_mem x, lm_mem z, lm_mem weight, int rows,
                          int dim, float eps);
    /* x /= sqrt(sum(x²) + eps) per row of dim, then x *= scale; in place. */
    void (*l2norm_scale)(lm_backend *be, lm_mem x, int rows, int dim, float eps, float scale);
    /* In-place rotary embedding of x [n, n_heads, head_dim]; positions int32 [n][3]. */
    void (*rope)(lm_backend *be, lm_mem x, int n, int n_heads, int head_dim, lm_mem positions,
                 const lm_rope_params *rope);
    /* out = silu(gate) * up, elementwise; out may alias gate or up. */
    void (*silu_mul)(lm_backend *be, lm_mem out, lm_mem gate, lm_mem up, int64_t n);
    /* out = (x - mean) / sqrt(var + eps) * weight + bias per row of dim,
     * biased variance (LayerNorm, model-spec B4); out may alias x. */
    void (*layernorm)(lm_backend *be, lm_mem out, lm_mem x, lm_mem weight, lm_mem bias, int rows,
                      int dim, float eps);
    /* x = gelu(x), elementwise, in place. */
    void (*gelu)(lm_backend *be, lm_mem x, int64_t n, lm_gelu_kind kind);
    /* x *= sigmoid(gate), elementwise. */
    void (*sigmoid_mul)(lm_backend *be, lm_mem x, lm_mem gate, int64_t n);
    /* x += y, elementwise. */
    void (*add)(lm_backend *be, lm_mem x, lm_mem y, int64_t n);

    /* ---- moving rows ---- */
    /* dst row r (dst_stride floats apart) = src row r (src_stride apart),
     * `width` floats each, r < rows: splits and concatenations of columns. */
    void (*copy_rows)(lm_backend *be, lm_mem dst, int64_t dst_stride, lm_mem src,
                      int64_t src_stride, int rows, int width);
    /* dst row i = src row row_ids[i], i < n, rows of `width` floats
     * (row_ids int32 [n]); dst may not overlap src. */
    void (*gather_rows)(lm_backend *be, lm_mem dst, lm_mem src, lm_mem row_ids, int n, int width);
    /* x row i += Σ_k weights[i, k] · table row ids[i, k] (k < taps; ids
     * int32 and weights float32 [n, taps]; table [rows, width] of any
     * weight dtype, read as float32): interpolated position embeddings
     * (bilinear: 4 taps, bicubic: 16).  The sum runs in k order. */
    void (*add_weighted_rows)(lm_backend *be, lm_mem x, const lm_matrix *table, lm_mem ids,
                              lm_mem weights, int n, int taps);
    /* ids[r] = the index of the largest of x row r ([rows, n]); the lowest
     * index among equal maxima; NaN never wins over a number (a row of
     * only NaN gives 0). */
    void (*argmax_rows)(lm_backend *be, lm_mem ids, lm_mem x, int rows, int n);
    /* Optional (NULL: the logits come back and the host samples them,
     * engine/sampler.h): each row r of logits [rows, vocab] whose
     * params[r].mode is LM_SAMPLE_ROW_DRAW drawn as lm_sample does, steps
     * 1-8, with params[r].uniform as its random number: the edits, then
     * greedy (argmax) or temperature, min_p, top_k, top_p, and the draw
     * walking the kept tokens in id order.  ids[r] = the token; drew[r] =
     * 1 when the draw used the uniform, 0 when the row was greedy or had
     * nothing left to sample (then ids[r] is the processed row's argmax).
     * Rows of other modes are left alone, ids and drew included; a drawn
     * row's logits are changed (its edits).  params: lm_sample_row [rows];
     * entries: the lm_sample_entry array the rows point into. */
    void (*sample_rows)(lm_backend *be, lm_mem ids, lm_mem drew, lm_mem logits, int rows, int vocab,
                        lm_mem params, lm_mem entries);

    /* x[r, :] += bias for each of rows rows of width floats (bias [width]):
     * the biases of Linear layers (GLM's q/k/v projections). */
    void (*add_rows)(lm_backend *be, lm_mem x, lm_mem bias, int rows, int width);

    /* x[r, :] *= sigmoid(gate[r]) for each of rows rows of width floats. */
    void (*sigmoid_scale_rows)(lm_backend *be, lm_mem x, lm_mem gate, int rows, int width);

    /* ---- mixture of experts ---- */
    /* ids int32 [n, top_k], weights float32 [n, top_k] from logits [n, n_experts]. */
    void (*moe_route)(lm_backend *be, lm_mem ids, lm_mem weights, lm_mem logits, int n,
                      const lm_moe_routing *routing);
    /* out [n, hidden] = Σ_j weights[t, j] · Expert_{ids[t, j]}(x_t), the sum
     * in j order over the slots whose expert is one of `experts` (ids are
     * the layer's, offset by experts->first_expert).  Tokens are grouped by
     * expert, so a touched expert's matrices are read once per call and an
     * untouched one not at all.  scratch: lm_moe_scratch_bytes(n, top_k,
     * experts) bytes. */
    void (*moe_experts)(lm_backend *be, lm_mem out, lm_mem x, int n, lm_mem ids, lm_mem weights,
                        int top_k, const lm_moe_experts *experts, lm_mem scratch);

    /* ---- attention ---- */
    /* Optional (NULL: LM_DTYPE_F32): the element type of the KV pools this
     * backend's attention wants for head_dim under its present compute
     * dtype.  LM_DTYPE_BF16 only under bf16 compute, where attention
     * rounds k and v to bf16 anyway (the cpu's; cuda's tensor-core
     * prefill), so that storing them rounded halves the pool and changes
     * no such result (cuda's decode rows, float32 arithmetic, then read the
     * rounded values); contexts ask when they are made.  A backend is given
     * bf16 pools only if it asked for them. */
    lm_dtype (*kv_dtype)(const lm_backend *be, int head_dim);
    /* Writes k, v rows [n, n_kv_heads*head_dim] into the pool at token slots (int32 [n]). */
    void (*kv_write)(lm_backend *be, const lm_kv_layer *kv, lm_mem k, lm_mem v, int n,
                     lm_mem slots);
    /* out [n, n_heads*head_dim] = softmax(q·Kᵀ·scale) · V over the paged cache, GQA
     * (query head h reads kv head h / (n_heads / n_kv_heads)). */
    void (*attention)(lm_backend *be, lm_mem out, lm_mem q, const lm_kv_layer *kv,
                      const lm_attention_batch *batch);

    /* ---- Gated DeltaNet (model-spec §A.7) ---- */
    /* The gates, in place over [n, H] rows: beta = sigmoid(beta);
     * g = neg_exp_A[h] * softplus(g + dt_bias[h]) (neg_exp_A = -exp(A_log)). */
    void (*gdn_gates)(lm_backend *be, lm_mem beta, lm_mem g, lm_mem neg_exp_A, lm_mem dt_bias,
                      int n, int H);
    /* Causal depthwise conv, then SiLU, of every sequence of `seqs`: in and
     * out rows of C floats (pre-conv input, output), weight [C, K] (tap K-1
     * hits the current token), each sequence's window [C, K-1] (its previous
     * K-1 inputs, oldest first) at states + slot * slot_stride floats, updated
     * to its last K-1 inputs.  out may not alias in. */
    void (*causal_conv1d_silu)(lm_backend *be, lm_mem out, lm_mem in, int C, lm_mem weight, int K,
                               lm_mem states, int64_t slot_stride, const lm_seq_batch *seqs);
    /* Gated delta rule of every sequence of `seqs` (model-spec §A.7 steps
     * 5-6): rows of q, k [Hk, dk] (already l2-normalised, q scaled), v and
     * out [Hv, dv], g (log decay) and beta [Hv]; each sequence's state
     * [Hv, dk, dv] at states + slot * slot_stride floats, updated in place.
     * Value head hv uses key head hv / (Hv / Hk). */
    void (*gated_delta_rule)(lm_backend *be, lm_mem out, lm_mem q, lm_mem k, lm_mem v, lm_mem g,
                             lm_mem beta, lm_mem states, int64_t slot_stride,
                             const lm_seq_batch *seqs, int Hk, int Hv, int dk, int dv);
} lm_backend_ops;

struct lm_backend {
    const lm_backend_ops *ops;
    void *impl; /* backend-private: the cpu backend keeps its thread pool here */
};

/* The backends this build has, by name: "cpu" (tuned kernels, n_threads
 * workers; 0 = all cores) and "ref" (the plain reference kernels, one
 * thread, for checking the others).  An unknown name is LM_ERR_INVALID
 * naming the ones there are. */
lm_status lm_backend_create(const char *name, int n_threads, lm_backend **out, lm_error *err);
/* The same on a given device of the kind: the GPU's index for cuda (a
 * device that is not there is refused naming the count); a host backend
 * has one device, 0, and refuses others. */
lm_status lm_backend_create_on(const char *name, int device, int n_threads, lm_backend **out, lm_error *err);
/* The cpu backend runs one of this build's kernel sets (base/kernel_set.h):
 * $LOOM_CPU_KERNELS when set, else the best this CPU runs; a set the build
 * lacks or the CPU cannot run is refused with a sentence. */
lm_status lm_backend_cpu_create(int n_threads, lm_backend **out, lm_error *err);
/* The same on the set named `kernels` ("generic", "avx2", "avx512",
 * "native"); NULL: as lm_backend_cpu_create. */
lm_status lm_backend_cpu_create_with_kernels(int n_threads, const char *kernels, lm_backend **out, lm_error *err);
/* The name of the kernel set a cpu backend runs; NULL for other backends. */
const char *lm_backend_cpu_kernels(const lm_backend *be);
lm_status lm_backend_ref_create(lm_backend **out, lm_error *err);
void lm_backend_destroy(lm_backend *be);
/* Names of the backends of this build, for --help and errors ("cpu, ref"). */
const char *lm_backend_names(void);
/* Whether `name` is a backend loom has (cpu, ref, cuda), built in or not:
 * a known name that cannot run here is the run's failure (cuda without a
 * GPU, or a build without it), not a usage error. */
bool lm_backend_name_known(const char *name);
/* Whether the backend keeps its memory on the host (cpu, ref): one device
 * that any number of ranks share. */
bool lm_backend_is_host(const lm_backend *be);
/* How many devices the kind `name` has here (1 for a host kind; 0 when a
 * GPU kind finds none). */
int lm_backend_device_count(const char *name);
/* Worker threads of the backend (1 for ref). */
int lm_backend_threads(const lm_backend *be);
/* The precision of the dense products (ops table, set_compute_dtype):
 * "f32" or "bf16"; a backend without the choice accepts "f32" only, and an
 * unknown name or a refused one is LM_ERR_INVALID / LM_ERR_UNSUPPORTED with
 * a sentence. */
lm_status lm_backend_set_compute(lm_backend *be, const char *name, lm_error *err);
/* "f32" or "bf16": what lm_backend_set_compute left. */
const char *lm_backend_compute(const lm_backend *be);

/* ---- wrappers ---- */

static inline bool lm_backend_supports_weights(const lm_backend *be, lm_dtype dtype) {
    if (be->ops->weight_dtype_supported) return be->ops->weight_dtype_supported(be, dtype);
    return dtype == LM_DTYPE_BF16 || dtype == LM_DTYPE_F16 || dtype == LM_DTYPE_F32;
}

static inline lm_status lm_alloc(lm_backend *be, size_t bytes, const char *what, lm_buffer **out,
                                 lm_error *err) {
    return be->ops->alloc(be, bytes, what, out, err);
}
static inline lm_status lm_import_host(lm_backend *be, const void *data, size_t bytes,
                                       const char *what, lm_buffer **out, lm_error *err) {
    return be->ops->import_host(be, data, bytes, what, out, err);
}
static inline void lm_buffer_free(lm_backend *be, lm_buffer *buffer) {
    if (buffer) be->ops->free(be, buffer);
}
static inline size_t lm_buffer_size(const lm_backend *be, const lm_buffer *buffer) {
    return buffer ? be->ops->buffer_size(buffer) : 0;
}
static inline void lm_upload(lm_backend *be, lm_mem dst, const void *src, size_t bytes) {
    be->ops->upload(be, dst, src, bytes);
}
static inline lm_status lm_download(lm_backend *be, void *dst, lm_mem src, size_t bytes,
                                    lm_error *err) {
    return be->ops->download(be, dst, src, bytes, err);
}
static inline void lm_copy(lm_backend *be, lm_mem dst, lm_mem src, size_t bytes) {
    be->ops->copy(be, dst, src, bytes);
}
static inline void lm_fill(lm_backend *be, lm_mem dst, uint8_t byte, size_t bytes) {
    be->ops->fill(be, dst, byte, bytes);
}
static inline void lm_discard(lm_backend *be, lm_mem at, size_t bytes) {
    if (be->ops->discard) be->ops->discard(be, at, bytes);
}
static inline lm_status lm_synchronize(lm_backend *be, lm_error *err) {
    return be->ops->synchronize(be, err);
}
static inline void lm_matmul(lm_backend *be, lm_mem y, lm_mem x, int n, const lm_matrix *w) {
    be->ops->matmul(be, y, x, n, w);
}
static inline void lm_embed(lm_backend *be, lm_mem out, lm_mem ids, int n, const lm_matrix *table) {
    be->ops->embed(be, out, ids, n, table);
}
static inline void lm_rmsnorm(lm_backend *be, lm_mem out, lm_mem x, lm_mem weight, int rows,
                              int dim, float eps) {
    be->ops->rmsnorm(be, out, x, weight, rows, dim, eps);
}
static inline void lm_gated_rmsnorm(lm_backend *be, lm_mem out, lm_mem x, lm_mem z, lm_mem weight,
                                    int rows, int dim, float eps) {
    be->ops->gated_rmsnorm(be, out, x, z, weight, rows, dim, eps);
}
static inline void lm_l2norm_scale(lm_backend *be, lm_mem x, int rows, int dim, float eps,
                                   float scale) {
    be->ops->l2norm_scale(be, x, rows, dim, eps, scale);
}
static inline void lm_rope(lm_backend *be, lm_mem x, int n, int n_heads, int head_dim,
                           lm_mem positions, const lm_rope_params *rope) {
    be->ops->rope(be, x, n, n_heads, head_dim, positions, rope);
}
static inline void lm_silu_mul(lm_backend *be, lm_mem out, lm_mem gate, lm_mem up, int64_t n) {
    be->ops->silu_mul(be, out, gate, up, n);
}
static inline void lm_layernorm(lm_backend *be, lm_mem out, lm_mem x, lm_mem weight, lm_mem bias,
                                int rows, int dim, float eps) {
    be->ops->layernorm(be, out, x, weight, bias, rows, dim, eps);
}
static inline void lm_gelu(lm_backend *be, lm_mem x, int64_t n, lm_gelu_kind kind) {
    be->ops->gelu(be, x, n, kind);
}
static inline void lm_add_weighted_rows(lm_backend *be, lm_mem x, const lm_matrix *table,
                                        lm_mem ids, lm_mem weights, int n, int taps) {
    be->ops->add_weighted_rows(be, x, table, ids, weights, n, taps);
}
static inline void lm_sigmoid_mul(lm_backend *be, lm_mem x, lm_mem gate, int64_t n) {
    be->ops->sigmoid_mul(be, x, gate, n);
}
static inline void lm_add(lm_backend *be, lm_mem x, lm_mem y, int64_t n) {
    be->ops->add(be, x, y, n);
}
static inline void lm_copy_rows(lm_backend *be, lm_mem dst, int64_t dst_stride, lm_mem src,
                                int64_t src_stride, int rows, int width) {
    be->ops->copy_rows(be, dst, dst_stride, src, src_stride, rows, width);
}
static inline void lm_gather_rows(lm_backend *be, lm_mem dst, lm_mem src, lm_mem row_ids, int n,
                                  int width) {
    be->ops->gather_rows(be, dst, src, row_ids, n, width);
}
static inline void lm_argmax_rows(lm_backend *be, lm_mem ids, lm_mem x, int rows, int n) {
    be->ops->argmax_rows(be, ids, x, rows, n);
}
static inline bool lm_backend_samples_rows(const lm_backend *be) { return be->ops->sample_rows != NULL; }
static inline void lm_sample_rows(lm_backend *be, lm_mem ids, lm_mem drew, lm_mem logits, int rows, int vocab,
                                  lm_mem params, lm_mem entries) {
    be->ops->sample_rows(be, ids, drew, logits, rows, vocab, params, entries);
}
static inline void lm_add_rows(lm_backend *be, lm_mem x, lm_mem bias, int rows, int width) {
    be->ops->add_rows(be, x, bias, rows, width);
}
static inline void lm_sigmoid_scale_rows(lm_backend *be, lm_mem x, lm_mem gate, int rows,
                                         int width) {
    be->ops->sigmoid_scale_rows(be, x, gate, rows, width);
}
static inline void lm_moe_route(lm_backend *be, lm_mem ids, lm_mem weights, lm_mem logits, int n,
                                const lm_moe_routing *routing) {
    be->ops->moe_route(be, ids, weights, logits, n, routing);
}
static inline void lm_moe_apply_experts(lm_backend *be, lm_mem out, lm_mem x, int n, lm_mem ids,
                                  lm_mem weights, int top_k, const lm_moe_experts *experts,
                                  lm_mem scratch) {
    be->ops->moe_experts(be, out, x, n, ids, weights, top_k, experts, scratch);
}
static inline lm_dtype lm_kv_dtype(const lm_backend *be, int head_dim) {
    return be->ops->kv_dtype ? be->ops->kv_dtype(be, head_dim) : LM_DTYPE_F32;
}
static inline void lm_kv_write(lm_backend *be, const lm_kv_layer *kv, lm_mem k, lm_mem v, int n,
                               lm_mem slots) {
    be->ops->kv_write(be, kv, k, v, n, slots);
}
static inline void lm_attention(lm_backend *be, lm_mem out, lm_mem q, const lm_kv_layer *kv,
                                const lm_attention_batch *batch) {
    be->ops->attention(be, out, q, kv, batch);
}

static inline void lm_gdn_gates(lm_backend *be, lm_mem beta, lm_mem g, lm_mem neg_exp_A,
                                lm_mem dt_bias, int n, int H) {
    be->ops->gdn_gates(be, beta, g, neg_exp_A, dt_bias, n, H);
}
static inline void lm_causal_conv1d_silu(lm_backend *be, lm_mem out, lm_mem in, int C,
                                         lm_mem weight, int K, lm_mem states, int64_t slot_stride,
                                         const lm_seq_batch *seqs) {
    be->ops->causal_conv1d_silu(be, out, in, C, weight, K, states, slot_stride, seqs);
}
static inline void lm_gated_delta_rule(lm_backend *be, lm_mem out, lm_mem q, lm_mem k, lm_mem v,
                                       lm_mem g, lm_mem beta, lm_mem states, int64_t slot_stride,
                                       const lm_seq_batch *seqs, int Hk, int Hv, int dk, int dv) {
    be->ops->gated_delta_rule(be, out, q, k, v, g, beta, states, slot_stride, seqs, Hk, Hv, dk, dv);
}


#endif
