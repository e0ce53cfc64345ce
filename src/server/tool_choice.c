#include "server/tool_choice.h"

#include <stdlib.h>
#include <string.h>

#include "grammar/cost.h"
#include "server/tool_call_grammar.h"
#include "server/reasoning_parser.h"

#define PICK_POLL_MS 50
#define PICK_BIAS 100.0f /* the largest logit_bias OpenAI allows: dominates any real logit */

typedef struct {
    const char *name; /* borrowed from the request */
    int32_t *ids;     /* the call's opening, tokenized */
    size_t n;
    bool active;
} candidate;

bool lm_tool_choice_forces_call(const lm_openai_request *r) {
    return r->tools && (r->tool_choice == LM_TOOL_CHOICE_REQUIRED || r->tool_choice == LM_TOOL_CHOICE_NAMED) &&
           r->add_generation_prompt && !r->continue_final_message;
}

#define GLM_ASSISTANT "<|assistant|>"
#define GLM_EMPTY_THINKING "\n<think></think>\n"

/* GLM: completes "<|assistant|>" + GLM_EMPTY_THINKING (see tool_choice.h). */
static const char *glm_bridge(const char *prompt, size_t len) {
    size_t n = strlen(GLM_ASSISTANT), at = len;
    for (size_t i = len >= n ? len - n + 1 : 0; i-- > 0;)
        if (memcmp(prompt + i, GLM_ASSISTANT, n) == 0) {
            at = i;
            break;
        }
    if (at == len) return "";
    const char *tail = prompt + at + n;
    size_t tail_len = len - at - n;
    static const char empty_thinking[] = GLM_EMPTY_THINKING;
    if (tail_len < sizeof empty_thinking && memcmp(tail, empty_thinking, tail_len) == 0)
        return empty_thinking + tail_len;
    return lm_prompt_opens_reasoning(tail, tail_len) ? "</think>\n" : "";
}

const char *lm_forced_call_bridge(lm_tool_form form, const char *prompt, size_t len, bool template_has_think) {
    if (!template_has_think) return "";
    if (form == LM_TOOL_FORM_GLM) return glm_bridge(prompt, len);
    return lm_prompt_opens_reasoning(prompt, len) ? "\n</think>\n\n" : "";
}

static unsigned status_of_engine(int rc) {
    switch (rc) {
    case LOOM_ERR_BUSY: case LOOM_ERR_SHUTDOWN: return 503;
    case LOOM_ERR_TOO_LONG: case LOOM_ERR_INVALID: return 400;
    default: return 500;
    }
}

/* One engine request of one token after prompt ++ prefix[0..n_prefix),
 * restricted (by logit bias) to allowed[0..n_allowed).  *token: the sample. */
static lm_status sample_one_of(lm_server *s, struct MHD_Connection *c, const lm_openai_request *r,
                               const int32_t *prompt, size_t n_prompt, const int32_t *prefix, size_t n_prefix,
                               const int32_t *allowed, float *bias, int n_allowed, int32_t *token,
                               unsigned *http_status, lm_error *err) {
    size_t n = n_prompt + n_prefix;
    int32_t *ids = malloc(sizeof *ids * n);
    if (!ids) return *http_status = 500, lm_fail(err, LM_ERR_NOMEM, "out of memory building a prompt to choose a tool");
    memcpy(ids, prompt, sizeof *ids * n_prompt);
    memcpy(ids + n_prompt, prefix, sizeof *ids * n_prefix);
    for (int i = 0; i < n_allowed; i++) bias[i] = PICK_BIAS;
    loom_request_params p = r->params;
    p.prompt = ids;
    p.n_prompt = (int)n;
    p.max_tokens = 1;
    p.min_tokens = 0;
    p.ignore_eos = true;
    p.stop = NULL;
    p.n_stop = 0;
    p.stop_token_ids = NULL;
    p.n_stop_token_ids = 0;
    p.n = 1;
    p.no_speculation = true;
    p.grammar = NULL; /* the pick chooses a name: no output grammar applies */
    p.sampling.logprobs = -1;
    p.sampling.logit_bias_ids = allowed;
    p.sampling.logit_bias_values = bias;
    p.sampling.n_logit_bias = n_allowed;
    loom_request *handle = NULL;
    char engine_error[512] = "";
    int rc = loom_submit(s->engine, &p, &handle, engine_error, sizeof engine_error);
    free(ids);
    if (rc != LOOM_OK) return *http_status = status_of_engine(rc), lm_fail(err, LM_ERR_INVALID, "%s", engine_error);
    bool got = false, failed = false;
    for (;;) {
        loom_event ev;
        int next = loom_next_event(handle, &ev, PICK_POLL_MS);
        if (next < 0) break;
        if (next == 0) {
            if (lm_client_gone(c) || atomic_load(&s->cancel_all)) loom_cancel(handle);
            continue;
        }
        if (ev.type == LOOM_EVENT_TOKEN && !got) {
            *token = ev.token;
            got = true;
        } else if (ev.type == LOOM_EVENT_ERROR) {
            failed = true;
            lm_fail(err, LM_ERR_INTERNAL, "%s", ev.error ? ev.error : "engine error");
        }
    }
    loom_request_free(handle);
    if (failed) return *http_status = 500, LM_ERR_INTERNAL;
    if (!got) return *http_status = 503, lm_fail(err, LM_ERR_IO, "the request was cancelled while choosing a tool");
    return LM_OK;
}

/* Narrows the candidates to one, token by token (see tool_choice.h). */
static lm_status pick(lm_server *s, struct MHD_Connection *c, const lm_openai_request *r, candidate *cands,
                      int count, const int32_t *prompt, size_t n_prompt, int *chosen, unsigned *http_status,
                      lm_error *err) {
    int32_t *allowed = malloc(sizeof *allowed * (size_t)count);
    float *bias = malloc(sizeof *bias * (size_t)count);
    lm_status st = LM_OK;
    if (!allowed || !bias) st = (*http_status = 500, lm_fail(err, LM_ERR_NOMEM, "out of memory choosing among %d tools", count));
    /* Every pass removes at least one candidate, so count passes suffice. */
    for (int pass = 0; st == LM_OK && pass <= count; pass++) {
        int first = -1, n_active = 0;
        for (int i = 0; i < count; i++)
            if (cands[i].active) {
                if (first < 0) first = i;
                n_active++;
            }
        *chosen = first;
        if (n_active <= 1) break;
        /* The first position where the active openings differ or one ends. */
        size_t at = 0;
        for (;; at++) {
            bool same = at < cands[first].n;
            for (int i = first + 1; same && i < count; i++)
                if (cands[i].active) same = at < cands[i].n && cands[i].ids[at] == cands[first].ids[at];
            if (!same) break;
        }
        int n_allowed = 0;
        for (int i = 0; i < count; i++) {
            if (!cands[i].active) continue;
            if (at >= cands[i].n) { /* a strict prefix of another opening: not reachable token-wise */
                cands[i].active = false;
                continue;
            }
            bool seen = false;
            for (int k = 0; k < n_allowed && !seen; k++) seen = allowed[k] == cands[i].ids[at];
            if (!seen) allowed[n_allowed++] = cands[i].ids[at];
        }
        if (n_allowed == 0) { /* identical openings (duplicate names): the first */
            cands[first].active = true;
            break;
        }
        int32_t token = allowed[0];
        if (n_allowed > 1)
            st = sample_one_of(s, c, r, prompt, n_prompt, cands[first].ids, at, allowed, bias, n_allowed, &token,
                               http_status, err);
        bool kept = false;
        for (int k = 0; k < n_allowed; k++) kept |= allowed[k] == token;
        if (!kept) token = allowed[0]; /* the bias should make this impossible */
        for (int i = 0; i < count; i++)
            if (cands[i].active && cands[i].ids[at] != token) cands[i].active = false;
    }
    free(allowed);
    free(bias);
    return st;
}

lm_status lm_forced_call_prompt(lm_server *s, struct MHD_Connection *c, const lm_openai_request *r,
                                lm_tool_form form, const int32_t *prompt, size_t n_prompt, int32_t **ids,
                                size_t *n_ids, const char **name, unsigned *http_status, lm_error *err) {
    *ids = NULL;
    *n_ids = 0;
    *http_status = 400;
    int count = r->tool_choice == LM_TOOL_CHOICE_NAMED ? 1 : cJSON_GetArraySize(r->tools);
    if (count <= 0) return lm_fail(err, LM_ERR_INVALID, "tool_choice needs tools");
    candidate *cands = calloc((size_t)count, sizeof *cands);
    if (!cands) return *http_status = 500, lm_fail(err, LM_ERR_NOMEM, "out of memory listing %d tools", count);
    lm_status st = LM_OK;
    if (r->tool_choice == LM_TOOL_CHOICE_NAMED) {
        cands[0].name = r->tool_name;
    } else {
        int i = 0;
        const cJSON *t;
        cJSON_ArrayForEach(t, r->tools) {
            const cJSON *fn = cJSON_GetObjectItemCaseSensitive(t, "function");
            cands[i++].name = cJSON_GetObjectItemCaseSensitive(fn, "name")->valuestring;
        }
    }
    for (int i = 0; st == LM_OK && i < count; i++) {
        lm_sbuf opening = {0};
        if (!lm_tool_call_opening(form, cands[i].name, &opening))
            st = lm_fail(err, LM_ERR_NOMEM, "out of memory writing the opening of a call to '%.64s'", cands[i].name);
        else st = lm_tokenizer_encode(s->tokenizer, lm_sbuf_str(&opening), opening.len, false, &cands[i].ids,
                                      &cands[i].n, err);
        lm_sbuf_free(&opening);
        cands[i].active = true;
        if (st == LM_ERR_NOMEM) *http_status = 500;
    }
    int chosen = 0;
    if (st == LM_OK && count > 1) st = pick(s, c, r, cands, count, prompt, n_prompt, &chosen, http_status, err);
    if (st == LM_OK) {
        const candidate *w = &cands[chosen];
        *ids = malloc(sizeof **ids * (n_prompt + w->n));
        if (!*ids) {
            st = lm_fail(err, LM_ERR_NOMEM, "out of memory appending the forced call's opening to the prompt");
            *http_status = 500;
        } else {
            memcpy(*ids, prompt, sizeof **ids * n_prompt);
            memcpy(*ids + n_prompt, w->ids, sizeof **ids * w->n);
            *n_ids = n_prompt + w->n;
            *name = w->name;
        }
    }
    for (int i = 0; i < count; i++) free(cands[i].ids);
    free(cands);
    return st;
}

lm_status lm_forced_call_grammar(lm_openai_request *r, lm_tool_form form, const char *name, lm_error *err) {
    loom_grammar_free(r->grammar);
    r->grammar = NULL;
    r->params.grammar = NULL;
    /* Only a call to a strict tool is constrained: the others keep the
     * unconstrained forced call (cut by max_tokens, a stop string or eos,
     * as clients of the unconstrained call rely on). */
    const cJSON *tool;
    bool strict = false;
    cJSON_ArrayForEach(tool, r->tools) {
        const cJSON *fn = cJSON_GetObjectItemCaseSensitive(tool, "function");
        const cJSON *fname = cJSON_GetObjectItemCaseSensitive(fn, "name");
        if (cJSON_IsString(fname) && strcmp(fname->valuestring, name) == 0)
            strict = cJSON_IsTrue(cJSON_GetObjectItemCaseSensitive(fn, "strict"));
    }
    if (!strict) return LM_OK;
    lm_tool_call_grammar_spec spec = {.tools = r->tools,
                                      .form = form,
                                      .first = name,
                                      .only = r->tool_choice == LM_TOOL_CHOICE_NAMED ? r->tool_name : NULL,
                                      .parallel = r->parallel_tool_calls};
    lm_status st = lm_tool_call_grammar(&spec, lm_grammar_compile_deadline(), &r->grammar, err);
    if (st != LM_OK) return st == LM_ERR_NOMEM ? st : LM_ERR_INVALID;
    r->params.grammar = r->grammar;
    return LM_OK;
}
