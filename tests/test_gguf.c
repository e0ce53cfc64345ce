/* GGUF files (issue 51): the reader, the qwen35 mapping, the tokenizer and
 * template from metadata, and quantized files.
 *
 * - the reader on a file gguf-py wrote (the committed fixtures) and on a
 *   small one built here by the format's spec, then every malformed form of
 *   the latter (each truncation, wrong magic, versions 1 and 4, counts past
 *   what the file holds, strings and arrays past the end, nested arrays,
 *   dims of 0 or 5, a ggml type id ggml does not define, columns that are
 *   not whole blocks, offsets past the end, misaligned or overlapping, a bad
 *   general.alignment, a key or tensor twice): each fails with a
 *   message, none crashes (the ASan build runs them too);
 * - typed metadata lookups: types, ranges, arrays, absent keys;
 * - qwen35-dense-gguf/model-f32.gguf, made by llama.cpp's gguf-py from
 *   qwen35-dense with convert_hf_to_gguf's transformations
 *   (tools/fixtures/make_gguf_fixture.py): its config equals config.json's;
 *   its logits equal loom's on the safetensors checkpoint within the
 *   fixtures' float32 bound, 1e-4 of their std (the converter's
 *   -exp(A_log) is computed in numpy, loom's from the checkpoint with
 *   expf: one of the 12 decay rates differs in its last bit; measured
 *   6e-6 on cpu, 1e-5 on ref), transformers' float64 references within
 *   the same 1e-4, and llama.cpp's own logits on the same file (llama_logits.c with
 *   an f32 KV cache) within 1e-3 (measured 4e-4: llama.cpp's own distance
 *   from transformers' references, loom's being 100x smaller);
 * - qwen35-moe-gguf/model-f16.gguf (the converter's --outtype f16: experts
 *   stacked into ffn_*_exps, the MTP head's fused ones split and stacked):
 *   the same bounds against its checkpoint and transformers, and 1e-2
 *   against llama.cpp (which rounds activations to float16 for float16
 *   weights: measured 5e-3);
 * - tensor by tensor, the F32 file under checkpoint names holds the
 *   checkpoint's values in its order (bf16 widened exactly; 1 + w norms,
 *   -exp(A_log) within a last bit): every transformation undone;
 * - a stand-in backend that runs every block type: deep8's Q4_0 tensors
 *   keep their ggml dtype and the file's bytes in place; dense Q4_0 is
 *   refused naming blk.0.ssm_out.weight (half-block value heads);
 * - weights.c with a block matrix (on ref's memory, told it runs Q4_0):
 *   used as stored (not made int8 again), a rank's slice cut at whole
 *   blocks, half a block refused;
 * - its MTP head loads (block 4 as mtp.*);
 * - the tokenizer built from its metadata encodes, decodes and marks
 *   special tokens as the tokenizer.json it came from does (loom's loader of
 *   that file is checked against Hugging Face tokenizers in test_tokenizer),
 *   and its chat template renders as the fixture's chat_template.jinja;
 * - a .gguf path, a folder of exactly one, a folder of two (refused);
 * - quantized files by llama-quantize: on a backend that runs the ggml
 *   type, deep8's Q8_0/Q4_0/Q4_K_M logits are within 1e-3 of the std of
 *   their float32 twins' (dequantized by gguf-py); on one that does not,
 *   the load is refused naming a tensor and the type.  qwen35-dense's Q4_0
 *   is refused either way: its out projection's value heads (16 columns)
 *   are not whole Q4_0 blocks, so the converter's head order cannot be
 *   undone without dequantizing. */
#include <cjson/cJSON.h>
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "base/bf16.h"
#include "harness.h"
#include "io/gguf.h"
#include "model_util.h"
#include "models/qwen35/qwen35_config.h"
#include "models/qwen35/qwen35_gguf.h"
#include "models/registry.h"
#include "models/weights.h"
#include "text/chat_template.h"
#include "text/tokenizer.h"
#include "text/tokenizer_gguf.h"

/* ------------------------------------------------ a GGUF built by the spec */

typedef struct {
    uint8_t b[4096];
    size_t n;
} bytes;

static void put(bytes *w, const void *p, size_t n) {
    memcpy(w->b + w->n, p, n);
    w->n += n;
}
static void put_u32(bytes *w, uint32_t v) {
    for (int i = 0; i < 4; i++) w->b[w->n++] = (uint8_t)(v >> (8 * i));
}
static void put_u64(bytes *w, uint64_t v) {
    for (int i = 0; i < 8; i++) w->b[w->n++] = (uint8_t)(v >> (8 * i));
}
static void put_str(bytes *w, const char *s) {
    put_u64(w, strlen(s));
    put(w, s, strlen(s));
}

/* Where the fields a malformed case changes sit. */
typedef struct {
    size_t version, n_tensors, n_kv, names_count, ints_count, align_value, w_type, w_offset, q_dims0, q_offset,
        w_name_len, header_end;
} layout;

/* v3, 6 metadata entries, 2 tensors: "w" F32 [2, 4] at 0 and "q" GGML_Q8_0
 * [32] at 32, general.alignment 32. */
static void build(bytes *w, layout *at) {
    w->n = 0;
    put(w, "GGUF", 4);
    at->version = w->n;
    put_u32(w, 3);
    at->n_tensors = w->n;
    put_u64(w, 2);
    at->n_kv = w->n;
    put_u64(w, 6);
    put_str(w, "general.architecture");
    put_u32(w, LM_GGUF_STRING);
    put_str(w, "qwen35");
    put_str(w, "general.alignment");
    put_u32(w, LM_GGUF_UINT32);
    at->align_value = w->n;
    put_u32(w, 32);
    put_str(w, "t.names");
    put_u32(w, LM_GGUF_ARRAY);
    put_u32(w, LM_GGUF_STRING);
    at->names_count = w->n;
    put_u64(w, 2);
    put_str(w, "x");
    put_str(w, "yz");
    put_str(w, "t.ints");
    put_u32(w, LM_GGUF_ARRAY);
    put_u32(w, LM_GGUF_INT32);
    at->ints_count = w->n;
    put_u64(w, 3);
    put_u32(w, 1);
    put_u32(w, (uint32_t)-2);
    put_u32(w, 3);
    put_str(w, "t.eps");
    put_u32(w, LM_GGUF_FLOAT32);
    float eps = 0.5f;
    put(w, &eps, 4);
    put_str(w, "t.flag");
    put_u32(w, LM_GGUF_BOOL);
    w->b[w->n++] = 1;
    /* tensor infos */
    at->w_name_len = w->n;
    put_str(w, "w");
    put_u32(w, 2);
    put_u64(w, 4); /* ne[0]: columns */
    put_u64(w, 2);
    at->w_type = w->n;
    put_u32(w, 0); /* F32 */
    at->w_offset = w->n;
    put_u64(w, 0);
    put_str(w, "q");
    put_u32(w, 1);
    at->q_dims0 = w->n;
    put_u64(w, 32);
    put_u32(w, 8); /* Q8_0 */
    at->q_offset = w->n;
    put_u64(w, 32);
    at->header_end = w->n;
    while (w->n % 32) w->b[w->n++] = 0;
    for (int i = 0; i < 8; i++) {
        float v = (float)i;
        put(w, &v, 4);
    }
    for (int i = 0; i < 34; i++) w->b[w->n++] = (uint8_t)i;
}

static void set_u32(bytes *w, size_t at, uint32_t v) {
    for (int i = 0; i < 4; i++) w->b[at + i] = (uint8_t)(v >> (8 * i));
}
static void set_u64(bytes *w, size_t at, uint64_t v) {
    for (int i = 0; i < 8; i++) w->b[at + i] = (uint8_t)(v >> (8 * i));
}

static void test_reads_a_spec_file(void) {
    bytes w;
    layout at;
    build(&w, &at);
    lm_gguf *g;
    lm_error err;
    CHECK_OK(lm_gguf_parse_memory(w.b, w.n, "spec.gguf", &g, &err), &err);
    if (test_current_failed()) return;
    CHECK(lm_gguf_version(g) == 3 && lm_gguf_alignment(g) == 32 && lm_gguf_kv_count(g) == 6);
    CHECK(lm_gguf_tensor_count(g) == 2);
    const lm_gguf_tensor *t = lm_gguf_find_tensor(g, "w");
    CHECK(t && t->tensor.dtype == LM_DTYPE_F32 && t->tensor.n_dims == 2 && t->tensor.shape[0] == 2 &&
          t->tensor.shape[1] == 4 && t->tensor.n_bytes == 32);
    CHECK(t && ((const float *)t->tensor.data)[5] == 5.0f);
    t = lm_gguf_find_tensor(g, "q");
    CHECK(t && t->tensor.dtype == LM_DTYPE_GGML_Q8_0 && t->tensor.n_bytes == 34 &&
          ((const uint8_t *)t->tensor.data)[33] == 33);
    const char *s = NULL;
    CHECK_OK(lm_gguf_get_string(g, "general.architecture", true, &s, &err), &err);
    CHECK(s && strcmp(s, "qwen35") == 0);
    uint32_t u = 0;
    CHECK_OK(lm_gguf_get_u32(g, "general.alignment", true, &u, &err), &err);
    CHECK(u == 32);
    float f = 0;
    CHECK_OK(lm_gguf_get_f32(g, "t.eps", true, &f, &err), &err);
    CHECK(f == 0.5f);
    bool b = false;
    CHECK_OK(lm_gguf_get_bool(g, "t.flag", true, &b, &err), &err);
    CHECK(b);
    const lm_gguf_kv *a;
    CHECK_OK(lm_gguf_get_array(g, "t.ints", true, &a, &err), &err);
    CHECK(a && a->count == 3 && lm_gguf_array_int(a, 1) == -2 && lm_gguf_array_float(a, 2) == 3.0);
    CHECK_OK(lm_gguf_get_array(g, "t.names", true, &a, &err), &err);
    CHECK(a && a->count == 2 && strcmp(a->strs[1], "yz") == 0 && a->str_lens[1] == 2);
    /* wrong types and ranges, named */
    CHECK(lm_gguf_get_u32(g, "general.architecture", true, &u, &err) == LM_ERR_FORMAT &&
          strstr(err.message, "general.architecture"));
    CHECK(lm_gguf_get_string(g, "missing.key", true, &s, &err) == LM_ERR_FORMAT && strstr(err.message, "missing.key"));
    u = 7;
    CHECK(lm_gguf_get_u32(g, "missing.key", false, &u, &err) == LM_OK && u == 7);
    CHECK(lm_gguf_get_array(g, "t.eps", true, &a, &err) == LM_ERR_FORMAT && strstr(err.message, "t.eps"));
    lm_gguf_close(g);
}

typedef struct {
    const char *what;
    void (*change)(bytes *w, const layout *at);
    const char *says; /* a word the message holds */
} malformed;

static void wrong_magic(bytes *w, const layout *at) { (void)at, w->b[0] = 'X'; }
static void version_1(bytes *w, const layout *at) { set_u32(w, at->version, 1); }
static void version_4(bytes *w, const layout *at) { set_u32(w, at->version, 4); }
static void huge_tensor_count(bytes *w, const layout *at) { set_u64(w, at->n_tensors, UINT64_MAX); }
static void huge_kv_count(bytes *w, const layout *at) { set_u64(w, at->n_kv, (uint64_t)1 << 40); }
static void huge_string_count(bytes *w, const layout *at) { set_u64(w, at->names_count, (uint64_t)1 << 62); }
static void huge_int_count(bytes *w, const layout *at) { set_u64(w, at->ints_count, UINT64_MAX / 2); }
static void huge_name(bytes *w, const layout *at) { set_u64(w, at->w_name_len, UINT64_MAX); }
static void nested_array(bytes *w, const layout *at) { set_u32(w, at->ints_count - 4, LM_GGUF_ARRAY); }
static void bad_value_type(bytes *w, const layout *at) { set_u32(w, at->ints_count - 4, 13); }
static void unknown_ggml_type(bytes *w, const layout *at) { set_u32(w, at->w_type, 99); }
static void removed_ggml_type(bytes *w, const layout *at) { set_u32(w, at->w_type, 4); }
static void zero_dim(bytes *w, const layout *at) { set_u64(w, at->q_dims0, 0); }
static void partial_block(bytes *w, const layout *at) { set_u64(w, at->q_dims0, 33); }
static void five_dims(bytes *w, const layout *at) { set_u32(w, at->q_dims0 - 4, 5); }
static void offset_past_end(bytes *w, const layout *at) { set_u64(w, at->q_offset, 4096); }
static void huge_offset(bytes *w, const layout *at) { set_u64(w, at->q_offset, UINT64_MAX - 31); }
static void misaligned(bytes *w, const layout *at) { set_u64(w, at->q_offset, 40); }
static void overlapping(bytes *w, const layout *at) { set_u64(w, at->w_offset, 32); }
static void alignment_7(bytes *w, const layout *at) { set_u32(w, at->align_value, 7); }
static void alignment_0(bytes *w, const layout *at) { set_u32(w, at->align_value, 0); }
static void duplicate_tensor(bytes *w, const layout *at) { w->b[at->q_dims0 - 4 - 1] = 'w'; }
static void duplicate_key(bytes *w, const layout *at) { memcpy(w->b + at->ints_count - 4 - 4 - 6, "t.flag", 6); }

static void test_malformed_files_fail_cleanly(void) {
    static const malformed cases[] = {
        {"wrong magic", wrong_magic, "GGUF"},
        {"version 1", version_1, "version"},
        {"version 4", version_4, "version"},
        {"huge tensor count", huge_tensor_count, "tensors"},
        {"huge metadata count", huge_kv_count, "metadata"},
        {"huge string array", huge_string_count, "t.names"},
        {"huge int array", huge_int_count, "t.ints"},
        {"huge tensor name", huge_name, "runs past"},
        {"nested array", nested_array, "arrays of arrays"},
        {"bad value type", bad_value_type, "value type"},
        {"unknown ggml type", unknown_ggml_type, "type 99"},
        {"a removed ggml type", removed_ggml_type, "type 4"},
        {"zero dimension", zero_dim, "dimension"},
        {"partial block", partial_block, "blocks"},
        {"five dims", five_dims, "dimensions"},
        {"offset past the end", offset_past_end, "run past"},
        {"huge offset", huge_offset, "run past"},
        {"misaligned offset", misaligned, "alignment"},
        {"overlapping tensors", overlapping, "overlap"},
        {"alignment 7", alignment_7, "alignment"},
        {"alignment 0", alignment_0, "alignment"},
        {"duplicate tensor", duplicate_tensor, "twice"},
        {"duplicate key", duplicate_key, "t.flag' appears twice"},
    };
    for (size_t i = 0; i < sizeof cases / sizeof *cases; i++) {
        bytes w;
        layout at;
        build(&w, &at);
        cases[i].change(&w, &at);
        lm_gguf *g = NULL;
        lm_error err = {0};
        lm_status st = lm_gguf_parse_memory(w.b, w.n, "bad.gguf", &g, &err);
        CHECK_MSG(st != LM_OK && !g, "%s: parsed", cases[i].what);
        CHECK_MSG(strstr(err.message, cases[i].says) != NULL, "%s: message '%s' lacks '%s'", cases[i].what,
                  err.message, cases[i].says);
        lm_gguf_close(g);
    }
    /* every truncation of the header, and of the data */
    bytes w;
    layout at;
    build(&w, &at);
    for (size_t n = 0; n < w.n; n++) {
        lm_gguf *g = NULL;
        lm_error err = {0};
        lm_status st = lm_gguf_parse_memory(w.b, n, "cut.gguf", &g, &err);
        CHECK_MSG(st == LM_ERR_FORMAT && !g && err.message[0], "cut at %zu of %zu: status %d", n, w.n, (int)st);
        lm_gguf_close(g);
        if (test_current_failed()) break;
    }
}

/* ----------------------------------------------------- the qwen35 fixture */

static const char *fixture(char *buf, size_t size, const char *rel) { return test_fixture_path(buf, size, rel); }

static void test_reads_gguf_py_files(void) {
    char path[4096];
    lm_gguf *g;
    lm_error err;
    CHECK_OK(lm_gguf_open(fixture(path, sizeof path, "models/qwen35-dense-gguf/model-f32.gguf"), LM_LOAD_MMAP, &g,
                          &err),
             &err);
    if (test_current_failed()) return;
    const char *arch = NULL;
    CHECK_OK(lm_gguf_get_string(g, "general.architecture", true, &arch, &err), &err);
    CHECK(arch && strcmp(arch, "qwen35") == 0);
    CHECK(lm_gguf_version(g) == 3 && lm_gguf_tensor_count(g) == 71);
    const lm_gguf_tensor *t = lm_gguf_find_tensor(g, "token_embd.weight");
    CHECK(t && t->tensor.dtype == LM_DTYPE_F32 && t->tensor.shape[0] == 2048 && t->tensor.shape[1] == 64);
    t = lm_gguf_find_tensor(g, "blk.0.ssm_conv1d.weight");
    CHECK(t && t->tensor.n_dims == 2 && t->tensor.shape[0] == 128 && t->tensor.shape[1] == 4);
    const lm_gguf_kv *tokens;
    CHECK_OK(lm_gguf_get_array(g, "tokenizer.ggml.tokens", true, &tokens, &err), &err);
    CHECK(tokens && tokens->count == 2048 && strcmp(tokens->strs[1902], "<|im_end|>") == 0);
    lm_gguf_close(g);
    /* a quantized one: Q4_0 blocks, ggml's dtype kept */
    CHECK_OK(lm_gguf_open(fixture(path, sizeof path, "models/qwen35-deep8-gguf/model-q4_0.gguf"), LM_LOAD_READ, &g,
                          &err),
             &err);
    if (test_current_failed()) return;
    t = lm_gguf_find_tensor(g, "blk.0.ffn_down.weight");
    CHECK(t && t->tensor.dtype == LM_DTYPE_GGML_Q4_0 && t->tensor.shape[0] == 64 && t->tensor.shape[1] == 96 &&
          t->tensor.n_bytes == lm_dtype_row_bytes(LM_DTYPE_GGML_Q4_0, 96) * 64);
    lm_gguf_close(g);
}

static void test_config_from_metadata(void) {
    char path[4096];
    lm_qwen35_config want, got;
    lm_error err;
    CHECK_OK(lm_qwen35_config_load(fixture(path, sizeof path, "models/qwen35-dense/config.json"), &want, &err), &err);
    lm_gguf *g;
    CHECK_OK(lm_gguf_open(fixture(path, sizeof path, "models/qwen35-dense-gguf/model-f32.gguf"), LM_LOAD_MMAP, &g,
                          &err),
             &err);
    if (test_current_failed()) return;
    CHECK_OK(lm_qwen35_gguf_config(g, &got, &err), &err);
    lm_gguf_close(g);
    if (test_current_failed()) return;
    CHECK(got.llama_cpp_forms && !want.llama_cpp_forms);
    CHECK(got.vocab_size == want.vocab_size && got.hidden_size == want.hidden_size &&
          got.intermediate_size == want.intermediate_size && got.num_hidden_layers == want.num_hidden_layers);
    CHECK(got.num_attention_heads == want.num_attention_heads && got.num_key_value_heads == want.num_key_value_heads &&
          got.head_dim == want.head_dim && got.rms_norm_eps == want.rms_norm_eps);
    CHECK(got.rot_dim == want.rot_dim && got.rope_theta == want.rope_theta);
    for (int i = 0; i < 3; i++) CHECK(got.mrope_section[i] == want.mrope_section[i]);
    CHECK(got.linear_conv_kernel_dim == want.linear_conv_kernel_dim &&
          got.linear_key_head_dim == want.linear_key_head_dim &&
          got.linear_value_head_dim == want.linear_value_head_dim &&
          got.linear_num_key_heads == want.linear_num_key_heads &&
          got.linear_num_value_heads == want.linear_num_value_heads);
    for (int i = 0; i < want.num_hidden_layers; i++) CHECK(got.layer_types[i] == want.layer_types[i]);
    CHECK(got.n_eos == 1 && got.eos_token_ids[0] == want.eos_token_ids[0] && got.pad_token_id == want.pad_token_id);
    CHECK(got.tie_word_embeddings == want.tie_word_embeddings &&
          got.mtp_num_hidden_layers == want.mtp_num_hidden_layers);
}

/* A GGUF's logits against its checkpoint's, transformers' and llama.cpp's
 * on the first n_prompts reference prompts. */
static void check_logits(const char *gguf_rel, const char *dense_rel, const char *llama_rel, int n_prompts,
                         int n_llama, double llama_bound) {
    char gguf[4096], dense[4096], path[4096];
    fixture(gguf, sizeof gguf, gguf_rel);
    fixture(dense, sizeof dense, dense_rel);
    lm_safetensors *ref = test_open_reference(dense);
    lm_safetensors *llama = NULL;
    lm_error err;
    CHECK_OK(lm_safetensors_open(fixture(path, sizeof path, llama_rel), LM_LOAD_READ, &llama, &err), &err);
    if (!ref || !llama) {
        lm_safetensors_close(ref);
        lm_safetensors_close(llama);
        CHECK(false);
        return;
    }
    test_prompt_logits from_gguf = {0}, from_checkpoint = {0}, on_llama_prompts = {0};
    CHECK(test_run_prompts(gguf, NULL, ref, n_prompts, &from_gguf));
    CHECK(test_run_prompts(dense, NULL, ref, n_prompts, &from_checkpoint));
    CHECK(test_run_prompts(gguf, NULL, llama, n_llama, &on_llama_prompts));
    if (!test_current_failed()) {
        double vs_checkpoint = test_worst_prompt_error(&from_gguf, &from_checkpoint, ref, n_prompts);
        double vs_reference = test_worst_prompt_error(&from_gguf, NULL, ref, n_prompts);
        double vs_llama = test_worst_prompt_error(&on_llama_prompts, NULL, llama, n_llama);
        printf("  %s: vs checkpoint %.2e, vs transformers %.2e, vs llama.cpp %.2e (of the logits' std)\n", gguf_rel,
               vs_checkpoint, vs_reference, vs_llama);
        /* one of the dense fixture's 12 decay rates differs in its last bit
         * (numpy's exp in the converter, expf in loom), which these random
         * models amplify to ~1e-5: the fixtures' float32 bound, 1e-4 */
        CHECK_MSG(vs_checkpoint <= 1e-4, "GGUF vs checkpoint %.3e", vs_checkpoint);
        CHECK_MSG(vs_reference <= test_logit_tolerance(), "GGUF vs transformers %.3e", vs_reference);
        CHECK_MSG(vs_llama <= llama_bound, "GGUF vs llama.cpp %.3e", vs_llama);
    }
    test_prompt_logits_free(&from_gguf);
    test_prompt_logits_free(&from_checkpoint);
    test_prompt_logits_free(&on_llama_prompts);
    lm_safetensors_close(ref);
    lm_safetensors_close(llama);
}

static void test_logits_equal_the_checkpoints(void) {
    check_logits("models/qwen35-dense-gguf/model-f32.gguf", "models/qwen35-dense",
                 "models/qwen35-dense-gguf/llama_logits.safetensors", TEST_PROMPTS, 3, 1e-3);
}

/* qwen35moe in float16 (experts stacked by the converter, the MTP head's
 * fused ones too): llama.cpp rounds the activations to float16 for float16
 * weights, which puts its logits 2e-3 to 5e-3 away; loom's stay float32. */
static void test_moe_logits_equal_the_checkpoints(void) {
    check_logits("models/qwen35-moe-gguf/model-f16.gguf", "models/qwen35-moe",
                 "models/qwen35-moe-gguf/llama_logits.safetensors", 2, 2, 1e-2);
}

static void test_mtp_head_from_the_file(void) {
    static const char *const files[] = {"models/qwen35-dense-gguf/model-f32.gguf",
                                        "models/qwen35-moe-gguf/model-f16.gguf"};
    for (size_t i = 0; i < 2; i++) {
        char gguf[4096];
        test_model m;
        if (!test_model_open(&m, fixture(gguf, sizeof gguf, files[i]), 1)) {
            CHECK(false);
            continue;
        }
        CHECK_MSG(m.qwen && m.qwen->has_mtp, "%s: no MTP head: %s", files[i], m.qwen ? m.qwen->mtp_missing : "?");
        test_model_close(&m);
    }
}

/* ------------------------------------------------ tokenizer and template */

static void test_tokenizer_from_metadata(void) {
    char gguf[4096], dense[4096], path[4096];
    lm_tokenizer *from_gguf = NULL, *from_json = NULL;
    lm_error err;
    CHECK_OK(lm_tokenizer_load(fixture(gguf, sizeof gguf, "models/qwen35-dense-gguf/model-f32.gguf"), &from_gguf, &err),
             &err);
    CHECK_OK(lm_tokenizer_load(fixture(dense, sizeof dense, "models/qwen35-dense"), &from_json, &err), &err);
    if (!from_gguf || !from_json) {
        lm_tokenizer_free(from_gguf);
        lm_tokenizer_free(from_json);
        return;
    }
    CHECK(lm_tokenizer_vocab_size(from_gguf) == lm_tokenizer_vocab_size(from_json));
    CHECK(lm_tokenizer_eos_id(from_gguf) == lm_tokenizer_eos_id(from_json) && lm_tokenizer_eos_id(from_gguf) == 1902);
    CHECK(lm_tokenizer_pad_id(from_gguf) == lm_tokenizer_pad_id(from_json));
    CHECK(lm_tokenizer_add_bos(from_gguf) == lm_tokenizer_add_bos(from_json));
    for (int32_t id = 0; id < lm_tokenizer_vocab_size(from_json); id++) {
        const char *a = lm_tokenizer_id_to_token(from_gguf, id), *b = lm_tokenizer_id_to_token(from_json, id);
        CHECK_MSG((!a && !b) || (a && b && strcmp(a, b) == 0), "token %d differs", id);
        CHECK_MSG(lm_tokenizer_is_special(from_gguf, id) == lm_tokenizer_is_special(from_json, id) &&
                      lm_tokenizer_is_added(from_gguf, id) == lm_tokenizer_is_added(from_json, id),
                  "token %d's kind differs", id);
        if (test_current_failed()) break;
    }
    /* the reference texts of the tokenizer tests, and special tokens */
    size_t len = 0;
    FILE *f = fopen(fixture(path, sizeof path, "tokenizers/qwen3/encode_cases.json"), "rb");
    char *text = NULL;
    if (f) {
        fseek(f, 0, SEEK_END);
        len = (size_t)ftell(f);
        fseek(f, 0, SEEK_SET);
        text = malloc(len + 1);
        if (text && fread(text, 1, len, f) != len) len = 0;
        fclose(f);
    }
    cJSON *cases = text ? cJSON_ParseWithLength(text, len) : NULL;
    free(text);
    CHECK_MSG(cJSON_IsArray(cases), "cannot read encode_cases.json");
    cJSON *extra = cJSON_CreateObject();
    cJSON_AddStringToObject(extra, "text", "<|im_start|>user\nHello, wörld! 12345 ünïcode 日本語<|im_end|>\n<think>");
    cJSON_AddItemToArray(cases, extra);
    int count = 0;
    const cJSON *c;
    cJSON_ArrayForEach(c, cases) {
        const char *s = cJSON_GetObjectItem(c, "text")->valuestring;
        int32_t *a = NULL, *b = NULL;
        size_t na = 0, nb = 0;
        CHECK_OK(lm_tokenizer_encode(from_gguf, s, strlen(s), true, &a, &na, &err), &err);
        CHECK_OK(lm_tokenizer_encode(from_json, s, strlen(s), true, &b, &nb, &err), &err);
        CHECK_MSG(na == nb && (na == 0 || memcmp(a, b, na * sizeof *a) == 0), "ids differ for '%.60s'", s);
        char *da = NULL, *db = NULL;
        size_t la = 0, lb = 0;
        CHECK_OK(lm_tokenizer_decode(from_gguf, a, na, false, &da, &la, &err), &err);
        CHECK_OK(lm_tokenizer_decode(from_json, b, nb, false, &db, &lb, &err), &err);
        CHECK_MSG(la == lb && da && db && memcmp(da, db, la) == 0, "decoded text differs for '%.60s'", s);
        free(a), free(b), free(da), free(db);
        count++;
    }
    CHECK_MSG(count == 44, "ran %d texts", count);
    cJSON_Delete(cases);
    lm_tokenizer_free(from_gguf);
    lm_tokenizer_free(from_json);
}

static void test_chat_template_from_metadata(void) {
    char gguf[4096], dense[4096];
    lm_chat_template *from_gguf = NULL, *from_jinja = NULL;
    char *eos = NULL;
    lm_error err;
    CHECK_OK(lm_chat_template_load_dir(fixture(gguf, sizeof gguf, "models/qwen35-dense-gguf/model-f32.gguf"),
                                       &from_gguf, NULL, &eos, &err),
             &err);
    CHECK_OK(lm_chat_template_load_dir(fixture(dense, sizeof dense, "models/qwen35-dense"), &from_jinja, NULL, NULL,
                                       &err),
             &err);
    CHECK(eos && strcmp(eos, "<|im_end|>") == 0);
    const char *context =
        "{\"messages\": [{\"role\": \"system\", \"content\": \"Be brief.\"}, {\"role\": \"user\", \"content\": "
        "\"Hi\"}, {\"role\": \"assistant\", \"content\": \"Hello!\"}, {\"role\": \"user\", \"content\": \"2+2?\"}], "
        "\"add_generation_prompt\": true, \"enable_thinking\": false}";
    if (from_gguf && from_jinja) {
        char *a = NULL, *b = NULL;
        size_t la = 0, lb = 0;
        CHECK_OK(lm_chat_template_render_json(from_gguf, context, strlen(context), NULL, &a, &la, &err), &err);
        CHECK_OK(lm_chat_template_render_json(from_jinja, context, strlen(context), NULL, &b, &lb, &err), &err);
        CHECK_MSG(a && b && la == lb && la > 0 && memcmp(a, b, la) == 0, "the renderings differ");
        free(a), free(b);
    }
    free(eos);
    lm_chat_template_free(from_gguf);
    lm_chat_template_free(from_jinja);
}

/* ------------------------------------------------------- finding the file */

static void test_locating_the_file(void) {
    char dir[4096], path[8192], target[4096], found[4096];
    bool is_gguf;
    lm_error err;
    CHECK(test_make_temp_folder(dir, sizeof dir, "gguf-locate"));
    fixture(target, sizeof target, "models/qwen35-dense-gguf/model-f32.gguf");
    char absolute[4096];
    CHECK(realpath(target, absolute) != NULL);
    CHECK_OK(lm_gguf_locate(dir, &is_gguf, found, sizeof found, &err), &err);
    CHECK(!is_gguf); /* empty */
    snprintf(path, sizeof path, "%s/one.gguf", dir);
    CHECK(symlink(absolute, path) == 0);
    CHECK_OK(lm_gguf_locate(dir, &is_gguf, found, sizeof found, &err), &err);
    CHECK(is_gguf && strcmp(found, path) == 0);
    CHECK(lm_tokenizer_available(dir));
    CHECK_OK(lm_gguf_locate(path, &is_gguf, found, sizeof found, &err), &err);
    CHECK(is_gguf && strcmp(found, path) == 0);
    snprintf(path, sizeof path, "%s/two.gguf", dir);
    CHECK(symlink(absolute, path) == 0);
    CHECK(lm_gguf_locate(dir, &is_gguf, found, sizeof found, &err) == LM_ERR_INVALID &&
          strstr(err.message, "several GGUF"));
    /* a checkpoint folder wins */
    snprintf(path, sizeof path, "%s/config.json", dir);
    FILE *f = fopen(path, "w");
    if (f) fclose(f);
    CHECK_OK(lm_gguf_locate(dir, &is_gguf, found, sizeof found, &err), &err);
    CHECK(!is_gguf);
    fixture(target, sizeof target, "models/qwen35-dense");
    CHECK_OK(lm_gguf_locate(target, &is_gguf, found, sizeof found, &err), &err);
    CHECK(!is_gguf);
}

/* ---------------------------------------------------------- quantized */

/* The block dtype of a file's matrices that the backend lacks, or
 * LM_DTYPE_COUNT when it runs them all. */
static lm_dtype missing_dtype(const char *path, lm_backend *be) {
    lm_gguf *g;
    lm_error err;
    if (lm_gguf_open(path, LM_LOAD_MMAP, &g, &err) != LM_OK) return LM_DTYPE_F32;
    lm_dtype missing = LM_DTYPE_COUNT;
    for (size_t i = 0; i < lm_gguf_tensor_count(g); i++) {
        lm_dtype d = lm_gguf_tensor_at(g, i)->tensor.dtype;
        if (lm_dtype_is_block(d) && !lm_backend_supports_weights(be, d)) missing = d;
    }
    lm_gguf_close(g);
    return missing;
}

static void test_quantized_files(void) {
    static const char *const types[] = {"q8_0", "q4_0", "q4_k_m"};
    lm_backend *be;
    lm_error err;
    CHECK_OK(lm_backend_create(test_backend_name(), 1, &be, &err), &err);
    if (test_current_failed()) return;
    char dense[4096];
    lm_safetensors *ref = test_open_reference(fixture(dense, sizeof dense, "models/qwen35-dense"));
    CHECK(ref != NULL);
    for (size_t i = 0; ref && i < sizeof types / sizeof *types; i++) {
        char rel[256], path[4096], twin[4096];
        snprintf(rel, sizeof rel, "models/qwen35-deep8-gguf/model-%s.gguf", types[i]);
        fixture(path, sizeof path, rel);
        snprintf(rel, sizeof rel, "models/qwen35-deep8-gguf/model-%s-twin.gguf", types[i]);
        fixture(twin, sizeof twin, rel);
        lm_dtype missing = missing_dtype(path, be);
        if (missing != LM_DTYPE_COUNT) {
            lm_model *model = NULL;
            lm_status st = lm_model_open(path, NULL, be, &model, &err);
            CHECK_MSG(st == LM_ERR_UNSUPPORTED && !model, "%s: loaded without %s", types[i], lm_dtype_name(missing));
            CHECK_MSG(strstr(err.message, "tensor blk.") && strstr(err.message, "backend does not run"),
                      "%s: refusal '%s' names no tensor and type", types[i], err.message);
            if (model) lm_model_free(model);
            printf("  %s: refused (%s)\n", types[i], err.message);
            continue;
        }
        test_prompt_logits quantized = {0}, dequantized = {0};
        CHECK(test_run_prompts(path, NULL, ref, 3, &quantized));
        CHECK(test_run_prompts(twin, NULL, ref, 3, &dequantized));
        if (!test_current_failed()) {
            double e = test_worst_prompt_error(&quantized, &dequantized, ref, 3);
            printf("  %s vs its float32 twin: %.2e of the logits' std\n", types[i], e);
            CHECK_MSG(e <= 1e-3, "%s vs its twin %.3e", types[i], e);
        }
        test_prompt_logits_free(&quantized);
        test_prompt_logits_free(&dequantized);
    }
    /* qwen35-dense's Q4_0: a Q4_0 block is two of its value heads */
    char path[4096];
    fixture(path, sizeof path, "models/qwen35-dense-gguf/model-q4_0.gguf");
    lm_model *model = NULL;
    lm_status st = lm_model_open(path, NULL, be, &model, &err);
    CHECK_MSG(st == LM_ERR_UNSUPPORTED && !model, "dense Q4_0 loaded");
    bool lacks = missing_dtype(path, be) != LM_DTYPE_COUNT;
    CHECK_MSG(lacks ? strstr(err.message, "Q4_0") != NULL
                    : strstr(err.message, "ssm_out") != NULL && strstr(err.message, "value heads") != NULL,
              "dense Q4_0 refusal: %s", err.message);
    if (model) lm_model_free(model);
    lm_safetensors_close(ref);
    lm_backend_destroy(be);
}

static float value_at(const lm_tensor *t, int64_t i) {
    if (t->dtype == LM_DTYPE_BF16) return lm_bf16_to_f32(((const uint16_t *)t->data)[i]);
    if (t->dtype == LM_DTYPE_F16) return lm_f16_to_f32(((const uint16_t *)t->data)[i]);
    return ((const float *)t->data)[i];
}

/* Tensor by tensor, the F32 GGUF's tensors under their checkpoint names
 * hold the checkpoint's values (bf16 widened exactly), in the checkpoint's
 * order, with the converter's two changes of value: 1 + w for the
 * zero-centred norms and -exp(A_log) (within a last bit: numpy's exp). */
static void test_tensors_match_the_checkpoint(void) {
    char path[4096];
    lm_error err;
    lm_checkpoint *hf = NULL, *ck = NULL;
    CHECK_OK(lm_checkpoint_open(fixture(path, sizeof path, "models/qwen35-dense"), LM_LOAD_MMAP, &hf, &err), &err);
    lm_gguf *g = NULL;
    CHECK_OK(lm_gguf_open(fixture(path, sizeof path, "models/qwen35-dense-gguf/model-f32.gguf"), LM_LOAD_MMAP, &g,
                          &err),
             &err);
    lm_backend *be = NULL;
    CHECK_OK(lm_backend_create("ref", 1, &be, &err), &err);
    lm_qwen35_config config;
    if (g && be) CHECK_OK(lm_qwen35_gguf_checkpoint(g, be, &config, &ck, &err), &err); /* takes g */
    else lm_gguf_close(g);
    int compared = 0;
    for (size_t i = 0; hf && ck && i < lm_checkpoint_count(hf); i++) {
        const lm_tensor *want = lm_checkpoint_at(hf, i);
        const char *name = want->name;
        if (strstr(name, "visual.")) continue; /* the converter writes the vision tower elsewhere */
        char mapped[256];
        if (strncmp(name, "model.language_model.", 21) == 0) snprintf(mapped, sizeof mapped, "model.%s", name + 21);
        else snprintf(mapped, sizeof mapped, "%s", name);
        const lm_tensor *got = lm_checkpoint_find(ck, mapped);
        CHECK_MSG(got != NULL, "%s is not in the GGUF's checkpoint", mapped);
        if (!got) continue;
        CHECK_MSG(got->n_elements == want->n_elements && got->n_dims == want->n_dims, "%s: shape", mapped);
        /* the converter's rule, on its names (mtp.pre_fc_norm_embedding is
         * its nextn.enorm, ending in norm.weight) */
        bool norm = (strstr(name, "norm.weight") || strstr(name, "pre_fc_norm_")) &&
                    !strstr(name, "linear_attn.norm.weight");
        bool decay = strstr(name, "A_log") != NULL;
        int64_t bad = -1;
        for (int64_t k = 0; k < want->n_elements && bad < 0; k++) {
            float w = value_at(want, k), v = value_at(got, k);
            float expect = norm ? 1.0f + w : decay ? -expf(w) : w;
            bool same = decay ? fabsf(v - expect) <= 2e-7f * fabsf(expect) : v == expect;
            if (!same) bad = k;
        }
        CHECK_MSG(bad < 0, "%s: element %lld differs", mapped, (long long)bad);
        compared++;
    }
    CHECK_MSG(compared == 71, "compared %d tensors, not the file's 71", compared); /* text model and MTP head */
    lm_checkpoint_close(ck);
    lm_checkpoint_close(hf);
    if (be) lm_backend_destroy(be);
}

/* A backend that says it runs every ggml block type and does nothing else:
 * what the mapping asks a backend (the kernels come with their own
 * tests). */
static bool runs_every_block_type(const lm_backend *be, lm_dtype d) {
    (void)be;
    return lm_dtype_is_block(d) || d == LM_DTYPE_F32 || d == LM_DTYPE_F16 || d == LM_DTYPE_BF16;
}

static void test_block_types_are_kept(void) {
    static const lm_backend_ops ops = {.name = "stand-in", .weight_dtype_supported = runs_every_block_type};
    lm_backend be = {.ops = &ops};
    char path[4096];
    lm_error err;
    /* deep8 Q4_0: value heads as key heads, nothing to undo: the file's
     * bytes in place, in their ggml dtype */
    lm_gguf *g;
    CHECK_OK(lm_gguf_open(fixture(path, sizeof path, "models/qwen35-deep8-gguf/model-q4_0.gguf"), LM_LOAD_READ, &g,
                          &err),
             &err);
    if (test_current_failed()) return;
    const lm_gguf_tensor *qkv = lm_gguf_find_tensor(g, "blk.0.attn_qkv.weight");
    const lm_gguf_tensor *out_proj = lm_gguf_find_tensor(g, "blk.0.ssm_out.weight");
    lm_qwen35_config config;
    lm_checkpoint *ck = NULL;
    CHECK_OK(lm_qwen35_gguf_checkpoint(g, &be, &config, &ck, &err), &err);
    if (ck && qkv && out_proj) {
        const lm_tensor *t = lm_checkpoint_find(ck, "model.layers.0.linear_attn.in_proj_qkv.weight");
        CHECK(t && t->dtype == LM_DTYPE_GGML_Q4_0 && t->data == qkv->tensor.data && t->n_bytes == qkv->tensor.n_bytes);
        t = lm_checkpoint_find(ck, "model.layers.0.linear_attn.out_proj.weight");
        CHECK(t && t->dtype == LM_DTYPE_GGML_Q4_0 && t->data == out_proj->tensor.data);
        /* tied: llama-quantize makes the one table Q8_0 */
        t = lm_checkpoint_find(ck, "model.embed_tokens.weight");
        CHECK(t && t->dtype == LM_DTYPE_GGML_Q8_0 && !lm_checkpoint_find(ck, "lm_head.weight") &&
              config.tie_word_embeddings);
        t = lm_checkpoint_find(ck, "model.layers.0.linear_attn.conv1d.weight");
        CHECK(t && t->dtype == LM_DTYPE_F32 && t->n_dims == 3 && t->shape[1] == 1);
    }
    lm_checkpoint_close(ck);
    /* dense Q4_0: out_proj's 16-column value heads are half a block */
    CHECK_OK(lm_gguf_open(fixture(path, sizeof path, "models/qwen35-dense-gguf/model-q4_0.gguf"), LM_LOAD_READ, &g,
                          &err),
             &err);
    if (test_current_failed()) return;
    ck = NULL;
    CHECK(lm_qwen35_gguf_checkpoint(g, &be, &config, &ck, &err) == LM_ERR_UNSUPPORTED && !ck);
    CHECK_MSG(strstr(err.message, "blk.0.ssm_out.weight") && strstr(err.message, "value heads") &&
                  strstr(err.message, "Q4_0"),
              "refusal: %s", err.message);
}

/* weights.c on a block matrix: the ref backend's memory with a table that
 * says it runs Q4_0 (only bytes move here: import, download). */
static bool runs_q4_0(const lm_backend *be, lm_dtype d) {
    (void)be;
    return d == LM_DTYPE_GGML_Q4_0 || d == LM_DTYPE_F32;
}

static void test_block_matrices_in_weights(void) {
    lm_backend *ref;
    lm_error err;
    CHECK_OK(lm_backend_create("ref", 1, &ref, &err), &err);
    if (test_current_failed()) return;
    lm_backend_ops ops = *ref->ops;
    ops.weight_dtype_supported = runs_q4_0;
    lm_backend be = {.ops = &ops, .impl = ref->impl};
    /* [4 rows, 64 cols] of Q4_0: 2 blocks of 18 bytes a row, byte b of row r = r * 36 + b */
    enum { ROWS = 4, COLS = 64, ROW_BYTES = 36 };
    static uint8_t data[ROWS * ROW_BYTES];
    for (int i = 0; i < ROWS * ROW_BYTES; i++) data[i] = (uint8_t)i;
    lm_tensor t = {.name = "w", .dtype = LM_DTYPE_GGML_Q4_0, .n_dims = 2, .shape = {ROWS, COLS},
                   .n_elements = ROWS * COLS, .n_bytes = sizeof data, .data = data, .file = "blocks"};
    lm_checkpoint *ck;
    CHECK_OK(lm_checkpoint_from_tensors("blocks", &t, 1, NULL, NULL, &ck, &err), &err);
    if (test_current_failed()) {
        lm_backend_destroy(ref);
        return;
    }
    lm_weights w;
    lm_weights_init(&w, ck, &be);
    lm_weights_quant int8 = {.int8_linear = true}; /* already quantized: kept as stored */
    lm_weights_set_quant(&w, &int8);
    lm_matrix m;
    CHECK_OK(lm_weights_linear(&w, "w", ROWS, COLS, &m, &err), &err);
    uint8_t got[sizeof data];
    if (!test_current_failed()) {
        CHECK(m.dtype == LM_DTYPE_GGML_Q4_0 && m.rows == ROWS && m.cols == COLS);
        CHECK_OK(lm_download(&be, got, m.data, sizeof data, &err), &err);
        CHECK(memcmp(got, data, sizeof data) == 0);
    }
    /* rows 1..2, the second block of columns */
    lm_weights_slice sl = {.n_runs = 1, .runs = {{1, 2}}, .col_first = 32, .col_count = 32};
    CHECK_OK(lm_weights_linear_slice(&w, "w", ROWS, COLS, &sl, &m, &err), &err);
    if (!test_current_failed()) {
        CHECK(m.dtype == LM_DTYPE_GGML_Q4_0 && m.rows == 2 && m.cols == 32);
        CHECK_OK(lm_download(&be, got, m.data, 2 * 18, &err), &err);
        for (int r = 0; r < 2; r++)
            for (int b = 0; b < 18; b++)
                CHECK_MSG(got[r * 18 + b] == data[(1 + r) * ROW_BYTES + 18 + b], "row %d byte %d", r, b);
    }
    /* half a block: refused, naming it */
    sl = (lm_weights_slice){.col_first = 16, .col_count = 32};
    CHECK(lm_weights_linear_slice(&w, "w", ROWS, COLS, &sl, &m, &err) == LM_ERR_UNSUPPORTED &&
          strstr(err.message, "whole blocks"));
    /* a vector of a block type is no weight loom reads */
    lm_mem v;
    CHECK(lm_weights_vector(&w, "w", ROWS * COLS, 0, true, &v, &err) != LM_OK);
    lm_weights_free(&w);
    lm_checkpoint_close(ck);
    lm_backend_destroy(ref);
}

int main(void) {
    RUN_TEST(test_reads_a_spec_file);
    RUN_TEST(test_malformed_files_fail_cleanly);
    RUN_TEST(test_reads_gguf_py_files);
    RUN_TEST(test_config_from_metadata);
    RUN_TEST(test_logits_equal_the_checkpoints);
    RUN_TEST(test_moe_logits_equal_the_checkpoints);
    RUN_TEST(test_mtp_head_from_the_file);
    RUN_TEST(test_tokenizer_from_metadata);
    RUN_TEST(test_chat_template_from_metadata);
    RUN_TEST(test_locating_the_file);
    RUN_TEST(test_tensors_match_the_checkpoint);
    RUN_TEST(test_block_types_are_kept);
    RUN_TEST(test_block_matrices_in_weights);
    RUN_TEST(test_quantized_files);
    return test_summary("gguf");
}
