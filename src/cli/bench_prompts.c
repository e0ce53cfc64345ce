/* Prompt sets for loom bench (see bench_prompts.h). */
#include "cli/bench_prompts.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cli/prompt_encoder.h"

static lm_status reserve(lm_bench_prompts *p, int count, lm_error *err) {
    int32_t **ids = realloc(p->ids, sizeof *ids * (size_t)count);
    if (ids) p->ids = ids;
    int *lengths = realloc(p->lengths, sizeof *lengths * (size_t)count);
    if (lengths) p->lengths = lengths;
    return ids && lengths ? LM_OK : lm_fail(err, LM_ERR_NOMEM, "out of memory");
}

lm_status lm_bench_prompts_random(lm_bench_prompts *p, int count, int length, int vocab, uint64_t seed,
                                  lm_error *err) {
    memset(p, 0, sizeof *p);
    if (reserve(p, count, err) != LM_OK) return LM_ERR_NOMEM;
    uint64_t x = seed * 2654435761u + 7;
    for (int i = 0; i < count; i++) {
        p->ids[i] = malloc(sizeof(int32_t) * (size_t)length);
        if (!p->ids[i]) {
            lm_bench_prompts_free(p);
            return lm_fail(err, LM_ERR_NOMEM, "out of memory");
        }
        p->count = i + 1;
        p->lengths[i] = length;
        for (int j = 0; j < length; j++) {
            x = x * 6364136223846793005ull + 1442695040888963407ull;
            p->ids[i][j] = (int32_t)((x >> 33) % (uint64_t)vocab);
        }
    }
    p->max_length = length;
    return LM_OK;
}

/* Turns each literal backslash-n into a newline, in place. */
static void unescape_newlines(char *s) {
    char *w = s;
    for (const char *r = s; *r; r++) {
        if (r[0] == '\\' && r[1] == 'n') {
            *w++ = '\n';
            r++;
        } else {
            *w++ = *r;
        }
    }
    *w = '\0';
}


lm_status lm_bench_prompts_file(lm_bench_prompts *p, const char *path, const char *model_dir, bool chat,
                                lm_error *err) {
    memset(p, 0, sizeof *p);
    FILE *f = fopen(path, "r");
    if (!f) return lm_fail(err, LM_ERR_IO, "cannot open %s", path);
    lm_prompt_encoder pe;
    lm_status st = lm_prompt_encoder_open(model_dir, chat, &pe, err);
    if (st != LM_OK) {
        fclose(f);
        return st;
    }
    char *line = NULL;
    size_t cap = 0;
    int line_no = 0;
    while (st == LM_OK && getline(&line, &cap, f) > 0) {
        line_no++;
        line[strcspn(line, "\r\n")] = '\0';
        if (!line[strspn(line, " \t")]) continue;
        if (p->count == LM_BENCH_MAX_PROMPTS) {
            st = lm_fail(err, LM_ERR_INVALID, "%s: more than %d prompts", path, LM_BENCH_MAX_PROMPTS);
            break;
        }
        unescape_newlines(line);
        st = reserve(p, p->count + 1, err);
        if (st == LM_OK) st = (chat ? lm_prompt_encoder_user : lm_prompt_encoder_raw)(&pe, line, &p->ids[p->count], &p->lengths[p->count], err);
        if (st != LM_OK) {
            lm_fail_context(err, "%s line %d", path, line_no);
            break;
        }
        if (p->lengths[p->count] > p->max_length) p->max_length = p->lengths[p->count];
        p->count++;
    }
    free(line);
    fclose(f);
    lm_prompt_encoder_close(&pe);
    if (st == LM_OK && p->count == 0) st = lm_fail(err, LM_ERR_INVALID, "%s holds no prompt", path);
    if (st != LM_OK) lm_bench_prompts_free(p);
    return st;
}

void lm_bench_prompts_free(lm_bench_prompts *p) {
    for (int i = 0; i < p->count; i++) free(p->ids[i]);
    free(p->ids);
    free(p->lengths);
    memset(p, 0, sizeof *p);
}
