/* The chat-template API on real templates: every case of
 * tokenizers/qwen3/chat_cases.json (rendered by transformers) byte for byte,
 * the fixture models' templates on golden conversations (rendered by
 * python3-jinja2 with transformers' settings), the published GLM templates of
 * tests/data/templates on tests/data/templates/glm-cases.json (rendered by
 * python3-jinja2, tests/data/templates/make_cases.py), and the ways a model
 * folder can carry its template and special tokens. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "harness.h"
#include "text/chat_template.h"

static char *slurp(const char *path, size_t *len) {
    FILE *f = fopen(path, "rb");
    if (!f) return NULL;
    fseek(f, 0, SEEK_END);
    long n = ftell(f);
    fseek(f, 0, SEEK_SET);
    char *buf = n >= 0 ? malloc((size_t)n + 1) : NULL;
    if (buf && fread(buf, 1, (size_t)n, f) != (size_t)n) {
        free(buf);
        buf = NULL;
    }
    fclose(f);
    if (buf) {
        buf[n] = 0;
        if (len) *len = (size_t)n;
    }
    return buf;
}

static bool write_file(const char *dir, const char *name, const char *text) {
    char path[512];
    snprintf(path, sizeof path, "%s/%s", dir, name);
    FILE *f = fopen(path, "wb");
    if (!f) return false;
    bool ok = fwrite(text, 1, strlen(text), f) == strlen(text);
    return fclose(f) == 0 && ok;
}

/* A fresh subfolder of the scratch directory. */
static const char *fresh_dir(char *buf, size_t size, const char *name) {
    snprintf(buf, size, "%s/%s", test_scratch_dir(), name);
    mkdir(buf, 0755);
    char path[600];
    static const char *const files[] = {"chat_template.jinja", "chat_template.json",
                                        "tokenizer_config.json"};
    for (size_t i = 0; i < 3; i++) {
        snprintf(path, sizeof path, "%s/%s", buf, files[i]);
        remove(path);
    }
    return buf;
}

/* Each case of chat_cases.json: kwargs + messages (+ tools) -> rendered. */
static void test_qwen3_chat_cases(void) {
    char path[512];
    lm_error err = {0};
    lm_chat_template *t;
    char *bos, *eos;
    CHECK_OK(lm_chat_template_load_dir(test_fixture_path(path, sizeof path, "tokenizers/qwen3"), &t,
                                       &bos, &eos, &err),
             &err);
    CHECK_MSG(bos == NULL, "qwen3 has no bos_token, got %s", bos);
    CHECK_MSG(eos && strcmp(eos, "<|im_end|>") == 0, "eos %s", eos ? eos : "(null)");
    free(eos);
    size_t len;
    char *text =
        slurp(test_fixture_path(path, sizeof path, "tokenizers/qwen3/chat_cases.json"), &len);
    CHECK_MSG(text, "cannot read %s", path);
    cJSON *cases = cJSON_ParseWithLength(text, len);
    free(text);
    CHECK(cJSON_IsArray(cases) && cJSON_GetArraySize(cases) >= 7);
    int checked = 0;
    const cJSON *c;
    cJSON_ArrayForEach(c, cases) {
        const char *name = cJSON_GetObjectItem(c, "name")->valuestring;
        const char *want = cJSON_GetObjectItem(c, "rendered")->valuestring;
        cJSON *ctx = cJSON_Duplicate(cJSON_GetObjectItem(c, "kwargs"), 1);
        if (!ctx) ctx = cJSON_CreateObject();
        cJSON_AddItemToObject(ctx, "messages",
                              cJSON_Duplicate(cJSON_GetObjectItem(c, "messages"), 1));
        if (cJSON_GetObjectItem(c, "tools"))
            cJSON_AddItemToObject(ctx, "tools",
                                  cJSON_Duplicate(cJSON_GetObjectItem(c, "tools"), 1));
        char *out = NULL, *out2 = NULL;
        size_t out_len, out2_len;
        lm_status st = lm_chat_template_render(t, ctx, &out, &out_len, &err);
        char *json = cJSON_PrintUnformatted(ctx);
        lm_status st2 =
            st ? st
               : lm_chat_template_render_json(t, json, strlen(json), NULL, &out2, &out2_len, &err);
        free(json);
        cJSON_Delete(ctx);
        if (st || st2) {
            test_failed(__FILE__, __LINE__, "case %s: %s", name, err.message);
        } else {
            if (strcmp(out, want) != 0)
                test_failed(__FILE__, __LINE__, "case %s\n  got  [%s]\n  want [%s]", name, out,
                            want);
            if (strcmp(out2, want) != 0)
                test_failed(__FILE__, __LINE__, "case %s (JSON text)\n  got [%s]", name, out2);
            checked++;
        }
        free(out);
        free(out2);
    }
    cJSON_Delete(cases);
    lm_chat_template_free(t);
    CHECK(checked >= 7 && !test_current_failed());
}

typedef struct {
    const char *model, *ctx, *want;
} golden;

/* Rendered by python3-jinja2 3.1 with transformers' environment. */
static const golden goldens[] = {
    {"qwen35-dense",
     "{\"messages\":[{\"role\":\"system\",\"content\":\"Be "
     "brief.\"},{\"role\":\"user\",\"content\":\"Hi\"}],"
     "\"add_generation_prompt\":true,\"enable_thinking\":false}",
     "<|im_start|>system\nBe "
     "brief.<|im_end|>\n<|im_start|>user\nHi<|im_end|>\n<|im_start|>assistant\n<think>\n\n</"
     "think>\n\n"},
    {"qwen35-moe",
     "{\"messages\":[{\"role\":\"user\",\"content\":\"Weather?\"},{\"role\":\"assistant\","
     "\"content\":\"\",\"reasoning_content\":"
     "\"Need "
     "tool.\",\"tool_calls\":[{\"type\":\"function\",\"function\":{\"name\":\"get_weather\","
     "\"arguments\":{\"city\":"
     "\"Paris\",\"days\":2}}}]},{\"role\":\"tool\",\"content\":\"sunny\"}],\"tools\":[{\"type\":"
     "\"function\",\"function\":"
     "{\"name\":\"get_weather\",\"parameters\":{\"type\":\"object\"}}}],\"add_generation_prompt\":"
     "true}",
     "<|im_start|>system\n# Tools\n\nYou may call one or more functions to assist with the user "
     "query.\n\nYou are provided with "
     "function signatures within <tools></tools> XML tags:\n<tools>\n{\"type\": \"function\", "
     "\"function\": {\"name\": "
     "\"get_weather\", \"parameters\": {\"type\": \"object\"}}}\n</tools>\n\nFor each function "
     "call, return a json object with "
     "function name and arguments within <tool_call></tool_call> XML "
     "tags:\n<tool_call>\n{\"name\": <function-name>, "
     "\"arguments\": "
     "<args-json-object>}\n</"
     "tool_call><|im_end|>\n<|im_start|>user\nWeather?<|im_end|>\n<|im_start|>assistant\n"
     "<think>\nNeed tool.\n</think>\n\n<tool_call>\n{\"name\": \"get_weather\", \"arguments\": "
     "{\"city\": \"Paris\", \"days\": 2}}"
     "\n</tool_call><|im_end|>\n<|im_start|>user\n<tool_response>\nsunny\n</"
     "tool_response><|im_end|>\n<|im_start|>assistant\n"},
    {"glm46v-moe",
     "{\"messages\":[{\"role\":\"system\",\"content\":\"Be "
     "brief.\"},{\"role\":\"user\",\"content\":\"Hi\"}],"
     "\"add_generation_prompt\":true,\"enable_thinking\":false}",
     "[gMASK]<sop><|system|>\nBe brief.<|user|>\nHi<|assistant|><think></think>"},
    {"glm46v-moe",
     "{\"messages\":[{\"role\":\"user\",\"content\":[{\"type\":\"image\"},{\"type\":\"text\","
     "\"text\":\"Describe.\"}]}],"
     "\"add_generation_prompt\":true}",
     "[gMASK]<sop><|user|>\n<|begin_of_image|><|image|><|end_of_image|>Describe.<|assistant|>"},
};

/* tests/data, or $LOOM_TEST_DATA. */
static const char *test_data_path(char *buf, size_t size, const char *relative) {
    const char *data = getenv("LOOM_TEST_DATA");
    snprintf(buf, size, "%s/%s", data && *data ? data : "tests/data", relative);
    return buf;
}

/* Every case of glm-cases.json: the GLM-V and GLM-4.6 templates over
 * conversations with tools, tool calls of every argument type, tool-result
 * runs, reasoning before/after the last user turn, /nothink, images and
 * videos; cases where Jinja2 raises must fail in loom too. */
static void test_glm_template_cases(void) {
    char path[512];
    size_t len;
    char *text = slurp(test_data_path(path, sizeof path, "templates/glm-cases.json"), &len);
    CHECK_MSG(text, "cannot read %s", path);
    cJSON *cases = cJSON_ParseWithLength(text, len);
    free(text);
    CHECK(cJSON_IsArray(cases) && cJSON_GetArraySize(cases) >= 20);
    int rendered = 0, refused = 0;
    const cJSON *c;
    cJSON_ArrayForEach(c, cases) {
        const char *tname = cJSON_GetObjectItem(c, "template")->valuestring;
        const char *name = cJSON_GetObjectItem(c, "name")->valuestring;
        const cJSON *want = cJSON_GetObjectItem(c, "rendered");
        char rel[256];
        snprintf(rel, sizeof rel, "templates/%s", tname);
        size_t src_len;
        char *src = slurp(test_data_path(path, sizeof path, rel), &src_len);
        if (!src) {
            test_failed(__FILE__, __LINE__, "cannot read %s", path);
            break;
        }
        lm_error err = {0};
        lm_chat_template *t = NULL;
        lm_status st = lm_chat_template_compile(src, src_len, &t, &err);
        free(src);
        char *out = NULL;
        size_t out_len = 0;
        if (!st) st = lm_chat_template_render(t, cJSON_GetObjectItem(c, "context"), &out, &out_len, &err);
        lm_chat_template_free(t);
        if (cJSON_IsString(want)) {
            if (st)
                test_failed(__FILE__, __LINE__, "%s/%s: %s", tname, name, err.message);
            else if (out_len != strlen(want->valuestring) || memcmp(out, want->valuestring, out_len))
                test_failed(__FILE__, __LINE__, "%s/%s\n  got  [%s]\n  want [%s]", tname, name, out,
                            want->valuestring);
            else
                rendered++;
        } else if (!st) {
            test_failed(__FILE__, __LINE__, "%s/%s: Jinja2 raises, loom rendered [%s]", tname, name,
                        out);
        } else {
            CHECK_MSG(err.message[0], "%s/%s failed without a message", tname, name);
            refused++;
        }
        free(out);
    }
    cJSON_Delete(cases);
    CHECK_MSG(rendered >= 20 && refused >= 1, "%d rendered, %d refused", rendered, refused);
}

static void test_fixture_models(void) {
    for (size_t i = 0; i < sizeof goldens / sizeof goldens[0]; i++) {
        char rel[128], dir[512];
        snprintf(rel, sizeof rel, "models/%s", goldens[i].model);
        lm_error err = {0};
        lm_chat_template *t;
        char *eos = NULL;
        CHECK_OK(lm_chat_template_load_dir(test_fixture_path(dir, sizeof dir, rel), &t, NULL, &eos,
                                           &err),
                 &err);
        CHECK_MSG(eos != NULL, "%s: no eos_token", goldens[i].model);
        free(eos);
        char *out;
        size_t len;
        lm_status st = lm_chat_template_render_json(t, goldens[i].ctx, strlen(goldens[i].ctx), NULL,
                                                    &out, &len, &err);
        lm_chat_template_free(t);
        CHECK_OK(st, &err);
        bool same = strcmp(out, goldens[i].want) == 0;
        if (!same)
            test_failed(__FILE__, __LINE__, "%s\n  got  [%s]\n  want [%s]", goldens[i].model, out,
                        goldens[i].want);
        free(out);
    }
}

/* Every fixture template renders a conversation with each message kind. */
static void test_fixture_models_render_everything(void) {
    static const char *const models[] = {"models/qwen35-dense", "models/qwen35-moe",
                                         "models/glm46v-moe", "tokenizers/qwen3"};
    const char *ctx =
        "{\"messages\":[{\"role\":\"system\",\"content\":\"S\"},{\"role\":\"user\",\"content\":"
        "\"U\"},"
        "{\"role\":\"assistant\",\"content\":\"A\",\"reasoning_content\":\"R\",\"tool_calls\":[{"
        "\"type\":\"function\","
        "\"function\":{\"name\":\"f\",\"arguments\":{\"x\":[1,2.5,{\"y\":null}],\"b\":true}}}]},"
        "{\"role\":\"tool\",\"content\":\"T\"},{\"role\":\"user\",\"content\":\"U2\"}],"
        "\"tools\":[{\"type\":\"function\",\"function\":{\"name\":\"f\"}}],\"add_generation_"
        "prompt\":true,\"enable_thinking\":true}";
    for (size_t i = 0; i < sizeof models / sizeof models[0]; i++) {
        char dir[512];
        lm_error err = {0};
        lm_chat_template *t;
        CHECK_OK(lm_chat_template_load_dir(test_fixture_path(dir, sizeof dir, models[i]), &t, NULL,
                                           NULL, &err),
                 &err);
        char *out;
        size_t len;
        lm_status st = lm_chat_template_render_json(t, ctx, strlen(ctx), NULL, &out, &len, &err);
        lm_chat_template_free(t);
        CHECK_OK(st, &err);
        CHECK_MSG(strstr(out, "U2") && strstr(out, "S"), "%s: [%s]", models[i], out);
        free(out);
    }
}

static lm_status render_dir(const char *dir, const char *ctx, char **out, lm_error *err) {
    lm_chat_template *t;
    *out = NULL;
    lm_status st = lm_chat_template_load_dir(dir, &t, NULL, NULL, err);
    if (st) return st;
    size_t len;
    st = lm_chat_template_render_json(t, ctx, strlen(ctx), NULL, out, &len, err);
    lm_chat_template_free(t);
    return st;
}

static void test_load_dir_variants(void) {
    char dir[512];
    lm_error err = {0};
    char *out, *bos = NULL, *eos = NULL;
    lm_chat_template *t;

    /* tokenizer files only: the template string and {"content": ...} tokens */
    fresh_dir(dir, sizeof dir, "tok_only");
    CHECK(write_file(
        dir, "tokenizer_config.json",
        "{\"bos_token\": {\"content\": \"<s>\", \"lstrip\": false}, \"eos_token\": \"</s>\","
        " \"chat_template\": \"{{ bos_token }}{% for m in messages %}[{{ m.content }}]{% endfor "
        "%}{{ eos_token }}\"}"));
    CHECK_OK(lm_chat_template_load_dir(dir, &t, &bos, &eos, &err), &err);
    CHECK(bos && !strcmp(bos, "<s>") && eos && !strcmp(eos, "</s>"));
    free(bos);
    free(eos);
    lm_chat_template_free(t);
    CHECK_OK(render_dir(dir, "{\"messages\":[{\"content\":\"a\"}]}", &out, &err), &err);
    CHECK_MSG(!strcmp(out, "<s>[a]</s>"), "got [%s]", out);
    free(out);
    /* the context's own bos_token wins */
    CHECK_OK(render_dir(dir, "{\"messages\":[],\"bos_token\":\"B\"}", &out, &err), &err);
    CHECK_MSG(!strcmp(out, "B</s>"), "got [%s]", out);
    free(out);

    /* a list of named templates: "default" is used */
    fresh_dir(dir, sizeof dir, "named");
    CHECK(write_file(dir, "tokenizer_config.json",
                     "{\"chat_template\": [{\"name\": \"tool_use\", \"template\": \"tools\"},"
                     " {\"name\": \"default\", \"template\": \"plain\"}]}"));
    CHECK_OK(render_dir(dir, "{}", &out, &err), &err);
    CHECK_MSG(!strcmp(out, "plain"), "got [%s]", out);
    free(out);
    CHECK(write_file(dir, "tokenizer_config.json",
                     "{\"chat_template\": [{\"name\": \"tool_use\", \"template\": \"x\"}]}"));
    CHECK(render_dir(dir, "{}", &out, &err) != LM_OK);
    CHECK_MSG(strstr(err.message, "no template named \"default\""), "%s", err.message);

    /* chat_template.jinja wins over the config; chat_template.json is read too */
    fresh_dir(dir, sizeof dir, "files");
    CHECK(write_file(dir, "tokenizer_config.json", "{\"chat_template\": \"from config\"}"));
    CHECK(write_file(dir, "chat_template.json", "{\"chat_template\": \"from json\"}"));
    CHECK_OK(render_dir(dir, "{}", &out, &err), &err);
    CHECK_MSG(!strcmp(out, "from json"), "got [%s]", out);
    free(out);
    CHECK(write_file(dir, "chat_template.jinja", "from jinja\n"));
    CHECK_OK(render_dir(dir, "{}", &out, &err), &err);
    CHECK_MSG(!strcmp(out, "from jinja"), "got [%s]", out);
    free(out);

    /* no template anywhere, a broken template, a broken config */
    fresh_dir(dir, sizeof dir, "none");
    CHECK(write_file(dir, "tokenizer_config.json", "{\"eos_token\": \"x\"}"));
    CHECK(render_dir(dir, "{}", &out, &err) != LM_OK);
    CHECK_MSG(strstr(err.message, "has no chat template"), "%s", err.message);
    CHECK(write_file(dir, "chat_template.jinja", "ok\n{% if %}\n"));
    CHECK(render_dir(dir, "{}", &out, &err) != LM_OK);
    CHECK_MSG(strstr(err.message, "chat template line 2"), "%s", err.message);
    CHECK(write_file(dir, "tokenizer_config.json", "{not json"));
    CHECK(render_dir(dir, "{}", &out, &err) != LM_OK);
    CHECK_MSG(strstr(err.message, "not valid JSON"), "%s", err.message);
    CHECK(lm_chat_template_load_dir("/nonexistent/loom/dir", &t, NULL, NULL, &err) != LM_OK);
}

int main(void) {
    RUN_TEST(test_qwen3_chat_cases);
    RUN_TEST(test_fixture_models);
    RUN_TEST(test_glm_template_cases);
    RUN_TEST(test_fixture_models_render_everything);
    RUN_TEST(test_load_dir_variants);
    return test_summary("test_chat_template");
}
