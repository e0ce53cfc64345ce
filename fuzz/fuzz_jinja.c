/* libFuzzer target for the chat-template engine.  The input is a template;
 * after a NUL byte, an optional JSON context follows (else a fixed chat
 * context with messages, tools and a tool call is used).  The template is
 * compiled and, when it compiles, rendered twice under small limits.
 * Invariants (a broken one aborts): every failure carries a message, and
 * rendering is deterministic (both renders agree, byte for byte, on the
 * result or on the error). */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "text/chat_template.h"

static const char default_context[] =
    "{\"messages\": [{\"role\": \"system\", \"content\": \" sys \"},"
    " {\"role\": \"user\", \"content\": \"Hi <b>\\u00e9\"},"
    " {\"role\": \"assistant\", \"content\": \"<think>\\nr\\n</think>\\n\\nA\", \"tool_calls\": "
    "[{\"type\": \"function\","
    " \"function\": {\"name\": \"f\", \"arguments\": {\"x\": [1, 2.5, null], \"y\": \"s\"}}}]},"
    " {\"role\": \"tool\", \"content\": \"{\\\"ok\\\": true}\"},"
    " {\"role\": \"user\", \"content\": [{\"type\": \"image\"}, {\"type\": \"text\", \"text\": "
    "\"t\"}]}],"
    " \"tools\": [{\"type\": \"function\", \"function\": {\"name\": \"f\", \"parameters\": "
    "{\"type\": \"object\"}}}],"
    " \"add_generation_prompt\": true, \"enable_thinking\": false, \"n\": 3, \"f\": 0.5}";

static void check(int ok, const char *what) {
    if (!ok) {
        fprintf(stderr, "fuzz_jinja: invariant broken: %s\n", what);
        abort();
    }
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    const char *src = (const char *)data;
    const char *nul = memchr(src, 0, size);
    size_t tpl_len = nul ? (size_t)(nul - src) : size;
    const char *ctx = nul ? nul + 1 : default_context;
    size_t ctx_len = nul ? size - tpl_len - 1 : sizeof default_context - 1;

    lm_error err = {0};
    lm_chat_template *t = NULL;
    if (lm_chat_template_compile(src, tpl_len, &t, &err) != LM_OK) {
        check(t == NULL && err.message[0] != 0, "a failed compile gives a message and no template");
        return 0;
    }
    lm_chat_template_options o;
    lm_chat_template_options_default(&o);
    o.max_loop_iterations = 5000;
    o.max_output = 1 << 16;
    o.max_memory = 16 << 20;
    o.max_steps = 200000;
    o.max_macro_depth = 16;
    o.has_now = true;
    o.now = 1721692800;

    char *out1 = NULL, *out2 = NULL;
    size_t len1 = 0, len2 = 0;
    lm_error err2 = {0};
    lm_status s1 = lm_chat_template_render_json(t, ctx, ctx_len, &o, &out1, &len1, &err);
    lm_status s2 = lm_chat_template_render_json(t, ctx, ctx_len, &o, &out2, &len2, &err2);
    check(s1 == s2, "two renders agree on success");
    if (s1 == LM_OK) {
        check(out1 && out2 && len1 == len2 && memcmp(out1, out2, len1) == 0,
              "two renders give the same text");
        check(len1 <= o.max_output, "output within its bound");
    } else {
        check(out1 == NULL && err.message[0] != 0, "a failed render gives a message and no text");
        check(strcmp(err.message, err2.message) == 0, "two renders fail the same way");
    }
    free(out1);
    free(out2);
    lm_chat_template_free(t);
    return 0;
}
