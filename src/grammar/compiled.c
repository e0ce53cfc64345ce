/* Compiling a loom_grammar_spec (grammar/compiled.h). */
#include "grammar/compiled.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "grammar/cost.h"
#include "grammar/gbnf.h"
#include "grammar/json_grammar.h"
#include "grammar/regex_compile.h"

static lm_status choice_grammar(const loom_grammar_spec *spec, uint64_t deadline, lm_grammar *out, lm_error *err) {
    if (spec->n_choices <= 0 || !spec->choices)
        return lm_fail(err, LM_ERR_INVALID, "a choice grammar needs at least one choice");
    if (spec->n_choices > LM_GRAMMAR_MAX_CHOICES)
        return lm_fail(err, LM_ERR_NOMEM, "more than %d choices", LM_GRAMMAR_MAX_CHOICES);
    size_t total = 0;
    for (int i = 0; i < spec->n_choices; i++) {
        if (!spec->choices[i]) return lm_fail(err, LM_ERR_INVALID, "choice %d is missing", i);
        if (!spec->choices[i][0]) return lm_fail(err, LM_ERR_INVALID, "choice %d is empty", i);
        total += strlen(spec->choices[i]);
    }
    if (total > LM_GRAMMAR_MAX_CHOICE_BYTES)
        return lm_fail(err, LM_ERR_NOMEM, "the choices are longer than %d bytes together", LM_GRAMMAR_MAX_CHOICE_BYTES);
    size_t *lens = malloc(sizeof *lens * (size_t)spec->n_choices);
    if (!lens) return lm_fail(err, LM_ERR_NOMEM, "out of memory");
    for (int i = 0; i < spec->n_choices; i++) lens[i] = strlen(spec->choices[i]);
    lm_grammar_builder b;
    lm_grammar_builder_init(&b);
    uint32_t root = 0, trie = 0;
    lm_gseq s = {0};
    /* a trie of the choices, then the suffix */
    lm_status st = lm_grammar_literals(&b, spec->choices, lens, (uint32_t)spec->n_choices, &trie, err);
    lm_gseq_ref(&s, trie);
    if (st == LM_OK && spec->suffix) st = lm_gseq_literal(&b, &s, spec->suffix, strlen(spec->suffix), err);
    if (st == LM_OK) st = lm_grammar_rule_of(&b, &s, &root, err);
    lm_gseq_free(&s);
    free(lens);
    if (st == LM_OK) st = lm_grammar_finish(&b, root, out, err);
    lm_grammar_builder_free(&b);
    if (st == LM_OK) st = lm_grammar_check_cost(out, "the choices", deadline, err);
    return st;
}

static lm_status regex_grammar(const loom_grammar_spec *spec, uint64_t deadline, lm_grammar *out, lm_error *err) {
    if (!spec->text) return lm_fail(err, LM_ERR_INVALID, "a regex grammar needs a pattern");
    lm_grammar_builder b;
    lm_grammar_builder_init(&b);
    lm_regex_options opt = {0};
    lm_gseq s = {0};
    uint32_t root = 0;
    lm_status st = lm_grammar_utf8_multibyte_rule(&b, &opt.utf8_rule, err);
    if (st == LM_OK) st = lm_regex_compile(&b, spec->text, spec->text_len, false, &opt, &s, err);
    if (st == LM_OK && spec->suffix) st = lm_gseq_literal(&b, &s, spec->suffix, strlen(spec->suffix), err);
    if (st == LM_OK) st = lm_grammar_rule_of(&b, &s, &root, err);
    if (st == LM_OK) st = lm_grammar_finish(&b, root, out, err);
    lm_gseq_free(&s);
    lm_grammar_builder_free(&b);
    if (st == LM_OK) {
        char name[128];
        lm_grammar_quote(name + 19, sizeof name - 19, spec->text, spec->text_len, 64);
        memcpy(name, "regular expression ", 19);
        st = lm_grammar_check_cost(out, name, deadline, err);
    }
    return st;
}

static lm_status gbnf_grammar(const loom_grammar_spec *spec, uint64_t deadline, lm_grammar *out, lm_error *err) {
    if (!spec->text) return lm_fail(err, LM_ERR_INVALID, "a GBNF grammar needs its text");
    lm_status st = lm_gbnf_compile(spec->text, spec->text_len, spec->suffix, out, err);
    return st == LM_OK ? lm_grammar_check_cost(out, "GBNF grammar", deadline, err) : st;
}

static lm_status compile_kind(const loom_grammar_spec *spec, uint64_t deadline, lm_grammar *out, lm_error *err) {
    lm_json_options json = {.any_whitespace = spec->whitespace == LOOM_JSON_WHITESPACE_ANY,
                            .whitespace_pattern = spec->whitespace_pattern,
                            .pattern_len = spec->whitespace_pattern ? strlen(spec->whitespace_pattern) : 0};
    switch (spec->kind) {
    /* fixed grammars (but for the suffix and a whitespace pattern, checked
     * on its own), of small states: not checked */
    case LOOM_GRAMMAR_JSON: return lm_json_grammar(LM_JSON_ANY_VALUE, spec->suffix, &json, out, err);
    case LOOM_GRAMMAR_JSON_OBJECT: return lm_json_grammar(LM_JSON_OBJECT, spec->suffix, &json, out, err);
    case LOOM_GRAMMAR_JSON_SCHEMA:
        if (!spec->text) return lm_fail(err, LM_ERR_INVALID, "a JSON schema grammar needs a schema");
        return lm_json_schema_grammar(spec->text, spec->text_len, spec->suffix, &json, deadline, out, err);
    case LOOM_GRAMMAR_REGEX: return regex_grammar(spec, deadline, out, err);
    case LOOM_GRAMMAR_CHOICE: return choice_grammar(spec, deadline, out, err);
    case LOOM_GRAMMAR_GBNF: return gbnf_grammar(spec, deadline, out, err);
    }
    return lm_fail(err, LM_ERR_INVALID, "unknown grammar kind %d", (int)spec->kind);
}

lm_status lm_grammar_compile_spec(const loom_grammar_spec *spec, lm_grammar *out, lm_error *err) {
    memset(out, 0, sizeof *out);
    lm_status st = compile_kind(spec, lm_grammar_compile_deadline(), out, err);
    if (st != LM_OK) lm_grammar_free(out);
    return st;
}

int loom_grammar_compile(const loom_grammar_spec *spec, loom_grammar **out, char *error, size_t error_size) {
    lm_error err = {0};
    *out = NULL;
    loom_grammar *g = calloc(1, sizeof *g);
    lm_status st = !spec ? lm_fail(&err, LM_ERR_INVALID, "no grammar spec")
                   : !g  ? lm_fail(&err, LM_ERR_NOMEM, "out of memory")
                         : lm_grammar_compile_spec(spec, &g->grammar, &err);
    if (st != LM_OK) {
        free(g);
        if (error && error_size) snprintf(error, error_size, "%s", err.message);
        return (int)st; /* lm_status and loom_status share their codes */
    }
    atomic_init(&g->refs, 1);
    *out = g;
    return LOOM_OK;
}

const loom_grammar *lm_grammar_ref(const loom_grammar *g) {
    if (g) atomic_fetch_add(&((loom_grammar *)g)->refs, 1);
    return g;
}

void lm_grammar_unref(const loom_grammar *g) {
    if (!g) return;
    loom_grammar *m = (loom_grammar *)g;
    if (atomic_fetch_sub(&m->refs, 1) == 1) {
        lm_grammar_free(&m->grammar);
        free(m);
    }
}

void loom_grammar_free(loom_grammar *g) { lm_grammar_unref(g); }
