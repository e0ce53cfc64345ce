/* What every family's config.json parser shares (Hugging Face conventions
 * over io/json_fields.h): tables of integer fields, the eos list, token-id
 * and rotary checks, and reading the file. */
#ifndef LOOM_MODELS_CONFIG_FIELDS_H
#define LOOM_MODELS_CONFIG_FIELDS_H

#include <stddef.h>

#include "base/error.h"
#include "io/json_fields.h"
#include "models/vision_config.h"

/* An int field of a config struct: its key, offset and range. */
typedef struct {
    const char *key;
    size_t offset;
    int min, max;
} lm_config_int_field;

#define LM_CONFIG_INT_FIELD(type, name, lo, hi) {#name, offsetof(type, name), lo, hi}

/* Reads every field of the table into the struct at cfg. */
lm_status lm_config_read_ints(const lm_json_fields *r, const lm_config_int_field *fields, size_t n,
                              void *cfg);

/* eos_token_id: an id or a list of at most max ids into ids[0..*n); an
 * explicit null says "no eos" (*n = 0) and overrides an earlier level. */
lm_status lm_config_read_eos(const lm_json_fields *r, int *ids, int *n, int max);

/* LM_ERR_FORMAT naming key when id (>= 0) is outside the vocabulary. */
lm_status lm_config_check_id(const lm_json_fields *r, const char *key, int id, int vocab);

/* A rope type field ("type" / "rope_type"): only "default" (or the older
 * "mrope") is implemented. */
lm_status lm_config_check_rope_type(const lm_json_fields *r, const char *key);

/* rot_dim = int(head_dim * factor) must be even, in [2, head_dim], and the
 * three M-RoPE sections must sum to rot_dim / 2. */
lm_status lm_config_check_rotary(const lm_json_fields *r, int head_dim, float factor, int rot_dim,
                                 const int sections[3]);

/* The fields both vision towers share, from a reader of vision_config,
 * over the family's defaults in *v: sizes (range-checked), rope_parameters
 * (rope_type default or axial, rope_theta), and the checks every tower
 * needs (in_channels 3, hidden_size a multiple of num_heads, a head
 * dimension divisible by 4 for the 2-D rotary). */
lm_status lm_config_read_vision(const lm_json_fields *vision, lm_vision_config *v);

/* One model_type a family's parser takes: the text sub-config's model_type
 * it expects (NULL: the family reads it itself), whether it is the MoE
 * variant, and whether the text settings sit under text_config (nested) or
 * at the top level. */
typedef struct {
    const char *model_type, *text_model_type;
    bool is_moe, nested;
} lm_config_kind;

/* The kind of top's model_type among kinds[0..n), or LM_ERR_UNSUPPORTED
 * naming the family ("Qwen3.5") and every model_type it takes. */
lm_status lm_config_find_kind(const lm_json_fields *top, const lm_config_kind *kinds, size_t n,
                              const char *family, const lm_config_kind **kind);

/* The text sub-config's model_type, when given, must be kind->text_model_type. */
lm_status lm_config_check_text_model_type(const lm_json_fields *text, const lm_config_kind *kind);

/* tie_word_embeddings, which may sit at the top level of a nested config or
 * in its text settings: true where either says so. */
lm_status lm_config_read_tying(const lm_json_fields *top, const lm_json_fields *text, bool nested,
                               bool *tie);

/* Parses config.json text (or reads the file at path, at most 16 MiB) and
 * hands its top-level object to read(top, cfg). */
typedef lm_status (*lm_config_reader)(const lm_json_fields *top, void *cfg);
lm_status lm_config_parse(const char *json, size_t len, const char *source_name,
                          lm_config_reader read, void *cfg, lm_error *err);
lm_status lm_config_load(const char *path, lm_config_reader read, void *cfg, lm_error *err);

#endif
