/* Constrained decoding in the engine, on the bundled model (models/loom-tiny,
 * trained, with an MTP head): greedy and sampled outputs under a grammar are
 * sentences of it and end because it is complete; speculative greedy with a
 * grammar equals plain greedy with it (K = 1, 3), also when the drafts are
 * forced to violate the grammar; the mask also runs in a batch of many
 * grammar requests at once, whose equal grammars share one frame table. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "engine/engine_internal.h"
#include "engine/sequence_grammar.h"
#include "engine_util.h"
#include "grammar/compiled.h"
#include "grammar/matcher.h"
#include "harness.h"
#include "text/tokenizer.h"

static const char *model_dir = "models/loom-tiny";
static int32_t *prompt_ids;
static int n_prompt_ids;

static const char *const schemas[] = {
    "{\"type\":\"object\",\"properties\":{\"name\":{\"type\":\"string\",\"maxLength\":12},"
    "\"age\":{\"type\":\"integer\"}},\"required\":[\"name\",\"age\"],\"additionalProperties\":false}",
    "{\"type\":\"array\",\"items\":{\"enum\":[\"red\",\"green\",\"blue\"]},\"minItems\":1,\"maxItems\":4}",
    "{\"$defs\":{\"t\":{\"type\":\"object\",\"properties\":{\"v\":{\"type\":\"boolean\"},\"kids\":{\"type\":\"array\","
    "\"items\":{\"$ref\":\"#/$defs/t\"},\"maxItems\":2}},\"required\":[\"v\"],\"additionalProperties\":false}},"
    "\"$ref\":\"#/$defs/t\"}",
    "{\"anyOf\":[{\"type\":\"null\"},{\"type\":\"string\",\"pattern\":\"^[a-z]{1,6}$\"},{\"const\":[1,2]}]}",
};
enum { N_SCHEMAS = sizeof schemas / sizeof schemas[0] };

static bool accepts(const lm_grammar *g, const char *s, size_t len) {
    lm_gmatcher m;
    lm_error err;
    if (lm_gmatcher_init(&m, g, &err) != LM_OK) return false;
    lm_gstate a = {0}, b = {0};
    bool ok = lm_gmatcher_start(&m, &a);
    for (size_t i = 0; ok && i < len; i++) {
        ok = lm_gmatcher_advance(&m, &a, (uint8_t)s[i], &b);
        lm_gstate t = a;
        a = b;
        b = t;
    }
    ok = ok && lm_gstate_complete(&a);
    lm_gstate_free(&a);
    lm_gstate_free(&b);
    lm_gmatcher_free(&m);
    return ok;
}

static loom_grammar *schema_grammar(const char *schema) {
    loom_grammar_spec spec = {.kind = LOOM_GRAMMAR_JSON_SCHEMA, .text = schema, .text_len = strlen(schema)};
    loom_grammar *g = NULL;
    char msg[512];
    if (loom_grammar_compile(&spec, &g, msg, sizeof msg) != LOOM_OK) fprintf(stderr, "compile: %s\n", msg);
    return g;
}

static void params_for(loom_request_params *p, const loom_grammar *g, bool sampled, uint64_t seed) {
    loom_request_params_default(p);
    p->prompt = prompt_ids;
    p->n_prompt = n_prompt_ids;
    p->max_tokens = 200;
    p->grammar = g;
    p->sampling.temperature = sampled ? 1.0f : 0;
    p->sampling.has_seed = sampled;
    p->sampling.seed = seed;
}

static bool submit_one(loom_engine *e, const loom_grammar *g, bool sampled, uint64_t seed, loom_request **out) {
    loom_request_params p;
    params_for(&p, g, sampled, seed);
    char error[256];
    if (loom_submit(e, &p, out, error, sizeof error) != LOOM_OK) {
        fprintf(stderr, "submit: %s\n", error);
        *out = NULL;
        return false;
    }
    return true;
}

static bool run_one(loom_engine *e, const loom_grammar *g, bool sampled, uint64_t seed, collected *out) {
    loom_request *r;
    if (!submit_one(e, g, sampled, seed, &r)) return false;
    collect_all(r, out, 1);
    loom_request_free(r);
    return !out->error;
}

/* An output must be a whole sentence and must have ended for that reason. */
static void check_output(const loom_grammar *g, const collected *c, const char *what) {
    CHECK_MSG(!c->error, "%s: %s", what, c->error_message);
    CHECK_MSG(c->reason == LOOM_FINISH_STOP, "%s: finished by %d, not STOP, after %d tokens: %.*s", what, c->reason,
              c->n_tokens, (int)c->text_len, c->text);
    CHECK_MSG(accepts(&g->grammar, c->text, c->text_len), "%s: '%.*s' is no sentence of the grammar", what,
              (int)c->text_len, c->text);
}

/* Per schema, the greedy request and six seeded ones (two under ASan:
 * test_rounds) run side by side (the engine's outputs do not depend on the
 * batch: test_engine), in a seventh of the decode steps one after another
 * would take. */
static void test_greedy_and_sampled_follow_the_grammar(void) {
    enum { MAX_SEEDS = 6 };
    const int seeds = test_rounds(MAX_SEEDS, 2);
    loom_engine *e = test_engine_open(model_dir, 256, 0, 512, seeds + 1, 0);
    CHECK(e);
    static collected outs[MAX_SEEDS + 1]; /* large */
    for (int s = 0; s < N_SCHEMAS && !test_current_failed(); s++) {
        loom_grammar *g = schema_grammar(schemas[s]);
        CHECK(g);
        loom_request *reqs[MAX_SEEDS + 1] = {0};
        bool submitted = true;
        for (int i = 0; i <= seeds && submitted; i++) submitted = submit_one(e, g, i > 0, (uint64_t)i, &reqs[i]);
        for (int i = 0; i <= seeds; i++) {
            if (reqs[i]) collect_all(reqs[i], &outs[i], 1);
            loom_request_free(reqs[i]);
        }
        CHECK(submitted);
        for (int i = 0; i <= seeds && !test_current_failed(); i++) check_output(g, &outs[i], schemas[s]);
        loom_grammar_free(g);
    }
    loom_engine_destroy(e);
}

static void test_regex_and_choice(void) {
    loom_engine *e = test_engine_open(model_dir, 256, 0, 512, 8, 0);
    CHECK(e);
    const char *const choices[] = {"alpha", "beta", "gamma delta"};
    loom_grammar_spec specs[] = {
        {.kind = LOOM_GRAMMAR_REGEX, .text = "(yes|no), [0-9]{2,3}!", .text_len = 21},
        {.kind = LOOM_GRAMMAR_CHOICE, .choices = choices, .n_choices = 3},
    };
    for (int i = 0; i < 2; i++) {
        loom_grammar *g = NULL;
        char msg[256];
        CHECK_MSG(loom_grammar_compile(&specs[i], &g, msg, sizeof msg) == LOOM_OK, "%s", msg);
        for (uint64_t seed = 1; seed <= 4; seed++) {
            collected c;
            CHECK(run_one(e, g, true, seed, &c));
            check_output(g, &c, i ? "choice" : "regex");
        }
        loom_grammar_free(g);
    }
    loom_engine_destroy(e);
}

/* Many grammar requests at once (the mask per row of a batch: twelve, four
 * under ASan); half of them with a grammar compiled apart from the same
 * schema, as the server compiles one per request: the engine keeps one
 * frame table for both, and counts the masks and their time. */
static void test_batch_of_grammar_requests(void) {
    enum { MAX_REQUESTS = 12 };
    const int n = test_rounds(MAX_REQUESTS, 4);
    loom_engine *e = test_engine_open(model_dir, 256, 0, 512, 16, 0);
    CHECK(e);
    loom_grammar *g = schema_grammar(schemas[0]), *twin = schema_grammar(schemas[0]);
    CHECK(g && twin && g != twin);
    loom_request *reqs[MAX_REQUESTS];
    for (int i = 0; i < n; i++) {
        loom_request_params p;
        params_for(&p, i % 2 ? twin : g, true, 100 + (uint64_t)i);
        char error[256];
        CHECK_MSG(loom_submit(e, &p, &reqs[i], error, sizeof error) == LOOM_OK, "%s", error);
    }
    loom_grammar_free(g); /* the requests hold their own references */
    loom_grammar_free(twin);
    for (int i = 0; i < n; i++) {
        collected c;
        collect_all(reqs[i], &c, 1);
        loom_request_free(reqs[i]);
        CHECK_MSG(!c.error && c.reason == LOOM_FINISH_STOP, "request %d: %s", i, c.error_message);
        char *text = strndup(c.text, c.text_len);
        bool ok = text && strstr(text, "\"name\"") && strstr(text, "\"age\"");
        free(text);
        CHECK_MSG(ok, "request %d: %.*s", i, (int)c.text_len, c.text);
    }
    int tables = 0;
    for (int i = 0; i < LM_GRAMMAR_FRAME_CACHE; i++) tables += e->sampler.grammar_frames.entries[i].frames != NULL;
    CHECK_MSG(tables == 1, "%d frame tables for one schema", tables);
    loom_stats stats;
    loom_engine_stats(e, &stats);
    CHECK_MSG(stats.grammar_masks >= (uint64_t)n && stats.grammar_ns > 0, "grammar masks %llu, %llu ns",
              (unsigned long long)stats.grammar_masks, (unsigned long long)stats.grammar_ns);
    loom_engine_destroy(e);
}

/* Drafts forced to break the grammar (a '}' or a letter where the grammar
 * wants something else): they are cut before the verify. */
static int bad_drafts(void *ctx, const int32_t *tokens, int n_tokens, int n_prompt, int32_t *drafts, int k) {
    const int32_t *ids = ctx;
    for (int i = 0; i < k; i++) drafts[i] = ids[(n_tokens + i) % 2];
    return k;
}

/* The schemas' greedy requests side by side on a fresh engine drafting k
 * tokens a step (0: none), the drafts forced to break the grammar when
 * forcing; their outputs in outs, the engine's stats at the end in st. */
static bool run_schemas(loom_grammar *const *grammars, int k, int32_t *forcing, collected *outs,
                        loom_stats *st) {
    loom_engine *e = test_engine_open(model_dir, 256, 0, 512, N_SCHEMAS, k);
    if (!e) return false;
    if (forcing) lm_engine_set_draft_override(e, bad_drafts, forcing);
    loom_request *reqs[N_SCHEMAS] = {0};
    bool ok = true;
    for (int s = 0; s < N_SCHEMAS && ok; s++) ok = submit_one(e, grammars[s], false, 0, &reqs[s]);
    for (int s = 0; s < N_SCHEMAS; s++) {
        if (reqs[s]) collect_all(reqs[s], &outs[s], 1);
        loom_request_free(reqs[s]);
    }
    *st = wait_idle(e);
    loom_engine_destroy(e);
    return ok;
}

/* Every schema's request runs in the same batch (the engine's speculative
 * outputs do not depend on the batch: test_speculative), so each engine
 * serves all four at once instead of one engine a schema.  K 1 and 3, each
 * with the head's drafts and with drafts forced to break the grammar; under
 * ASan (test_rounds) the first two of those four, which still meet both
 * K's, both kinds of drafts and the verify of drafts that survive. */
static void test_speculative_equals_plain(void) {
    lm_tokenizer *tok;
    lm_error err;
    CHECK_OK(lm_tokenizer_load(model_dir, &tok, &err), &err);
    int32_t forced[2] = {lm_tokenizer_token_to_id(tok, "}"), lm_tokenizer_token_to_id(tok, "a")};
    lm_tokenizer_free(tok);
    CHECK(forced[0] >= 0 && forced[1] >= 0);
    static const struct {
        int k;
        bool forcing;
    } runs[] = {{1, false}, {3, true}, {3, false}, {1, true}};
    const int n_runs = test_rounds(4, 2);
    loom_grammar *grammars[N_SCHEMAS] = {0};
    bool compiled = true;
    for (int s = 0; s < N_SCHEMAS; s++) compiled = (grammars[s] = schema_grammar(schemas[s])) && compiled;
    static collected plain[N_SCHEMAS], spec[N_SCHEMAS]; /* large */
    loom_stats st;
    bool ran = compiled && run_schemas(grammars, 0, NULL, plain, &st);
    for (int s = 0; s < N_SCHEMAS && ran && !test_current_failed(); s++) check_output(grammars[s], &plain[s], "plain");
    uint64_t drafted = 0;
    for (int i = 0; i < n_runs && ran && !test_current_failed(); i++) {
        int k = runs[i].k;
        bool forcing = runs[i].forcing;
        ran = run_schemas(grammars, k, forcing ? forced : NULL, spec, &st);
        if (!ran) break;
        CHECK_MSG(st.speculative_tokens == k, "speculation is off (K %d)", st.speculative_tokens);
        for (int s = 0; s < N_SCHEMAS; s++)
            CHECK_MSG(spec[s].n_tokens == plain[s].n_tokens &&
                          memcmp(spec[s].tokens, plain[s].tokens, sizeof(int32_t) * (size_t)plain[s].n_tokens) == 0,
                      "schema %d K %d%s: speculative '%.*s' != plain '%.*s'", s, k, forcing ? " forced" : "",
                      (int)spec[s].text_len, spec[s].text, (int)plain[s].text_len, plain[s].text);
        if (!forcing) drafted += st.spec_drafted_tokens;
    }
    for (int s = 0; s < N_SCHEMAS; s++) loom_grammar_free(grammars[s]);
    CHECK_MSG(ran, "an engine did not open or a request was refused");
    /* the head's drafts that the grammar allows were verified somewhere */
    CHECK_MSG(drafted > 0, "no draft survived the grammar in any run");
}

/* A grammar over the engine's per-token budget ends its request with an
 * error naming the budget, after one mask, while a plain request beside it
 * runs to its end; the same grammar under the default budget is answered. */
static void test_token_budget(void) {
    loom_engine *e = test_engine_open(model_dir, 256, 0, 512, 8, 0);
    CHECK(e);
    loom_grammar_spec spec = {.kind = LOOM_GRAMMAR_REGEX, .text = "(a?b?){24}c", .text_len = 11};
    loom_grammar *g = NULL;
    char msg[256];
    CHECK_MSG(loom_grammar_compile(&spec, &g, msg, sizeof msg) == LOOM_OK, "%s", msg);
    lm_engine_set_grammar_token_work(e, 300);
    loom_request_params plain, constrained;
    params_for(&plain, NULL, false, 0);
    plain.max_tokens = 24;
    plain.ignore_eos = true;
    params_for(&constrained, g, true, 7);
    loom_request *a, *b;
    char error[256];
    CHECK_MSG(loom_submit(e, &plain, &a, error, sizeof error) == LOOM_OK, "%s", error);
    CHECK_MSG(loom_submit(e, &constrained, &b, error, sizeof error) == LOOM_OK, "%s", error);
    collected c, p;
    collect_all(b, &c, 1);
    collect_all(a, &p, 1);
    loom_request_free(a);
    loom_request_free(b);
    CHECK_MSG(c.error && strstr(c.error_message, "budget") && c.n_tokens == 0, "over budget: error %d '%s', %d tokens",
              c.error, c.error_message, c.n_tokens);
    CHECK_MSG(!p.error && p.n_tokens == 24, "the plain request: error '%s', %d tokens", p.error_message, p.n_tokens);
    lm_engine_set_grammar_token_work(e, LM_GRAMMAR_TOKEN_WORK);
    CHECK(run_one(e, g, true, 7, &c));
    check_output(g, &c, "(a?b?){24}c under the default budget");
    loom_grammar_free(g);
    loom_engine_destroy(e);
}

static void test_refusals(void) {
    loom_engine *e = test_engine_open(model_dir, 256, 0, 512, 8, 0);
    CHECK(e);
    /* a grammar nothing in the vocabulary can continue after its start:
     * a choice of a byte no token holds (U+10FFFF) */
    const char *const choices[] = {"\xf4\x8f\xbf\xbf"};
    loom_grammar_spec spec = {.kind = LOOM_GRAMMAR_CHOICE, .choices = choices, .n_choices = 1};
    loom_grammar *g = NULL;
    char msg[256];
    CHECK(loom_grammar_compile(&spec, &g, msg, sizeof msg) == LOOM_OK);
    collected c;
    run_one(e, g, false, 0, &c);
    /* either the bytes exist as tokens (then it completes) or it is an error naming the grammar */
    CHECK_MSG((c.error && strstr(c.error_message, "grammar")) || (!c.error && c.reason == LOOM_FINISH_STOP),
              "error '%s' reason %d", c.error_message, c.reason);
    loom_grammar_free(g);
    loom_engine_destroy(e);
}

int main(void) {
    lm_tokenizer *tok;
    lm_error err;
    if (lm_tokenizer_load(model_dir, &tok, &err) != LM_OK) {
        fprintf(stderr, "test_grammar_engine: %s\n", err.message);
        return 1;
    }
    const char *text = "A record as JSON:";
    size_t n;
    if (lm_tokenizer_encode(tok, text, strlen(text), false, &prompt_ids, &n, &err) != LM_OK) return 1;
    n_prompt_ids = (int)n;
    lm_tokenizer_free(tok);
    RUN_TEST(test_greedy_and_sampled_follow_the_grammar);
    RUN_TEST(test_regex_and_choice);
    RUN_TEST(test_batch_of_grammar_requests);
    RUN_TEST(test_speculative_equals_plain);
    RUN_TEST(test_token_budget);
    RUN_TEST(test_refusals);
    free(prompt_ids);
    return test_summary("test_grammar_engine");
}
