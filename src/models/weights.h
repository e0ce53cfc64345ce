/* Fetching a model's tensors from a checkpoint by name, checking each shape,
 * preparing them on the model's backend (imported once at load), and
 * remembering which were used (so `loom inspect` can list the rest). */
#ifndef LOOM_MODELS_WEIGHTS_H
#define LOOM_MODELS_WEIGHTS_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

#include "io/checkpoint.h"
#include "models/gptq_quant.h"

struct cJSON;
#include "ops/ops.h"

/* How weights are made at load (lm_weights_set_quant; lm_model_load_options
 * carries it): Linear layers' float matrices as stored or int8 (Q8_0), and
 * the block shape of an FP8 checkpoint's weight_scale_inv. */
typedef struct {
    bool int8_linear;      /* --quantize int8: lm_weights_linear makes Q8_0 */
    bool fp8_linear;       /* --quantize fp8: lm_weights_linear makes FP8_B128 where it can */
    int fp8_block_rows;    /* > 0: config.json says FP8 with weight_block_size */
    int fp8_block_cols;    /* [fp8_block_rows, fp8_block_cols] */
    int mlx_bits;          /* > 0: config.json's "quantization" (MLX affine, models/mlx_quant.h) */
    int mlx_group;         /* its group_size */
    bool mlx_overrides;    /* it names modules of their own bits/group_size (or false: not quantized) */
    lm_int4_quant int4;    /* GPTQ / AWQ int4 (quantization_config's quant_method gptq or awq) */
} lm_weights_quant;

/* config.json's quantization_config (top level, else text_config's): none,
 * MLX affine ("quantization" or "quantization_config" holding group_size
 * and bits and no quant_method; any other key is a module path with its
 * own {group_size, bits}, or false, each checked here and read when its
 * tensor is loaded), or quant_method "fp8" with a weight_block_size of two ints in [1, 65536]
 * (fmt, when given, "e4m3"; activation_scheme "dynamic" or "static": loom
 * computes activations in float32 either way).  Anything else is an error
 * naming the field.  int8_linear is left as it was. */
lm_status lm_weights_quant_config(const char *config_path, lm_weights_quant *q, lm_error *err);

typedef struct {
    const lm_checkpoint *checkpoint; /* NULL in random mode */
    lm_backend *backend;             /* where the weights go */
    lm_buffer **buffers;             /* one per imported tensor, freed with lm_weights_free */
    size_t n_buffers, cap_buffers;
    /* Random mode (benchmarks on a config shape, no checkpoint): every tensor
     * asked for is made up on the spot from this seed, bf16 matrices scaled
     * by 1/sqrt(cols) so activations stay in range. */
    bool random;
    bool random_has_lm_head;
    uint64_t random_state;
    void **random_owned;
    size_t n_random_owned, cap_random_owned;
    /* The latest made-up tensor and the slot of its values in random_owned:
     * imported whole to a backend whose memory is not the host's, the
     * values are freed at once (a benchmark shape's host copy would
     * otherwise stay as large as the model). */
    lm_tensor *random_latest;
    size_t random_latest_slot;
    const lm_tensor **used; /* tensors handed out */
    size_t n_used, cap_used;
    float **owned;          /* host copies made at load (float32 conversions, reordered
                             * weights of any dtype), freed with lm_weights_free */
    size_t n_owned, cap_owned;
    lm_weights_quant quant;
    /* Where loading reports the bytes of the tensors it takes (NULL:
     * nowhere), and the ranks that take a share each (the bytes are
     * counted 1/progress_ranks a rank). */
    const lm_progress *progress;
    int progress_ranks;
    size_t q8_bytes; /* bytes of the Q8_0 matrices made at load */
    bool loading_experts;  /* lm_weights_set_experts */
    size_t fp8_kept_bytes; /* bytes of FP8_B128 matrices from an FP8 checkpoint */
    size_t fp8_made_bytes; /* bytes of FP8_B128 matrices made from float weights (--quantize fp8) */
    size_t fp8_bf16_bytes; /* bytes of bf16 matrices decoded from FP8 (a backend without int8 weights) */
    size_t mlx_bytes;      /* bytes of matrices decoded from MLX affine codes */
    lm_dtype mlx_made;     /* what the latest became (bf16, float32 or Q8_0), for the note */
    int mlx_made_bits;     /* its bits */
    size_t mlx_made_matrices;
    size_t mlx_kept_bytes;    /* bytes of MLX 4-bit matrices kept 4-bit (ggml Q4_1 blocks) */
    size_t mlx_kept_matrices;
    size_t int4_kept_bytes, int4_kept_matrices; /* GPTQ / AWQ matrices kept 4-bit (Q4_0 / Q5_0 blocks) */
    size_t int4_f32_bytes, int4_f32_matrices;   /* ... decoded (float32 on host backends, else bf16) */
    lm_dtype int4_decoded;                      /* which */
    size_t int4_f32_permuted;                   /* of which desc_act put out of group order */
    struct cJSON *mlx_config; /* config.json, read at the first MLX matrix when quant.mlx_overrides */
    struct lm_pool *convert_pool; /* threads converting large matrices at load (made at the first) */
    bool convert_pool_failed;     /* it could not be made, or one thread: convert on the caller's */
    /* Quantized checkpoints' tensors and the weights they stand for (an
     * MLX X.weight or a GPTQ/AWQ X.qweight: rows · cols; their scales,
     * biases, zeros and g_idx: 0), for lm_weights_tensor_parameters. */
    struct lm_counted_params {
        const lm_tensor *tensor;
        int64_t parameters;
    } *counted;
    size_t n_counted, cap_counted;
    /* Tensors whose data was converted at load and then handed back to the
     * system (lm_big_release): never handed out again. */
    const lm_tensor **released;
    size_t n_released, cap_released;
} lm_weights;

void lm_weights_init(lm_weights *w, const lm_checkpoint *checkpoint, lm_backend *backend);
/* Random mode; has_lm_head says whether "lm_head.weight" exists (untied). */
/* Reports the tensors taken from here on to progress: "placing" the
 * checkpoint's bytes (its whole size the phase's total), or "making"
 * random ones; n_ranks ranks load a share each (1: the whole model). */
void lm_weights_set_progress(lm_weights *w, const lm_progress *progress, int n_ranks);
void lm_weights_init_random(lm_weights *w, uint64_t seed, bool has_lm_head, lm_backend *backend);
/* Whether the matrices loaded from here on are routed experts (one matrix
 * each): they are then never kept FP8 (the MoE kernels read int8 and bf16
 * experts), as stacks of experts never are. */
void lm_weights_set_experts(lm_weights *w, bool experts);
/* The quantization of the weights made from here on (default: none). */
void lm_weights_set_quant(lm_weights *w, const lm_weights_quant *q);
/* Bytes of weight data handed out so far (matrices and vectors as stored). */
size_t lm_weights_bytes_used(const lm_weights *w);
/* What the load made of the stored weights, for a startup line: "weights
 * made int8 at load: N MB", "FP8 weights made bf16 at load: N MB, as ...",
 * or "" when every matrix is used as stored. */
void lm_weights_made_note(const lm_weights *w, char *out, size_t size);
void lm_weights_free(lm_weights *w);

/* NULL when absent; marks it used when present. */
const lm_tensor *lm_weights_find(lm_weights *w, const char *name);
bool lm_weights_has(const lm_weights *w, const char *name);

/* A 2-D float weight [rows, cols] as stored, on the backend (the cpu
 * backend uses the checkpoint's memory in place). */
lm_status lm_weights_matrix(lm_weights *w, const char *name, int64_t rows, int64_t cols,
                            lm_matrix *out, lm_error *err);
/* A Linear layer's weight [rows, cols]: lm_weights_matrix, except that it is
 * made Q8_0 (base/dtype.h) when the quantization says int8_linear and cols
 * is a multiple of LM_Q8_BLOCK (a backend without Q8_0 weights gets an
 * error saying so).  Every matrix (linear or not) stored as F8_E4M3 with
 * its `<name>_scale_inv` block scales is decoded and converted to Q8_0
 * (float32 when cols is not a multiple of LM_Q8_BLOCK), or to bf16 on a
 * backend without Q8_0 weights.  Every matrix stored MLX-quantized
 * (`X.weight` uint32 with `X.scales` and `X.biases`, config.json's
 * "quantization") is kept 4-bit as ggml Q4_1 blocks where its codes are
 * 4-bit and its scales and biases float16 (the same weights exactly), else
 * decoded into the dtype of its scales (Q8_0 with int8_linear); every
 * GPTQ / AWQ int4 matrix (`X.qweight`, `X.qzeros`, `X.scales`, `X.g_idx`;
 * models/gptq_quant.h) is kept as Q4_0 / Q5_0 blocks of the same weights
 * where its groups run in order, else decoded (float32 on host backends);
 * here and in every loader below, slices included (only the slice's rows
 * are read). */
lm_status lm_weights_linear(lm_weights *w, const char *name, int64_t rows, int64_t cols,
                            lm_matrix *out, lm_error *err);
/* The same for a 3-D [n, rows, cols] tensor (fused experts). */
lm_status lm_weights_linear_stacked(lm_weights *w, const char *name, int64_t n, int64_t rows,
                                    int64_t cols, lm_matrix *out, lm_error *err);
/* The part of a 2-D weight that one rank of a tensor-parallel group keeps
 * (issue 19): up to LM_SLICE_MAX_RUNS runs of rows, concatenated in order
 * (a fused q | k | v projection gives a rank one run of each), and one
 * window of columns (a row-parallel projection's share of its input). */
#define LM_SLICE_MAX_RUNS 4
typedef struct {
    int n_runs; /* 0: every row */
    struct {
        int64_t first, count;
    } runs[LM_SLICE_MAX_RUNS];
    int64_t col_first, col_count; /* col_count 0: every column */
} lm_weights_slice;

/* lm_weights_linear of a slice of the [rows, cols] tensor `name`: the
 * matrix holds the slice's rows and columns, and only they are read from
 * the checkpoint.  One run of whole rows is imported as stored (in place
 * on the cpu backend); other slices are copied on the host first.  int8
 * (lm_weights_quant) is made from the slice when its columns are a
 * multiple of LM_Q8_BLOCK.  An FP8 tensor's slice is decoded row by row
 * (only its rows are read) and made what lm_weights_linear makes of FP8,
 * judged by the slice's columns.  A slice outside the tensor is an error
 * naming it. */
lm_status lm_weights_linear_slice(lm_weights *w, const char *name, int64_t rows, int64_t cols,
                                  const lm_weights_slice *slice, lm_matrix *out, lm_error *err);
/* The same slice of each matrix of a 3-D [n, rows, cols] tensor (fused
 * experts), as one matrix [n · slice rows, slice cols]. */
lm_status lm_weights_linear_stacked_slice(lm_weights *w, const char *name, int64_t n, int64_t rows, int64_t cols,
                                          const lm_weights_slice *slice, lm_matrix *out, lm_error *err);
/* Matrices [first, first + count) of a 3-D [n, rows, cols] tensor whole
 * (a rank's experts under expert parallelism), as one matrix [count ·
 * rows, cols]: only their bytes are read, imported in place where the
 * backend allows, as lm_weights_linear_slice. */
lm_status lm_weights_linear_stacked_range(lm_weights *w, const char *name, int64_t n, int64_t first, int64_t count,
                                          int64_t rows, int64_t cols, lm_matrix *out, lm_error *err);
/* A 3-D float tensor [n, rows, cols] as stored (fused experts), on the
 * backend, as one [n * rows, cols] matrix: lm_matrix_rows cuts its slices
 * without copying. */
lm_status lm_weights_stacked(lm_weights *w, const char *name, int64_t n, int64_t rows, int64_t cols,
                             lm_matrix *out, lm_error *err);
/* A float tensor of exactly `shape` (n_dims dims) as the matrix
 * [shape[0], shape[1]·…·shape[n_dims-1]], as stored: a convolution whose
 * kernel covers its whole input is this matmul (the vision towers' patch
 * embeddings, [C, 3, tp, p, p]). */
lm_status lm_weights_flat_matrix(lm_weights *w, const char *name, int n_dims, const int64_t *shape,
                                 lm_matrix *out, lm_error *err);
/* A Conv2d weight [out_ch, in_ch, kh, kw] as the matrix [out_ch, kh·kw·in_ch]
 * whose column (y·kw + x)·in_ch + c holds W[o, c, y, x]: the convolution
 * over one kernel-sized block of rows of in_ch, stored one after the other
 * in (y, x) order, is then one matmul (GLM's 2×2 downsample).  Copied on
 * the host in the tensor's dtype, owned by w. */
lm_status lm_weights_conv2d_as_rows(lm_weights *w, const char *name, int64_t out_ch, int64_t in_ch,
                                    int64_t kh, int64_t kw, lm_matrix *out, lm_error *err);
/* Rows [first, first + rows) of m, a view of the same memory. */
lm_matrix lm_matrix_rows(const lm_matrix *m, int64_t first, int64_t rows);

/* The lm_head [vocab, hidden]: `name` (lm_head.weight; mlx-lm's
 * language_model.lm_head.weight), or the (loaded) embedding
 * when tied; with tensor parallelism over n_ranks ranks that split the
 * vocabulary (forward_common.h's lm_vocab_splits) only rank's rows (a view
 * of the tied embedding, or only those rows read), and *split says so. */
lm_status lm_weights_lm_head(lm_weights *w, const char *name, const lm_matrix *embed_tokens, bool tied, int vocab,
                             int hidden, int rank, int n_ranks, lm_matrix *out, bool *split, lm_error *err);
/* Any float tensor with exactly n elements, converted to float32 and plus
 * `offset` (1.0 turns a zero-centred norm weight into its scale), in host
 * memory owned by w, for transforms made once before import.  Shape must be
 * [n] unless `any_shape`. */
lm_status lm_weights_host_vector(lm_weights *w, const char *name, int64_t n, float offset,
                                 bool any_shape, float **out, lm_error *err);
/* n float32 values of host memory owned by w (from lm_weights_host_vector)
 * onto the backend. */
lm_status lm_weights_import(lm_weights *w, const float *values, int64_t n, const char *what,
                            lm_mem *out, lm_error *err);
/* lm_weights_host_vector, then lm_weights_import. */
lm_status lm_weights_vector(lm_weights *w, const char *name, int64_t n, float offset,
                            bool any_shape, lm_mem *out, lm_error *err);

/* Whether a checkpoint tensor was used by the model. */
bool lm_weights_was_used(const lm_weights *w, const lm_tensor *t);
/* Parameters of the tensors handed out. */
int64_t lm_weights_parameters_used(const lm_weights *w);
/* The weights tensor t stands for: its elements, except for a quantized
 * checkpoint's packed codes (the matrix's rows · cols) and their scales,
 * biases, zeros and g_idx (0). */
int64_t lm_weights_tensor_parameters(const lm_weights *w, const lm_tensor *t);
/* Prints the checkpoint's used (or unused) tensors grouped by the first
 * components of their names, with counts and parameters (`loom inspect`). */
void lm_weights_print_groups(const lm_weights *w, bool want_used, FILE *f);
/* The same over several sets of weights of one checkpoint (a model's parts
 * kept apart, as the text model and its vision tower): a tensor is used
 * when any of them used it. */
void lm_weights_print_groups_of(const lm_weights *const *ws, int n, bool want_used, FILE *f);

#endif
