/* The OpenAI rows of the pipeline: /v1/chat/completions and
 * /v1/completions bodies parsed, their whole answers (every choice, usage,
 * stop_reason as vLLM gives it) and their Server-Sent Event chunks (role,
 * deltas with reasoning and tool-call fragments, finish, usage, [DONE]). */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "server/generation.h"
#include "server/json_text.h"

/* Completions' logprobs object from chat-shaped entries. */
static cJSON *completion_logprobs(const cJSON *entries, size_t text_offset) {
    cJSON *o = cJSON_CreateObject();
    cJSON *tokens = cJSON_AddArrayToObject(o, "tokens");
    cJSON *lps = cJSON_AddArrayToObject(o, "token_logprobs");
    cJSON *tops = cJSON_AddArrayToObject(o, "top_logprobs");
    cJSON *offsets = cJSON_AddArrayToObject(o, "text_offset");
    const cJSON *e;
    cJSON_ArrayForEach(e, entries) {
        const char *tok = cJSON_GetObjectItemCaseSensitive(e, "token")->valuestring;
        cJSON_AddItemToArray(tokens, cJSON_CreateString(tok));
        cJSON_AddItemToArray(lps, cJSON_CreateNumber(cJSON_GetObjectItemCaseSensitive(e, "logprob")->valuedouble));
        cJSON *top = cJSON_CreateObject();
        const cJSON *t;
        cJSON_ArrayForEach(t, cJSON_GetObjectItemCaseSensitive(e, "top_logprobs")) {
            const char *tt = cJSON_GetObjectItemCaseSensitive(t, "token")->valuestring;
            if (!cJSON_HasObjectItem(top, tt))
                cJSON_AddNumberToObject(top, tt, cJSON_GetObjectItemCaseSensitive(t, "logprob")->valuedouble);
        }
        cJSON_AddItemToArray(tops, top);
        cJSON_AddItemToArray(offsets, cJSON_CreateNumber((double)text_offset));
        text_offset += strlen(tok);
    }
    return o;
}

static cJSON *usage_json(const gen_ctx *g) {
    int completion = 0, prompt_tokens = 0;
    for (int i = 0; i < g->n; i++) completion += g->choices[i].completion_tokens;
    for (int p = 0; p < g->n_prompts; p++) prompt_tokens += g->prompts[p].prompt_tokens;
    cJSON *u = cJSON_CreateObject();
    cJSON_AddNumberToObject(u, "prompt_tokens", prompt_tokens);
    cJSON_AddNumberToObject(u, "total_tokens", prompt_tokens + completion);
    cJSON_AddNumberToObject(u, "completion_tokens", completion);
    int cached = 0; /* as OpenAI reports it: prompt tokens served from the prefix cache */
    for (int p = 0; p < g->n_prompts; p++) cached += g->prompts[p].cached_tokens;
    cJSON *details = cJSON_AddObjectToObject(u, "prompt_tokens_details");
    cJSON_AddNumberToObject(details, "cached_tokens", cached);
    int drafted = 0, accepted = 0;
    for (int i = 0; i < g->n; i++) {
        drafted += g->choices[i].drafted_tokens;
        accepted += g->choices[i].accepted_tokens;
    }
    if (drafted > 0) { /* speculative decoding: MTP drafts verified and accepted */
        cJSON *spec = cJSON_AddObjectToObject(u, "speculative");
        cJSON_AddNumberToObject(spec, "drafted_tokens", drafted);
        cJSON_AddNumberToObject(spec, "accepted_tokens", accepted);
        cJSON_AddNumberToObject(spec, "acceptance_rate", (double)accepted / drafted);
    }
    return u;
}

/* As vLLM: stop_reason names a stop token the request listed in
 * stop_token_ids; an end of turn (the model's eos ids, the tokenizer's eos
 * token) is a normal end and gives null. */
static bool stopped_by_request_token(const gen_ctx *g, int32_t token) {
    const lm_tokenizer *tok = g->server->tokenizer;
    const char *eos = tok ? lm_tokenizer_eos_token(tok) : NULL;
    if (eos && lm_tokenizer_token_to_id(tok, eos) == token) return false;
    for (int i = 0; i < g->req.params.n_stop_token_ids; i++)
        if (g->req.stop_token_ids[i] == token) return true;
    return false;
}

static void add_stop_reason(cJSON *choice, const gen_ctx *g, const choice_state *ch) {
    if (ch->stop_string >= 0 && ch->stop_string < g->req.params.n_stop)
        cJSON_AddStringToObject(choice, "stop_reason", g->req.stop[ch->stop_string]);
    else if (ch->stop_token >= 0 && stopped_by_request_token(g, ch->stop_token))
        cJSON_AddNumberToObject(choice, "stop_reason", ch->stop_token);
    else /* eos, the end of the turn, or not stopped */
        cJSON_AddNullToObject(choice, "stop_reason");
}

static cJSON *tool_call_json(const lm_tool_call *call, int index, bool with_index) {
    cJSON *t = cJSON_CreateObject();
    if (with_index) cJSON_AddNumberToObject(t, "index", index);
    cJSON_AddStringToObject(t, "id", call->id);
    cJSON_AddStringToObject(t, "type", "function");
    cJSON *fn = cJSON_AddObjectToObject(t, "function");
    cJSON_AddStringToObject(fn, "name", call->name);
    cJSON_AddStringToObject(fn, "arguments", call->arguments);
    return t;
}

static cJSON *envelope(const gen_ctx *g, const char *object) {
    cJSON *root = cJSON_CreateObject();
    cJSON_AddStringToObject(root, "id", g->id);
    cJSON_AddStringToObject(root, "object", object);
    cJSON_AddNumberToObject(root, "created", (double)g->created);
    cJSON_AddStringToObject(root, "model", g->server->options.served_model_name);
    return root;
}

/* Chat completions and completions: every choice. */
static cJSON *openai_whole(gen_ctx *g) {
    bool chat = g->req.kind == LM_API_CHAT;
    cJSON *root = envelope(g, chat ? "chat.completion" : "text_completion");
    cJSON *choices = cJSON_AddArrayToObject(root, "choices");
    for (int i = 0; i < g->n; i++) {
        choice_state *ch = &g->choices[i];
        cJSON *c = cJSON_CreateObject();
        cJSON_AddNumberToObject(c, "index", i);
        if (chat) {
            cJSON *m = cJSON_AddObjectToObject(c, "message");
            cJSON_AddStringToObject(m, "role", "assistant");
            if (ch->content.len || ch->calls.n == 0) cJSON_AddStringToObject(m, "content", lm_sbuf_str(&ch->content));
            else cJSON_AddNullToObject(m, "content");
            if (ch->use_reasoning && ch->reasoning.len) {
                cJSON_AddStringToObject(m, "reasoning_content", lm_sbuf_str(&ch->reasoning));
                cJSON_AddStringToObject(m, "reasoning", lm_sbuf_str(&ch->reasoning));
            }
            if (ch->calls.n) {
                cJSON *calls = cJSON_AddArrayToObject(m, "tool_calls");
                for (int k = 0; k < ch->calls.n; k++)
                    cJSON_AddItemToArray(calls, tool_call_json(&ch->calls.items[k], k, false));
            }
            if (ch->logprobs) {
                cJSON *lp = cJSON_AddObjectToObject(c, "logprobs");
                cJSON_AddItemReferenceToObject(lp, "content", ch->logprobs);
            } else {
                cJSON_AddNullToObject(c, "logprobs");
            }
        } else {
            lm_sbuf text = {0};
            const char *echo = g->prompts[i / g->n_per].echo_text;
            if (echo) lm_sbuf_puts(&text, echo);
            lm_sbuf_append(&text, lm_sbuf_str(&ch->content), ch->content.len);
            cJSON_AddStringToObject(c, "text", lm_sbuf_str(&text));
            if (ch->logprobs) cJSON_AddItemToObject(c, "logprobs", completion_logprobs(ch->logprobs,
                                                    echo ? strlen(echo) : 0));
            else cJSON_AddNullToObject(c, "logprobs");
            if (ch->token_ids) cJSON_AddItemReferenceToObject(c, "token_ids", ch->token_ids);
            lm_sbuf_free(&text);
        }
        cJSON_AddStringToObject(c, "finish_reason", lm_finish_reason_name(ch));
        add_stop_reason(c, g, ch);
        cJSON_AddItemToArray(choices, c);
    }
    cJSON_AddItemToObject(root, "usage", usage_json(g));
    return root;
}

static void sse(gen_ctx *g, cJSON *chunk) {
    char *text = lm_json_print(chunk);
    cJSON_Delete(chunk);
    if (!text) {
        g->out.failed = true;
        return;
    }
    lm_sbuf_puts(&g->out, "data: ");
    lm_sbuf_puts(&g->out, text);
    lm_sbuf_puts(&g->out, "\n\n");
    cJSON_free(text);
}

static cJSON *chunk_choice(gen_ctx *g, cJSON **root, int index) {
    bool chat = g->req.kind == LM_API_CHAT;
    *root = envelope(g, chat ? "chat.completion.chunk" : "text_completion");
    cJSON *choices = cJSON_AddArrayToObject(*root, "choices");
    cJSON *c = cJSON_CreateObject();
    cJSON_AddNumberToObject(c, "index", index);
    cJSON_AddItemToArray(choices, c);
    return c;
}

/* Chat: the tool calls' deltas as OpenAI streams them: a call's first
 * delta has its index, id, type and name, the later ones its index and
 * argument fragments. */
static cJSON *tool_call_deltas(choice_state *ch) {
    cJSON *list = cJSON_CreateArray();
    lm_tool_delta d;
    while (list && lm_tool_delta_next(&ch->tool_cursor, &ch->calls, &ch->tool_parser, &d)) {
        if (!d.first && d.fragment_len == 0) continue;
        cJSON *t = cJSON_CreateObject();
        cJSON_AddNumberToObject(t, "index", d.index);
        if (d.first) {
            cJSON_AddStringToObject(t, "id", d.id);
            cJSON_AddStringToObject(t, "type", "function");
        }
        cJSON *fn = cJSON_AddObjectToObject(t, "function");
        if (d.first) cJSON_AddStringToObject(fn, "name", d.name);
        char *fragment = strndup(d.fragment, d.fragment_len);
        cJSON_AddStringToObject(fn, "arguments", fragment ? fragment : "");
        free(fragment);
        cJSON_AddItemToArray(list, t);
    }
    return list;
}

/* The role chunks (chat), or the echoed prompts (completions). */
static void openai_stream_start(gen_ctx *g) {
    for (int i = 0; i < g->n; i++) {
        cJSON *root;
        cJSON *c = chunk_choice(g, &root, i);
        const char *echo = NULL;
        if (g->req.kind == LM_API_CHAT) {
            cJSON *d = cJSON_AddObjectToObject(c, "delta");
            cJSON_AddStringToObject(d, "role", "assistant");
            cJSON_AddStringToObject(d, "content", "");
        } else {
            echo = g->prompts[i / g->n_per].echo_text;
            cJSON_AddStringToObject(c, "text", echo ? echo : "");
        }
        cJSON_AddNullToObject(c, "logprobs");
        cJSON_AddNullToObject(c, "finish_reason");
        if (g->req.kind == LM_API_CHAT || echo) sse(g, root);
        else cJSON_Delete(root);
    }
}

/* Emits what a choice gained from one event: a delta chunk, then a finish chunk. */
static void openai_stream_update(gen_ctx *g, int i, cJSON *logprob) {
    choice_state *ch = &g->choices[i];
    bool chat = g->req.kind == LM_API_CHAT;
    cJSON *call_deltas = chat ? tool_call_deltas(ch) : NULL;
    bool new_calls = cJSON_GetArraySize(call_deltas) > 0;
    if (ch->content.len || ch->reasoning.len || new_calls || logprob || (ch->token_ids && cJSON_GetArraySize(ch->token_ids))) {
        cJSON *root;
        cJSON *c = chunk_choice(g, &root, i);
        if (chat) {
            cJSON *d = cJSON_AddObjectToObject(c, "delta");
            if (ch->reasoning.len) {
                cJSON_AddStringToObject(d, "reasoning_content", lm_sbuf_str(&ch->reasoning));
                cJSON_AddStringToObject(d, "reasoning", lm_sbuf_str(&ch->reasoning));
            }
            if (ch->content.len || (!ch->reasoning.len && !new_calls)) cJSON_AddStringToObject(d, "content", lm_sbuf_str(&ch->content));
            if (new_calls) {
                cJSON_AddItemToObject(d, "tool_calls", call_deltas);
                call_deltas = NULL;
            }
            if (logprob) {
                cJSON *lp = cJSON_AddObjectToObject(c, "logprobs");
                cJSON *content = cJSON_AddArrayToObject(lp, "content");
                cJSON_AddItemToArray(content, logprob);
            } else {
                cJSON_AddNullToObject(c, "logprobs");
            }
        } else {
            cJSON_AddStringToObject(c, "text", lm_sbuf_str(&ch->content));
            if (logprob) {
                cJSON *entries = cJSON_CreateArray();
                cJSON_AddItemToArray(entries, logprob);
                cJSON_AddItemToObject(c, "logprobs", completion_logprobs(entries, 0));
                cJSON_Delete(entries);
            } else {
                cJSON_AddNullToObject(c, "logprobs");
            }
            if (ch->token_ids) {
                cJSON_AddItemToObject(c, "token_ids", ch->token_ids);
                ch->token_ids = cJSON_CreateArray();
            }
        }
        cJSON_AddNullToObject(c, "finish_reason");
        sse(g, root);
        lm_sbuf_clear(&ch->content);
        lm_sbuf_clear(&ch->reasoning);
    } else if (logprob) {
        cJSON_Delete(logprob);
    }
    cJSON_Delete(call_deltas);
    if (ch->finished) {
        cJSON *root;
        cJSON *c = chunk_choice(g, &root, i);
        if (chat) cJSON_AddObjectToObject(c, "delta");
        else cJSON_AddStringToObject(c, "text", "");
        cJSON_AddNullToObject(c, "logprobs");
        cJSON_AddStringToObject(c, "finish_reason", lm_finish_reason_name(ch));
        add_stop_reason(c, g, ch);
        sse(g, root);
    }
}

static void openai_stream_end(gen_ctx *g) {
    if (g->req.include_usage) {
        cJSON *root = envelope(g, g->req.kind == LM_API_CHAT ? "chat.completion.chunk" : "text_completion");
        cJSON_AddArrayToObject(root, "choices");
        cJSON_AddItemToObject(root, "usage", usage_json(g));
        sse(g, root);
    }
    lm_sbuf_puts(&g->out, "data: [DONE]\n\n");
    g->final_sent = true;
}

static lm_status parse_chat(gen_ctx *g, const char *body, size_t len, char *param, size_t param_size, lm_error *err) {
    return lm_openai_request_parse(LM_API_CHAT, body, len, &g->server->image_parts, &g->req, param, param_size, err);
}

static lm_status parse_completion(gen_ctx *g, const char *body, size_t len, char *param, size_t param_size,
                                  lm_error *err) {
    return lm_openai_request_parse(LM_API_COMPLETION, body, len, &g->server->image_parts, &g->req, param, param_size,
                                   err);
}

const lm_generation_api lm_chat_completions_api = {
    LM_API_CHAT, LM_WIRE_OPENAI, "/v1/chat/completions", "chatcmpl-", parse_chat, openai_whole, openai_stream_start,
    openai_stream_update, openai_stream_end};

const lm_generation_api lm_completions_api = {
    LM_API_COMPLETION, LM_WIRE_OPENAI, "/v1/completions", "cmpl-", parse_completion, openai_whole,
    openai_stream_start, openai_stream_update, openai_stream_end};
