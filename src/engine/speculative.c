/* Drafting with the MTP head (model-spec §C.4).  After each engine step,
 * every speculating sequence runs the head over the positions it committed
 * in that step (target hidden h_p, next token t_{p+1}, position p), which
 * keeps the head's own KV cache in step with the target's; a sequence with a
 * pending token then drafts K tokens greedily, the first from the last
 * catch-up row, the rest feeding the head its own output (post mtp.norm).
 * All sequences share one MTP forward per round. */
#include <stdio.h>
#include <string.h>

#include "engine/engine_internal.h"
#include "models/qwen35_mtp.h"

static int argmax(const float *x, int n) {
    int best = 0;
    for (int i = 1; i < n; i++)
        if (x[i] > x[best]) best = i;
    return best;
}

/* Drafts a sequence may make now: bounded by K, its remaining max_tokens
 * and the context limit, and by KV blocks for the verify step. */
static int draft_budget(loom_engine *e, lm_sequence *seq) {
    const loom_request_params *p = &seq->request->params;
    int k = e->spec_k;
    int left = p->max_tokens - lm_sequence_generated(seq) - 1; /* the verify emits one more */
    if (k > left) k = left;
    int room = e->max_model_len - seq->n_tokens - 1;
    if (k > room) k = room;
    if (k <= 0) return 0;
    if (!lm_engine_ensure_blocks(e, seq, seq->n_cached + k + 1)) return 0;
    return k;
}

void lm_engine_catch_up_and_draft(loom_engine *e) {
    if (e->n_catch_up == 0) return;
    const lm_qwen35_model *model = &e->model.model;
    int H = e->model.config.hidden_size, V = e->model.config.vocab_size;
    lm_error err = {0};

    /* Round 0: the committed rows of every speculating sequence. */
    int n_tok = 0, n_seqs = 0;
    int drafting[256];
    int n_drafting = 0;
    for (int i = 0; i < e->n_catch_up; i++) {
        lm_mtp_catch_up *c = &e->catch_up[i];
        lm_sequence *seq = c->seq;
        int k = c->draft ? draft_budget(e, seq) : 0;
        lm_step_seq *ss = &e->mtp_seqs[n_seqs];
        *ss = (lm_step_seq){.first = n_tok, .n_new = c->count, .n_cached = c->from,
                            .block_table = seq->blocks, .n_blocks = seq->n_blocks, .no_logits = k == 0};
        for (int j = 0; j < c->count; j++) {
            int pos = c->from + j;
            e->mtp_tokens[n_tok] = seq->tokens[pos + 1];
            e->mtp_positions[3 * n_tok] = e->mtp_positions[3 * n_tok + 1] =
                e->mtp_positions[3 * n_tok + 2] = pos;
            memcpy(e->mtp_hidden + (size_t)n_tok * H, e->hidden_all + (size_t)(c->hidden_row + j) * H,
                   sizeof(float) * (size_t)H);
            n_tok++;
        }
        seq->n_drafts = 0;
        if (k > 0 && n_drafting < (int)(sizeof drafting / sizeof drafting[0])) {
            drafting[n_drafting++] = n_seqs;
            seq->n_drafts = -k; /* planned; becomes k once drafted */
        } else {
            ss->no_logits = true;
        }
        n_seqs++;
    }
    lm_step_batch batch = {.n_tokens = n_tok, .tokens = e->mtp_tokens, .positions = e->mtp_positions,
                           .n_seqs = n_seqs, .seqs = e->mtp_seqs};
    /* hidden_out reuses the input rows: logit rows come first, in order. */
    if (lm_qwen35_mtp_forward(model, e->model.backend, &e->mtp_kv, &e->workspace, &batch, e->mtp_hidden,
                              e->mtp_logits, e->mtp_hidden, &err) != LM_OK) {
        fprintf(stderr, "loom: MTP drafting failed, continuing without: %s\n", err.message);
        for (int i = 0; i < e->n_catch_up; i++) e->catch_up[i].seq->n_drafts = 0;
        e->n_catch_up = 0;
        return;
    }
    /* Draft 1 from each drafting sequence's last row. */
    lm_sequence *seqs[256];
    int pos[256], want[256];
    for (int d = 0; d < n_drafting; d++) {
        lm_sequence *seq = e->catch_up[drafting[d]].seq;
        seqs[d] = seq;
        want[d] = -seq->n_drafts;
        seq->drafts[0] = argmax(e->mtp_logits + (size_t)d * V, V);
        seq->n_drafts = 1;
        pos[d] = seq->n_cached; /* position of the pending token = the next MTP row */
    }
    /* Rounds 2..K: feed the head its own output and the last draft. */
    for (int round = 1; round < e->spec_k; round++) {
        n_tok = 0;
        int map[256];
        for (int d = 0; d < n_drafting; d++) {
            if (seqs[d]->n_drafts != round || round >= want[d]) continue;
            lm_step_seq *ss = &e->mtp_seqs[n_tok];
            *ss = (lm_step_seq){.first = n_tok, .n_new = 1, .n_cached = pos[d],
                                .block_table = seqs[d]->blocks, .n_blocks = seqs[d]->n_blocks};
            e->mtp_tokens[n_tok] = seqs[d]->drafts[round - 1];
            e->mtp_positions[3 * n_tok] = e->mtp_positions[3 * n_tok + 1] =
                e->mtp_positions[3 * n_tok + 2] = pos[d];
            /* the previous round's output row d sits at row d of mtp_hidden */
            if (n_tok != d)
                memmove(e->mtp_hidden + (size_t)n_tok * H, e->mtp_hidden + (size_t)d * H,
                        sizeof(float) * (size_t)H);
            map[n_tok++] = d;
        }
        if (n_tok == 0) break;
        batch = (lm_step_batch){.n_tokens = n_tok, .tokens = e->mtp_tokens,
                                .positions = e->mtp_positions, .n_seqs = n_tok, .seqs = e->mtp_seqs};
        if (lm_qwen35_mtp_forward(model, e->model.backend, &e->mtp_kv, &e->workspace, &batch,
                                  e->mtp_hidden, e->mtp_logits, e->mtp_hidden, &err) != LM_OK)
            break; /* keep the drafts made so far */
        /* Compact: row r belongs to drafter map[r]; keep rows aligned to d. */
        for (int r = n_tok - 1; r >= 0; r--) {
            int d = map[r];
            seqs[d]->drafts[round] = argmax(e->mtp_logits + (size_t)r * V, V);
            seqs[d]->n_drafts = round + 1;
            pos[d]++;
        }
        for (int r = n_tok - 1; r >= 0; r--)
            if (map[r] != r)
                memmove(e->mtp_hidden + (size_t)map[r] * H, e->mtp_hidden + (size_t)r * H,
                        sizeof(float) * (size_t)H);
    }
    for (int d = 0; d < n_drafting; d++) {
        lm_sequence *seq = seqs[d];
        if (e->draft_override)
            seq->n_drafts = e->draft_override(e->draft_override_ctx, seq->tokens, seq->n_tokens, seq->n_prompt,
                                              seq->drafts, seq->n_drafts);
        e->spec_counters.drafted += (uint64_t)seq->n_drafts;
    }
    e->n_catch_up = 0;
}

void lm_engine_set_draft_override(loom_engine *e, lm_draft_override fn, void *ctx) {
    e->draft_override = fn;
    e->draft_override_ctx = ctx;
}
