/* FP8 checkpoints made from a fixture, for the tests of loading them
 * (tests/test_quantized.c whole, tests/test_tensor_parallel.c by ranks):
 * the layout of Qwen3.5's FP8 releases — e4m3 weights with one inverse
 * scale per 128x128 block (float32, or bf16 in one layer, as some releases
 * store them) and config.json's quantization_config — and, beside it,
 * checkpoints of the same dequantized weights (e4m3 · scale, computed as
 * loom computes it) in float32 or rounded to bf16, which a correct load of
 * the FP8 one must reproduce exactly. */
#ifndef LOOM_TESTS_FP8_CHECKPOINT_H
#define LOOM_TESTS_FP8_CHECKPOINT_H

#include <stdbool.h>
#include <stddef.h>

typedef enum {
    TEST_FP8_WEIGHTS,       /* e4m3 + weight_scale_inv + quantization_config */
    TEST_FP8_DEQUANT_F32,   /* the dequantized weights in float32 */
    TEST_FP8_DEQUANT_BF16,  /* the dequantized weights rounded to bf16 (nearest even) */
} test_fp8_form;

/* How a written FP8 checkpoint is spoiled (the bad-file tests). */
typedef enum { TEST_FP8_GOOD, TEST_FP8_NO_SCALE, TEST_FP8_WRONG_SCALE_SHAPE } test_fp8_spoil;

/* The quantization_config of the checkpoints Qwen3.5's FP8 releases ship. */
#define TEST_FP8_CONFIG                                                                     \
    "{\"quant_method\": \"fp8\", \"fmt\": \"e4m3\", \"activation_scheme\": \"dynamic\", " \
    "\"weight_block_size\": [128, 128], \"modules_to_not_convert\": [\"lm_head\", \"embed_tokens\"]}"

typedef struct {
    test_fp8_form form;
    /* TEST_FP8_WEIGHTS: config.json's quantization_config (NULL: none). */
    const char *quant_json;
    test_fp8_spoil spoil; /* spoils layers.3.self_attn.q_proj's scales */
    /* Which matrices become FP8: false, the projections and the MTP head's
     * fc, as the releases convert them (lm_head, the embedding, routers and
     * the small linear-attention gates in_proj_a/b stay bf16); true, every
     * matrix --quantize int8 makes int8 (lm_head, in_proj_a/b and fused
     * [E, rows, cols] expert stacks too, routers not), so that the FP8
     * model and the dequantized one loaded with --quantize int8 hold the
     * same int8 weights. */
    bool every_linear;
} test_fp8_options;

/* Writes dir/model.safetensors (every tensor of the fixture's shards) and
 * dir/config.json from fixture_dir; false, saying why on stderr, on
 * failure. */
bool test_fp8_write_checkpoint(const char *fixture_dir, const char *dir, const test_fp8_options *o);

/* Removes what test_fp8_write_checkpoint wrote, and the folder. */
void test_remove_checkpoint(const char *dir);

#endif
