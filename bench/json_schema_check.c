/* JSON schemas through loom's grammar compiler, without a model: for each
 * case it compiles the schema (loom_grammar_compile, cost check included),
 * says whether each given instance is a sentence of the grammar, and
 * samples random complete answers from the grammar's automaton (random
 * walks over the bytes the matcher allows, closing bytes favoured so that
 * strings and containers end).  tools/jsonschemabench.py feeds it
 * JSONSchemaBench and the JSON-Schema-Test-Suite and validates the answers
 * with python3-jsonschema.
 *
 * Input: one JSON object a line on stdin,
 *   {"schema": {...}, "instances": ["<json text>", ...], "samples": N, "seed": S,
 *    "any_whitespace": false}
 * Output: one JSON object a line,
 *   {"compiled": true, "error": "...", "compile_ms": 1.2,
 *    "accepted": [true, ...], "samples": ["<json text>", ...], "incomplete": 0}
 *
 * usage: json_schema_check < cases.jsonl > results.jsonl
 * (the walks are tests/grammar_walk.c's, linked in by the Makefile) */
#include <cjson/cJSON.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "grammar/compiled.h"
#include "grammar/matcher.h"
#include "../tests/grammar_walk.h"

#define MAX_LINE (8 << 20)
#define MAX_SAMPLE_BYTES 4096

static double now_ms(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec * 1e3 + (double)ts.tv_nsec * 1e-6;
}

/* the weight of a byte in a walk: closing bytes often, multi-byte rarely */
static unsigned weight(uint8_t c) {
    if (c == '"' || c == ']' || c == '}') return 40;
    if (c >= 0x80) return 1;
    return 4;
}

static cJSON *run_case(const cJSON *c) {
    cJSON *res = cJSON_CreateObject();
    const cJSON *schema = cJSON_GetObjectItemCaseSensitive(c, "schema");
    const cJSON *schema_text = cJSON_GetObjectItemCaseSensitive(c, "schema_text");
    const cJSON *instances = cJSON_GetObjectItemCaseSensitive(c, "instances");
    int samples = cJSON_GetObjectItemCaseSensitive(c, "samples") ? cJSON_GetObjectItemCaseSensitive(c, "samples")->valueint : 0;
    const cJSON *seedv = cJSON_GetObjectItemCaseSensitive(c, "seed");
    uint64_t rng = 0x9E3779B97F4A7C15ull ^ (uint64_t)(seedv ? seedv->valuedouble : 1);
    /* the schema's own text where given: its numbers as written */
    char *text = cJSON_IsString(schema_text) ? strdup(schema_text->valuestring) : cJSON_PrintUnformatted(schema);
    loom_grammar_spec spec = {.kind = LOOM_GRAMMAR_JSON_SCHEMA, .text = text, .text_len = text ? strlen(text) : 0,
                              .whitespace = cJSON_IsTrue(cJSON_GetObjectItemCaseSensitive(c, "any_whitespace"))
                                                ? LOOM_JSON_WHITESPACE_ANY
                                                : LOOM_JSON_WHITESPACE_COMPACT};
    loom_grammar *g = NULL;
    char msg[512] = "";
    double t0 = now_ms();
    int rc = loom_grammar_compile(&spec, &g, msg, sizeof msg);
    cJSON_AddNumberToObject(res, "compile_ms", now_ms() - t0);
    cJSON_AddBoolToObject(res, "compiled", rc == LOOM_OK);
    free(text);
    if (rc != LOOM_OK) {
        cJSON_AddStringToObject(res, "error", msg);
        return res;
    }
    cJSON *acc = cJSON_AddArrayToObject(res, "accepted");
    const cJSON *inst;
    cJSON_ArrayForEach(inst, instances) cJSON_AddItemToArray(acc, cJSON_CreateBool(cJSON_IsString(inst) && test_grammar_accepts(&g->grammar, inst->valuestring)));
    cJSON *out = cJSON_AddArrayToObject(res, "samples");
    char *buf = malloc(MAX_SAMPLE_BYTES + 1);
    int incomplete = 0;
    for (int i = 0; i < samples && buf; i++) {
        if (test_grammar_walk(&g->grammar, &rng, weight, 4, buf, MAX_SAMPLE_BYTES + 1)) cJSON_AddItemToArray(out, cJSON_CreateString(buf));
        else incomplete++;
    }
    free(buf);
    cJSON_AddNumberToObject(res, "incomplete", incomplete);
    loom_grammar_free(g);
    return res;
}

int main(void) {
    char *line = malloc(MAX_LINE);
    if (!line) return 1;
    while (fgets(line, MAX_LINE, stdin)) {
        cJSON *c = cJSON_Parse(line);
        cJSON *res = c ? run_case(c) : cJSON_CreateObject();
        if (!c) cJSON_AddStringToObject(res, "error", "not a JSON line");
        char *s = cJSON_PrintUnformatted(res);
        printf("%s\n", s ? s : "{}");
        fflush(stdout);
        cJSON_free(s);
        cJSON_Delete(res);
        cJSON_Delete(c);
    }
    free(line);
    return 0;
}
