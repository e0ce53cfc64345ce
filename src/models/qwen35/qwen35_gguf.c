#include "models/qwen35/qwen35_gguf.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cjson/cJSON.h>

#include "base/big_alloc.h"
#include "models/qwen35/qwen35.h"

#define NAME_BYTES 160
#define TRY(call)                                     \
    do {                                              \
        lm_status try_status_ = (call);               \
        if (try_status_ != LM_OK) return try_status_; \
    } while (0)

/* ------------------------------------------------------------ metadata */

typedef struct {
    const lm_gguf *g;
    const char *arch; /* "qwen35" or "qwen35moe": the prefix of its keys */
    lm_error *err;
} meta;

static const char *arch_key(const meta *m, const char *name, char *buf, size_t size) {
    snprintf(buf, size, "%s.%s", m->arch, name);
    return buf;
}

/* An architecture key as a JSON integer field (absent and optional: no field). */
static lm_status put_u32(const meta *m, cJSON *o, const char *field, const char *name, bool required) {
    char key[128];
    uint32_t v = 0;
    const char *k = arch_key(m, name, key, sizeof key);
    bool present = lm_gguf_find_kv(m->g, k) != NULL;
    TRY(lm_gguf_get_u32(m->g, k, required, &v, m->err));
    if (present && !cJSON_AddNumberToObject(o, field, v))
        return lm_fail(m->err, LM_ERR_NOMEM, "out of memory");
    return LM_OK;
}

static lm_status put_token_id(const meta *m, cJSON *o, const char *field, const char *key) {
    uint32_t v = 0;
    bool present = lm_gguf_find_kv(m->g, key) != NULL;
    TRY(lm_gguf_get_u32(m->g, key, false, &v, m->err));
    if (present && !cJSON_AddNumberToObject(o, field, v)) return lm_fail(m->err, LM_ERR_NOMEM, "out of memory");
    return LM_OK;
}

/* Settings that would change the model and that loom does not implement
 * are refused rather than ignored. */
static lm_status refuse_unknown_settings(const meta *m) {
    char key[128];
    const char *scaling = "none";
    TRY(lm_gguf_get_string(m->g, arch_key(m, "rope.scaling.type", key, sizeof key), false, &scaling, m->err));
    if (strcmp(scaling, "none") != 0)
        return lm_fail(m->err, LM_ERR_UNSUPPORTED, "%s: %s is '%.40s'; loom runs Qwen3.5's plain rope only",
                       lm_gguf_name(m->g), key, scaling);
    uint32_t gating = 1; /* llama.cpp's LLAMA_EXPERT_GATING_FUNC_TYPE_SOFTMAX */
    TRY(lm_gguf_get_u32(m->g, arch_key(m, "expert_gating_func", key, sizeof key), false, &gating, m->err));
    if (gating != 1)
        return lm_fail(m->err, LM_ERR_UNSUPPORTED, "%s: %s is %u; Qwen3.5's router is a softmax (1)",
                       lm_gguf_name(m->g), key, gating);
    uint32_t key_length = 0, value_length = 0;
    TRY(lm_gguf_get_u32(m->g, arch_key(m, "attention.key_length", key, sizeof key), true, &key_length, m->err));
    TRY(lm_gguf_get_u32(m->g, arch_key(m, "attention.value_length", key, sizeof key), false, &value_length,
                        m->err));
    if (value_length && value_length != key_length)
        return lm_fail(m->err, LM_ERR_UNSUPPORTED, "%s: attention key_length %u and value_length %u differ",
                       lm_gguf_name(m->g), key_length, value_length);
    return LM_OK;
}

/* layer_types from the recurrent-layers array, when the file has one. */
static lm_status put_layer_types(const meta *m, cJSON *o, uint32_t n_layer) {
    char key[128];
    const lm_gguf_kv *recurrent;
    TRY(lm_gguf_get_array(m->g, arch_key(m, "attention.recurrent_layers", key, sizeof key), false, &recurrent,
                          m->err));
    if (!recurrent) return put_u32(m, o, "full_attention_interval", "full_attention_interval", false);
    if (recurrent->count < n_layer || recurrent->elem_type == LM_GGUF_STRING)
        return lm_fail(m->err, LM_ERR_FORMAT, "%s: %s has %llu entries for %u layers", lm_gguf_name(m->g), key,
                       (unsigned long long)recurrent->count, n_layer);
    cJSON *types = cJSON_AddArrayToObject(o, "layer_types");
    for (uint32_t i = 0; types && i < n_layer; i++) {
        cJSON *s = cJSON_CreateString(lm_gguf_array_int(recurrent, i) ? "linear_attention" : "full_attention");
        if (!s || !cJSON_AddItemToArray(types, s)) return lm_fail(m->err, LM_ERR_NOMEM, "out of memory");
    }
    return types ? LM_OK : lm_fail(m->err, LM_ERR_NOMEM, "out of memory");
}

static lm_status put_rope(const meta *m, cJSON *o, uint32_t head_dim) {
    char key[128];
    float theta = 10000.0f;
    uint32_t rot = 0;
    TRY(lm_gguf_get_f32(m->g, arch_key(m, "rope.freq_base", key, sizeof key), false, &theta, m->err));
    TRY(lm_gguf_get_u32(m->g, arch_key(m, "rope.dimension_count", key, sizeof key), true, &rot, m->err));
    if (head_dim == 0 || rot > head_dim)
        return lm_fail(m->err, LM_ERR_FORMAT, "%s: %s %u is not within the head size %u", lm_gguf_name(m->g), key,
                       rot, head_dim);
    const lm_gguf_kv *sections;
    TRY(lm_gguf_get_array(m->g, arch_key(m, "rope.dimension_sections", key, sizeof key), true, &sections, m->err));
    if (sections->count < 3 || !lm_gguf_is_int_type(sections->elem_type))
        return lm_fail(m->err, LM_ERR_FORMAT, "%s: %s is not a list of at least 3 integers", lm_gguf_name(m->g),
                       key);
    if (sections->count > 3 && lm_gguf_array_int(sections, 3) != 0)
        return lm_fail(m->err, LM_ERR_UNSUPPORTED, "%s: %s has a fourth section (%lld); Qwen3.5 has three",
                       lm_gguf_name(m->g), key, (long long)lm_gguf_array_int(sections, 3));
    cJSON *p = cJSON_AddObjectToObject(o, "rope_parameters");
    cJSON *mrope = p ? cJSON_AddArrayToObject(p, "mrope_section") : NULL;
    if (!mrope) return lm_fail(m->err, LM_ERR_NOMEM, "out of memory");
    for (int i = 0; i < 3; i++) {
        cJSON *n = cJSON_CreateNumber((double)lm_gguf_array_int(sections, (uint64_t)i));
        if (!n || !cJSON_AddItemToArray(mrope, n)) return lm_fail(m->err, LM_ERR_NOMEM, "out of memory");
    }
    /* the factor the config turns back into int(head_dim * factor) == rot */
    double factor = (double)rot / head_dim;
    if (!cJSON_AddStringToObject(p, "rope_type", "default") || !cJSON_AddBoolToObject(p, "mrope_interleaved", 1) ||
        !cJSON_AddNumberToObject(p, "rope_theta", theta) || !cJSON_AddNumberToObject(p, "partial_rotary_factor", factor))
        return lm_fail(m->err, LM_ERR_NOMEM, "out of memory");
    return LM_OK;
}

/* The text config (what config.json's text_config would say), as JSON. */
static lm_status build_config_json(const meta *m, cJSON *o, uint32_t *n_layer_out) {
    char key[128];
    bool moe = strcmp(m->arch, "qwen35moe") == 0;
    uint32_t blocks = 0, nextn = 0, head_dim = 0, inner = 0, v_heads = 0;
    TRY(lm_gguf_get_u32(m->g, arch_key(m, "block_count", key, sizeof key), true, &blocks, m->err));
    TRY(lm_gguf_get_u32(m->g, arch_key(m, "nextn_predict_layers", key, sizeof key), false, &nextn, m->err));
    if (nextn >= blocks)
        return lm_fail(m->err, LM_ERR_FORMAT, "%s: nextn_predict_layers %u leaves no layers of block_count %u",
                       lm_gguf_name(m->g), nextn, blocks);
    TRY(refuse_unknown_settings(m));
    TRY(lm_gguf_get_u32(m->g, arch_key(m, "attention.key_length", key, sizeof key), true, &head_dim, m->err));
    TRY(lm_gguf_get_u32(m->g, arch_key(m, "ssm.inner_size", key, sizeof key), true, &inner, m->err));
    TRY(lm_gguf_get_u32(m->g, arch_key(m, "ssm.time_step_rank", key, sizeof key), true, &v_heads, m->err));
    if (v_heads == 0 || inner % v_heads)
        return lm_fail(m->err, LM_ERR_FORMAT, "%s: ssm.inner_size %u is not a multiple of ssm.time_step_rank %u",
                       lm_gguf_name(m->g), inner, v_heads);
    const lm_gguf_tensor *embed = lm_gguf_find_tensor(m->g, "token_embd.weight");
    if (!embed || embed->tensor.n_dims != 2)
        return lm_fail(m->err, LM_ERR_FORMAT, "%s: token_embd.weight is missing or not a matrix", lm_gguf_name(m->g));
    float eps = 1e-6f;
    TRY(lm_gguf_get_f32(m->g, arch_key(m, "attention.layer_norm_rms_epsilon", key, sizeof key), true, &eps, m->err));
    uint32_t n_layer = blocks - nextn;
    *n_layer_out = n_layer;
    if (!cJSON_AddStringToObject(o, "model_type", moe ? "qwen3_5_moe_text" : "qwen3_5_text") ||
        !cJSON_AddNumberToObject(o, "vocab_size", (double)embed->tensor.shape[0]) ||
        !cJSON_AddNumberToObject(o, "num_hidden_layers", n_layer) ||
        !cJSON_AddNumberToObject(o, "mtp_num_hidden_layers", nextn) ||
        !cJSON_AddNumberToObject(o, "head_dim", head_dim) || !cJSON_AddNumberToObject(o, "rms_norm_eps", eps) ||
        !cJSON_AddNumberToObject(o, "linear_num_value_heads", v_heads) ||
        !cJSON_AddNumberToObject(o, "linear_value_head_dim", inner / v_heads) ||
        !cJSON_AddBoolToObject(o, "tie_word_embeddings", !lm_gguf_find_tensor(m->g, "output.weight")))
        return lm_fail(m->err, LM_ERR_NOMEM, "out of memory");
    static const struct {
        const char *field, *key;
        bool required;
    } fields[] = {
        {"hidden_size", "embedding_length", true},
        {"intermediate_size", "feed_forward_length", false},
        {"num_attention_heads", "attention.head_count", true},
        {"num_key_value_heads", "attention.head_count_kv", true},
        {"max_position_embeddings", "context_length", false},
        {"linear_conv_kernel_dim", "ssm.conv_kernel", true},
        {"linear_key_head_dim", "ssm.state_size", true},
        {"linear_num_key_heads", "ssm.group_count", true},
        {"num_experts", "expert_count", false},
        {"num_experts_per_tok", "expert_used_count", false},
        {"moe_intermediate_size", "expert_feed_forward_length", false},
        {"shared_expert_intermediate_size", "expert_shared_feed_forward_length", false},
    };
    for (size_t i = 0; i < sizeof fields / sizeof *fields; i++)
        TRY(put_u32(m, o, fields[i].field, fields[i].key, fields[i].required));
    TRY(put_layer_types(m, o, n_layer));
    TRY(put_rope(m, o, head_dim));
    TRY(put_token_id(m, o, "eos_token_id", "tokenizer.ggml.eos_token_id"));
    TRY(put_token_id(m, o, "pad_token_id", "tokenizer.ggml.padding_token_id"));
    TRY(put_token_id(m, o, "bos_token_id", "tokenizer.ggml.bos_token_id"));
    return LM_OK;
}

static lm_status read_arch(const lm_gguf *g, const char **arch, lm_error *err) {
    TRY(lm_gguf_get_string(g, "general.architecture", true, arch, err));
    if (strcmp(*arch, "qwen35") != 0 && strcmp(*arch, "qwen35moe") != 0)
        return lm_fail(err, LM_ERR_UNSUPPORTED, "%s: general.architecture '%.40s' is not qwen35 or qwen35moe",
                       lm_gguf_name(g), *arch);
    return LM_OK;
}

lm_status lm_qwen35_gguf_config(const lm_gguf *g, lm_qwen35_config *config, lm_error *err) {
    const char *arch;
    TRY(read_arch(g, &arch, err));
    meta m = {g, arch, err};
    cJSON *o = cJSON_CreateObject();
    if (!o) return lm_fail(err, LM_ERR_NOMEM, "out of memory");
    uint32_t n_layer = 0;
    lm_status st = build_config_json(&m, o, &n_layer);
    char *text = st == LM_OK ? cJSON_PrintUnformatted(o) : NULL;
    cJSON_Delete(o);
    if (st != LM_OK) return st;
    if (!text) return lm_fail(err, LM_ERR_NOMEM, "out of memory");
    char source[300];
    snprintf(source, sizeof source, "%.250s (GGUF metadata)", lm_gguf_name(g));
    st = lm_qwen35_config_parse(text, strlen(text), source, config, err);
    free(text);
    if (st != LM_OK) return st;
    config->llama_cpp_forms = true;
    char key[128];
    uint32_t rot = 0;
    lm_gguf_get_u32(g, arch_key(&m, "rope.dimension_count", key, sizeof key), true, &rot, err);
    if ((uint32_t)config->rot_dim != rot)
        return lm_fail(err, LM_ERR_INTERNAL, "%s: rope.dimension_count %u became %d rotary dims", lm_gguf_name(g),
                       rot, config->rot_dim);
    return LM_OK;
}

/* ------------------------------------------------------------- tensors */

/* How a tensor goes back to the checkpoint's layout. */
typedef enum {
    AS_STORED,
    V_ROWS_AFTER_QK, /* attn_qkv, ssm_conv1d: the V part's rows, heads of dv rows */
    V_ROWS,          /* attn_gate: heads of dv rows */
    V_HEAD_ROWS,     /* ssm_alpha/beta, ssm_a, ssm_dt.bias: one row (element) a head */
    V_COLUMNS,       /* ssm_out: heads of dv columns */
    PER_EXPERT,      /* ffn_*_exps: one matrix per expert */
} transform;

typedef struct {
    const char *gguf, *hf;
    transform how;
} name_rule;

static const name_rule LAYER_RULES[] = {
    {"attn_norm.weight", "input_layernorm.weight", AS_STORED},
    {"post_attention_norm.weight", "post_attention_layernorm.weight", AS_STORED},
    {"attn_q.weight", "self_attn.q_proj.weight", AS_STORED},
    {"attn_k.weight", "self_attn.k_proj.weight", AS_STORED},
    {"attn_v.weight", "self_attn.v_proj.weight", AS_STORED},
    {"attn_output.weight", "self_attn.o_proj.weight", AS_STORED},
    {"attn_q_norm.weight", "self_attn.q_norm.weight", AS_STORED},
    {"attn_k_norm.weight", "self_attn.k_norm.weight", AS_STORED},
    {"ffn_gate.weight", "mlp.gate_proj.weight", AS_STORED},
    {"ffn_up.weight", "mlp.up_proj.weight", AS_STORED},
    {"ffn_down.weight", "mlp.down_proj.weight", AS_STORED},
    {"ffn_gate_inp.weight", "mlp.gate.weight", AS_STORED},
    {"ffn_gate_inp_shexp.weight", "mlp.shared_expert_gate.weight", AS_STORED},
    {"ffn_gate_shexp.weight", "mlp.shared_expert.gate_proj.weight", AS_STORED},
    {"ffn_up_shexp.weight", "mlp.shared_expert.up_proj.weight", AS_STORED},
    {"ffn_down_shexp.weight", "mlp.shared_expert.down_proj.weight", AS_STORED},
    {"ffn_gate_exps.weight", "mlp.experts.%d.gate_proj.weight", PER_EXPERT},
    {"ffn_up_exps.weight", "mlp.experts.%d.up_proj.weight", PER_EXPERT},
    {"ffn_down_exps.weight", "mlp.experts.%d.down_proj.weight", PER_EXPERT},
    {"attn_qkv.weight", "linear_attn.in_proj_qkv.weight", V_ROWS_AFTER_QK},
    {"attn_gate.weight", "linear_attn.in_proj_z.weight", V_ROWS},
    {"ssm_beta.weight", "linear_attn.in_proj_b.weight", V_HEAD_ROWS},
    {"ssm_alpha.weight", "linear_attn.in_proj_a.weight", V_HEAD_ROWS},
    {"ssm_out.weight", "linear_attn.out_proj.weight", V_COLUMNS},
    {"ssm_conv1d.weight", "linear_attn.conv1d.weight", V_ROWS_AFTER_QK},
    /* ssm_a is -exp(A_log): config.llama_cpp_forms tells the loader */
    {"ssm_a", "linear_attn.A_log", V_HEAD_ROWS},
    {"ssm_dt.bias", "linear_attn.dt_bias", V_HEAD_ROWS},
    {"ssm_norm.weight", "linear_attn.norm.weight", AS_STORED},
};

/* The MTP block's own tensors (the rest are a decoder layer's). */
static const name_rule MTP_RULES[] = {
    {"nextn.eh_proj.weight", "mtp.fc.weight", AS_STORED},
    {"nextn.enorm.weight", "mtp.pre_fc_norm_embedding.weight", AS_STORED},
    {"nextn.hnorm.weight", "mtp.pre_fc_norm_hidden.weight", AS_STORED},
    {"nextn.shared_head_norm.weight", "mtp.norm.weight", AS_STORED},
};

/* What holds the renamed tensors: the file, the rearranged copies, the names. */
typedef struct {
    lm_gguf *g;
    lm_tensor *tensors;
    size_t count, cap;
    char (*names)[NAME_BYTES];
    void **copies;
    size_t n_copies, cap_copies;
} gguf_tensors;

static void gguf_tensors_free(void *p) {
    gguf_tensors *t = p;
    if (!t) return;
    for (size_t i = 0; i < t->n_copies; i++) free(t->copies[i]);
    free(t->copies);
    free(t->names);
    free(t->tensors);
    lm_gguf_close(t->g);
    free(t);
}

typedef struct {
    const lm_qwen35_config *c;
    lm_backend *backend;
    gguf_tensors *out;
    lm_error *err;
} mapping;

static lm_status add_tensor(mapping *mp, const lm_tensor *t, const char *name) {
    gguf_tensors *o = mp->out;
    if (o->count == o->cap) {
        size_t cap = o->cap ? 2 * o->cap : 64;
        lm_tensor *tensors = realloc(o->tensors, cap * sizeof *tensors);
        if (tensors) o->tensors = tensors;
        char(*names)[NAME_BYTES] = tensors ? realloc(o->names, cap * sizeof *names) : NULL;
        if (!names) return lm_fail(mp->err, LM_ERR_NOMEM, "out of memory mapping GGUF tensors");
        o->names = names;
        /* the names moved: point the table at them again */
        for (size_t i = 0; i < o->count; i++) o->tensors[i].name = o->names[i];
        o->cap = cap;
    }
    snprintf(o->names[o->count], NAME_BYTES, "%s", name);
    o->tensors[o->count] = *t;
    o->tensors[o->count].name = o->names[o->count];
    o->count++;
    return LM_OK;
}

static lm_status new_copy(mapping *mp, size_t bytes, uint8_t **out) {
    gguf_tensors *o = mp->out;
    if (o->n_copies == o->cap_copies) {
        size_t cap = o->cap_copies ? 2 * o->cap_copies : 16;
        void **copies = realloc(o->copies, cap * sizeof *copies);
        if (!copies) return lm_fail(mp->err, LM_ERR_NOMEM, "out of memory");
        o->copies = copies;
        o->cap_copies = cap;
    }
    *out = lm_big_alloc(bytes ? bytes : 1);
    if (!*out) return lm_fail(mp->err, LM_ERR_NOMEM, "out of memory copying a GGUF tensor");
    o->copies[o->n_copies++] = *out;
    return LM_OK;
}

/* Value head h of the checkpoint (key head h / r, its j = h % r) sits at
 * position j * n_k + h / r in the converter's tiled order. */
static int64_t tiled_position(int64_t h, int64_t n_k, int64_t r) { return (h % r) * n_k + h / r; }

/* Rows [skip, ...) in heads of head_rows rows, back to grouped order. */
static lm_status regroup_rows(mapping *mp, lm_tensor *t, int64_t skip, int64_t head_rows, const char *gname) {
    const lm_qwen35_config *c = mp->c;
    int64_t n_k = c->linear_num_key_heads, r = c->linear_num_value_heads / c->linear_num_key_heads;
    int64_t rows = t->shape[0], n_v = c->linear_num_value_heads;
    if (rows != skip + n_v * head_rows)
        return lm_fail(mp->err, LM_ERR_FORMAT, "%s: tensor %s has %lld rows, not %lld + %lld value heads of %lld",
                       t->file, gname, (long long)rows, (long long)skip, (long long)n_v, (long long)head_rows);
    size_t row_bytes = t->n_bytes / (size_t)rows, head_bytes = row_bytes * (size_t)head_rows;
    uint8_t *copy;
    TRY(new_copy(mp, t->n_bytes, &copy));
    const uint8_t *src = t->data;
    memcpy(copy, src, row_bytes * (size_t)skip);
    for (int64_t h = 0; h < n_v; h++)
        memcpy(copy + row_bytes * (size_t)skip + head_bytes * (size_t)h,
               src + row_bytes * (size_t)skip + head_bytes * (size_t)tiled_position(h, n_k, r), head_bytes);
    t->data = copy;
    return LM_OK;
}

/* Every row's columns in heads of dv, back to grouped order: whole
 * elements of a float type, whole blocks of a block type (a head's
 * columns must then be whole blocks). */
static lm_status regroup_columns(mapping *mp, lm_tensor *t, const char *gname) {
    const lm_qwen35_config *c = mp->c;
    int64_t n_k = c->linear_num_key_heads, n_v = c->linear_num_value_heads, r = n_v / n_k;
    int64_t dv = c->linear_value_head_dim, cols = t->shape[t->n_dims - 1];
    if (t->n_dims != 2 || cols != n_v * dv)
        return lm_fail(mp->err, LM_ERR_FORMAT, "%s: tensor %s has %lld columns, not %lld value heads of %lld", t->file,
                       gname, (long long)cols, (long long)n_v, (long long)dv);
    int64_t block = lm_dtype_block_elems(t->dtype);
    if (dv % block)
        return lm_fail(mp->err, LM_ERR_UNSUPPORTED,
                       "%s: tensor %s is %s, blocks of %lld columns, and its value heads (%lld columns) are not whole "
                       "blocks: the converter's head order cannot be undone without dequantizing it, which loom does "
                       "not do yet",
                       t->file, gname, lm_dtype_name(t->dtype), (long long)block, (long long)dv);
    size_t row_bytes = t->n_bytes / (size_t)t->shape[0], head_bytes = row_bytes / (size_t)n_v;
    uint8_t *copy;
    TRY(new_copy(mp, t->n_bytes, &copy));
    const uint8_t *src = t->data;
    for (int64_t row = 0; row < t->shape[0]; row++)
        for (int64_t h = 0; h < n_v; h++)
            memcpy(copy + row_bytes * (size_t)row + head_bytes * (size_t)h,
                   src + row_bytes * (size_t)row + head_bytes * (size_t)tiled_position(h, n_k, r), head_bytes);
    t->data = copy;
    return LM_OK;
}

static lm_status check_dtype(mapping *mp, const lm_gguf_tensor *gt) {
    char buf[32];
    if (gt->tensor.dtype == LM_DTYPE_COUNT)
        return lm_fail(mp->err, LM_ERR_UNSUPPORTED, "%s: tensor %s is ggml %s, a type loom does not read",
                       gt->tensor.file, gt->tensor.name, lm_gguf_ggml_type_name(gt->ggml_type, buf, sizeof buf));
    if (lm_dtype_is_block(gt->tensor.dtype) && !lm_backend_supports_weights(mp->backend, gt->tensor.dtype))
        return lm_fail(mp->err, LM_ERR_UNSUPPORTED, "%s: tensor %s is ggml %s, which the %s backend does not run",
                       gt->tensor.file, gt->tensor.name, lm_gguf_ggml_type_name(gt->ggml_type, buf, sizeof buf),
                       mp->backend->ops->name);
    if (!lm_dtype_is_block(gt->tensor.dtype) && gt->tensor.dtype != LM_DTYPE_F32 &&
        gt->tensor.dtype != LM_DTYPE_F16 && gt->tensor.dtype != LM_DTYPE_BF16)
        return lm_fail(mp->err, LM_ERR_UNSUPPORTED, "%s: tensor %s is ggml %s, not a weight type", gt->tensor.file,
                       gt->tensor.name, lm_gguf_ggml_type_name(gt->ggml_type, buf, sizeof buf));
    return LM_OK;
}

static lm_status add_per_expert(mapping *mp, const lm_gguf_tensor *gt, const char *pattern) {
    const lm_tensor *t = &gt->tensor;
    if (t->n_dims != 3)
        return lm_fail(mp->err, LM_ERR_FORMAT, "%s: tensor %s is not [experts, rows, cols]", t->file, t->name);
    size_t bytes = t->n_bytes / (size_t)t->shape[0];
    for (int64_t e = 0; e < t->shape[0]; e++) {
        lm_tensor one = *t;
        one.n_dims = 2;
        one.shape[0] = t->shape[1];
        one.shape[1] = t->shape[2];
        one.n_elements = t->shape[1] * t->shape[2];
        one.n_bytes = bytes;
        one.data = (const uint8_t *)t->data + bytes * (size_t)e;
        char name[NAME_BYTES];
        snprintf(name, sizeof name, pattern, (int)e);
        TRY(add_tensor(mp, &one, name));
    }
    return LM_OK;
}

static lm_status add_layer_tensor(mapping *mp, const lm_gguf_tensor *gt, const char *prefix, const name_rule *rule) {
    const lm_qwen35_config *c = mp->c;
    lm_tensor t = gt->tensor;
    TRY(check_dtype(mp, gt));
    char name[NAME_BYTES];
    if (rule->how == PER_EXPERT) {
        snprintf(name, sizeof name, "%s%s", prefix, rule->hf);
        return add_per_expert(mp, gt, name);
    }
    snprintf(name, sizeof name, "%s%s", prefix, rule->hf);
    int64_t qk = 2 * (int64_t)c->linear_num_key_heads * c->linear_key_head_dim, dv = c->linear_value_head_dim;
    bool regroup = c->linear_num_value_heads != c->linear_num_key_heads;
    if (regroup && rule->how == V_ROWS_AFTER_QK) TRY(regroup_rows(mp, &t, qk, dv, gt->tensor.name));
    if (regroup && rule->how == V_ROWS) TRY(regroup_rows(mp, &t, 0, dv, gt->tensor.name));
    if (regroup && rule->how == V_HEAD_ROWS) TRY(regroup_rows(mp, &t, 0, 1, gt->tensor.name));
    if (regroup && rule->how == V_COLUMNS) TRY(regroup_columns(mp, &t, gt->tensor.name));
    if (strcmp(rule->gguf, "ssm_conv1d.weight") == 0 && t.n_dims == 2) {
        /* [C, K] as Hugging Face's [C, 1, K] */
        t.n_dims = 3;
        t.shape[2] = t.shape[1];
        t.shape[1] = 1;
    }
    return add_tensor(mp, &t, name);
}

static const name_rule *find_rule(const name_rule *rules, size_t n, const char *suffix) {
    for (size_t i = 0; i < n; i++)
        if (strcmp(rules[i].gguf, suffix) == 0) return &rules[i];
    return NULL;
}

/* One GGUF tensor under its checkpoint name; names this mapping does not
 * know keep their own (loom inspect lists them among the unused). */
static lm_status map_tensor(mapping *mp, const lm_gguf_tensor *gt) {
    const char *name = gt->tensor.name;
    static const name_rule TOP[] = {
        {"token_embd.weight", "model.embed_tokens.weight", AS_STORED},
        {"output.weight", "lm_head.weight", AS_STORED},
        {"output_norm.weight", "model.norm.weight", AS_STORED},
    };
    const name_rule *top = find_rule(TOP, sizeof TOP / sizeof *TOP, name);
    if (top) {
        TRY(check_dtype(mp, gt));
        return add_tensor(mp, &gt->tensor, top->hf);
    }
    int bid = -1;
    const char *suffix = NULL;
    if (strncmp(name, "blk.", 4) == 0) { /* "blk.<block>.<rest>", the block at most 6 digits */
        int digits = 0;
        bid = 0;
        while (digits < 7 && name[4 + digits] >= '0' && name[4 + digits] <= '9')
            bid = bid * 10 + (name[4 + digits] - '0'), digits++;
        if (digits == 0 || digits > 6 || name[4 + digits] != '.') bid = -1;
        else suffix = name + 4 + digits + 1;
    }
    if (bid >= 0) {
        int n_layer = mp->c->num_hidden_layers;
        char prefix[64];
        if (bid < n_layer) {
            const name_rule *rule = find_rule(LAYER_RULES, sizeof LAYER_RULES / sizeof *LAYER_RULES, suffix);
            snprintf(prefix, sizeof prefix, "model.layers.%d.", bid);
            if (rule) return add_layer_tensor(mp, gt, prefix, rule);
        } else if (bid - n_layer < mp->c->mtp_num_hidden_layers) {
            const name_rule *rule = find_rule(MTP_RULES, sizeof MTP_RULES / sizeof *MTP_RULES, suffix);
            if (rule) {
                TRY(check_dtype(mp, gt));
                return add_tensor(mp, &gt->tensor, rule->hf);
            }
            rule = find_rule(LAYER_RULES, sizeof LAYER_RULES / sizeof *LAYER_RULES, suffix);
            snprintf(prefix, sizeof prefix, "mtp.layers.%d.", bid - n_layer);
            if (rule) return add_layer_tensor(mp, gt, prefix, rule);
        }
    }
    if (gt->tensor.dtype == LM_DTYPE_COUNT) return LM_OK; /* not a type loom can even list */
    return add_tensor(mp, &gt->tensor, name);
}

lm_status lm_qwen35_gguf_checkpoint(lm_gguf *g, lm_backend *backend, lm_qwen35_config *config,
                                    lm_checkpoint **out, lm_error *err) {
    *out = NULL;
    gguf_tensors *held = calloc(1, sizeof *held);
    if (!held) {
        lm_gguf_close(g);
        return lm_fail(err, LM_ERR_NOMEM, "out of memory");
    }
    held->g = g;
    lm_status st = lm_qwen35_gguf_config(g, config, err);
    mapping mp = {config, backend, held, err};
    for (size_t i = 0; st == LM_OK && i < lm_gguf_tensor_count(g); i++) st = map_tensor(&mp, lm_gguf_tensor_at(g, i));
    if (st != LM_OK) {
        gguf_tensors_free(held);
        return st;
    }
    /* the table is copied; the names and data stay with `held` */
    return lm_checkpoint_from_tensors(lm_gguf_name(g), held->tensors, held->count, gguf_tensors_free, held, out, err);
}

lm_status lm_qwen35_open_gguf(lm_gguf *g, const lm_model_load_options *options, lm_backend *backend,
                              lm_model **out, lm_error *err) {
    lm_qwen35_config config;
    lm_checkpoint *checkpoint;
    TRY(lm_qwen35_gguf_checkpoint(g, backend, &config, &checkpoint, err));
    lm_model_load_options o = *options;
    if (o.mtp_norms == LM_MTP_NORMS_AUTO) o.mtp_norms = LM_MTP_NORMS_SHIFTED; /* the converter added the 1 */
    lm_qwen35_model *m;
    TRY(lm_qwen35_load(checkpoint, &config, &o, backend, &m, err));
    *out = &m->base;
    return LM_OK;
}
