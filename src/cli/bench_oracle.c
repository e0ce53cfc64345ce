#include "cli/bench_oracle.h"

#include <stdbool.h>
#include <stdlib.h>

static uint64_t hash_ids(const int32_t *ids, int n) { /* FNV-1a over the bytes' words */
    uint64_t h = 1469598103934665603ull;
    for (int i = 0; i < n; i++) {
        h ^= (uint32_t)ids[i];
        h *= 1099511628211ull;
    }
    return h;
}

static uint64_t mix(uint64_t x) { /* splitmix64's finaliser */
    x += 0x9e3779b97f4a7c15ull;
    x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ull;
    x = (x ^ (x >> 27)) * 0x94d049bb133111ebull;
    return x ^ (x >> 31);
}

lm_status lm_bench_oracle_init(lm_bench_oracle *o, const lm_bench_prompts *prompts, int gen_tokens,
                               double acceptance, int vocab, lm_error *err) {
    *o = (lm_bench_oracle){.count = prompts->count, .gen_tokens = gen_tokens, .vocab = vocab,
                           .acceptance = acceptance};
    if (prompts->count <= 0 || gen_tokens <= 0 || vocab < 2 || !(acceptance >= 0 && acceptance <= 1))
        return lm_fail(err, LM_ERR_INVALID, "planted acceptance: bad sizes or acceptance %g", acceptance);
    o->prompt_hash = malloc(sizeof(uint64_t) * (size_t)prompts->count);
    o->outputs = malloc(sizeof(int32_t) * (size_t)prompts->count * (size_t)gen_tokens);
    o->n_outputs = calloc((size_t)prompts->count, sizeof(int));
    if (!o->prompt_hash || !o->outputs || !o->n_outputs) {
        lm_bench_oracle_free(o);
        return lm_fail(err, LM_ERR_NOMEM, "out of memory for the planted-acceptance oracle");
    }
    for (int i = 0; i < prompts->count; i++) o->prompt_hash[i] = hash_ids(prompts->ids[i], prompts->lengths[i]);
    return LM_OK;
}

void lm_bench_oracle_record(lm_bench_oracle *o, int index, int32_t token) {
    if (index < 0 || index >= o->count || o->n_outputs[index] >= o->gen_tokens) return;
    o->outputs[(size_t)index * (size_t)o->gen_tokens + (size_t)o->n_outputs[index]++] = token;
}

int lm_bench_oracle_draft(void *oracle, const int32_t *tokens, int n_tokens, int n_prompt, int32_t *drafts,
                          int k) {
    const lm_bench_oracle *o = oracle;
    uint64_t h = hash_ids(tokens, n_prompt);
    int index = -1;
    for (int i = 0; i < o->count && index < 0; i++)
        if (o->prompt_hash[i] == h) index = i;
    if (index < 0) return 0; /* not a recorded prompt: no drafts */
    const int32_t *out = o->outputs + (size_t)index * (size_t)o->gen_tokens;
    int generated = n_tokens - n_prompt, made = 0;
    /* drafts[i] guesses the token at output position generated + i */
    for (; made < k && generated + made < o->n_outputs[index]; made++) {
        int32_t truth = out[generated + made];
        uint64_t r = mix(h ^ mix((uint64_t)(generated + made)));
        bool planted = (double)(r >> 11) * 0x1.0p-53 < o->acceptance;
        drafts[made] = planted ? truth : (truth + 1) % o->vocab;
    }
    return made;
}

void lm_bench_oracle_free(lm_bench_oracle *o) {
    free(o->prompt_hash);
    free(o->outputs);
    free(o->n_outputs);
    *o = (lm_bench_oracle){0};
}
