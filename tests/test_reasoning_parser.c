/* The reasoning parser: whole inputs, and the same inputs fed in pieces cut
 * at every byte (and byte by byte) must give the same reasoning and content. */
#include <stdio.h>
#include <string.h>

#include "harness.h"
#include "server/reasoning_parser.h"

typedef struct {
    const char *output;
    bool starts_inside;
    const char *reasoning, *content;
} reasoning_case;

static const reasoning_case cases[] = {
    {"<think>\nLet me think.\n</think>\n\nThe answer is 4.", false, "Let me think.", "The answer is 4."},
    {"Let me think.\n</think>\n\nThe answer is 4.", true, "Let me think.", "The answer is 4."},
    {"no reasoning here", false, "", "no reasoning here"},
    {"still thinking when cut off", true, "still thinking when cut off", ""},
    {"<think></think>plain", false, "", "plain"},
    {"a <thin b </thin", false, "", "a <thin b </thin"},
    {"<think>x < y and </thinking> is not it</think>z", false, "x < y and </thinking> is not it", "z"},
    {"<think>1\n\n2\n</think>\n<think>not again</think>", false, "1\n\n2", "<think>not again</think>"},
    {"\n\nhi", true, "", ""}, /* overwritten below: reasoning "hi" */
    {"unterminated <think", false, "", "unterminated <think"},
    {"r\xc3\xa9sum\xc3\xa9</think>caf\xc3\xa9", true, "r\xc3\xa9sum\xc3\xa9", "caf\xc3\xa9"},
    /* GLM: the generation prompt opens no <think> (GLM-4.6V "<|assistant|>\n",
     * GLM-4.6 "<|assistant|>", after which the model writes "\n<think>"); a
     * GLM-V answer in <|begin_of_box|> tags (when the client keeps special
     * tokens) is content; with thinking off the output is all content. */
    {"<think>Look at the image.</think>\n<|begin_of_box|>[1,2,3,4]<|end_of_box|>", false, "Look at the image.",
     "<|begin_of_box|>[1,2,3,4]<|end_of_box|>"},
    {"\n<think>Reason.\n</think>\nAnswer", false, "Reason.", "Answer"},
    {"\n\r\n<think></think>x", false, "", "x"},
    {"\nplain, no reasoning", false, "", "\nplain, no reasoning"},
    {"\n\n", false, "", "\n\n"},
    {"\n<thin", false, "", "\n<thin"},
    {"The answer is 4.", false, "", "The answer is 4."},
};

static void run_case(const reasoning_case *c, const char *want_r, const char *want_c, size_t cut,
                     size_t piece) {
    lm_reasoning_parser p;
    lm_reasoning_parser_init(&p, c->starts_inside);
    lm_sbuf r = {0}, content = {0};
    size_t len = strlen(c->output);
    if (piece) {
        for (size_t i = 0; i < len; i += piece) {
            size_t n = len - i < piece ? len - i : piece;
            lm_reasoning_parser_feed(&p, c->output + i, n, &r, &content);
        }
    } else {
        lm_reasoning_parser_feed(&p, c->output, cut, &r, &content);
        lm_reasoning_parser_feed(&p, c->output + cut, len - cut, &r, &content);
    }
    lm_reasoning_parser_finish(&p, &r, &content);
    bool ok = strcmp(lm_sbuf_str(&r), want_r) == 0 && strcmp(lm_sbuf_str(&content), want_c) == 0;
    if (!ok)
        test_failed(__FILE__, __LINE__, "case '%s' cut %zu piece %zu: reasoning '%s' content '%s'",
                    c->output, cut, piece, lm_sbuf_str(&r), lm_sbuf_str(&content));
    lm_sbuf_free(&r);
    lm_sbuf_free(&content);
    lm_reasoning_parser_free(&p);
}

static void test_whole_and_split(void) {
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        const reasoning_case *c = &cases[i];
        const char *want_r = c->reasoning;
        if (strcmp(c->output, "\n\nhi") == 0) want_r = "hi";
        size_t len = strlen(c->output);
        for (size_t cut = 0; cut <= len; cut++) run_case(c, want_r, c->content, cut, 0);
        run_case(c, want_r, c->content, 0, 1);
        run_case(c, want_r, c->content, 0, 3);
        if (test_current_failed()) return;
    }
}

/* While streaming, nothing that belongs to a marker is ever shown. */
static void test_no_marker_leaks_while_streaming(void) {
    const char *out = "<think>abc</think>def";
    lm_reasoning_parser p;
    lm_reasoning_parser_init(&p, false);
    lm_sbuf r = {0}, c = {0};
    for (size_t i = 0; out[i]; i++) {
        lm_reasoning_parser_feed(&p, out + i, 1, &r, &c);
        CHECK(strchr(lm_sbuf_str(&r), '<') == NULL);
        CHECK(strchr(lm_sbuf_str(&c), '<') == NULL);
    }
    lm_reasoning_parser_finish(&p, &r, &c);
    CHECK(strcmp(lm_sbuf_str(&r), "abc") == 0);
    CHECK(strcmp(lm_sbuf_str(&c), "def") == 0);
    lm_sbuf_free(&r);
    lm_sbuf_free(&c);
    lm_reasoning_parser_free(&p);
}

/* drop_stray: a <think> inside or after the reasoning and a </think> before
 * it or after it are dropped, wherever the text is cut. */
static void test_stray_markers_dropped(void) {
    const char *out = "x</think>y<think>a<think>b</think>c<think>d</think>e";
    size_t len = strlen(out);
    for (size_t cut = 0; cut <= len; cut++) {
        lm_reasoning_parser p;
        lm_reasoning_parser_init(&p, false);
        p.drop_stray = true;
        lm_sbuf r = {0}, c = {0};
        lm_reasoning_parser_feed(&p, out, cut, &r, &c);
        lm_reasoning_parser_feed(&p, out + cut, len - cut, &r, &c);
        lm_reasoning_parser_finish(&p, &r, &c);
        bool ok = strcmp(lm_sbuf_str(&r), "ab") == 0 && strcmp(lm_sbuf_str(&c), "xycde") == 0;
        lm_sbuf_free(&r);
        lm_sbuf_free(&c);
        lm_reasoning_parser_free(&p);
        CHECK_MSG(ok, "cut at %zu", cut);
    }
}

static void test_prompt_detection(void) {
    const char *open = "<|im_start|>assistant\n<think>\n";
    const char *closed = "<|im_start|>assistant\n<think>\n\n</think>\n\n";
    const char *none = "<|im_start|>assistant\n";
    const char *old = "<think>a</think>b<|im_start|>assistant\n";
    CHECK(lm_prompt_opens_reasoning(open, strlen(open)));
    CHECK(!lm_prompt_opens_reasoning(closed, strlen(closed)));
    CHECK(!lm_prompt_opens_reasoning(none, strlen(none)));
    CHECK(!lm_prompt_opens_reasoning(old, strlen(old)));
}

int main(void) {
    RUN_TEST(test_whole_and_split);
    RUN_TEST(test_no_marker_leaks_while_streaming);
    RUN_TEST(test_stray_markers_dropped);
    RUN_TEST(test_prompt_detection);
    return test_summary("test_reasoning_parser");
}
