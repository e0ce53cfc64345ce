/* POST /v1/messages/count_tokens: the Anthropic request's prompt, rendered
 * by the chat template as /v1/messages renders it, counted in tokens. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "server/anthropic_request.h"
#include "server/server_internal.h"

enum MHD_Result lm_handle_count_tokens(lm_server *s, struct MHD_Connection *c, const char *body, size_t len) {
    lm_openai_request r;
    char param[64] = "";
    lm_error err = {0};
    bool one_tool_use; /* nothing to count */
    lm_status st = lm_anthropic_request_parse(body, len, true, &s->image_parts, &r, &one_tool_use, param, sizeof param, &err);
    unsigned status = r.too_large ? 413 : st == LM_ERR_NOMEM ? 500 : 400;
    char message[1200];
    const char *why = err.message;
    if (st == LM_OK && !lm_server_serves_model(s, r.model)) {
        lm_server_unknown_model_message(s, r.model, message, sizeof message);
        why = message;
        status = 404;
        st = LM_ERR_INVALID;
    } else if (st == LM_OK && !s->tokenizer) {
        why = "this model has no tokenizer, so messages cannot be counted";
        st = LM_ERR_INVALID;
    }
    char *text = NULL;
    size_t text_len = 0;
    int32_t *ids = NULL;
    size_t n = 0;
    if (st == LM_OK) st = lm_render_chat_prompt(s, &r, &text, &text_len, &err);
    if (st == LM_OK) st = lm_tokenizer_encode(s->tokenizer, text, text_len, false, &ids, &n, &err);
    if (st != LM_OK && why == err.message) status = st == LM_ERR_NOMEM ? 500 : status;
    free(text);
    free(ids);
    lm_openai_request_free(&r);
    if (st != LM_OK) return lm_reply_error_as(c, LM_WIRE_ANTHROPIC, status, why, param);
    cJSON *out = cJSON_CreateObject();
    cJSON_AddNumberToObject(out, "input_tokens", (double)n);
    enum MHD_Result ret = lm_reply_json(c, 200, out);
    cJSON_Delete(out);
    return ret;
}
