/* The JSON Schema compiler's inside (grammar/json_grammar.h is its outside):
 * the builder every keyword's file writes rules into, and the functions
 * those files call one another by.  A file a job:
 *   json_grammar.c          the driver: a schema's types, $ref rules, the entry points;
 *   json_basics.c           whitespace, strings, numbers, any value: the shared rules;
 *   json_exact_text.c       values as their exact JSON text (the schema's own numbers);
 *   json_keywords.c         which keywords assert what, counts, implied types;
 *   json_schema_refs.c      $ref resolution: base URIs, $id and $anchor;
 *   json_schema_normalize.c allOf, if and $ref beside siblings merged;
 *   json_schema_branches.c  anyOf / oneOf (branches apart, or narrowed apart);
 *   json_schema_not.c       not: a bounded complement;
 *   json_values_schema.c    enum / const, alone or filtered by their siblings;
 *   json_string_schema.c    strings: lengths, pattern, format;
 *   json_number_schema.c    numbers: bounds, multipleOf;
 *   json_object_schema.c    objects: properties, required, extras, counts, dependencies;
 *   json_array_schema.c     arrays: items, prefixItems, counts, uniqueItems, contains.
 * Internal to src/grammar/. */
#ifndef LOOM_GRAMMAR_JSON_SCHEMA_COMPILER_H
#define LOOM_GRAMMAR_JSON_SCHEMA_COMPILER_H

#include <cjson/cJSON.h>
#include <stdbool.h>
#include <stdint.h>
#include <string.h>

#include "base/error.h"
#include "grammar/grammar.h"
#include "grammar/json_grammar.h"

typedef struct {
    const cJSON *target;
    uint32_t rule;
} schema_ref;

/* json_schema_refs.c's registry: a resource ($id) or anchor by its URI, and
 * the base URI each $ref of the document stands at (by its text's address,
 * which the merged copies share) */
typedef struct {
    char *uri;
    const cJSON *node;
    bool dynamic; /* a $dynamicAnchor's */
} schema_resource;

typedef struct {
    const char *text;
    char *base;
    bool dynamic; /* a $dynamicRef's */
} ref_base;

typedef struct {
    lm_grammar_builder *b;
    lm_error *err;
    /* ws: the gaps around brackets and before ':' and ','; sep: after ':'
     * and ','; NO_RULE where nothing may come */
    uint32_t ws, sep, utf8, string_body, string_char, key_body, escape, number, integer, value;
    bool have_value;
    const lm_json_options *options;
    const cJSON *root;
    bool draft4; /* the root's $schema is draft 3 or 4: boolean exclusiveMinimum/Maximum */
    uint64_t deadline; /* of the cost checks (grammar/cost.h) */
    schema_ref refs[LM_SCHEMA_MAX_REFS];
    int n_refs;
    schema_resource *resources; /* NULL: references within the document only */
    ref_base *ref_bases;
    int n_resources, n_ref_bases;
    bool owns_resources; /* a sub-builder (json_values_schema.c) borrows its parent's */
    char empty_reason[LM_ERROR_MESSAGE_MAX]; /* why the last merge found nothing in common (json_schema_normalize.c) */
    cJSON **owned; /* the merged schemas made while compiling, deleted at the end */
    int n_owned, cap_owned;
} json_builder;

#define TRY(x)                         \
    do {                               \
        lm_status st_ = (x);           \
        if (st_ != LM_OK) return st_;  \
    } while (0)

/* ---- small sequence helpers */

static inline lm_status lit(json_builder *j, lm_gseq *s, const char *text) {
    return lm_gseq_literal(j->b, s, text, strlen(text), j->err);
}

static inline lm_status range(json_builder *j, lm_gseq *s, uint8_t lo, uint8_t hi) {
    lm_byte_class c = {{0}};
    lm_byte_class_add_range(&c, lo, hi);
    return lm_gseq_class(j->b, s, &c, j->err);
}

/* rule with a single alternative seq (seq is freed) */
static inline lm_status rule_of(json_builder *j, lm_gseq *seq, uint32_t *rule) {
    lm_status st = lm_grammar_rule_of(j->b, seq, rule, j->err);
    lm_gseq_free(seq);
    return st;
}

static inline void ref(lm_gseq *s, uint32_t rule) { lm_gseq_ref(s, rule); }
/* the whitespace that may come around brackets / after ':' and ',' */
static inline void gap(json_builder *j, lm_gseq *s) {
    if (j->ws != LM_GRAMMAR_NO_RULE) ref(s, j->ws);
}
static inline void sep(json_builder *j, lm_gseq *s) { ref(s, j->sep); }

static inline lm_status unsupported(json_builder *j, const char *keyword) {
    return lm_fail(j->err, LM_ERR_UNSUPPORTED, "JSON schema: '%s' is not supported", keyword);
}

static inline lm_status nomem(json_builder *j) { return lm_fail(j->err, LM_ERR_NOMEM, "out of memory"); }

static inline const cJSON *get(const cJSON *schema, const char *key) { return cJSON_GetObjectItemCaseSensitive(schema, key); }

/* ---- json_basics.c */

/* the rules every JSON grammar shares (whitespace, strings, numbers), made once */
lm_status lm_js_add_basics(json_builder *j);
/* '"' and the rest of any string */
lm_status lm_js_string_value(json_builder *j, lm_gseq *out);
/* open ws (item (ws ',' ws item){min-1,max-1})? ws close */
lm_status lm_js_repeated_container(json_builder *j, lm_gseq *out, const char *open, const char *close,
                                   const lm_gseq *item, int min, int max);
/* j->value: any JSON value (made on first use) */
lm_status lm_js_any_value_rule(json_builder *j);
/* keeps a schema made while compiling until the end (refs point into it) */
lm_status lm_js_own(json_builder *j, cJSON *made);

/* ---- json_exact_text.c */

/* the schema's own text of each number into its node's valuestring */
bool lm_js_stash_numbers(cJSON *node, const char **p, const char *end);
void lm_js_number_text(const cJSON *v, char *buf, size_t size);
/* compact JSON text with exact numbers (malloc'd; NULL: out of memory) */
char *lm_js_exact_text(const cJSON *v);
lm_status lm_js_json_literal(json_builder *j, const cJSON *value, lm_gseq *out);
lm_status lm_js_literals(json_builder *j, const cJSON *const *values, int n, lm_gseq *out);

/* ---- json_keywords.c */

bool lm_js_is_keyword_of(const char *key, const char *const *names);
/* the first keyword of the schema loom refuses by name, or NULL */
const char *lm_js_refused_keyword(const cJSON *schema);
/* whether the schema asserts anything beyond the keywords besides lists */
bool lm_js_has_assertions(const cJSON *schema, const char *const *besides);
lm_status lm_js_bounded_count(json_builder *j, const cJSON *schema, const char *key, int fallback, int cap,
                              bool is_max, int *out);
/* the types the grammar generates for the schema: its type, else those its keywords speak of */
unsigned lm_js_implied_types(const cJSON *schema);

/* ---- json_schema_refs.c */

/* the registry of j->root's resources, anchors and $ref bases */
lm_status lm_js_register_resources(json_builder *j);
void lm_js_free_resources(json_builder *j);
lm_status lm_js_resolve_ref(json_builder *j, const cJSON *refp, const cJSON **target);

/* ---- json_schema_normalize.c */

/* the intersection of a and b (narrower, never wider), each closed first
 * (its unevaluated* made additionalProperties / items) */
lm_status lm_js_merged(json_builder *j, const cJSON *a, const cJSON *b, const cJSON **out);
/* the same where a (LM_JS_OWNER_A) or b is the schema the other is an
 * in-place subschema of (allOf, $ref, if, an anyOf branch): its
 * unevaluated* keywords see the other's evaluations, so stay as they are */
#define LM_JS_OWNER_A 1
#define LM_JS_OWNER_B 2
lm_status lm_js_merged_scoped(json_builder *j, const cJSON *a, const cJSON *b, int owner, const cJSON **out);
/* whether s is the false a merge gave (j->empty_reason says why) */
bool lm_js_is_empty_merge(const cJSON *s);
lm_status lm_js_without(json_builder *j, const cJSON *schema, const char *key, const cJSON **out);
/* whether s's unevaluatedProperties / unevaluatedItems assert anything */
bool lm_js_unevaluated_asserts(const cJSON *s);
lm_status lm_js_normalize(json_builder *j, const cJSON *schema, const cJSON **out);
lm_status lm_js_normalize_through(json_builder *j, const cJSON *schema, const cJSON **out);

/* ---- json_schema_branches.c */

lm_status lm_js_branches_schema(json_builder *j, const cJSON *schema, const char *word, lm_gseq *out, int depth);

/* ---- json_schema_not.c */

/* a schema no instance of s matches (narrower than the complement); found
 * false where no keyword of s has a bounded complement */
lm_status lm_js_negation(json_builder *j, const cJSON *s, const cJSON **out, bool *found);

/* ---- json_values_schema.c */

bool lm_js_grammar_accepts(const lm_grammar *g, const char *s, lm_error *err);
/* keeps of values (n of them) those the schema's grammar accepts */
lm_status lm_js_filter_values(json_builder *j, const cJSON *schema, const cJSON **values, int *n, int depth);
lm_status lm_js_values_schema(json_builder *j, const cJSON *schema, lm_gseq *out, int depth);

/* ---- the typed schemas */

lm_status lm_js_pattern_language(json_builder *j, const char *pattern, lm_gseq *out, const char *what);
lm_status lm_js_pattern_matches(json_builder *j, const char *pattern, const char *name, bool *out);
lm_status lm_js_string_schema(json_builder *j, const cJSON *schema, lm_gseq *out);
lm_status lm_js_number_schema(json_builder *j, const cJSON *schema, bool integer, lm_gseq *out);
lm_status lm_js_object_schema(json_builder *j, const cJSON *schema, lm_gseq *out, int depth);
lm_status lm_js_array_schema(json_builder *j, const cJSON *schema, lm_gseq *out, int depth);

/* ---- json_grammar.c */

lm_status lm_js_compile_schema(json_builder *j, const cJSON *schema, lm_gseq *out, int depth);
lm_status lm_js_finish(json_builder *j, lm_gseq *top, const char *suffix, lm_grammar *out);

#endif
