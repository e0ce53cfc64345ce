#include "image/multimodal_prompt.h"

lm_status lm_expand_image_placeholders(const int32_t *prompt, int n, int32_t image_token_id,
                                       const lm_image_grid *grids, int n_images, int32_t *out,
                                       int max_out, int *n_out, lm_image_span *spans,
                                       lm_error *err) {
    int64_t placeholders = 0, rows = 0;
    for (int i = 0; i < n; i++) placeholders += prompt[i] == image_token_id;
    for (int i = 0; i < n_images; i++) rows += lm_image_grid_tokens(&grids[i]);
    /* Already expanded: every image's rows are there.  (With one row per
     * image the two readings agree.) */
    bool expanded = placeholders == rows;
    if (!expanded && placeholders != n_images)
        return lm_fail(err, LM_ERR_INVALID,
                       "the prompt has %lld image placeholders for %d image%s: it needs one per "
                       "image (or %lld, every image's rows already expanded)",
                       (long long)placeholders, n_images, n_images == 1 ? "" : "s", (long long)rows);
    int64_t total = expanded ? n : n - placeholders + rows;
    if (total > max_out)
        return lm_fail(err, LM_ERR_INVALID, "the prompt with its images takes %lld tokens; the limit is %d",
                       (long long)total, max_out);
    int o = 0, image = 0;
    for (int i = 0; i < n;) {
        if (prompt[i] != image_token_id) {
            out[o++] = prompt[i++];
            continue;
        }
        int count = lm_image_grid_tokens(&grids[image]);
        if (expanded) { /* the run must hold exactly this image's rows */
            int run = 0;
            while (i + run < n && run < count && prompt[i + run] == image_token_id) run++;
            if (run < count)
                return lm_fail(err, LM_ERR_INVALID,
                               "image %d needs %d placeholder tokens in a row; the prompt has %d at token %d",
                               image + 1, count, run, i);
        }
        spans[image] = (lm_image_span){o, count};
        for (int j = 0; j < count; j++) out[o++] = image_token_id;
        i += expanded ? count : 1;
        image++;
    }
    *n_out = o;
    return LM_OK;
}

void lm_image_prompt_positions(int n, const lm_image_grid *grids, const lm_image_span *spans,
                               int n_images, int32_t *positions, int *rope_delta) {
    /* Text advances one per token; an image takes (cur + t, cur + row,
     * cur + col) over its merged grid and moves cur past its larger side. */
    int cur = 0, max_pos = -1, image = 0;
    for (int i = 0; i < n;) {
        if (image < n_images && i == spans[image].first) {
            const lm_image_grid *g = &grids[image];
            int lh = g->grid_h / g->merge_size, lw = g->grid_w / g->merge_size, k = i;
            for (int t = 0; t < g->grid_t; t++)
                for (int r = 0; r < lh; r++)
                    for (int c = 0; c < lw; c++, k++) {
                        positions[3 * k] = cur + t;
                        positions[3 * k + 1] = cur + r;
                        positions[3 * k + 2] = cur + c;
                    }
            int top = cur + (g->grid_t - 1 > lh - 1 ? (g->grid_t - 1 > lw - 1 ? g->grid_t - 1 : lw - 1)
                                                     : (lh - 1 > lw - 1 ? lh - 1 : lw - 1));
            if (top > max_pos) max_pos = top;
            cur = top + 1;
            i += spans[image].count;
            image++;
            continue;
        }
        positions[3 * i] = positions[3 * i + 1] = positions[3 * i + 2] = cur;
        if (cur > max_pos) max_pos = cur;
        cur++;
        i++;
    }
    *rope_delta = max_pos + 1 - n;
}
