/* The chat prompt: the template rendered over a request's messages and
 * tools (with continue_final_message's cut), the byte floor that refuses a
 * text which cannot fit before it is tokenized, and how image parts are
 * placed in a prompt (the engine's marker, its placeholder token). */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "io/image_decode.h"
#include "server/generation.h"
#include "server/media.h"

lm_status lm_server_images_init(lm_server *s, lm_error *err) {
    lm_image_parts *p = &s->image_parts;
    s->image_token_id = -1;
    if (s->options.allowed_local_media_path) {
        lm_status st = lm_media_dir(s->options.allowed_local_media_path, &s->media_dir, err);
        if (st != LM_OK) return st;
        p->local_dir = s->media_dir;
    }
    p->max_image_bytes = LM_IMAGE_DEFAULT_MAX_BYTES;
    /* An image part is written as the chat template would write it: the
     * engine's marker (vision start, one placeholder, vision end), text the
     * tokenizer reads back as those tokens; the placeholder is its middle. */
    const char *marker = loom_engine_image_marker(s->engine);
    p->refusal = s->options.images_off ? "images are turned off on this server (--max-image-pixels -1)"
                                       : "this model does not take images";
    if (!marker || !s->tokenizer) return LM_OK;
    int32_t *ids = NULL;
    size_t n = 0;
    lm_error why = {0};
    if (lm_tokenizer_encode(s->tokenizer, marker, strlen(marker), false, &ids, &n, &why) == LM_OK && n == 3) {
        s->image_token_id = ids[1];
        p->marker = marker;
    } else {
        p->refusal = "this model's image marker is not three tokens of its tokenizer, so images cannot be placed "
                     "in a prompt";
    }
    free(ids);
    return LM_OK;
}

/* The image placeholders in a prompt. */
int lm_count_image_tokens(const lm_server *s, const int32_t *ids, size_t n) {
    int count = 0;
    for (size_t i = 0; s->image_token_id >= 0 && i < n; i++) count += ids[i] == s->image_token_id;
    return count;
}

lm_status lm_prompt_bytes_fit(const lm_server *s, size_t text_bytes, lm_error *err) {
    size_t floor = s->tokenizer ? lm_tokenizer_min_tokens(s->tokenizer, text_bytes) : 0;
    if (floor <= (size_t)s->options.max_model_len) return LM_OK;
    return lm_fail(err, LM_ERR_INVALID,
                   "This model's maximum context length is %d tokens. However, your request has at least %zu input "
                   "tokens (%zu bytes of text).",
                   s->options.max_model_len, floor, text_bytes);
}

/* The bytes of every string in v (the messages' text, a floor on what the
 * template renders), stopping once past `enough`. */
static size_t string_bytes(const cJSON *v, size_t enough) {
    size_t n = 0;
    for (const cJSON *c = v ? v->child : NULL; c && n <= enough; c = c->next) {
        if (cJSON_IsString(c)) n += strlen(c->valuestring);
        else if (c->child) n += string_bytes(c, enough - n);
    }
    return n;
}

lm_status lm_render_chat_prompt(const lm_server *s, const lm_openai_request *r, char **text,
                                size_t *len, lm_error *err) {
    if (!s->chat_template) return lm_fail(err, LM_ERR_INVALID, "this model has no chat template");
    /* A conversation that cannot fit is refused before the template runs
     * over it (the template engine bounds its strings at 16 MiB). */
    lm_status fits = lm_prompt_bytes_fit(s, string_bytes(r->messages, SIZE_MAX / 2), err);
    if (fits != LM_OK) return fits;
    cJSON *ctx = cJSON_CreateObject();
    if (!ctx) return lm_fail(err, LM_ERR_NOMEM, "out of memory building the chat template's context");
    const cJSON *kw;
    cJSON_ArrayForEach(kw, r->template_kwargs) cJSON_AddItemToObject(ctx, kw->string, cJSON_Duplicate(kw, true));
    cJSON_DeleteItemFromObjectCaseSensitive(ctx, "messages");
    cJSON_DeleteItemFromObjectCaseSensitive(ctx, "add_generation_prompt");
    cJSON_AddItemToObject(ctx, "messages", cJSON_Duplicate(r->messages, true));
    if (r->tools) {
        cJSON *tools = cJSON_CreateArray();
        const cJSON *t;
        cJSON_ArrayForEach(t, r->tools) {
            const cJSON *name = cJSON_GetObjectItemCaseSensitive(cJSON_GetObjectItemCaseSensitive(t, "function"), "name");
            /* A named tool_choice shows the model only that function. */
            if (r->tool_choice != LM_TOOL_CHOICE_NAMED || strcmp(name->valuestring, r->tool_name) == 0)
                cJSON_AddItemToArray(tools, cJSON_Duplicate(t, true));
        }
        cJSON_DeleteItemFromObjectCaseSensitive(ctx, "tools");
        cJSON_AddItemToObject(ctx, "tools", tools);
    }
    cJSON_AddBoolToObject(ctx, "add_generation_prompt", r->add_generation_prompt);
    lm_status st = lm_chat_template_render(s->chat_template, ctx, text, len, err);
    cJSON_Delete(ctx);
    if (st != LM_OK || !r->continue_final_message) return st;
    /* continue_final_message: cut after the last message's content so the
     * model continues it (the template closed it with an end marker). */
    const cJSON *last = cJSON_GetArrayItem(r->messages, cJSON_GetArraySize(r->messages) - 1);
    const char *content = cJSON_GetObjectItemCaseSensitive(last, "content")->valuestring;
    size_t cl = strlen(content);
    if (cl == 0) return LM_OK;
    for (size_t i = *len >= cl ? *len - cl + 1 : 0; i-- > 0;)
        if (memcmp(*text + i, content, cl) == 0) {
            *len = i + cl;
            (*text)[*len] = 0;
            return LM_OK;
        }
    return LM_OK;
}
