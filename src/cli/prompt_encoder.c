/* Text prompts -> token ids (see prompt_encoder.h). */
#include "cli/prompt_encoder.h"

#include <stdlib.h>
#include <string.h>

lm_status lm_prompt_encoder_open(const char *dir, bool chat, lm_prompt_encoder *pe, lm_error *err) {
    memset(pe, 0, sizeof *pe);
    lm_status st = lm_tokenizer_load(dir, &pe->tokenizer, err);
    if (st == LM_OK && chat) {
        char *bos = NULL, *eos = NULL;
        st = lm_chat_template_load_dir(dir, &pe->template, &bos, &eos, err);
        free(bos);
        free(eos);
    }
    if (st != LM_OK) lm_prompt_encoder_close(pe);
    return st;
}

static lm_status encode(const lm_prompt_encoder *pe, const char *text, size_t len, bool add_special,
                        int32_t **ids, int *n, lm_error *err) {
    size_t count = 0;
    *ids = NULL;
    lm_status st = lm_tokenizer_encode(pe->tokenizer, text, len, add_special, ids, &count, err);
    if (st == LM_OK && count == 0) st = lm_fail(err, LM_ERR_INVALID, "the prompt encodes to no tokens");
    if (st != LM_OK) {
        free(*ids);
        *ids = NULL;
        return st;
    }
    *n = (int)count;
    return LM_OK;
}

lm_status lm_prompt_encoder_chat(const lm_prompt_encoder *pe, const cJSON *messages, const cJSON *variables,
                                 int32_t **ids, int *n, char **text, lm_error *err) {
    if (!pe->template) return lm_fail(err, LM_ERR_INVALID, "the encoder was opened without a chat template");
    cJSON *ctx = cJSON_CreateObject();
    if (!ctx) return lm_fail(err, LM_ERR_NOMEM, "out of memory");
    /* The context borrows the caller's messages for the render. */
    cJSON *ref = cJSON_CreateArrayReference(messages->child);
    if (!ref) {
        cJSON_Delete(ctx);
        return lm_fail(err, LM_ERR_NOMEM, "out of memory");
    }
    cJSON_AddItemToObject(ctx, "messages", ref);
    cJSON_AddBoolToObject(ctx, "add_generation_prompt", 1);
    for (const cJSON *v = variables ? variables->child : NULL; v; v = v->next) {
        cJSON *copy = cJSON_Duplicate(v, 1);
        if (!copy || !cJSON_AddItemToObject(ctx, v->string, copy)) {
            cJSON_Delete(copy);
            cJSON_Delete(ctx);
            return lm_fail(err, LM_ERR_NOMEM, "out of memory");
        }
    }
    char *rendered = NULL;
    size_t len = 0;
    lm_status st = lm_chat_template_render(pe->template, ctx, &rendered, &len, err);
    cJSON_Delete(ctx);
    if (st == LM_OK) st = encode(pe, rendered, len, false, ids, n, err);
    if (st == LM_OK && text) {
        *text = rendered;
        rendered = NULL;
    }
    free(rendered);
    return st;
}

lm_status lm_prompt_encoder_user(const lm_prompt_encoder *pe, const char *text, int32_t **ids, int *n,
                                 lm_error *err) {
    cJSON *messages = cJSON_CreateArray(), *m = cJSON_CreateObject();
    if (m && !cJSON_AddItemToArray(messages, m)) { /* false when messages is NULL */
        cJSON_Delete(m);
        m = NULL;
    }
    lm_status st;
    if (m && cJSON_AddStringToObject(m, "role", "user") && cJSON_AddStringToObject(m, "content", text))
        st = lm_prompt_encoder_chat(pe, messages, NULL, ids, n, NULL, err);
    else
        st = lm_fail(err, LM_ERR_NOMEM, "out of memory");
    cJSON_Delete(messages);
    return st;
}

lm_status lm_prompt_encoder_raw(const lm_prompt_encoder *pe, const char *text, int32_t **ids, int *n,
                                lm_error *err) {
    return encode(pe, text, strlen(text), true, ids, n, err);
}

void lm_prompt_encoder_close(lm_prompt_encoder *pe) {
    lm_chat_template_free(pe->template);
    lm_tokenizer_free(pe->tokenizer);
    memset(pe, 0, sizeof *pe);
}
