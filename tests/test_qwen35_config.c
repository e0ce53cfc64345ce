/* config.json parsing for Qwen3.5: the fixture and benchmark configs with
 * exact values, legacy spellings, defaults, and one JSON per validation
 * error. */
#include <stdio.h>
#include <string.h>

#include "harness.h"
#include "models/qwen35/qwen35_config.h"

static lm_status parse(const char *json, lm_qwen35_config *cfg, lm_error *err) {
    return lm_qwen35_config_parse(json, strlen(json), "config.json", cfg, err);
}

static int count_full_layers(const lm_qwen35_config *cfg) {
    int n = 0;
    for (int i = 0; i < cfg->num_hidden_layers; i++) n += cfg->layer_types[i] == LM_LAYER_FULL_ATTENTION;
    return n;
}

static void test_fixture_dense(void) {
    char path[512];
    test_fixture_path(path, sizeof path, "models/qwen35-dense/config.json");
    lm_qwen35_config c;
    lm_error err;
    CHECK_OK(lm_qwen35_config_load(path, &c, &err), &err);
    CHECK(strcmp(c.model_type, "qwen3_5") == 0 && !c.is_moe);
    CHECK(c.vocab_size == 2048 && c.hidden_size == 64 && c.intermediate_size == 128);
    CHECK(c.num_hidden_layers == 4 && c.num_attention_heads == 4 && c.num_key_value_heads == 2);
    CHECK(c.head_dim == 32 && c.rot_dim == 8);
    CHECK(c.mrope_section[0] == 2 && c.mrope_section[1] == 1 && c.mrope_section[2] == 1);
    CHECK_NEAR(c.rope_theta, 1e6, 0);
    CHECK_NEAR(c.partial_rotary_factor, 0.25, 0);
    CHECK_NEAR(c.rms_norm_eps, 1e-6, 1e-12);
    CHECK(c.linear_conv_kernel_dim == 4 && c.linear_key_head_dim == 16 && c.linear_value_head_dim == 16);
    CHECK(c.linear_num_key_heads == 2 && c.linear_num_value_heads == 4);
    CHECK(c.layer_types[0] == LM_LAYER_LINEAR_ATTENTION && c.layer_types[2] == LM_LAYER_LINEAR_ATTENTION);
    CHECK(c.layer_types[3] == LM_LAYER_FULL_ATTENTION);
    CHECK(c.n_eos == 1 && c.eos_token_ids[0] == 1902);
    CHECK(c.pad_token_id == 1900 && c.bos_token_id == -1);
    CHECK(c.mtp_num_hidden_layers == 1 && !c.mtp_use_dedicated_embeddings);
    CHECK(!c.tie_word_embeddings && !c.attention_bias);
    CHECK(c.max_position_embeddings == 4096 && strcmp(c.hidden_act, "silu") == 0);
    CHECK(c.image_token_id == 1905 && c.video_token_id == 1906);
    CHECK(c.vision_start_token_id == 1903 && c.vision_end_token_id == 1904);
    CHECK(c.has_vision_config);
    CHECK(c.num_experts == 0 && c.num_experts_per_tok == 0);
}

static void test_fixture_moe(void) {
    char path[512];
    test_fixture_path(path, sizeof path, "models/qwen35-moe/config.json");
    lm_qwen35_config c;
    lm_error err;
    CHECK_OK(lm_qwen35_config_load(path, &c, &err), &err);
    CHECK(strcmp(c.model_type, "qwen3_5_moe") == 0 && c.is_moe);
    CHECK(c.num_experts == 8 && c.num_experts_per_tok == 2);
    CHECK(c.moe_intermediate_size == 32 && c.shared_expert_intermediate_size == 48);
    CHECK(c.hidden_size == 64 && c.num_hidden_layers == 4 && c.rot_dim == 8);
    CHECK(c.mtp_num_hidden_layers == 1 && c.n_eos == 1 && c.eos_token_ids[0] == 1902);
}

static void load_bench(const char *file, lm_qwen35_config *c, lm_error *err, lm_status *status) {
    char path[512];
    snprintf(path, sizeof path, "bench/configs/%s", file); /* the repository's copy, from its root */
    *status = lm_qwen35_config_load(path, c, err);
}

static void test_bench_configs(void) {
    lm_qwen35_config c;
    lm_error err;
    lm_status s;
    load_bench("qwen3.5-27b-shape.json", &c, &err, &s);
    CHECK_OK(s, &err);
    CHECK(c.hidden_size == 5120 && c.intermediate_size == 17408 && c.num_hidden_layers == 64);
    CHECK(c.num_attention_heads == 24 && c.num_key_value_heads == 4 && c.head_dim == 256);
    CHECK(c.linear_num_value_heads == 48 && c.rot_dim == 64 && c.vocab_size == 248320);
    CHECK_NEAR(c.rope_theta, 1e7, 0);
    CHECK(c.n_eos == 0 && c.pad_token_id == -1);
    CHECK(count_full_layers(&c) == 16 && c.layer_types[63] == LM_LAYER_FULL_ATTENTION);
    CHECK(c.image_token_id == 248056 && c.vision_end_token_id == 248054);

    load_bench("qwen3.5-0.8b-shape.json", &c, &err, &s);
    CHECK_OK(s, &err);
    CHECK(c.hidden_size == 1024 && c.num_hidden_layers == 24 && c.tie_word_embeddings);
    CHECK(c.linear_num_value_heads == 16);

    load_bench("qwen3.5-9b-shape.json", &c, &err, &s);
    CHECK_OK(s, &err);
    CHECK(c.hidden_size == 4096 && c.intermediate_size == 12288 && c.num_hidden_layers == 32);

    load_bench("qwen3.5-35b-a3b-shape.json", &c, &err, &s);
    CHECK_OK(s, &err);
    CHECK(c.is_moe && c.num_experts == 256 && c.num_experts_per_tok == 8);
    CHECK(c.moe_intermediate_size == 512 && c.shared_expert_intermediate_size == 512);
    CHECK(c.hidden_size == 2048 && c.num_hidden_layers == 40 && c.num_key_value_heads == 2);
    CHECK(c.intermediate_size == 0 && count_full_layers(&c) == 10);

    load_bench("glm-4.6v-shape.json", &c, &err, &s);
    CHECK(s == LM_ERR_UNSUPPORTED);
    CHECK_MSG(strstr(err.message, "is not a Qwen3.5 model"), "%s", err.message);
}

/* No text fields at all: transformers' defaults. */
static void test_defaults(void) {
    lm_qwen35_config c;
    lm_error err;
    CHECK_OK(parse("{\"model_type\":\"qwen3_5\"}", &c, &err), &err);
    CHECK(c.vocab_size == 248320 && c.hidden_size == 4096 && c.intermediate_size == 12288);
    CHECK(c.num_hidden_layers == 32 && c.num_attention_heads == 16 && c.num_key_value_heads == 4);
    CHECK(c.head_dim == 256 && c.rot_dim == 64 && c.max_position_embeddings == 32768);
    CHECK_NEAR(c.rope_theta, 10000, 0);
    CHECK(c.mrope_section[0] == 11 && c.mrope_section[1] == 11 && c.mrope_section[2] == 10);
    CHECK(c.linear_conv_kernel_dim == 4 && c.linear_num_key_heads == 16 && c.linear_num_value_heads == 32);
    CHECK(c.full_attention_interval == 4 && count_full_layers(&c) == 8);
    CHECK(c.layer_types[3] == LM_LAYER_FULL_ATTENTION && c.layer_types[4] == LM_LAYER_LINEAR_ATTENTION);
    CHECK(c.n_eos == 0 && c.pad_token_id == -1 && c.bos_token_id == -1);
    CHECK(c.mtp_num_hidden_layers == 0 && !c.tie_word_embeddings && !c.has_vision_config);
    CHECK(c.image_token_id == 248056 && c.video_token_id == 248057);

    CHECK_OK(parse("{\"model_type\":\"qwen3_5_moe\",\"text_config\":{}}", &c, &err), &err);
    CHECK(c.is_moe && c.hidden_size == 2048 && c.num_hidden_layers == 40 && c.num_key_value_heads == 2);
    CHECK(c.num_experts == 256 && c.num_experts_per_tok == 8 && c.moe_intermediate_size == 512);
    CHECK(c.intermediate_size == 0);

    /* a bare text config has no multimodal ids */
    CHECK_OK(parse("{\"model_type\":\"qwen3_5_moe_text\",\"num_hidden_layers\":6,"
                   "\"full_attention_interval\":3}",
                   &c, &err),
             &err);
    CHECK(c.is_moe && strcmp(c.model_type, "qwen3_5_moe_text") == 0);
    CHECK(c.image_token_id == -1 && c.vision_start_token_id == -1);
    CHECK(c.layer_types[2] == LM_LAYER_FULL_ATTENTION && c.layer_types[5] == LM_LAYER_FULL_ATTENTION);
    CHECK(count_full_layers(&c) == 2);
}

/* Older configs: rope settings at top level and in rope_scaling; legacy
 * layer-type spellings; eos as a list; tying at the top level. */
static void test_legacy_spellings(void) {
    const char *json =
        "{\"model_type\":\"qwen3_5_text\",\"head_dim\":128,\"rope_theta\":5000000,"
        "\"partial_rotary_factor\":0.5,"
        "\"rope_scaling\":{\"type\":\"mrope\",\"mrope_section\":[12,10,10]},"
        "\"num_hidden_layers\":4,\"layer_types\":[\"mamba\",\"linear_attention\",\"mamba\","
        "\"attention\"],\"eos_token_id\":[5,7,9],\"bos_token_id\":3,"
        "\"num_nextn_predict_layers\":2,\"tie_word_embeddings\":true}";
    lm_qwen35_config c;
    lm_error err;
    CHECK_OK(parse(json, &c, &err), &err);
    CHECK_NEAR(c.rope_theta, 5e6, 0);
    CHECK_NEAR(c.partial_rotary_factor, 0.5, 0);
    CHECK(c.rot_dim == 64 && c.mrope_section[0] == 12 && c.mrope_section[2] == 10);
    CHECK(c.layer_types[0] == LM_LAYER_LINEAR_ATTENTION && c.layer_types[3] == LM_LAYER_FULL_ATTENTION);
    CHECK(c.n_eos == 3 && c.eos_token_ids[0] == 5 && c.eos_token_ids[2] == 9);
    CHECK(c.bos_token_id == 3 && c.mtp_num_hidden_layers == 2 && c.tie_word_embeddings);

    /* rope_parameters wins over the top-level spellings */
    CHECK_OK(parse("{\"model_type\":\"qwen3_5\",\"tie_word_embeddings\":true,\"eos_token_id\":4,"
                   "\"text_config\":{\"rope_theta\":1,\"rope_parameters\":{\"rope_theta\":2,"
                   "\"partial_rotary_factor\":0.25,\"mrope_section\":[11,11,10]}}}",
                   &c, &err),
             &err);
    CHECK_NEAR(c.rope_theta, 2, 0);
    CHECK(c.tie_word_embeddings);
    CHECK(c.n_eos == 1 && c.eos_token_ids[0] == 4); /* top-level eos when text has none */
}

/* The implemented values of the settings refused otherwise still load. */
static void test_implemented_settings(void) {
    lm_qwen35_config c;
    lm_error err;
    CHECK_OK(parse("{\"model_type\":\"qwen3_5\",\"text_config\":{\"attention_bias\":false,"
                   "\"hidden_act\":\"silu\",\"attn_output_gate\":true,\"use_sliding_window\":false,"
                   "\"sliding_window\":4096,\"rope_parameters\":{\"rope_type\":\"default\","
                   "\"mrope_interleaved\":true}}}",
                   &c, &err),
             &err);
    CHECK_OK(parse("{\"model_type\":\"qwen3_5_text\",\"sliding_window\":null,"
                   "\"use_sliding_window\":null,\"rope_scaling\":{\"type\":\"mrope\","
                   "\"mrope_interleaved\":true}}",
                   &c, &err),
             &err);
    CHECK(!c.attention_bias && strcmp(c.hidden_act, "silu") == 0);
}

typedef struct {
    const char *json;
    lm_status status;
    const char *message; /* a part of the error message */
} bad_config;

#define TEXT(fields) "{\"model_type\":\"qwen3_5\",\"text_config\":{" fields "}}"
static const bad_config bad_configs[] = {
    {"{", LM_ERR_FORMAT, "config.json: not valid JSON"},
    {"[]", LM_ERR_FORMAT, "config.json: not a JSON object"},
    {"{}", LM_ERR_FORMAT, "config.json: model_type is missing"},
    {"{\"model_type\":3}", LM_ERR_FORMAT, "config.json: model_type must be a string"},
    {"{\"model_type\":\"llama\"}", LM_ERR_UNSUPPORTED, "model_type 'llama' is not a Qwen3.5 model"},
    {"{\"model_type\":\"qwen3_5\",\"text_config\":5}", LM_ERR_FORMAT, "config.json: text_config must be an object"},
    {TEXT("\"model_type\":\"qwen3_5_moe_text\""), LM_ERR_FORMAT, "text_config.model_type is 'qwen3_5_moe_text' but qwen3_5 expects 'qwen3_5_text'"},
    {TEXT("\"hidden_size\":\"64\""), LM_ERR_FORMAT, "config.json: text_config.hidden_size must be an integer"},
    {TEXT("\"hidden_size\":64.5"), LM_ERR_FORMAT, "config.json: text_config.hidden_size must be an integer"},
    {TEXT("\"hidden_size\":0"), LM_ERR_FORMAT, "text_config.hidden_size is 0; it must be between 1 and 65536"},
    {TEXT("\"hidden_size\":70000"), LM_ERR_FORMAT, "text_config.hidden_size is 70000"},
    {TEXT("\"hidden_size\":1e20"), LM_ERR_FORMAT, "text_config.hidden_size must be an integer"},
    {TEXT("\"vocab_size\":-1"), LM_ERR_FORMAT, "text_config.vocab_size is -1"},
    {TEXT("\"vocab_size\":5000000"), LM_ERR_FORMAT, "text_config.vocab_size is 5000000"},
    {TEXT("\"num_hidden_layers\":513"), LM_ERR_FORMAT, "text_config.num_hidden_layers is 513"},
    {TEXT("\"intermediate_size\":0"), LM_ERR_FORMAT, "text_config.intermediate_size is 0"},
    {TEXT("\"num_attention_heads\":6"), LM_ERR_FORMAT, "text_config.num_attention_heads (6) must be a multiple of text_config.num_key_value_heads (4)"},
    {TEXT("\"linear_num_value_heads\":24,\"linear_num_key_heads\":16"), LM_ERR_FORMAT, "text_config.linear_num_value_heads (24) must be a multiple of text_config.linear_num_key_heads (16)"},
    {TEXT("\"head_dim\":255"), LM_ERR_FORMAT, "text_config.head_dim (255) must be even"},
    {TEXT("\"head_dim\":36,\"partial_rotary_factor\":0.25,\"rope_parameters\":{\"mrope_section\":[2,2,0]}"), LM_ERR_FORMAT, "int(head_dim 36 * partial_rotary_factor 0.25) = 9 must be even"},
    {TEXT("\"rope_parameters\":{\"partial_rotary_factor\":1.5}"), LM_ERR_FORMAT, "text_config.rope_parameters.partial_rotary_factor is 1.5"},
    {TEXT("\"rope_parameters\":{\"partial_rotary_factor\":0}"), LM_ERR_FORMAT, "partial_rotary_factor is 0"},
    {TEXT("\"rope_parameters\":{\"mrope_section\":[11,11,11]}"), LM_ERR_FORMAT, "mrope_section [11, 11, 11] sums to 33 but must sum to half the rotary dimension (32)"},
    {TEXT("\"rope_parameters\":{\"mrope_section\":[16,16]}"), LM_ERR_FORMAT, "text_config.rope_parameters.mrope_section must be a list of 3 integers"},
    {TEXT("\"rope_parameters\":{\"mrope_section\":[16,16,\"0\"]}"), LM_ERR_FORMAT, "mrope_section must be a list of 3 integers"},
    {TEXT("\"rope_parameters\":5"), LM_ERR_FORMAT, "text_config.rope_parameters must be an object"},
    {TEXT("\"rope_parameters\":{\"rope_type\":\"yarn\"}"), LM_ERR_UNSUPPORTED, "text_config.rope_parameters.rope_type 'yarn' is not supported"},
    {TEXT("\"rope_scaling\":{\"type\":\"linear\"}"), LM_ERR_UNSUPPORTED, "text_config.rope_scaling.type 'linear' is not supported"},
    {TEXT("\"rope_theta\":-1"), LM_ERR_FORMAT, "text_config.rope_theta is -1"},
    {TEXT("\"rms_norm_eps\":\"small\""), LM_ERR_FORMAT, "text_config.rms_norm_eps must be a number"},
    {TEXT("\"rms_norm_eps\":0"), LM_ERR_FORMAT, "text_config.rms_norm_eps is 0"},
    {TEXT("\"linear_conv_kernel_dim\":0"), LM_ERR_FORMAT, "text_config.linear_conv_kernel_dim is 0; it must be between 1 and 64"},
    {TEXT("\"linear_conv_kernel_dim\":65"), LM_ERR_FORMAT, "text_config.linear_conv_kernel_dim is 65"},
    {TEXT("\"num_hidden_layers\":2,\"layer_types\":[\"full_attention\"]"), LM_ERR_FORMAT, "text_config.layer_types has 1 entries but num_hidden_layers is 2"},
    {TEXT("\"num_hidden_layers\":2,\"layer_types\":[\"full_attention\",\"sliding_attention\"]"), LM_ERR_UNSUPPORTED, "text_config.layer_types[1] is 'sliding_attention'; expected 'linear_attention' or 'full_attention'"},
    {TEXT("\"num_hidden_layers\":1,\"layer_types\":[1]"), LM_ERR_FORMAT, "text_config.layer_types must be a list of strings"},
    {TEXT("\"layer_types\":\"full_attention\""), LM_ERR_FORMAT, "text_config.layer_types must be a list of strings"},
    {TEXT("\"full_attention_interval\":0"), LM_ERR_FORMAT, "text_config.full_attention_interval is 0"},
    {TEXT("\"attention_bias\":0"), LM_ERR_FORMAT, "text_config.attention_bias must be true or false"},
    {TEXT("\"tie_word_embeddings\":\"yes\""), LM_ERR_FORMAT, "text_config.tie_word_embeddings must be true or false"},
    {TEXT("\"hidden_act\":\"a_very_long_activation\""), LM_ERR_FORMAT, "text_config.hidden_act must be a string of at most 15 characters"},
    {TEXT("\"eos_token_id\":\"x\""), LM_ERR_FORMAT, "text_config.eos_token_id must be an integer or a list"},
    {TEXT("\"eos_token_id\":[1,2,3,4,5,6,7,8,9]"), LM_ERR_FORMAT, "text_config.eos_token_id must be an integer or a list of at most 8"},
    {TEXT("\"eos_token_id\":[1,-2]"), LM_ERR_FORMAT, "text_config.eos_token_id must be"},
    {TEXT("\"eos_token_id\":300000"), LM_ERR_FORMAT, "config.json: eos_token_id is 300000, outside the vocabulary of 248320 tokens"},
    {TEXT("\"pad_token_id\":1.5"), LM_ERR_FORMAT, "text_config.pad_token_id must be an integer"},
    {TEXT("\"vocab_size\":1000"), LM_ERR_FORMAT, "image_token_id is 248056, outside the vocabulary of 1000 tokens"},
    {"{\"model_type\":\"qwen3_5\",\"image_token_id\":\"x\"}", LM_ERR_FORMAT, "config.json: image_token_id must be an integer"},
    {"{\"model_type\":\"qwen3_5\",\"tie_word_embeddings\":1}", LM_ERR_FORMAT, "config.json: tie_word_embeddings must be true or false"},
    {TEXT("\"mtp_num_hidden_layers\":-1"), LM_ERR_FORMAT, "text_config.mtp_num_hidden_layers is -1"},
    {TEXT("\"mtp_use_dedicated_embeddings\":\"no\""), LM_ERR_FORMAT, "text_config.mtp_use_dedicated_embeddings must be true or false"},
    {"{\"model_type\":\"qwen3_5_moe\",\"text_config\":{\"num_experts\":4,\"num_experts_per_tok\":5}}", LM_ERR_FORMAT, "text_config.num_experts_per_tok (5) is more than num_experts (4)"},
    {"{\"model_type\":\"qwen3_5_moe\",\"text_config\":{\"num_experts\":0}}", LM_ERR_FORMAT, "text_config.num_experts is 0"},
    {"{\"model_type\":\"qwen3_5_moe\",\"text_config\":{\"moe_intermediate_size\":[1]}}", LM_ERR_FORMAT, "text_config.moe_intermediate_size must be an integer"},
    /* valid settings loom does not implement: refused, naming the field and value */
    {TEXT("\"attention_bias\":true"), LM_ERR_UNSUPPORTED, "config.json: text_config.attention_bias is true; biases on q/k/v/o are not supported"},
    {"{\"model_type\":\"qwen3_5_text\",\"attention_bias\":true}", LM_ERR_UNSUPPORTED, "config.json: attention_bias is true"},
    {TEXT("\"hidden_act\":\"gelu\""), LM_ERR_UNSUPPORTED, "config.json: text_config.hidden_act is 'gelu'; only 'silu' is supported"},
    {TEXT("\"hidden_act\":\"\""), LM_ERR_UNSUPPORTED, "text_config.hidden_act is ''"},
    {TEXT("\"attn_output_gate\":false"), LM_ERR_UNSUPPORTED, "config.json: text_config.attn_output_gate is false"},
    {TEXT("\"attn_output_gate\":\"no\""), LM_ERR_FORMAT, "text_config.attn_output_gate must be true or false"},
    {TEXT("\"use_sliding_window\":true"), LM_ERR_UNSUPPORTED, "config.json: text_config.use_sliding_window is true; sliding-window attention is not supported"},
    {TEXT("\"sliding_window\":4096"), LM_ERR_UNSUPPORTED, "config.json: text_config.sliding_window is 4096; sliding-window attention is not supported"},
    {TEXT("\"use_sliding_window\":true,\"sliding_window\":4096"), LM_ERR_UNSUPPORTED, "text_config.use_sliding_window is true"},
    {TEXT("\"rope_parameters\":{\"mrope_interleaved\":false}"), LM_ERR_UNSUPPORTED, "config.json: text_config.rope_parameters.mrope_interleaved is false; only interleaved M-RoPE is supported"},
    {TEXT("\"rope_scaling\":{\"type\":\"mrope\",\"mrope_interleaved\":false}"), LM_ERR_UNSUPPORTED, "text_config.rope_scaling.mrope_interleaved is false"},
    {TEXT("\"rope_parameters\":{\"rope_type\":\"dynamic\",\"factor\":2.0}"), LM_ERR_UNSUPPORTED, "text_config.rope_parameters.rope_type 'dynamic' is not supported (only 'default')"},
    {TEXT("\"rope_scaling\":{\"rope_type\":\"yarn\"}"), LM_ERR_UNSUPPORTED, "text_config.rope_scaling.rope_type 'yarn' is not supported"},
    {TEXT("\"num_hidden_layers\":1,\"layer_types\":[\"chunked_attention\"]"), LM_ERR_UNSUPPORTED, "text_config.layer_types[0] is 'chunked_attention'"},
    {TEXT("\"linear_conv_kernel_dim\":-3"), LM_ERR_FORMAT, "text_config.linear_conv_kernel_dim is -3; it must be between 1 and 64"},
    {"{\"model_type\":\"qwen3_5_text\",\"hidden_size\":true}", LM_ERR_FORMAT, "config.json: hidden_size must be an integer"},
};
#undef TEXT

static void test_validation_errors(void) {
    for (size_t i = 0; i < sizeof bad_configs / sizeof *bad_configs; i++) {
        const bad_config *b = &bad_configs[i];
        lm_qwen35_config c;
        lm_error err = {0};
        lm_status got = parse(b->json, &c, &err);
        CHECK_MSG(got == b->status, "%s: got %s (%s), want %s", b->json, lm_status_name(got),
                  err.message, lm_status_name(b->status));
        CHECK_MSG(strstr(err.message, b->message), "%s:\n    message '%s'\n    lacks   '%s'",
                  b->json, err.message, b->message);
    }
}

static void test_missing_file(void) {
    lm_qwen35_config c;
    lm_error err;
    CHECK(lm_qwen35_config_load("/nonexistent/config.json", &c, &err) == LM_ERR_IO);
    CHECK(strstr(err.message, "/nonexistent/config.json"));
}

int main(void) {
    RUN_TEST(test_fixture_dense);
    RUN_TEST(test_fixture_moe);
    RUN_TEST(test_bench_configs);
    RUN_TEST(test_defaults);
    RUN_TEST(test_legacy_spellings);
    RUN_TEST(test_implemented_settings);
    RUN_TEST(test_validation_errors);
    RUN_TEST(test_missing_file);
    return test_summary("test_qwen35_config");
}
